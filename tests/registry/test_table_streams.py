"""The SSE stream slots (``StreamsTable``): opens racing on a tenant take its cap and no more, and a restarted
replica lets its own slots go."""

from __future__ import annotations

from service.registry import Registry

from _tables import together


def test_twenty_stream_opens_at_once_take_the_cap_and_a_restarted_replica_lets_its_own_go(registry: Registry):
    slots = together(20, lambda i: registry.streams.take("acme", f"r{i % 2} s{i}", replica=f"r{i % 2}", cap=4,
                                                          now=100.0, ttl=10))
    taken = [s for s in slots if s is not None]
    assert sorted(taken) == [0, 1, 2, 3], "four slots, each once, whichever replica asked"  # type: ignore[type-var]
    assert registry.streams.take("beta", "r0 x", replica="r0", cap=4, now=100.0, ttl=10) == 0, "a cap per tenant"
    theirs = {s for i, s in enumerate(slots) if s is not None and i % 2 == 1}
    assert registry.streams.release_all("r0") == 4 - len(theirs) + 1, "r0 started again: its slots (beta's too) go"
    free = sorted(set(range(4)) - theirs)
    assert registry.streams.take("acme", "r0 y", replica="r0", cap=4, now=100.0, ttl=10) == (free[0] if free else None)
    assert registry.streams.take("acme", "r2 z", replica="r2", cap=4, now=111.0, ttl=10) is not None, "ran out"
