"""The service's parts on their own: config, tenants, registry, event numbering, diff stat, logging."""

from __future__ import annotations

import io
import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.worktree import Changes, FileStat
from service.config import ServiceConfigError, load_config
from service.control.events import read_new
from service.logging import configure_logging, get_logger
from service.registry import Registry
from service.control.harvest import diffstat
from service.tenants import TenantError, TenantNotReady, Tenants, hash_token

from _service_helpers import ROOT


# -- config ----------------------------------------------------------------------------------------
def _tenants_file(tmp_path: Path) -> Path:
    p = tmp_path / "tenants.toml"
    p.write_text("")
    return p


def test_config_from_toml_with_env_overrides_and_relative_paths(tmp_path: Path):
    _tenants_file(tmp_path)
    cfg_file = tmp_path / "svc.toml"
    cfg_file.write_text('data_dir = "data"\ntenants = "tenants.toml"\nbackend = "local"\nmax_running = 2\n')
    cfg = load_config(cfg_file, env={"FLOWER_SERVICE_MAX_RUNNING": "7", "FLOWER_SERVICE_POLL_S": "0.5"})
    assert cfg.data_dir == str(tmp_path / "data") and cfg.tenants == str(tmp_path / "tenants.toml")
    assert cfg.max_running == 7 and cfg.poll_s == 0.5 and cfg.backend == "local"
    assert cfg.db_path == tmp_path / "data" / "registry.sqlite3"


def test_config_from_json_named_by_the_environment(tmp_path: Path):
    _tenants_file(tmp_path)
    (tmp_path / "svc.json").write_text(json.dumps({"data_dir": str(tmp_path / "d"), "tenants": "tenants.toml",
                                                   "backend": "docker", "image": "flower:test"}))
    cfg = load_config(env={"FLOWER_SERVICE_CONFIG": str(tmp_path / "svc.json")})
    assert cfg.backend == "docker" and cfg.image == "flower:test"
    (tmp_path / "svc.json").write_text(json.dumps({"data_dir": "d", "tenants": "tenants.toml", "backend": "docker"}))
    assert load_config(tmp_path / "svc.json", env={}).image == ""  # docker builds this tree's image itself


@pytest.mark.parametrize("body, env, fragment", [
    ('data_dir = "d"\ntenants = "tenants.toml"\nbackend = "podman"\n', {},
     "`backend` is 'podman': it must be one of local, docker, kubernetes"),
    ('data_dir = "d"\ntenants = "tenants.toml"\nmax_running = 0\n', {}, "max_running"),
    ('data_dir = "d"\ntenants = "tenants.toml"\nmax_runing = 3\n', {},
     "unknown setting `max_runing`: did you mean `max_running`?"),
    ('data_dir = "d"\n', {}, "tenants"),
    ('data_dir = "d"\ntenants = "nope.toml"\n', {}, "does not exist"),
    ('data_dir = "d"\ntenants = "tenants.toml"\n', {"FLOWER_SERVICE_PORT": "eighty"}, "port"),
    ('data_dir = "d" tenants', {}, "not valid TOML"),
    ('data_dir = "d"\ntenants = "tenants.toml"\nbackend = "kubernetes"\n', {}, "image"),
    ('data_dir = "d"\ntenants = "tenants.toml"\nbackend = "kubernetes"\nimage = "i"\nwarm = 1\n', {}, "helm/README.md"),
    ('data_dir = "d"\ntenants = "tenants.toml"\nwarm = -1\n', {}, "warm"),
])
def test_bad_config_is_one_clear_error(tmp_path: Path, body: str, env: dict[str, str], fragment: str):
    _tenants_file(tmp_path)
    (tmp_path / "svc.toml").write_text(body)
    with pytest.raises(ServiceConfigError) as e:
        load_config(tmp_path / "svc.toml", env=env)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_a_missing_config_file_and_the_command_line_say_so(tmp_path: Path):
    with pytest.raises(ServiceConfigError, match="does not exist"):
        load_config(tmp_path / "absent.toml", env={})
    out = subprocess.run([sys.executable, "-m", "service", "--config", str(tmp_path / "absent.toml")], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "absent.toml does not exist" in out.stderr and "Traceback" not in out.stderr


def test_a_port_in_use_is_one_sentence_not_a_server_log_line(tmp_path: Path):
    _tenants_file(tmp_path)
    (tmp_path / "svc.toml").write_text('data_dir = "data"\ntenants = "tenants.toml"\nbackend = "local"\n')
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "service", "--config", str(tmp_path / "svc.toml"), "--port",
                              str(port), "--log-format", "json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    said = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert said == (f"flower-service: port {port} on 127.0.0.1 is in use by another process: stop it, or give "
                    f"another with --port (0 picks a free one)"), said
    assert "Errno" not in out.stderr + out.stdout and "uvicorn" not in out.stderr + out.stdout
    assert not (tmp_path / "data" / "registry.sqlite3").exists(), "nothing was started on the way"


