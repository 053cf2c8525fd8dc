"""EgressProxy: a run's way to the network through its tenant's allow-list, opened and closed by the service.

``open(key, tenant, rules, folder)`` makes ``folder/egress.sock`` (the run's ``gateway/`` folder, read-only inside
the sandbox, where the runner bridges it to a loopback port: ``sandbox.egress``) and leads every connection made
to it to squid's port for that set of rules (``service.egress.squid``); ``close(key)`` removes the socket and ends
the connections. ``key`` is what the audit names: a run's id, or ``setup-<x>`` for a setup container. Each
connection's source port towards squid is told to the ledger (``service.egress.ledger``), which maps squid's log
lines back to keys, audits and counts them. A run's uploads are capped in all (``max_upload_mb``, tunnels
included: squid cannot see into them): past it its connections are cut, new ones refused, and it is audited once.
At most ``MAX_CONNECTIONS_PER_KEY`` connections of one key at once (more are closed as they come).

One thread of its own with a selector (as the runner's bridge): the sockets, the pumps and the log's tail.
"""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..config import ServiceConfig
from ..logging import get_logger
from .ledger import EgressRecord, Ledger, read_counts
from .rules import Rule, key_of
from .squid import Squid, SquidConfig, SquidError

__all__ = ["EgressProxy", "EgressRecord", "SOCKET_NAME", "SquidError", "read_counts"]

SOCKET_NAME = "egress.sock"  # beside gateway.sock (sandbox/egress.py EGRESS_SOCKET)
MAX_CONNECTIONS_PER_KEY = 64
START_WAIT_S = 30.0
_TICK_S = 0.2

log = get_logger("flower.service.egress")


@dataclass(eq=False)
class _Opening:
    """One key's socket."""

    key: str
    tenant: str
    set_key: str
    server: socket.socket
    folder: Path
    uploaded: int = 0
    cut: bool = False
    conns: set["_Pair"] = field(default_factory=set)


@dataclass(eq=False)
class _Pair:
    """A run's connection and this side's to squid, piped both ways with at most one chunk held for a side that
    is slow to read (its peer is not read meanwhile): a run that stops reading slows only itself."""

    run: socket.socket
    squid: socket.socket
    opening: _Opening
    held: dict[socket.socket, bytes] = field(default_factory=dict)  # what waits to be sent to that socket
    eof: set[socket.socket] = field(default_factory=set)  # the sockets that sent their end
    shut: set[socket.socket] = field(default_factory=set)  # the sockets told our end
    done: bool = False

    def other(self, s: socket.socket) -> socket.socket:
        return self.squid if s is self.run else self.run


