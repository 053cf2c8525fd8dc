"""The warm pool through the real service (local bubblewrap and Docker): a sandbox started ahead holds nothing of
any run — no spec, no env file, no token, no socket, no key — though its first step's CLI is already started in
the repository's checkout, its first prompt rehearsed against its own bridge (a stand-in key, a reply of nothing,
rewound); a submitted run claims it (the sandbox existed before the run did), gets its gateway token then, its
first step takes the waiting CLI, and the pool starts another."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import uuid
from collections.abc import Iterable
from pathlib import Path

import httpx

from _hostile import DONE, ENDED, hostile_deployment, worker_rules
from _service_helpers import Service, wait_for, wait_question, wait_status
from flower.core.spare import WARM_UP
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ANSWER, ASK, BRIEF, CLARIFIER, marked_pids
from sandbox.backends import DockerBackend, LocalBackend

import pytest

pytestmark = pytest.mark.cli

KEY = f"sk-ant-acme-warm-canary-{uuid.uuid4().hex}"  # stands for the tenant's real key: only the gateway holds it


def waiting(runs: Path, backend_name: str) -> dict[Path, str]:
    """The warm sandboxes of this deployment still waiting: ``{slot folder: handle}``."""
    backend = LocalBackend(root=runs) if backend_name == "local" else DockerBackend("unused")
    return {folder: h for folder, h in backend.slots().items() if folder.parent == runs}


def ready(runs: Path, backend_name: str, *, gone: Iterable[Path] = ()) -> dict[Path, str] | None:
    """The waiting sandboxes once there is one per tenant and none of the folders ``gone`` is among them."""
    w = waiting(runs, backend_name)
    return w if len(w) == 2 and not set(gone) & set(w) else None


def commands_of(backend_name: str, folder: Path, handle: str) -> str:
    """The command lines of the waiting sandbox's processes, one a line."""
    if backend_name == "docker":
        return subprocess.run(["docker", "top", handle], capture_output=True, text=True).stdout
    lines = []
    for pid in marked_pids(folder.name):
        try:
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return "\n".join(lines)


def environ_of(backend_name: str, folder: Path, handle: str) -> list[str]:
    """Every environment variable the waiting sandbox's processes were started with."""
    if backend_name == "docker":
        out = subprocess.run(["docker", "inspect", handle], capture_output=True, text=True, check=True).stdout
        return list(json.loads(out)[0]["Config"]["Env"])
    found: list[str] = []
    for pid in marked_pids(folder.name):
        try:
            found += [e.decode(errors="replace") for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if e]
        except OSError:
            continue
    return found


def test_a_warm_sandbox_holds_nothing_until_a_run_claims_it_and_the_pool_refills(
        tmp_path: Path, services: list[Service], backend_name: str) -> None:
    dep = hostile_deployment(tmp_path / "dep", backend_name)
    dep.config.write_text(dep.config.read_text() + "warm = 1\n")
    runs = (dep.data / "runs").resolve()
    script = f"""set +e
PAT=$(echo {KEY[::-1]} | rev)
echo "SLOT $(basename "$(dirname "$PWD")")"
echo "ENV $(env | grep -c "$PAT")"
echo "FILES $(timeout 60 grep -rIl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -e "$PAT" / 2>/dev/null | wc -l)"
echo "TOKEN $(env | grep -c '^ANTHROPIC_API_KEY=flower-run-')"
echo {DONE}"""
    with ScriptedModel(worker_rules("热启动", script)) as model:
        values = {**model.env, "ANTHROPIC_API_KEY": KEY}
        values.pop("CLAUDE_CONFIG_DIR")
        for path in dep.creds.values():
            path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        service = Service(dep).start(timeout=120)
        services.append(service)

        # one waiting sandbox per tenant repository, holding nothing of any run
        slots = wait_for(lambda: ready(runs, backend_name), timeout=120, what="a warm sandbox for each tenant")
        for folder, handle in slots.items():
            wait_for(lambda: "_bundled/claude" in commands_of(backend_name, folder, handle), timeout=120,
                     what="the waiting sandbox's CLI started ahead")
            files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir())
            handed = [f for f in files if f.startswith(("mailbox/", "gateway/"))]
            assert handed == [], handed  # no spec, no env file, no gateway socket
            assert not any(KEY in p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())
            env = environ_of(backend_name, folder, handle)
            assert "FLOWER_WARM=1" in env, env
            # the CLI is told where its sandbox's own bridge listens and the bridge's stand-in for a key (which no
            # gateway takes), nothing else of the model's
            held = [e for e in env if KEY in e or "flower-run-" in e or e.startswith(("ANTHROPIC", "FLOWER_TENANT"))
                    and not re.fullmatch(r"ANTHROPIC_BASE_URL=http://127\.0\.0\.1:\d+", e)
                    and not re.fullmatch(r"ANTHROPIC_API_KEY=flower-stand-in-[0-9a-f]{32}", e)]
            assert held == [], held
        acme_repo = dep.repos["acme"].name
        acme_slot = next(f for f in slots if (f / acme_repo).is_dir())

        r = service.client("acme").post("/v1/runs", json={"ask": "热启动", "options": {"rounds": 1}})
        assert r.status_code == 201, r.text
        run_id = r.json()["id"]
        run = wait_status(service.client("acme"), run_id, ENDED, timeout=300)
        out = max((x["text"] for req in model.conversation for x in req.results if DONE in x["text"]), key=len)
        refilled = wait_for(lambda: ready(runs, backend_name, gone=[acme_slot]), timeout=120, what="the pool refilled")
        metrics = httpx.get(f"{service.url}/metrics").text
        started = next(x for x in service.lines() if x.get("event") == "run.started" and x.get("run") == run_id)

    assert run["status"] == "succeeded", (run, out[-2000:])
    assert f"SLOT {acme_slot.name}" in out, out  # the run worked in the sandbox that waited before it existed
    assert started["handle"] == slots[acme_slot]
    assert "ENV 0" in out and "FILES 0" in out and "TOKEN 1" in out, out  # its token came with the claim
    assert run["usage"]["input_tokens"] > 0  # through the gateway, metered
    events = [json.loads(x) for x in (acme_slot / "outbox" / "events.jsonl").read_text().splitlines()]
    taken = [e["payload"] for e in events if e["payload"].get("subtype") == "prespawn"]
    assert taken[:1] == [{"subtype": "prespawn", "taken": True, "why": None}], taken  # the waiting CLI did step 1
    # its rehearsal never left the sandbox, and left nothing in the conversation the model saw
    assert not any(WARM_UP in json.dumps(x.body, ensure_ascii=False) for x in model.requests)
    assert acme_slot not in refilled and len(refilled) == 2  # a claimed sandbox is never handed out again
    assert 'flower_warm_claims_total{outcome="hit"} 1.0' in metrics, metrics
    assert 'flower_run_start_seconds_count{warm="true"} 1.0' in metrics, metrics  # submit → its first request
    service.stop()
    assert waiting(runs, backend_name) == {}, "a stopped service leaves no sandbox waiting"
    assert not any(p.name.startswith("warm-") and not (p / "outbox" / "exit.json").exists() for p in runs.iterdir())


