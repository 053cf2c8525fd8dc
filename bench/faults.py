"""The figures of the fault tests: runs in flight and lost, events lost or duplicated, log lines per minute during
the fault, seconds to recover — one row per fault, from real faults (tests/faults/, root and Docker needed).

    .venv/bin/python -m bench.faults [pytest args…]

It runs ``pytest tests/faults`` with ``FLOWER_FAULTS_FIGURES`` pointing at a file, then prints what each test
wrote there. Nothing here is pass/fail on time: the tests assert the outcomes, this prints the numbers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.jsonl"
        env = {**os.environ, "FLOWER_FAULTS_FIGURES": str(out)}
        rc = subprocess.run([sys.executable, "-m", "pytest", "tests/faults", "-q", *(argv or sys.argv[1:])],
                            cwd=ROOT, env=env).returncode
        rows = [json.loads(line.removeprefix("FAULT-FIGURES ")) for line in out.read_text().splitlines()] \
            if out.exists() else []
    for row in rows:
        name = row.pop("test")
        print(f"{name}:")
        for k, v in row.items():
            print(f"  {k:34} {json.dumps(v, ensure_ascii=False)}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