class EgressProxy:
    """squid with one port per rule set, and one socket per key leading there. Thread-safe; squid starts with the
    first ``open`` (nothing runs while no tenant has an allow-list)."""

    def __init__(self, folder: Path, *, squid: str = "/usr/sbin/squid", internal_ok: Sequence[str] = (),
                 forbidden_ports: Sequence[int] = (), max_upload_mb: int = 64, hosts_file: str = "/etc/hosts",
) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.max_upload = max_upload_mb << 20
        self._squid_binary, self._hosts_file = squid, hosts_file
        self._squid_cfg = (tuple(internal_ok), tuple(p for p in forbidden_ports if p), max_upload_mb)
        self._squid: Squid | None = None  # made with the first rule set
        self._lock = threading.RLock()
        self._sets: dict[str, tuple[int, tuple[Rule, ...]]] = {}
        self._open: dict[str, _Opening] = {}
        self._ledger = Ledger(folder)
        self._sel = selectors.DefaultSelector()
        self._thread: threading.Thread | None = None
        self._closed = False

    @classmethod
    def of(cls, config: ServiceConfig, name: str) -> EgressProxy:
        """The proxy of one process of the service, as its config says: ``name`` ("gateway", "setup", …) names its
        folder, ``data_dir/egress/<name>``, where its counts are kept (``/metrics`` sums every such folder)."""
        return cls(config.data_path / "egress" / name, squid=config.egress_squid, internal_ok=config.egress_internal,
                   max_upload_mb=config.egress_max_upload_mb, hosts_file=config.egress_hosts_file,
                   forbidden_ports=[config.port, config.gateway_port or 0])

    # -- the interface ---------------------------------------------------------------------------
    def open(self, key: str, tenant: str, rules: Sequence[Rule], folder: Path) -> Path:
        """Listen on ``folder/egress.sock`` for ``key`` with ``rules``; again with other rules: they apply from now
        on. Returns the socket's path. SquidError when squid cannot serve them."""
        rules = tuple(sorted(set(rules)))
        set_key = key_of(rules)
        with self._lock:
            if set_key not in self._sets:
                self._add_set(set_key, rules)
            opening = self._open.get(key)
            if opening is not None and opening.folder == folder:
                opening.set_key = set_key
                return folder / SOCKET_NAME
            if opening is not None:
                self.close(key)
            server = _listen(folder)
            self._open[key] = _Opening(key, tenant, set_key, server, folder)
            self._ensure_thread()
            self._sel.register(server, selectors.EVENT_READ, self._open[key])
            log.info("egress.opened", tenant=tenant, run=key, rules=[str(r) for r in rules])
            return folder / SOCKET_NAME

    def close(self, key: str) -> None:
        """The key's socket goes and its connections end (what squid logs of them later is still audited)."""
        with self._lock:
            opening = self._open.pop(key, None)
            if opening is None:
                return
            self._unregister(opening.server)
            opening.server.close()
            try:
                fd = os.open(opening.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
                try:
                    os.unlink(SOCKET_NAME, dir_fd=fd)
                finally:
                    os.close(fd)
            except OSError:
                pass
            for pair in list(opening.conns):
                self._end(pair)
            self._ledger.forget(key)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._open)

    def counts(self) -> dict[str, int]:
        """Totals: ``requests|<tenant>|<allowed or refused>`` and ``bytes|<tenant>|<up or down>``."""
        with self._lock:
            return dict(self._ledger.counts)

    def shutdown(self) -> None:
        with self._lock:
            for key in list(self._open):
                self.close(key)
            self._closed = True
        if self._thread is not None:
            self._thread.join(5)
        self._read_log()
        if self._squid is not None:
            self._squid.stop()
            shutil.rmtree(self._squid.cfg.folder, ignore_errors=True)

    # -- squid -----------------------------------------------------------------------------------
    def _squid_of(self) -> Squid:
        if self._squid is None:
            work = _squid_folder(self.folder)
            shutil.copyfile(self._hosts_file, work / "hosts")  # squid may run as its own user: it reads its copy
            os.chmod(work / "hosts", 0o644)  # whatever the service's umask (unread, squid would ask DNS instead)
            internal_ok, forbidden, max_mb = self._squid_cfg
            self._squid = Squid(self._squid_binary, SquidConfig(work, internal_ok, forbidden, max_mb,
                                                                str(work / "hosts")))
        return self._squid

    def _add_set(self, set_key: str, rules: tuple[Rule, ...]) -> None:
        port = _free_port()
        sets = {**self._sets, set_key: (port, rules)}
        squid = self._squid_of()
        squid.write(sets)
        squid.start_or_reload()
        self._wait_listening(squid, port)
        self._sets = sets
        log.info("egress.rule_set", set=set_key, port=port, rules=[str(r) for r in rules])

    def _wait_listening(self, squid: Squid, port: int) -> None:
        deadline = time.monotonic() + START_WAIT_S
        while time.monotonic() < deadline:
            why = squid.failed()
            if why:
                squid.stop()
                raise SquidError(why)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                time.sleep(0.05)
                continue
            log = squid.cfg.folder / "cache.log"
            unread = [line for line in log.read_text("utf-8", "replace").splitlines() if "parseEtcHosts" in line]
            if unread:  # squid would ask DNS for the names the operator pinned
                squid.stop()
                raise SquidError(f"squid could not read its hosts file: {unread[-1][:300]}")
            return
        raise SquidError(f"squid did not listen on 127.0.0.1:{port} within {START_WAIT_S:g} s (see "
                         f"{squid.cfg.folder / 'cache.log'})")

    def _read_log(self) -> None:
        with self._lock:
            if self._squid is not None:
                self._ledger.read(self._squid.cfg.folder / "access.log")

    # -- the thread ------------------------------------------------------------------------------
    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="flower-egress", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        last_log = 0.0
        while not self._closed:
            try:
                ready = self._sel.select(_TICK_S)
            except OSError:
                time.sleep(_TICK_S)
                ready = []
            with self._lock:
                for key, mask in ready:
                    if isinstance(key.data, _Opening):
                        self._accept(key.data)
                    elif isinstance(key.data, _Pair) and not key.data.done:
                        self._ready(key.fileobj, key.data, mask)  # type: ignore[arg-type]
            if time.monotonic() - last_log >= _TICK_S:
                last_log = time.monotonic()
                self._read_log()

    def _accept(self, opening: _Opening) -> None:
        try:
            client, _ = opening.server.accept()
        except OSError:
            return
        if opening.cut or len(opening.conns) >= MAX_CONNECTIONS_PER_KEY or opening.key not in self._open:
            client.close()
            return
        port = self._sets[opening.set_key][0]
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # chunks go on as they come (no 40 ms waits)
        try:
            upstream.connect(("127.0.0.1", port))
        except OSError:  # squid reconfiguring: the run's client sees the connection close and tries again
            upstream.close()
            client.close()
            return
        self._ledger.connected(int(upstream.getsockname()[1]), opening.key, opening.tenant)
        pair = _Pair(client, upstream, opening)
        opening.conns.add(pair)
        client.setblocking(False)
        upstream.setblocking(False)
        self._sel.register(client, selectors.EVENT_READ, pair)
        self._sel.register(upstream, selectors.EVENT_READ, pair)

    def _ready(self, s: socket.socket, pair: _Pair, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            self._flush(s, pair)
        if mask & selectors.EVENT_READ and not pair.done:
            self._read(s, pair)
        if not pair.done:
            self._watch(pair)

    def _read(self, s: socket.socket, pair: _Pair) -> None:
        other = pair.other(s)
        try:
            chunk = s.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self._end(pair)
            return
        if not chunk:
            pair.eof.add(s)
            self._flush(other, pair)
            return
        if s is pair.run:
            pair.opening.uploaded += len(chunk)
            if pair.opening.uploaded > self.max_upload:
                self._cut(pair.opening)
                return
        pair.held[other] = pair.held.get(other, b"") + chunk
        self._flush(other, pair)

    def _flush(self, s: socket.socket, pair: _Pair) -> None:
        """Send what is held for ``s``; once its peer ended and nothing is held, pass the end on."""
        data = pair.held.get(s, b"")
        try:
            if data:
                try:
                    sent = s.send(data)
                except BlockingIOError:
                    sent = 0
                pair.held[s] = data[sent:]
            if not pair.held.get(s) and pair.other(s) in pair.eof and s not in pair.shut:
                pair.shut.add(s)
                s.shutdown(socket.SHUT_WR)
        except OSError:
            self._end(pair)
            return
        if len(pair.shut) == 2:
            self._end(pair)

    def _watch(self, pair: _Pair) -> None:
        """Each socket is read while nothing waits for its peer, and written to while something waits for it."""
        for s in (pair.run, pair.squid):
            events = (selectors.EVENT_READ if s not in pair.eof and not pair.held.get(pair.other(s)) else 0) | \
                     (selectors.EVENT_WRITE if pair.held.get(s) else 0)
            try:
                if events:
                    self._sel.modify(s, events, pair)
                else:
                    self._sel.unregister(s)
            except KeyError:
                if events:
                    self._sel.register(s, events, pair)
            except (ValueError, OSError):
                pass

    def _cut(self, opening: _Opening) -> None:
        """Past the upload cap: every connection of this key ends, and no new one is led anywhere."""
        opening.cut = True
        for pair in list(opening.conns):
            self._end(pair)
        self._ledger.cut(opening.key, opening.tenant, opening.uploaded, self.max_upload)

    def _end(self, pair: _Pair) -> None:
        if pair.done:
            return
        pair.done = True
        pair.opening.conns.discard(pair)
        try:
            self._ledger.closed(int(pair.squid.getsockname()[1]))
        except OSError:
            pass
        for s in (pair.run, pair.squid):
            self._unregister(s)
            s.close()

    def _unregister(self, s: socket.socket) -> None:
        try:
            self._sel.unregister(s)
        except (KeyError, ValueError):
            pass

def _listen(folder: Path) -> socket.socket:
    """``folder/egress.sock``, reachable by the run's uid (what reaches it is led to squid alone)."""
    folder.mkdir(mode=0o755, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        try:
            if stat.S_ISSOCK(os.stat(SOCKET_NAME, dir_fd=fd, follow_symlinks=False).st_mode):
                os.unlink(SOCKET_NAME, dir_fd=fd)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path = f"/proc/self/fd/{fd}/{SOCKET_NAME}"
        sock.bind(path)
        os.chmod(path, 0o666)
    finally:
        os.close(fd)
    sock.listen(64)
    sock.setblocking(False)
    return sock


def _squid_folder(owner: Path) -> Path:
    """squid's own folder (configuration, logs, pid): outside the service's data dir, which squid's user may not
    enter; owned by that user when squid is started as root (it then drops to Debian's ``proxy``). Named after the
    proxy's folder, so that a squid a dead process of the service left there (the parent-death signal does not
    survive squid's change of user) is ended before a new one starts."""
    import hashlib

    work = Path(tempfile.gettempdir()) / f"flower-squid-{hashlib.sha256(str(owner).encode()).hexdigest()[:16]}"
    _end_left_squid(work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(mode=0o700)
    if os.geteuid() == 0:
        import pwd

        try:
            entry = pwd.getpwnam("proxy")
        except KeyError:
            return work
        os.chown(work, entry.pw_uid, entry.pw_gid)
    return work


def _end_left_squid(work: Path) -> None:
    """SIGTERM to the squid whose pid file is in ``work``, if that process is squid run on ``work``'s config."""
    import signal

    try:
        pid = int((work / "squid.pid").read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, IndexError):
        return
    if str(work / "squid.conf").encode() in cmdline:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            return
        for _ in range(100):
            if not Path(f"/proc/{pid}").exists():
                return
            time.sleep(0.05)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
