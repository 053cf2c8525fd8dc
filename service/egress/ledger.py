"""The egress ledger: squid's access log read as it grows, each line mapped back to the run that made the request,
audited and counted (``service.egress.proxy`` records which run holds each of its connections to squid).

Mapping: each connection the proxy opens to squid has its own source port, recorded here with the key before a byte
is sent; squid logs that port with each request (``%>p``). A record outlives its connection for ``KEEP_S`` (squid
writes a tunnel's line when it closes).

Audit: ``audit.egress`` (allowed) or ``audit.egress_refused`` (``source="proxy"``) on the ``flower.audit`` logger —
tenant, run, method, host, port, status, squid's result and error codes, bytes up and down — at most
``MAX_LINES_PER_KEY`` lines per key (then one ``audit.egress_unlogged``; the counts go on). Counts: totals by
tenant (requests by decision, bytes by direction), kept in ``counts.json`` in the proxy's folder, so they survive
a restart and the API's process reads them for ``/metrics`` (``read_counts``).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..logging import get_logger

__all__ = ["Ledger", "EgressRecord", "read_counts", "KEEP_S", "MAX_LINES_PER_KEY"]

KEEP_S = 120.0
MAX_LINES_PER_KEY = 1000

audit_log = get_logger("flower.audit")
log = get_logger("flower.service.egress")


@dataclass(frozen=True)
class EgressRecord:
    """One request as squid saw it, mapped to its run."""

    key: str
    tenant: str
    method: str
    scheme: str
    host: str
    port: int
    status: int
    result: str
    bytes_up: int
    bytes_down: int
    error: str = ""

    @property
    def refused(self) -> bool:
        """squid turned it away: denied, too large, or not a request at all (nothing was forwarded)."""
        return "DENIED" in self.result or self.result.startswith("NONE") or self.method == "-"


class Ledger:
    """What squid logged, mapped to runs; not thread-safe (the proxy holds its lock around every call)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.by_port: dict[int, tuple[str, str, float | None]] = {}  # source port → key, tenant, closed at
        self.lines: Counter[str] = Counter()  # audit lines written per key
        self.counts: Counter[str] = Counter(self._load_counts())
        self._log_pos = 0
        self._log_rest = b""

    def connected(self, port: int, key: str, tenant: str) -> None:
        self.by_port[port] = (key, tenant, None)

    def closed(self, port: int) -> None:
        if port in self.by_port:
            key, tenant, _ = self.by_port[port]
            self.by_port[port] = (key, tenant, time.monotonic())

    def forget(self, key: str) -> None:
        self.lines.pop(key, None)

    def cut(self, key: str, tenant: str, uploaded: int, limit: int) -> None:
        """A run past its upload cap: audited once, counted as a refusal."""
        audit_log.warning("audit.egress_refused", tenant=tenant, run=key, source="proxy", reason="upload_cap",
                          limit_bytes=limit, bytes_up=uploaded, hint="its connections were cut and new ones are "
                                                                     "refused")
        self.counts[f"requests|{tenant}|refused"] += 1
        self._save_counts()

    def read(self, path: Path) -> None:
        """squid's new lines in ``path``, audited and counted."""
        try:
            with open(path, "rb") as f:
                f.seek(self._log_pos)
                data = f.read(1 << 20)
        except OSError:
            return
        self._log_pos += len(data)
        data = self._log_rest + data
        lines = data.split(b"\n")
        self._log_rest = lines.pop()
        for line in lines:
            record = self._record(line.decode("utf-8", "replace"))
            if record is not None:
                self._audit(record)
        now = time.monotonic()
        for port, (_, _, closed) in list(self.by_port.items()):
            if closed is not None and now - closed > KEEP_S:
                del self.by_port[port]
        if lines:
            self._save_counts()

    def _record(self, line: str) -> EgressRecord | None:
        parts = line.split()
        if len(parts) != 11 or not parts[1].isdigit():
            return None
        _, client_port, method, scheme, host, port, status, result, up, down, error = parts
        if method == "-" and up == "0":  # a connection that sent nothing (the readiness probe among them)
            return None
        known = self.by_port.get(int(client_port))
        if known is None:
            log.warning("egress.unmapped", line=line[:300], hint="a request squid logged that no run's connection "
                                                                 "made: squid reached by someone else?")
            return None
        return EgressRecord(key=known[0], tenant=known[1], method=method, scheme=scheme if scheme != "-" else "",
                            host=host, port=int(port) if port.isdigit() else 0,
                            status=int(status) if status.isdigit() else 0, result=result,
                            bytes_up=int(up) if up.isdigit() else 0, bytes_down=int(down) if down.isdigit() else 0,
                            error=error if error != "-" else "")

    def _audit(self, r: EgressRecord) -> None:
        decision = "refused" if r.refused else "allowed"
        self.counts[f"requests|{r.tenant}|{decision}"] += 1
        self.counts[f"bytes|{r.tenant}|up"] += r.bytes_up
        self.counts[f"bytes|{r.tenant}|down"] += r.bytes_down
        self.lines[r.key] += 1
        if self.lines[r.key] > MAX_LINES_PER_KEY:
            if self.lines[r.key] == MAX_LINES_PER_KEY + 1:
                audit_log.warning("audit.egress_unlogged", tenant=r.tenant, run=r.key, after=MAX_LINES_PER_KEY,
                                  hint="further requests are counted in /metrics, not logged one by one")
            return
        fields = dict(tenant=r.tenant, run=r.key, method=r.method, host=r.host, port=r.port, status=r.status,
                      result=r.result, bytes_up=r.bytes_up, bytes_down=r.bytes_down, source="proxy",
                      **({"error": r.error} if r.error else {}))
        if r.refused:
            audit_log.warning("audit.egress_refused", **fields)
        else:
            audit_log.info("audit.egress", **fields)

    def _load_counts(self) -> dict[str, int]:
        try:
            data = json.loads((self.folder / "counts.json").read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): int(v) for k, v in data.items() if isinstance(v, int)} if isinstance(data, dict) else {}

    def _save_counts(self) -> None:
        tmp = self.folder / "counts.json.tmp"
        tmp.write_text(json.dumps(dict(self.counts), sort_keys=True))
        os.replace(tmp, self.folder / "counts.json")


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


