"""What fired a run is shown where people look: the page (real headless Chromium) and ``flower remote show`` (the
real CLI) both say a trigger of schedule sch-… started it; a run submitted by hand says nothing of the kind."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from _service_helpers import TOKENS, Deployment, Service, serve, wait_status
from test_remote_cli import FLOWER
from test_web_page import ARTIFACTS, browser, sign_in, text_of, until  # noqa: F401 - the headless Chromium fixture
from flower.testing import Rule, ScriptedModel, say
from sandbox.testing import BRIEF, CLARIFIER

pytestmark = pytest.mark.cli

ENDED = ("succeeded", "failed", "cancelled", "aborted", "killed")


def test_the_page_and_flower_remote_show_the_trigger_that_started_a_run(
        deployment: Deployment, services: list[Service], browser: Any, tmp_path: Path) -> None:
    driver = browser
    with ScriptedModel([Rule(say(BRIEF), system=CLARIFIER)]) as model:
        service = serve(deployment, services, model)
        acme = service.client("acme")
        ci = acme.post("/v1/schedules", json={"ask": "CI 挂了, 修一下", "options": {"clarify_only": True},
                                              "trigger": True}).json()
        fired = httpx.post(f"{service.url}/v1/triggers/{ci['id']}", json={"text": "FAILED test_retry"},
                           headers={"Authorization": f"Bearer {ci['trigger_token']}"}, timeout=30)
        assert fired.status_code == 201, fired.text
        run_id = fired.json()["run"]
        by_hand = acme.post("/v1/runs", json={"ask": "手工提交", "options": {"clarify_only": True}}).json()["id"]
        wait_status(acme, run_id, ENDED)
        wait_status(acme, by_hand, ENDED)

        driver.get(f"{service.url}/#{run_id}")
        sign_in(driver, service, TOKENS["acme"])
        where = until(driver, lambda d: "triggered by" in text_of(d, "run-where") and text_of(d, "run-where"),
                      "the run's trigger on the page")
        driver.save_screenshot(str(ARTIFACTS / "schedules-triggered-run.png"))
        driver.get(f"{service.url}/#{by_hand}")
        driver.refresh()
        until(driver, lambda d: text_of(d, "run-id") == by_hand and "branch" in text_of(d, "run-where"),
              "the run submitted by hand")
        hand_where = text_of(driver, "run-where")

        home = tmp_path / "home"
        home.mkdir()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}, "HOME": str(home),
               "FLOWER_LANG": "en"}
        shown = subprocess.run([*FLOWER, "remote", "--server", service.url, "--token", TOKENS["acme"], "show", run_id],
                               env=env, capture_output=True, text=True, timeout=120)
        shown_hand = subprocess.run([*FLOWER, "remote", "--server", service.url, "--token", TOKENS["acme"], "show",
                                     by_hand], env=env, capture_output=True, text=True, timeout=120)
    assert f"triggered by {ci['id']}" in where, where
    assert "triggered by" not in hand_where and "scheduled by" not in hand_where, hand_where
    assert shown.returncode == 0, shown.stderr
    assert f"fired by  trigger {ci['id']}" in shown.stdout, shown.stdout
    assert shown_hand.returncode == 0 and "fired by" not in shown_hand.stdout, shown_hand.stdout
