"""The egress proxies' totals, summed from their ``counts.json`` files: what ``/metrics`` shows (the proxies run in
the gateway's process, the metrics are served by the service's)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

__all__ = ["read_counts"]


def read_counts(root: Path) -> Counter[str]:
    """Every proxy's totals under ``root`` (``<root>/*/counts.json``), summed: what ``/metrics`` shows."""
    total: Counter[str] = Counter()
    for path in sorted(root.glob("*/counts.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            total.update({str(k): int(v) for k, v in data.items() if isinstance(v, int)})
    return total
