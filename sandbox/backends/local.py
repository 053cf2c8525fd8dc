"""LocalBackend: a run as a process of this machine, walled in by bubblewrap (Debian ``bubblewrap``).

With ``isolation="bwrap"`` (the default) the run gets its own pid, ipc and uts namespaces, no
capabilities, a read-only view of only what it needs to execute — ``/usr``, a few files of ``/etc``, the
Python it runs and flower's own code — and, read-write, only its own folders (``RunLayout.writable``); its
mailbox (spec, env file, answers) and the team's object store are read-only. No other tenant's path exists inside,
``/proc`` shows only the run's own processes, and what of it writes to the kernel (``/proc/sys``, ``sysrq-trigger``…)
is read-only. The run is never root on the host: a non-root service's uid is mapped to ``RUN_UID`` by a user
namespace; a root service's run becomes ``RUN_UID`` outright (``bwrap_argv(drop=)``: a user namespace would map it to
root), its folders handed to that uid first (``mail_owner``). ``isolation="none"`` is a plain subprocess with a clean
environment (development only: it is the service's uid and sees everything that uid sees).

Limits: where the machine lets this backend write cgroups (v1 ``memory``/``pids`` hierarchies, or cgroup v2 with
those controllers), each run gets its own cgroup — ``mem_limit`` (2 GiB, swap included) and ``pids_limit`` (512),
the Docker backend's defaults — joined before bubblewrap starts, so nothing the run forks escapes it. Where it
cannot, the run has no limits and ``limits(handle)`` says so (empty).

The process gets its own session, so ``stop`` can end everything the run started. A handle is
``local:<pid>:<start time>:<run folder>`` of the process this backend started (bubblewrap's outer
process, or the entrypoint itself without isolation); ``live()`` re-finds runs by the ``FLOWER_RUN_ID``
marker in the environment of such processes — in this service's own pid namespace only, so nothing a
run starts inside its sandbox can pose as a run. A handle is a claim (it comes back from the registry, which
may have been restored from anywhere): a process that is not this backend's own child is taken for the handle's
only while it carries the marker, runs the entrypoint on the handle's folder and has the handle's start time
(``/proc/<pid>/stat`` field 22; a handle without one names no process), so a handle naming an unrelated or a
reused pid is never signalled. With ``root``, a handle naming a folder elsewhere is refused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..layout import RunLayout, folder_of, local_handle
from ..egress import EGRESS_ENV
from ..spec import Egress, Prepared, RunSpec
from .base import (RUN_MARK, WARM_MARK, BackendError, Handle, State, check_prepared, check_spec, claim_slot,
                   claimed_run, read_exit, run_env, stopped_exit, warm_env)

__all__ = ["LocalBackend", "bwrap_available", "Isolation", "folder_of"]

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
Isolation = Literal["bwrap", "none"]
# What of /etc a run needs: name lookups, TLS roots, the dynamic linker. Nothing else (keys, shadow…) is there.
ETC = ("passwd", "group", "hosts", "resolv.conf", "nsswitch.conf", "host.conf", "ssl", "ca-certificates",
       "ca-certificates.conf", "alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime")
RUN_UID = 10001


CGROUP = Path("/sys/fs/cgroup")
# The wrapper joins the run's cgroups, then becomes bubblewrap (same pid: the handle does not change).
_JOIN = 'IFS=:; for f in $FLOWER_CGROUPS; do echo $$ > "$f" || exit 125; done; unset FLOWER_CGROUPS PWD OLDPWD; exec "$@"'


def _cgroups(run: str, mem_limit: int | None, pids_limit: int | None) -> list[Path]:
    """Create the run's cgroups with their limits; the procs files to join (none where cgroups are not writable)."""
    made: list[Path] = []
    try:
        if (CGROUP / "cgroup.controllers").is_file():  # v2: one tree
            parent = CGROUP / "flower"
            parent.mkdir(exist_ok=True)
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
            d = parent / run
            d.mkdir(exist_ok=True)
            if mem_limit:
                (d / "memory.max").write_text(str(mem_limit))
                (d / "memory.swap.max").write_text("0")
            if pids_limit:
                (d / "pids.max").write_text(str(pids_limit))
            return [d / "cgroup.procs"]
        for kind, limit in (("memory", mem_limit), ("pids", pids_limit)):
            if not limit or not (CGROUP / kind).is_dir():
                continue
            d = CGROUP / kind / f"flower-{run}"
            d.mkdir(exist_ok=True)
            made.append(d)
            if kind == "pids":
                (d / "pids.max").write_text(str(limit))
            else:
                (d / "memory.limit_in_bytes").write_text(str(limit))
                if (d / "memory.memsw.limit_in_bytes").exists():
                    (d / "memory.memsw.limit_in_bytes").write_text(str(limit))
        return [d / "cgroup.procs" for d in made]
    except OSError:
        for d in made:
            _rmdir(d)
        return []


