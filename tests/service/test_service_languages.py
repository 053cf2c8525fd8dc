"""The service's screens in one language (issue 24): one scripted run on a real service (a guard's denial, the
judge's 达成), then ``flower remote list/show/logs`` and the web page in headless Chromium show Chinese under
``LANG=C.UTF-8`` only inside a gloss or in the run's own text; the same commands under ``FLOWER_LANG=zh`` and the page
at ``?lang=zh`` speak Chinese; the commit of the run's work is in the run's language."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from _hello import ASK_TEXT
from _languages import chinese, guarded_rules, model_text, strays
from _service_helpers import TOKENS, Deployment, Service, git, serve, wait_status
from flower.testing import ScriptedModel
from test_remote_cli import FLOWER, client_env
from test_web_page import browser, sign_in, text_of, until  # noqa: F401 - browser is the fixture

pytestmark = pytest.mark.cli


def remote(env: dict[str, str], *args: str) -> str:
    p = subprocess.run([*FLOWER, "remote", *args], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p.stdout + p.stderr


def test_remote_and_the_page_speak_the_readers_language(deployment: Deployment, services: list[Service],
                                                       tmp_path: Path, browser: Any):  # noqa: F811
    home = tmp_path / "home"
    home.mkdir()
    with ScriptedModel(guarded_rules(ASK_TEXT)) as model:
        service = serve(deployment, services, model)
        api = service.client("acme")
        r = api.post("/v1/runs", json={"ask": ASK_TEXT, "options": {"rounds": 1, "timeout_s": 0}})
        assert r.status_code == 201, r.text
        run_id = r.json()["id"]
        assert wait_status(api, run_id, ("succeeded", "failed"))["status"] == "succeeded"
        api_run = api.get(f"/v1/runs/{run_id}").json()
        base = {**client_env(home), "FLOWER_SERVER": service.url, "FLOWER_TOKEN": TOKENS["acme"], "FLOWER_LANG": ""}
        en = {**base, "LANG": "C.UTF-8", "LC_ALL": ""}
        zh = {**base, "FLOWER_LANG": "zh"}
        english = {args: remote(en, *args) for args in (("list",), ("show", run_id), ("logs", run_id))}
        raw = remote(en, "logs", run_id, "--json")
        chinese_screens = {args: remote(zh, *args) for args in (("list",), ("show", run_id), ("logs", run_id))}

        driver = browser
        driver.get(f"{service.url}/#{run_id}")
        sign_in(driver, service, TOKENS["acme"])
        until(driver, lambda d: "verdict:" in text_of(d, "events"), "the verdict on the English page")
        until(driver, lambda d: d.find_elements("css selector", "#diff .add"), "the diff")
        page = str(driver.execute_script("return document.body.innerText"))
        driver.get(f"{service.url}/?lang=zh#{run_id}")  # the token stays in the tab's session
        until(driver, lambda d: "判定:" in text_of(d, "events"), "the verdict on the Chinese page")
        page_zh = str(driver.execute_script("return document.body.innerText"))
    assert model.unmatched == [], [(r.system[:40], r.prompt[:80]) for r in model.unmatched]

    told = model_text(ASK_TEXT)
    for args, screen in english.items():
        assert strays(screen, told) == [], (args, screen)
    assert strays(page, told) == [], page
    logs = english[("logs", run_id)]
    for shown in ("== 确认需求 (clarify) · step 1 of 3", "- 工作·判定#1 (work, verdict 1): an independent verdict",
                  "! guard stopped coordinator's Write: the coordinator does not do the work itself"):
        assert shown in logs, (shown, logs)
    assert "工作 (work)" in english[("list",)] and "step  工作 (work)" in english[("show", run_id)]
    for screen in (logs, page):  # the judge's verdict body: its headings glossed, its words as it wrote them
        assert "  ## 结论 (verdict)" in screen and "  ## 理由 (reasons)" in screen, screen
    for shown in ("verdict: achieved (达成)", "== 工作 (work) · step 3 of 3",
                  "guard stopped coordinator's Write: the coordinator does not do the work itself", "Send message"):
        assert shown in page, (shown, page)
    # the guard's own sentence (the model's, in Chinese) stays whole in the raw events
    denials = [e for e in map(json.loads, raw.splitlines()) if e["kind"] == "audit" and e["text"] == "deny"]
    assert denials and "协调者不亲自动手" in denials[0]["payload"]["reason"], denials

    assert "状态" in chinese_screens[("show", run_id)] and "步骤" in chinese_screens[("show", run_id)]
    assert "守卫拦下了 coordinator 的 Write:协调者不亲自动手" in chinese_screens[("logs", run_id)]
    assert "== 确认需求 (1/3)" in chinese_screens[("logs", run_id)]
    assert all(chinese(line) for line in chinese_screens[("show", run_id)].splitlines()[:3])
    for shown in ("判定:达成", "== 工作 (3/3)", "守卫拦下了", "发消息", "取消运行"):
        assert shown in page_zh, (shown, page_zh)

    # the documents written for the person: headings glossed, their status line in English (issue 35)
    notes = deployment.data / "runs" / run_id / f".flower-{deployment.repos['acme'].name}" / "notes"
    for name in ("需求.md", "目标.md"):
        text = (notes / name).read_text()
        assert strays(text, told) == [], (name, text)
    assert "## 验收标准 (acceptance criteria)" in (notes / "需求.md").read_text()
    assert "## 检查清单 (checklist)" in (notes / "目标.md").read_text()
    # the API's step beside its label for a reader of English
    shown = api_run
    assert shown["step"] and shown["step_label"] == f"{shown['step']} (work)" and strays(shown["step_label"], []) == []

    subjects = git(deployment.repos["acme"], "log", "--format=%s", f"flower/{run_id}", "--not", "main")
    assert subjects.strip() and strays(subjects, []) == [], subjects
    assert "the work up to step 工作 (work)" in subjects or "its work at the end" in subjects, subjects