def test_the_command_line_hashes_tokens_and_refuses_a_broken_tenants_file(tmp_path: Path):
    out = subprocess.run([sys.executable, "-m", "service", "hash-token", "acme-secret-token-0123"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == hash_token("acme-secret-token-0123")
    (tmp_path / "tenants.toml").write_text('[[tenant]]\nname = "a"\nrepo = "r"\ncredentials = "c"\n')
    (tmp_path / "svc.toml").write_text('data_dir = "data"\ntenants = "tenants.toml"\nbackend = "local"\n')
    out = subprocess.run([sys.executable, "-m", "service", "--config", str(tmp_path / "svc.toml"), "--port", "0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "needs exactly one of `token_sha256` or `token`" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_help_lists_every_subcommand_and_logs_default_to_auto(tmp_path: Path):
    from service.__main__ import SUBCOMMANDS

    out = subprocess.run([sys.executable, "-m", "service", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and SUBCOMMANDS, out.stderr
    for name in SUBCOMMANDS:
        assert f"python -m service {name}" in out.stdout, (name, out.stdout)
    assert "hash-token" in out.stdout
    out = subprocess.run([sys.executable, "-m", "service", "hash-token", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "token_sha256" in out.stdout and hash_token("--help") not in out.stdout
    (tmp_path / "t.toml").write_text("")
    assert load_config(env={}, data_dir=str(tmp_path), tenants=str(tmp_path / "t.toml")).log_format == "auto"


# -- tenants ---------------------------------------------------------------------------------------
def _write_tenants(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


def test_tenants_keep_only_a_hash_and_authenticate_by_it(tmp_path: Path):
    digest = hash_token("beta-secret-token-0123")
    p = _write_tenants(tmp_path / "t.toml", f"""
[[tenant]]
name = "acme"
token = "acme-secret-token-0123"
repo = "repos/acme"
credentials = "acme.env"
quota = 2
allowed_options = ["rounds"]

[[tenant]]
name = "beta"
token_sha256 = "{digest}"
repo = "/srv/beta"
credentials = "/etc/beta.env"
""")
    tenants = Tenants(p)
    acme = tenants.authenticate("acme-secret-token-0123")
    assert acme is not None and acme.name == "acme" and acme.quota == 2
    assert acme.repo == str(tmp_path / "repos" / "acme") and acme.allowed_options == {"rounds"}
    assert "acme-secret-token-0123" not in repr(acme) and not hasattr(acme, "token")
    assert tenants.authenticate("beta-secret-token-0123").name == "beta"
    assert tenants.authenticate("acme-secret-token-0124") is None and tenants.authenticate("") is None


@pytest.mark.parametrize("body, fragment", [
    ('[[tenant]]\nname = "Bad Name"\ntoken = "0123456789abcdef"\nrepo = "r"\ncredentials = "c"\n', "name"),
    ('[[tenant]]\nname = "a"\nrepo = "r"\ncredentials = "c"\n', "exactly one of"),
    ('[[tenant]]\nname = "a"\ntoken = "short"\nrepo = "r"\ncredentials = "c"\n', "token"),
    ('[[tenant]]\nname = "a"\ntoken = "0123456789abcdef"\nrepo = "r"\ncredentials = "c"\n'
     '[[tenant]]\nname = "b"\ntoken = "0123456789abcdef"\nrepo = "r"\ncredentials = "c"\n', "shares its token"),
    ('[[tenant]]\nname = "a"\ntoken = "0123456789abcdef"\nrepo = "r"\ncredentials = "c"\n'
     '[[tenant]]\nname = "a"\ntoken = "0123456789abcdeg"\nrepo = "r"\ncredentials = "c"\n', "appears twice"),
    ('[[tenant]]\nname = "a"\ntoken = "0123456789abcdef"\nrepo = "r"\ncredentials = "c"\nqouta = 2\n',
     "unknown setting `qouta`: did you mean `quota`?"),
    ('[[tenant]]\nname = "a"\ntoken = "0123456789abcdef"\nrepo = "r"\ncredentials = "c"\nquota = 0\n', "quota"),
    ('tenant = 3\n', "list of tenants"),
])
def test_bad_tenants_file_is_one_clear_error(tmp_path: Path, body: str, fragment: str):
    with pytest.raises(TenantError) as e:
        Tenants(_write_tenants(tmp_path / "t.toml", body))
    assert fragment in str(e.value)


def test_tenants_file_is_reread_on_change_and_a_broken_edit_keeps_the_last_good_one(tmp_path: Path):
    p = _write_tenants(tmp_path / "t.toml", '[[tenant]]\nname = "a"\ntoken = "0123456789abcdef"\nrepo = "r"\n'
                                            'credentials = "c"\n')
    errors: list[str] = []
    tenants = Tenants(p, on_reload_error=errors.append)
    assert tenants.authenticate("0123456789abcdef").name == "a"
    p.write_text('[[tenant]]\nname = "b"\ntoken = "0123456789abcdeX"\nrepo = "r"\ncredentials = "c"\n')
    os.utime(p, ns=(1, 1))
    assert tenants.authenticate("0123456789abcdef") is None and tenants.get("b") is not None
    p.write_text("[[tenant]\n")
    os.utime(p, ns=(2, 2))
    assert tenants.authenticate("0123456789abcdeX").name == "b", "the last good file stays in force"
    assert [t.name for t in tenants.all()] == ["b"]
    assert errors and "not valid TOML" in errors[0] and "last good tenants file stays in force" in errors[0]
    p.write_text('[[tenant]]\nname = "c"\ntoken = "0123456789abcdeY"\nrepo = "r"\ncredentials = "c"\n')
    os.utime(p, ns=(3, 3))
    assert tenants.authenticate("0123456789abcdeX") is None, "a tenant removed from a file that parses is gone"
    assert tenants.authenticate("0123456789abcdeY").name == "c", "and the fixed file is served"


def test_a_tenant_repo_that_is_a_symlink_or_another_tenants_is_refused(tmp_path: Path, git_repo):
    acme = git_repo(tmp_path / "acme")
    (tmp_path / "link").symlink_to(acme)
    twin = tmp_path / "twin"
    twin.mkdir()
    (twin / ".git").write_text(f"gitdir: {acme / '.git'}\n")  # a work tree of its own over acme's objects
    a = '[[tenant]]\nname = "a"\ntoken = "0123456789abcdef"\nrepo = "acme"\ncredentials = "c"\n'
    for repo, fragment in [("link", "goes through a symlink"), ("acme", "share a repository"),
                           ("acme/../acme", "share a repository"), ("twin", "share a git object store")]:
        body = a + f'[[tenant]]\nname = "b"\ntoken = "0123456789abcdeg"\nrepo = "{repo}"\ncredentials = "c"\n'
        with pytest.raises(TenantError, match=fragment):
            Tenants(_write_tenants(tmp_path / "t.toml", body))


def test_check_ready_names_what_is_missing(tmp_path: Path, git_repo):
    repo = git_repo(tmp_path / "repo")
    cred = tmp_path / "c.env"
    p = _write_tenants(tmp_path / "t.toml", f'[[tenant]]\nname = "a"\ntoken = "0123456789abcdef"\n'
                                            f'repo = "{repo}"\ncredentials = "{cred}"\n')
    t = Tenants(p).get("a")
    with pytest.raises(TenantNotReady, match="credentials file of tenant a is missing"):
        t.check_ready()
    cred.write_text("ANTHROPIC_BASE_URL=http://127.0.0.1:9\n")
    with pytest.raises(TenantNotReady, match="has none of ANTHROPIC_API_KEY"):
        t.check_ready()
    cred.write_text("ANTHROPIC_API_KEY='k$ey'\n")
    assert t.check_ready() == {"ANTHROPIC_API_KEY": "k$ey"}
    plain = tmp_path / "plain"
    plain.mkdir()
    (repo / "sub").mkdir()
    empty = tmp_path / "empty"
    subprocess.run(["git", "init", "-q", str(empty)], check=True)
    for path, fragment in [(plain, "is not a git repository"), (repo / "sub", "not its top"),
                           (empty, "has no commit yet"), (tmp_path / "gone", "does not exist")]:
        p.write_text(f'[[tenant]]\nname = "a"\ntoken = "0123456789abcdef"\nrepo = "{path}"\ncredentials = "{cred}"\n')
        os.utime(p, ns=(hash(str(path)) % 10**9, 0))
        with pytest.raises(TenantNotReady, match=fragment):
            Tenants(p).get("a").check_ready()


# -- registry --------------------------------------------------------------------------------------
def test_registry_is_a_wal_sqlite_file_that_survives_reopening(tmp_path: Path):
    db = tmp_path / "data" / "registry.sqlite3"
    reg = Registry(db)
    run = reg.runs.create(id="r1", tenant="acme", ask="做一个 hello", options={"rounds": 2}, repo="/r")
    assert run.status == "queued" and run.options == {"rounds": 2}
    assert reg.runs.transition("r1", "starting", frm=["queued"])
    assert not reg.runs.transition("r1", "starting", frm=["queued"]), "a guarded transition wins once"
    assert reg.runs.transition("r1", "running", frm=["starting"], handle="pid:1", branch="flower/r1", base="abc")
    reg.runs.update("r1", event_offset=120, event_seq=3, cost_usd=0.25, diffstat={"files": []})
    reg.close()

    reg = Registry(db)
    run = reg.runs.get("r1")
    assert (run.status, run.event_offset, run.event_seq, run.cost_usd, run.branch) == \
        ("running", 120, 3, 0.25, "flower/r1")
    assert reg.runs.get("r1", tenant="beta") is None and reg.runs.list(tenant="beta") == []
    assert reg.runs.count(statuses=["running"], tenant="acme") == 1
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(ValueError):
        reg.runs.transition("r1", "exploded", frm=["running"])


# -- events ----------------------------------------------------------------------------------------
def _events_file(folder: Path, data: bytes) -> Path:
    (folder / "outbox").mkdir(parents=True, exist_ok=True)
    path = folder / "outbox" / "events.jsonl"
    path.write_bytes(data)
    return path


def test_events_are_numbered_by_complete_lines_whoever_reads(tmp_path: Path):
    path = _events_file(tmp_path, b'{"kind": "step", "text": "a"}\n\nnot json\n{"kind": "text", "te')
    got, offset, seq = read_new(tmp_path, 0, 0)
    assert [(n, e.kind) for n, e in got] == [(1, "step"), (3, "unparsed")] and seq == 3
    with open(path, "ab") as f:
        f.write(b'xt": "b"}\n')
    more, offset2, seq2 = read_new(tmp_path, offset, seq)
    assert [(n, e.text) for n, e in more] == [(4, "b")] and seq2 == 4 and offset2 == path.stat().st_size
    # small reads give the same numbers as one big read
    seen, off, n = [], 0, 0
    while True:
        evs, new_off, n = read_new(tmp_path, off, n, limit=8)
        seen += [k for k, _ in evs]
        if new_off == off:
            break
        off = new_off
    assert seen == [1, 3, 4] and off == path.stat().st_size
    assert read_new(tmp_path / "absent", 0, 0) == ([], 0, 0)


def test_a_stream_of_a_run_another_replica_follows_is_the_files_whole_and_in_order(tmp_path: Path):
    """Nothing is published on this replica's queue for a run another one follows: the stream reads the file
    again on its own, every event once and in order, resumes after Last-Event-ID, and ends with the run."""
    import asyncio

    from service.control.events import Ended, Numbered, replay

    path = _events_file(tmp_path, b'{"kind": "step", "text": "1"}\n')
    status: list[str] = []

    async def follow(after: int) -> list[Numbered | Ended]:
        got: list[Numbered | Ended] = []
        async for item in replay(tmp_path, after, asyncio.Queue(), lambda: status[0] if status else None,
                                 keepalive_s=60, poll_s=0.05):
            if not isinstance(item, (Numbered, Ended)):
                continue
            got.append(item)
        return got

    async def the_run_writes() -> None:
        for n in range(2, 6):
            await asyncio.sleep(0.1)
            with open(path, "ab") as f:
                f.write(json.dumps({"kind": "text", "text": str(n)}).encode() + b"\n")
        status.append("succeeded")

    async def both() -> tuple[list[Numbered | Ended], list[Numbered | Ended]]:
        whole, _, resumed = await asyncio.gather(asyncio.wait_for(follow(0), 10), the_run_writes(),
                                                 asyncio.wait_for(follow(3), 10))
        return whole, resumed

    whole, resumed = asyncio.run(both())
    assert [(i.seq, i.event.text) for i in whole if isinstance(i, Numbered)] == [(n, str(n)) for n in range(1, 6)]
    assert whole[-1] == Ended("succeeded", 5)
    assert [i.seq for i in resumed if isinstance(i, Numbered)] == [4, 5] and resumed[-1] == Ended("succeeded", 5)


def test_a_keep_alive_is_a_comment_no_event_source_dispatches() -> None:
    """What the stream writes for a quiet stretch, read by the rules of the HTML standard's event-stream parser:
    a blank line dispatches an event when any ``data:`` field came before it — even an empty one. Litestar's
    default wrote one with each keep-alive, so every client got an empty message every 15 s (and every client
    here worked around it); now a keep-alive dispatches nothing and a run's event still does."""
    from service.api.stream import _message
    from sandbox.records import Event
    from service.control.events import KeepAlive, Numbered

    def dispatched(raw: bytes) -> list[str]:
        events, data = [], None
        for line in raw.decode().replace("\r\n", "\n").split("\n"):
            if line == "":
                if data is not None:
                    events.append(data)
                data = None
            elif line.startswith("data"):
                value = line.partition(":")[2].removeprefix(" ")
                data = value if data is None else f"{data}\n{value}"
        return events

    assert dispatched(_message(KeepAlive()).encode()) == []
    assert b"keep-alive" in _message(KeepAlive()).encode()
    (got,) = dispatched(_message(Numbered(7, Event(kind="text", text="活"))).encode())
    assert json.loads(got)["seq"] == 7 and json.loads(got)["text"] == "活"


def test_a_huge_event_line_is_cut_not_stalled_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import service.control.events as events

    monkeypatch.setattr(events, "MAX_LINE", 64)
    path = _events_file(tmp_path, b'{"kind": "text", "text": "' + b"x" * 100 + b'"}\n{"kind": "step", "text": "b"}\n')
    got, offset, seq = events.read_new(tmp_path, 0, 0, limit=64)
    assert got[0][1].kind == "unparsed" and seq == 1 and offset == 64, "a piece of MAX_LINE bytes, no more"
    seen = []
    for _ in range(5):  # every pass moves on
        more, offset, seq = events.read_new(tmp_path, offset, seq, limit=64)
        seen += more
    assert [e.kind for _, e in seen] == ["unparsed", "step"] and offset == path.stat().st_size


def test_diffstat_counts_files_and_lines():
    files = [FileStat(path="hello.py", insertions=2, deletions=0, binary=False, name=b"hello.py"),
             FileStat(path="logo.png", insertions=0, deletions=0, binary=True, name=b"logo.png"),
             FileStat(path="README.md", insertions=1, deletions=1, binary=False, name=b"README.md")]
    assert diffstat(Changes(commit="c", merge_base="b", files=files, truncated=False)) == {
        "files": [{"path": "hello.py", "insertions": 2, "deletions": 0, "binary": False},
                  {"path": "logo.png", "insertions": 0, "deletions": 0, "binary": True},
                  {"path": "README.md", "insertions": 1, "deletions": 1, "binary": False}],
        "insertions": 3, "deletions": 1, "truncated": False}


# -- logging ---------------------------------------------------------------------------------------
@pytest.fixture
def restore_logging():
    """configure_logging changes process-wide state: put it back for the tests that follow."""
    import logging

    import structlog

    saved, root = structlog.get_config(), logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)


def test_logging_is_json_for_a_pipe_and_key_value_for_a_terminal(restore_logging):
    buf = io.StringIO()
    configure_logging("json", stream=buf)
    get_logger("t").info("hello", tenant="acme", n=1)
    line = json.loads(buf.getvalue().strip().splitlines()[-1])
    assert line["event"] == "hello" and line["tenant"] == "acme" and line["level"] == "info" and line["timestamp"]

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    configure_logging("auto", stream=tty)
    get_logger("t").warning("hello", tenant="acme")
    assert "event='hello'" in tty.getvalue() and "tenant='acme'" in tty.getvalue()