def _rmdir(d: Path, tries: int = 1) -> None:
    """Remove an emptied cgroup; its last processes may still be exiting, so ``tries`` times, 50 ms apart."""
    for _ in range(tries):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)


def _kill_cgroups(run: str) -> None:
    """SIGKILL every process left in the run's cgroups: the CLI and what it started may sit in sessions of
    their own, out of the process group's reach, and a cgroup with a process in it cannot be removed."""
    for d in _run_cgroups(run):
        try:
            pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            continue
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


SWEEP_AFTER_S = 60.0  # a cgroup younger than this may be one another service on this machine is about to join


def _sweep() -> None:
    """Remove the empty cgroups runs left (a run's last processes may outlive its removal by a moment) — not a
    young one: an empty cgroup is also one made a moment ago, by this service or a replica beside it, for a run
    whose wrapper has yet to join it (removed then, that run would fail to start)."""
    for d in [*CGROUP.glob("memory/flower-*"), *CGROUP.glob("pids/flower-*"), *CGROUP.glob("flower/*")]:
        try:
            young = time.time() - d.stat().st_mtime < SWEEP_AFTER_S
            if d.is_dir() and not young and not (d / "cgroup.procs").read_text().strip():
                d.rmdir()
        except OSError:
            continue


def cgroup_name(folder: Path) -> str:
    """The run's cgroups' name: its folder's, and which runs root it is in — cgroups are the machine's, and two
    services (or test sessions) on one machine may each have a run of one name; the one removing its run must
    kill only its own processes."""
    where = hashlib.sha256(os.fsencode(os.path.realpath(folder.parent))).hexdigest()[:12]
    return f"{folder.name}-{where}"


def _run_cgroups(run: str) -> list[Path]:
    return [d for d in (CGROUP / "flower" / run, CGROUP / "memory" / f"flower-{run}", CGROUP / "pids" / f"flower-{run}")
            if d.is_dir()]


def bwrap_available() -> bool:
    return shutil.which("bwrap") is not None


def _code_dirs() -> list[Path]:
    """Where the run's Python and flower's own code live (an editable install points outside the venv)."""
    import flower
    from flower.core.agent import PLUGIN_DIR

    dirs = {Path(sys.prefix), Path(sys.base_prefix), Path(flower.__file__).parent, Path(__file__).parents[1]}
    if Path(PLUGIN_DIR).is_dir():
        dirs.add(Path(PLUGIN_DIR))
    return sorted(d.resolve() for d in dirs)


# /proc as Docker shows it: what writes to the kernel read-only, what tells of the host's kernel masked
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
PROC_MASKED = ("kcore", "keys", "latency_stats", "timer_list", "timer_stats", "sched_debug")
PROC_MASKED_DIRS = ("acpi", "asound", "scsi")


def drop_argv(uid: int, gid: int, *, setpriv: str = "setpriv") -> list[str]:
    """What a root service's run starts with inside bubblewrap: become ``uid:gid`` for good — no groups, no
    capability left (bounding set included), no privilege gained through exec."""
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
            "--no-new-privs", "--"]