def test_a_warm_run_outlives_a_crashed_service_and_what_waited_for_it_is_swept(tmp_path: Path,
                                                                               services: list[Service]) -> None:
    dep = hostile_deployment(tmp_path / "dep", "local")
    dep.config.write_text(dep.config.read_text() + "warm = 1\n")
    runs = (dep.data / "runs").resolve()
    ask = "重启之后继续"
    rules = [Rule(tool(ASK, {"question": "用什么语言?", "options": [ANSWER, "Go"]}), system=CLARIFIER, prompt=ask),
             Rule(say(BRIEF), system=CLARIFIER, prompt=ask, result=ANSWER)]
    with ScriptedModel(rules) as model:
        values = {k: v for k, v in model.env.items() if k != "CLAUDE_CONFIG_DIR"}
        for path in dep.creds.values():
            path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        first = Service(dep, "first").start(timeout=120)
        services.append(first)
        slots = wait_for(lambda: ready(runs, "local"), timeout=120, what="a warm sandbox for each tenant")
        acme_slot = next(f for f in slots if (f / dep.repos["acme"].name).is_dir())
        acme = first.client("acme")
        run_id = acme.post("/v1/runs", json={"ask": ask, "options": {"clarify_only": True}}).json()["id"]
        q = wait_question(acme, run_id)
        left = wait_for(lambda: ready(runs, "local", gone=[acme_slot]), timeout=120, what="the pool refilled")
        first.stop(signal.SIGKILL)  # a crash: the waiting sandboxes are left behind

        assert LocalBackend(root=runs).live().keys() == {run_id}, "the claimed sandbox is re-found as its run"
        second = Service(dep, "second").start(timeout=120)
        services.append(second)
        acme = second.client("acme")
        fresh = wait_for(lambda: ready(runs, "local", gone=left), timeout=120,
                         what="new warm sandboxes in place of the old ones")
        reattached = [x["run"] for x in second.lines(since_start=True) if x.get("event") == "run.reattached"]
        swept = [x for x in second.lines(since_start=True) if x.get("event") == "warm.swept"]
        acme.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": "1"})
        done = wait_status(acme, run_id, ENDED)
    assert reattached == [run_id]
    assert swept and swept[0]["sandboxes"] == 2, swept  # beta's and acme's refill, left by the crashed service
    assert done["status"] == "succeeded", done
    assert len(fresh) == 2 and not set(fresh) & set(left)
    assert not [p for p in runs.iterdir() if p.name.startswith("warm-") and p not in fresh
                and not (p / "outbox" / "exit.json").exists()], "a swept slot's folder goes with it"
