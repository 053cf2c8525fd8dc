"""squid, run for the egress allow-lists: its configuration, written whole from the rule sets, and its process.

squid listens on 127.0.0.1 only, one port per rule set (a tenant's allow-list; runs with the same list share it),
named so that its ACLs (``myportname``) apply that set's rules and nothing else's. The runs never reach these ports
themselves: the service leads each run's socket to its set's port (``service.egress.proxy``). What the
configuration holds, in the order squid decides:

1. refused whatever the list says: a request to one of the service's own ports (its API, its gateway, squid's
   ports), and any request that asks to upgrade the connection (``Upgrade:``, e.g. a websocket);
2. allowed: a listed host (``dstdomain -n``: a name, never looked up backwards, so an IP literal matches no
   entry), on its ports — 80 for plain http and 443 for CONNECT when the entry names none, else the entry's one
   port — with the entry's methods if it lists some (never CONNECT then: the method would be hidden), and only
   when the host's addresses are not internal (loopback, private, link-local; ``internal_ok`` lists the ranges an
   operator lets through, e.g. a mirror on the company network). The name is resolved by squid and only once the
   name matched: an unlisted name is never looked up at all;
3. everything else refused. No cache, no ``X-Forwarded-For``, bodies capped (``request_body_max_size``).

Each request is one line of ``access.log`` (``LOG_FORMAT``): the client's port (the service's side of the
connection: how a line is mapped back to its run), method, scheme, host, port, status, squid's result code, bytes
from the client and to it.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .rules import Rule

__all__ = ["SquidConfig", "Squid", "render", "LOG_FORMAT", "INTERNAL", "SquidError"]

SQUID = "/usr/sbin/squid"
# the client's port, method, scheme, host, port, status to the client, squid's result, bytes in, bytes out, the
# error squid answered with (ERR_ACCESS_DENIED, ERR_CONNECT_FAIL, …; "-" for none)
LOG_FORMAT = "%ts.%03tu %>p %rm %>rs %>rd %>rP %>Hs %Ss %>st %<st %err_code"
INTERNAL = ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
            "192.168.0.0/16", "::/128", "::1", "fc00::/7", "fe80::/10")


class SquidError(RuntimeError):
    """squid could not be started or reconfigured; the message says why (its own log's last lines)."""


@dataclass(frozen=True)
class SquidConfig:
    """What the configuration is made of besides the rule sets."""

    folder: Path
    internal_ok: tuple[str, ...] = ()
    """Internal ranges an allow-listed host may resolve to (CIDRs)."""
    forbidden_ports: tuple[int, ...] = ()
    """Ports never reached on any host: the service's API and gateway (squid's own are added)."""
    max_request_mb: int = 64
    hosts_file: str = "/etc/hosts"
    """Names squid resolves before asking DNS (``hosts_file``)."""


def _domain(rule: Rule) -> tuple[str, str]:
    """The ACL type and value that match ``rule``'s host: the name itself, or every name under a wildcard's."""
    if rule.wildcard:
        return "dstdom_regex -n -i", "^([a-z0-9-]+\\.)+" + re.escape(rule.host[2:]) + "$"
    return "dstdomain -n", rule.host


def render(cfg: SquidConfig, sets: Mapping[str, tuple[int, Sequence[Rule]]]) -> str:
    """squid.conf for ``sets`` (rule-set key → its port and rules), as the module doc says."""
    folder = cfg.folder
    ports = sorted({p for p, _ in sets.values()})
    forbidden = sorted({*cfg.forbidden_ports, *ports} - {0})
    lines = [f"http_port 127.0.0.1:{port} name=set_{key}" for key, (port, _) in sorted(sets.items())]
    lines += [
        f"pid_filename {folder}/squid.pid",
        f"cache_log {folder}/cache.log",
        f"coredump_dir {folder}",
        f"logformat flower {LOG_FORMAT}",
        f"access_log stdio:{folder}/access.log logformat=flower",
        "buffered_logs off",
        f"hosts_file {cfg.hosts_file}",
        "logfile_rotate 0",
        "cache deny all",
        "cache_mem 0 MB",
        "netdb_filename none",
        "visible_hostname flower-egress",
        "httpd_suppress_version_string on",
        "forwarded_for delete",
        "shutdown_lifetime 0 seconds",
        f"request_body_max_size {cfg.max_request_mb} MB",
        "acl CONNECT method CONNECT",
        "acl https port 443",
        "acl web port 80 443",
        "acl upgrade req_header Upgrade .",
        f"acl internal dst {' '.join(INTERNAL)}",
    ]
    if forbidden:
        lines.append(f"acl forbidden port {' '.join(map(str, forbidden))}")
        lines.append("http_access deny forbidden")
    lines.append("http_access deny upgrade")
    dest = [["!internal"]] + ([["internal_ok"]] if cfg.internal_ok else [])
    if cfg.internal_ok:
        lines.insert(lines.index("acl CONNECT method CONNECT"), f"acl internal_ok dst {' '.join(cfg.internal_ok)}")
    for key, (_, rules) in sorted(sets.items()):
        lines.append(f"acl s_{key} myportname set_{key}")
        for i, rule in enumerate(rules):
            name = f"s_{key}_{i}"
            kind, value = _domain(rule)
            lines.append(f"acl {name} {kind} {value}")
            if rule.port is not None:
                lines.append(f"acl {name}_port port {rule.port}")
            plain, tunnel = (f"{name}_port", f"{name}_port") if rule.port is not None else ("web", "https")
            allows = [[plain, "!CONNECT"]]
            if rule.methods:
                lines.append(f"acl {name}_methods method {' '.join(rule.methods)}")
                allows[0].append(f"{name}_methods")
            else:
                allows.append([tunnel, "CONNECT"])
            for allow in allows:
                for d in dest:
                    lines.append(f"http_access allow s_{key} {name} {' '.join(allow)} {' '.join(d)}")
    lines.append("http_access deny all")
    return "\n".join(lines) + "\n"


class Squid:
    """One squid process (``-N``: in the foreground, a child of the service's, which ends with it), reconfigured
    by SIGHUP after its configuration file is written again."""

    def __init__(self, binary: str, cfg: SquidConfig) -> None:
        self.binary, self.cfg = binary, cfg
        self.conf = cfg.folder / "squid.conf"
        self.proc: subprocess.Popen[bytes] | None = None
        # squid names its shared memory (/dev/shm/squid-…) after its service name: two squids of one name on a
        # machine (the gateway's and the setups', or two services') share it and answer each other's requests 502
        self.name = "flower" + hashlib.sha256(str(cfg.folder).encode()).hexdigest()[:12]

    def write(self, sets: Mapping[str, tuple[int, Sequence[Rule]]]) -> None:
        text = render(self.cfg, sets)
        tmp = self.conf.with_suffix(".tmp")
        tmp.write_text(text)
        os.chmod(tmp, 0o644)  # squid's user reads it again on each reconfigure
        os.replace(tmp, self.conf)
        check = subprocess.run([self.binary, "-n", self.name, "-k", "parse", "-f", str(self.conf)],
                               capture_output=True, timeout=30)
        if check.returncode != 0:
            raise SquidError(f"squid refused its generated configuration {self.conf}: "
                             f"{_tail(check.stderr.decode('utf-8', 'replace'))}")

    def start_or_reload(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGHUP)
            return
        if not Path(self.binary).is_file():
            raise SquidError(f"squid is not installed at {self.binary}: install Debian's `squid` package (or set "
                             "`egress_squid` in the service config) to serve egress allow-lists")
        (self.cfg.folder / "squid.pid").unlink(missing_ok=True)
        started: list[subprocess.Popen[bytes] | BaseException] = []
        ready = threading.Event()

        def keep() -> None:
            """Start squid and wait for it: the parent-death signal follows the thread that forked, so that thread
            lives exactly as long as squid does."""
            try:
                with open(self.cfg.folder / "stderr.log", "ab") as err:  # never a pipe nobody reads
                    proc = subprocess.Popen([self.binary, "-n", self.name, "-N", "-f", str(self.conf)], stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=err, close_fds=True,
                                            preexec_fn=_die_with_parent)
            except OSError as e:
                started.append(e)
                ready.set()
                return
            started.append(proc)
            ready.set()
            proc.wait()

        threading.Thread(target=keep, name="flower-squid", daemon=True).start()
        ready.wait()
        if isinstance(started[0], BaseException):
            raise SquidError(f"squid could not be started ({started[0]})")
        self.proc = started[0]

    def failed(self) -> str | None:
        """Why squid is not running, if it is not."""
        if self.proc is None or self.proc.poll() is None:
            return None
        text = "".join(path.read_text("utf-8", "replace")[-4000:] for path in
                       (self.cfg.folder / "stderr.log", self.cfg.folder / "cache.log") if path.is_file())
        return f"squid exited with status {self.proc.returncode}: {_tail(text)}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def _tail(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if "FATAL" in line or "ERROR" in line]
    return " | ".join((lines or [line.strip() for line in text.splitlines() if line.strip()])[-3:])[:600]


def _die_with_parent() -> None:
    """squid ends when the process that started it does (PR_SET_PDEATHSIG): no orphan keeps its ports."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