def bwrap_argv(layout: RunLayout, objects: Path | None, command: list[str], *, bwrap: str = "bwrap",
               share_net: bool = True, drop: tuple[int, int] | None = None, setpriv: str = "setpriv") -> list[str]:
    """The bubblewrap command line of one run (pure: reads nothing of the run's folders).

    ``drop=None`` (a service that is not root): a user namespace maps the service's uid to ``RUN_UID`` inside.
    ``drop=(uid, gid)`` (a root service: a user namespace would map the run's uid to root outside):
    bubblewrap sets up as root, keeps only what ``setpriv`` needs to become ``uid:gid`` before the run's
    command, and nothing of the run is root on the host."""
    argv = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--new-session",
            "--cap-drop", "ALL", "--hostname", "flower-run"]
    if drop is None:
        argv[1:1] = ["--unshare-user", "--uid", str(RUN_UID), "--gid", str(RUN_UID)]
    else:
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
        command = [*drop_argv(*drop, setpriv=setpriv), *command]
    if not share_net:
        argv.append("--unshare-net")
    mounted: list[Path] = []  # the host's folders bound in so far: what is in them is there already
    made: set[Path] = {Path("/proc"), Path("/dev"), Path("/tmp")}  # mounts of bubblewrap's own, each set up below

    def bind(op: str, source: str | Path, dest: str | Path) -> None:
        """``op source dest``, the folders above ``dest`` made first, 0755 (bubblewrap would make them 0700 and
        root's: a dropped run could not reach its own folders)."""
        dest = Path(dest)
        for parent in reversed(dest.parents[:-1]):
            if parent not in made and not any(parent.is_relative_to(m) for m in mounted):
                argv.extend(["--perms", "0755", "--dir", str(parent)])
                made.add(parent)
        argv.extend([op, str(source), str(dest)])
        mounted.append(dest)

    for top in ("bin", "lib", "lib64", "lib32", "libx32", "sbin"):
        p = Path("/") / top
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            bind("--ro-bind", p, p)
    bind("--ro-bind", "/usr", "/usr")
    for name in ETC:
        bind("--ro-bind-try", f"/etc/{name}", f"/etc/{name}")
    # in order: what is bound after /tmp's tmpfs shows through it (code or runs may live under /tmp)
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm", "--perms", "1777",
             "--tmpfs", "/tmp"]
    for name in PROC_READ_ONLY:
        argv += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
    for name in PROC_MASKED:
        if Path("/proc", name).exists():
            argv += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    for name in PROC_MASKED_DIRS:
        if Path("/proc", name).is_dir():
            argv += ["--tmpfs", f"/proc/{name}", "--remount-ro", f"/proc/{name}"]
    for d in _code_dirs():
        bind("--ro-bind", d, d)
    for d in layout.writable:
        bind("--bind", d, d)
    bind("--ro-bind", layout.mailbox, layout.mailbox)
    if layout.gateway.is_dir():
        bind("--ro-bind", layout.gateway, layout.gateway)
    if objects is not None:
        bind("--ro-bind", objects, objects)
    argv += ["--remount-ro", "/", "--chdir", str(layout.dir), "--", *command]
    return argv


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in ticks) of a live pid, else None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return fields[0], int(fields[19])


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _entrypoint_of(pid: int) -> int:
    """The entrypoint a handle's process runs: itself, or under bubblewrap the first child of its init (the
    outer bwrap does not pass signals on)."""
    try:
        if Path(f"/proc/{pid}/exe").resolve().name != "bwrap":
            return pid
    except OSError:
        return pid
    for init in _children(pid):
        for child in _children(init):
            return child
    return pid


def _parse(handle: str) -> tuple[int, int, Path]:
    parsed = local_handle(handle)
    if parsed is None:
        raise BackendError(f"{handle!r} is not a local backend handle")
    return parsed


