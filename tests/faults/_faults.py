"""Helpers of the fault tests: figures for the report, log lines within a window of time."""

from __future__ import annotations

import json
import os
from typing import Any

from _service_helpers import Service

__all__ = ["figures", "lines_between", "need"]


def need(what: str) -> None:
    """A missing prerequisite (root, an engine): a failure when FLOWER_REQUIRE_DOCKER=1 (CI), else a skip."""
    import pytest

    if os.environ.get("FLOWER_REQUIRE_DOCKER") == "1":
        pytest.fail(f"FLOWER_REQUIRE_DOCKER=1 but {what}")
    pytest.skip(f"{what} (set FLOWER_REQUIRE_DOCKER=1 to make this a failure)")


def figures(name: str, **values: Any) -> None:
    """One line of figures for the report (and for bench/faults.py), printed and appended to $FLOWER_FAULTS_FIGURES."""
    line = "FAULT-FIGURES " + json.dumps({"test": name, **values}, ensure_ascii=False)
    print(line, flush=True)
    out = os.environ.get("FLOWER_FAULTS_FIGURES")
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def lines_between(service: Service, t0: float, t1: float) -> list[dict[str, Any]]:
    """The service's log lines stamped between two wall-clock times."""
    from datetime import datetime

    out = []
    for line in service.lines():
        ts = line.get("timestamp")
        if not isinstance(ts, str):
            continue
        try:
            t = datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
        if t0 <= t <= t1:
            out.append(line)
    return out
