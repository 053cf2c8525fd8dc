"""Items 1 and 2: the data dir on a small tmpfs that fills up while a run works.

Below the free-space floor: submits answer 507 with a sentence, the queued run waits, ``/healthz`` says
``degraded`` with the reason, ``/metrics`` says so; the run that meets ENOSPC ends ``failed`` with "disk full" as
its reason, and what it had committed stays on its branch. No hot loop: the scheduler's failures back off and a
repeating error is logged once with a count. Once space is back the service carries on by itself."""

from __future__ import annotations

import errno
import time
from pathlib import Path

import pytest

from _faults import figures, lines_between
from _service_helpers import Deployment, Service, git, run_status, serve, wait_for, wait_question, wait_status
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ACHIEVED, ASK, BRIEF, CLARIFIER, GOAL, JUDGE, LEAD, REPORT

pytestmark = pytest.mark.cli

TERMINAL = ("succeeded", "failed", "aborted", "killed", "cancelled")


def fill(path: Path) -> Path:
    """Write until the file system says ENOSPC: the fault, as another process filling the disk would cause it."""
    filler = path / "filler.bin"
    chunk = b"\0" * (256 * 1024)
    with open(filler, "wb", buffering=0) as f:
        for size in (len(chunk), 4096, 1):
            try:
                while True:
                    f.write(chunk[:size])
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
    return filler


def test_a_full_data_dir_degrades_loudly_keeps_the_work_and_recovers(tmp_path: Path, services: list[Service],
                                                                     small_disk):
    deployment = Deployment(tmp_path, quota=1, max_running=1, extra_config="min_free_mb = 2\n")
    small_disk(deployment.data, 24)
    rules = [
        Rule(tool(ASK, {"question": "用什么语言?", "options": ["Python", "Go"]}), system=CLARIFIER, prompt="写满"),
        Rule(say(BRIEF), system=CLARIFIER, prompt="写满", result="Python"),
        Rule(say(GOAL), system=JUDGE, prompt="请为它设定目标"),
        Rule(tool("Agent", {"description": "实现 hello.py", "prompt": "WORKER-TASK 写 hello.py", "subagent_type": "coder",
                            "run_in_background": False}), system=LEAD, agent=False),
        Rule(tool("Write", {"file_path": "hello.py", "content": "print('hello')\n"}), agent=True, prompt="WORKER-TASK"),
        Rule(say(REPORT), agent=True, prompt="WORKER-TASK", result="hello.py"),
        Rule(say("hello.py 写好了"), system=LEAD, agent=False, result="hello.py"),
        # the judge takes its time: the disk fills while the run waits for it, after its work was handed back
        Rule(say(ACHIEVED, delay=8), system=JUDGE, prompt="第 1 轮工作结束了"),
        Rule(tool(ASK, {"question": "排队的用什么语言?"}), system=CLARIFIER, prompt="排队"),
        Rule(say(BRIEF), system=CLARIFIER, prompt="排队"),
    ]
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model, timeout=180)
        acme = service.client("acme")
        anon = service.client(None)
        assert anon.get("/healthz").json()["status"] == "ok"
        working = acme.post("/v1/runs", json={"ask": "写满", "options": {"rounds": 1}})
        assert working.status_code == 201, working.text
        a = working.json()["id"]
        b = acme.post("/v1/runs", json={"ask": "排队", "options": {"clarify_only": True}}).json()["id"]
        q = wait_question(acme, a)
        acme.post(f"/v1/runs/{a}/answers", json={"question_id": q["id"], "text": "Python"})
        # its work is handed back (the checkpoint after the work step), then the judge is asked
        wait_for(lambda: run_status(acme, a)["commit"], 180, what="run A's work on its branch")
        wait_for(lambda: any(JUDGE in r.system and "第 1 轮工作结束了" in r.prompt for r in model.requests), 60,
                 what="the judge to be asked")

        t_fault = time.time()
        filler = fill(deployment.data)
        refused = acme.post("/v1/runs", json={"ask": "又一个", "options": {"clarify_only": True}})
        assert refused.status_code == 507, refused.text
        assert "disk" in refused.json()["error"] and "nothing was queued" in refused.json()["error"]
        health = anon.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "degraded", health.text
        assert any(r.startswith("disk low") for r in health.json()["reasons"]), health.json()
        metrics = anon.get("/metrics").text
        assert 'flower_degraded{reason="disk_low"} 1' in metrics, metrics

        # the run meets ENOSPC when the judge answers; the fault lasts a while longer, the queued run waits
        from sandbox.backends import LocalBackend

        wait_for(lambda: a not in LocalBackend(root=deployment.data / "runs").live(), 120,
                 what="run A to die of the full disk")
        time.sleep(12)  # the fault lasts: what the service does meanwhile is counted
        assert run_status(acme, b)["status"] == "queued", "a queued run waits while the disk is low"
        t_free = time.time()
        filler.unlink()
        done = wait_status(acme, a, TERMINAL, timeout=120)
        t_a_final = time.time()
        wait_for(lambda: anon.get("/healthz").json()["status"] == "ok", 30, what="/healthz ok again")
        qb = wait_question(acme, b, timeout=120)
        t_b_running = time.time()
        acme.post(f"/v1/runs/{b}/answers", json={"question_id": qb["id"], "text": "1"})
        queued_final = wait_status(acme, b, TERMINAL)

    assert done["status"] == "failed" and done["error"].startswith("disk full"), done
    assert f"kept on its branch flower/{a}" in done["error"], done["error"]
    assert git(deployment.repos["acme"], "show", f"flower/{a}:hello.py") == "print('hello')\n", "the work is kept"
    assert queued_final["status"] == "succeeded", queued_final

    during = lines_between(service, t_fault, t_free)
    minutes = max((t_free - t_fault) / 60, 1e-9)
    failures = [x for x in during if x.get("level") in ("error", "warning")]
    tracebacks = [x for x in during if "exception" in x]
    # a repeating failure is logged once with a count (and a summary a minute), not once per pass
    per_event: dict[str, int] = {}
    for x in failures:
        per_event[x["event"]] = per_event.get(x["event"], 0) + 1
    assert all(n <= 3 for n in per_event.values()), per_event
    assert len(tracebacks) <= len({x["event"] for x in tracebacks}), ("one traceback per distinct failure",
                                                                    [(x.get("timestamp"), x["event"], x.get("level")) for x in during])
    figures("disk_full", runs_in_flight=1, runs_queued=1, runs_lost=0,
            run_a=done["status"], run_b=queued_final["status"], fault_s=round(t_free - t_fault, 1),
            log_lines=len(during), log_lines_per_min=round(len(during) / minutes, 1),
            warn_or_error_lines=len(failures), per_event=per_event,
            recover_a_final_s=round(t_a_final - t_free, 1), recover_queued_running_s=round(t_b_running - t_free, 1))