def _marked(pid: int) -> tuple[Path, bool, int] | None:
    """(run folder, warm?, start time) of a live process of this pid namespace that runs the entrypoint with the
    run marker in its environment; None for any other process (inside a sandbox, unrelated, gone, a zombie)."""
    proc = Path(f"/proc/{pid}")
    try:
        if os.readlink(proc / "ns" / "pid") != os.readlink("/proc/self/ns/pid"):
            return None  # inside some sandbox: whatever it claims to be, it is not a run we started
        cmd = [a for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
        at = cmd.index(b"sandbox.entrypoint") if b"sandbox.entrypoint" in cmd else -1
        if at < 1 or cmd[at - 1] != b"-m" or at + 1 >= len(cmd):
            return None
        raw = (proc / "environ").read_bytes().split(b"\0")
        env = dict(item.split(b"=", 1) for item in raw if b"=" in item)
    except OSError:
        return None
    st = _stat(pid)
    if not env.get(RUN_MARK.encode()) or st is None or st[0] == "Z":
        return None
    folder = Path(os.fsdecode(cmd[at + 1])).parent.parent  # <folder>/mailbox/spec.json
    return folder, env.get(WARM_MARK.encode()) == b"1", st[1]


@dataclass(frozen=True)
class _Child:
    """A sandbox process this backend started: its run folder, and whether it is a warm one."""

    proc: subprocess.Popen[bytes]
    folder: Path
    warm: bool


class LocalBackend:
    """Runs ``<python> -m sandbox.entrypoint <spec>``; ``root`` limits ``live()`` to one runs folder.

    ``isolation``: "bwrap" (see the module doc; BackendError at start when bubblewrap is missing) or "none".
    ``share_net``: the run keeps the host's network (it reaches the model on 127.0.0.1); False gives it none.
    """

    def __init__(self, *, python: str | None = None, root: str | Path | None = None, path: str | None = None,
                 isolation: Isolation = "bwrap", share_net: bool = True, mem_limit: int | None = 2 << 30,
                 pids_limit: int | None = 512) -> None:
        self.mem_limit, self.pids_limit = mem_limit, pids_limit
        self.python = python or sys.executable
        self.root = Path(root).resolve() if root else None
        self.path = path or os.environ.get("PATH") or DEFAULT_PATH
        self.isolation, self.share_net = isolation, share_net
        self._procs: dict[int, _Child] = {}
        self._removed: set[str] = set()

    # -- the protocol ------------------------------------------------------
    def start(self, layout: RunLayout, spec: RunSpec, *, network: str | None = None) -> Handle:
        if network is not None:
            raise BackendError("the local backend cannot put a run on a named network: "
                               "use the Docker backend for that, or pass network=None")
        if self.isolation == "bwrap":
            objects = check_prepared(layout, spec)
        else:
            check_spec(layout, spec)
            objects = None
        running = self.live().get(layout.run_id)
        if running:
            raise BackendError(f"run {layout.run_id} is already running ({running})")
        return self._spawn(layout, objects, spec.egress, run_env(layout, spec, str(layout.env_file)))

    def warm(self, layout: RunLayout, *, objects: Path | None, egress: Egress,
             settings: Mapping[str, str] | None = None, environment: Prepared | None = None) -> Handle:
        """A sandbox on the slot folder ``layout`` with the runner imported and waiting (``sandbox.pool``)."""
        if environment is not None:
            raise BackendError("the local backend runs the host's tools, not a team's image: only the docker "
                               "backend starts a sandbox in a prepared environment")
        return self._spawn(layout, objects, egress, warm_env(layout, settings))

    def claim(self, handle: Handle, layout: RunLayout, spec: RunSpec) -> Handle:
        claim_slot(layout, spec, self.mail_owner())
        return handle

    def slots(self) -> dict[Path, Handle]:
        return {folder: handle for folder, handle in self._scan(warm=True).items() if claimed_run(folder) is None}

    def _spawn(self, layout: RunLayout, objects: Path | None, egress: Egress, env: dict[str, str]) -> Handle:
        command = [self.python, "-m", "sandbox.entrypoint", str(layout.spec_file)]
        owner = self.mail_owner()
        if self.isolation == "bwrap":
            bwrap = shutil.which("bwrap")
            if bwrap is None:
                raise BackendError("bubblewrap is not installed (`apt-get install bubblewrap`): without it a local "
                                   "run is not isolated; install it, or set isolation='none' for development")
            setpriv = shutil.which("setpriv") if owner is not None else "setpriv"
            if setpriv is None:
                raise BackendError(f"a root service starts each local run as uid {RUN_UID} with setpriv, which is "
                                   "not installed: install util-linux (`apt-get install util-linux`), or run the "
                                   "service as an unprivileged user")
            command = bwrap_argv(layout, objects, command, bwrap=bwrap, share_net=self.share_net and egress == "open",
                                 drop=owner, setpriv=setpriv)
        layout.ensure()
        layout.exit_file.unlink(missing_ok=True)
        if owner is not None:  # what the run writes, and its mail (spec, env file) to read; mounted read-only
            layout.hand_over(*owner)
        env = {"PATH": self.path, **env}
        if egress == "proxied":  # the runner bridges gateway/egress.sock and exports the proxy (sandbox.egress)
            env[EGRESS_ENV] = egress
        if owner is not None:  # the wrapper, bubblewrap and setpriv run as root: nothing may load code into them
            env = {k: v for k, v in env.items() if not k.startswith("LD_")}
        _sweep()
        joins = _cgroups(cgroup_name(layout.dir), self.mem_limit, self.pids_limit)
        if joins:
            command = ["/bin/sh", "-c", _JOIN, "sh", *command]
            env["FLOWER_CGROUPS"] = ":".join(str(p) for p in joins)
        fd = os.open(layout.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "ab") as out:
            proc = subprocess.Popen(command, cwd=layout.dir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self._procs[proc.pid] = _Child(proc, layout.dir, env.get(WARM_MARK) == "1")
        st = _stat(proc.pid)
        return Handle(f"local:{proc.pid}:{st[1] if st else 0}:{layout.dir}")

    def state(self, handle: Handle) -> State:
        if handle in self._removed:
            return "missing"
        pid, start, folder = self._handle(handle)
        if self._alive(pid, start, folder):
            return "running"
        for d in _run_cgroups(cgroup_name(folder)):  # its processes are gone: so goes its cgroup
            _rmdir(d)
        return "exited" if folder.is_dir() else "missing"

    def exit_code(self, handle: Handle) -> int | None:
        pid, start, folder = self._handle(handle)
        if handle in self._removed or self._alive(pid, start, folder):
            return None
        proc = self._proc(pid)
        if proc is not None and proc.returncode is not None:
            return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        data = read_exit(folder)
        code = data.get("exit_code") if data else None
        return code if isinstance(code, int) else None

    def stop(self, handle: Handle, timeout: float = 10) -> None:
        pid, start, folder = self._handle(handle)
        verified = self._alive(pid, start, folder)  # the group is this run's: safe to kill after its leader is gone
        if verified:
            try:
                os.kill(_entrypoint_of(pid), signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + timeout
            while self._alive(pid, start, folder) and time.monotonic() < deadline:
                time.sleep(0.05)
        self._kill_group(pid, start, folder, verified=verified)
        _kill_cgroups(cgroup_name(folder))
        stopped_exit(folder, timeout)

    def live(self) -> dict[str, Handle]:
        out: dict[str, Handle] = {}
        for folder, handle in self._scan(warm=False).items():
            out[folder.name] = handle
        for folder, handle in self._scan(warm=True).items():
            run_id = claimed_run(folder)
            if run_id:
                out[run_id] = handle
        return out

    def _scan(self, *, warm: bool) -> dict[Path, Handle]:
        """``{run folder: handle}`` of the sandboxes this backend started that are still running: the runs
        (``warm=False``) or the warm sandboxes, claimed or not."""
        out: dict[Path, Handle] = {}
        for child in list(self._procs.values()):
            child.proc.poll()  # reap our own children
        for entry in Path("/proc").iterdir():
            found = _marked(int(entry.name)) if entry.name.isdigit() else None
            if found is None or found[1] != warm:
                continue
            folder, _, start = found
            if self.root is not None and folder.parent != self.root:
                continue
            out[folder] = Handle(f"local:{entry.name}:{start}:{folder}")
        for pid, child in list(self._procs.items()):  # a child still in its exec shows no command line yet
            st = _stat(pid)
            if child.proc.returncode is None and child.warm == warm and st is not None and st[0] != "Z" \
                    and (self.root is None or child.folder.parent == self.root):
                out.setdefault(child.folder, Handle(f"local:{pid}:{st[1]}:{child.folder}"))
        return out

    def remove(self, handle: Handle) -> None:
        pid, start, folder = self._handle(handle)
        self._kill_group(pid, start, folder, force=True)
        _kill_cgroups(cgroup_name(folder))
        self._procs.pop(pid, None)
        self._removed.add(handle)
        for d in _run_cgroups(cgroup_name(folder)):
            _rmdir(d, tries=40)

    def limits(self, handle: str) -> dict[str, int]:
        """The limits the run's cgroups hold (``{"memory": bytes, "pids": n}``); empty when it has none."""
        out: dict[str, int] = {}
        for d in _run_cgroups(cgroup_name(self._handle(handle)[2])):
            for key, name in (("memory", "memory.max"), ("memory", "memory.limit_in_bytes"), ("pids", "pids.max")):
                try:
                    out[key] = int((d / name).read_text())
                except (OSError, ValueError):
                    continue
        return out

    # -- extras --------------------------------------------------------------
    def mail_owner(self) -> tuple[int, int] | None:
        """``(RUN_UID, RUN_UID)`` for a root service's bubblewrap runs, which never run as root (``bwrap_argv``);
        else None: a user namespace maps the service's uid to the run's, so the run reads what the service writes
        (without isolation the run is the service's own uid)."""
        return (RUN_UID, RUN_UID) if self.isolation == "bwrap" and os.getuid() == 0 else None

    def logs(self, handle: Handle) -> str:
        """What the run's process printed (its output.log)."""
        _, _, folder = self._handle(handle)
        try:
            return (folder / "output.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def wait(self, handle: Handle, timeout: float | None = None) -> int | None:
        """Block until the run's process ends (or ``timeout``); its exit code."""
        pid, start, folder = self._handle(handle)
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._alive(pid, start, folder):
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        return self.exit_code(handle)

    # -- internals -----------------------------------------------------------
    def _handle(self, handle: str) -> tuple[int, int, Path]:
        """(pid, start time, run folder) of a handle; BackendError for one naming a folder outside ``root``."""
        pid, start, folder = _parse(handle)
        if self.root is not None and folder.parent != self.root:
            raise BackendError(f"handle {handle!r} names a folder outside {self.root}: it is not one of this "
                               "backend's runs")
        return pid, start, folder

    def _proc(self, pid: int) -> subprocess.Popen[bytes] | None:
        child = self._procs.get(pid)
        return child.proc if child is not None else None

    def _alive(self, pid: int, start: int, folder: Path) -> bool:
        """The handle's process still runs: our own child, or a process carrying the run's marker, running the
        entrypoint on ``folder``, with the handle's start time (a handle naming any other pid names nothing)."""
        proc = self._proc(pid)
        if proc is not None:
            return proc.poll() is None
        found = _marked(pid)
        return start != 0 and found is not None and found[0] == folder and found[2] == start

    def _kill_group(self, pid: int, start: int, folder: Path, *, force: bool = False,
                    verified: bool = False) -> None:
        """SIGKILL the run's process group (the CLI and what it started), once its leader is gone or if ``force``.

        Only for a group this backend can vouch for: its own child, or a live process with the handle's start
        time (a re-attached run whose leader is gone may have had its pid reused).
        """
        if not (verified or pid in self._procs or self._alive(pid, start, folder)):
            return
        children = _children(pid)  # bubblewrap's init: its end ends the sandbox's pid namespace
        if force and self._alive(pid, start, folder):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc = self._proc(pid)
        if proc is not None:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
