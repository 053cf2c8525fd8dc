"""What the registry's table specs share: run ids of one tenant, and work released in many threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable

ACME = [f"20260101-00000{i}-" + f"{i:x}" * 32 for i in range(6)]


def together(n: int, work: Callable[[int], object]) -> list[object]:
    """``work(i)`` in ``n`` threads released at once; what each returned, in order."""
    start, results = threading.Barrier(n), [None] * n
    errors: list[BaseException] = []

    def one(i: int) -> None:
        start.wait()
        try:
            results[i] = work(i)  # type: ignore[call-overload]
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results
