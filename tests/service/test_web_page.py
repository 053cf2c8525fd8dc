"""The web page at ``/`` in a real headless Chromium (Debian ``chromium`` + ``chromium-driver``, Selenium):
sign in with a tenant token, submit a scripted run, answer its question in the page, watch its events and
verdict arrive over SSE, read its coloured diff (a large one file by file, a large file on a click); interrupt
and cancel from the page. Screenshots go to
tests/artifacts/web/ (gitignored)."""

from __future__ import annotations

import calendar
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _hello import ASK_TEXT, QUESTION, hello_rules, interrupt_rules
from _service_helpers import TOKENS, Deployment, Service, git, serve, sse, wait_status
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ASK, BRIEF, CLARIFIER

pytestmark = pytest.mark.cli

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "web"
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
WAIT_S = 120
NOTHING_BACK = "No diff: the run ended without handing back any work."


@pytest.fixture
def browser() -> Iterator[Any]:
    if not (CHROMIUM and DRIVER):
        if os.environ.get("FLOWER_REQUIRE_BROWSER") == "1":
            pytest.fail("FLOWER_REQUIRE_BROWSER=1 but chromium/chromedriver are not installed "
                        "(apt-get install chromium chromium-driver)")
        pytest.skip("no chromium + chromedriver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1600",
                "--disable-gpu", "--lang=en-US"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=DriverService(DRIVER), options=options)
    driver.set_script_timeout(30)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def until(driver: Any, fn: Any, what: str, timeout: float = WAIT_S) -> Any:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: fn(d))
    except TimeoutException:
        shot = ARTIFACTS / f"timeout-{what.replace(' ', '-')[:40]}.png"
        driver.save_screenshot(str(shot))
        log = driver.find_element("id", "events").text[-2000:]
        raise AssertionError(f"timed out waiting for {what} (screenshot {shot}); events so far:\n{log}") from None


def text_of(driver: Any, element_id: str) -> str:
    return str(driver.find_element("id", element_id).text)


def log_of(driver: Any) -> str:
    """The event log's lines, those of folded steps too (an element's ``text`` is only what is shown)."""
    return str(driver.execute_script(
        "return [...document.querySelectorAll('#events summary, #events div:not(.lines)')]"
        ".map((e) => e.textContent).join('\\n')"))


def sign_in(driver: Any, service: Service, token: str) -> None:
    box = driver.find_element("id", "token")
    box.clear()
    box.send_keys(token)
    driver.find_element("id", "signin-btn").click()


def submit(driver: Any, ask: str, options: str) -> str:
    before = text_of(driver, "run-id")
    driver.find_element("id", "new-ask").send_keys(ask)
    driver.find_element("id", "new-options").clear()
    driver.find_element("id", "new-options").send_keys(options)
    driver.find_element("id", "submit-btn").click()
    until(driver, lambda d: text_of(d, "run-id") not in ("", before), "the new run to be selected")
    return text_of(driver, "run-id")


def test_a_run_is_submitted_its_question_answered_in_the_page_and_its_diff_shown(
        deployment: Deployment, services: list[Service], browser: Any):
    driver = browser
    with ScriptedModel(hello_rules()) as model:
        service = serve(deployment, services, model)
        driver.get(service.url + "/")
        until(driver, lambda d: d.find_element("id", "token").is_displayed(), "the sign-in form")
        sign_in(driver, service, "not-a-tenant-token")
        until(driver, lambda d: "no tenant" in text_of(d, "signin-error"), "the wrong token to be refused")
        driver.save_screenshot(str(ARTIFACTS / "01-sign-in-refused.png"))
        assert not driver.find_element("id", "app").is_displayed()
        sign_in(driver, service, TOKENS["acme"])
        until(driver, lambda d: d.find_element("id", "app").is_displayed(), "the signed-in page")
        stored = driver.execute_script("return [sessionStorage.getItem('flower.token'), localStorage.length, "
                                       "document.cookie]")
        assert stored == [TOKENS["acme"], 0, ""], "the token lives in the tab's session only"

        run_id = submit(driver, ASK_TEXT, '{"rounds": 1}')
        question = until(driver, lambda d: d.find_elements("css selector", "#questions .question"), "the question")[0]
        assert QUESTION in question.text
        options = [b.text for b in question.find_elements("css selector", "button.option")]
        assert options == ["Python", "Go"]
        until(driver, lambda d: f"? {QUESTION}" in log_of(d), "the ask in the event log")
        assert "running" in text_of(driver, "run-status")
        driver.save_screenshot(str(ARTIFACTS / "02-question-open.png"))
        question.find_element("xpath", ".//button[text()='Python']").click()  # answered in the page

        until(driver, lambda d: "verdict: achieved (达成)" in log_of(d), "the judge's verdict")
        until(driver, lambda d: text_of(d, "run-status") == "succeeded", "the run to succeed")
        until(driver, lambda d: d.find_elements("css selector", "#diff .add"), "the diff")
        log = log_of(driver)
        for expected in ("== 确认需求 (clarify) · step 1 of 3", "+ Python", "== 设定目标 (set the goal) · step 2 of 3",
                         "== 工作 (work) · step 3 of 3", "> dispatched to coder: 实现 hello.py", "* Write hello.py",
                         "<- report handed back: 写好了 hello.py",
                         "- 工作·判定#1 (work, verdict 1): the judge checks this round", "verdict: achieved (达成)"):
            assert expected in log, (expected, log)
        assert "+ 设定目标 (set the goal) · $0.0000 · 1 turn · total" in log, log  # not "1 turns"
        # the work was handed back once (by the work step): the steps after it changed nothing and say nothing
        assert log.count("work handed back") == 1, log
        diff = driver.execute_script(  # read in one go: the page may redraw the diff between two reads
            "const all = (q) => [...document.querySelectorAll(q)].map((e) => e.textContent);"
            "return {add: all('#diff .add'), str: all('#diff .add .str'), file: all('#diff .file')}")
        assert diff["add"] == ["+print('hello')"], diff
        assert diff["str"] == ["'hello'"], diff  # coloured as code
        assert "+++ b/hello.py" in diff["file"], diff
        assert listed(driver) == ["hello.py +1 -0"], "the file list, from the diffstat"
        assert text_of(driver, "run-cost") != "$0.0000" and not driver.find_elements("css selector", ".question")
        badge = f"#runs li[data-id='{run_id}'] .badge"
        until(driver, lambda d: d.find_element("css selector", badge).text == "succeeded", "the list to show it")
        driver.execute_script("document.getElementById('events').scrollTop = 1e9")  # the verdict, at the end
        driver.save_screenshot(str(ARTIFACTS / "03-run-succeeded-with-diff.png"))
        driver.find_element("id", "diff").screenshot(str(ARTIFACTS / "04-diff.png"))

        final = wait_status(service.client("acme"), run_id, ("succeeded",), timeout=10)
    assert model.unmatched == [], [(r.system[:40], r.user[:80]) for r in model.unmatched]
    assert final["cost_usd"] > 0
    assert f"${final['cost_usd']:.4f}" == text_of(driver, "run-cost")
    assert git(deployment.repos["acme"], "show", f"flower/{run_id}:hello.py") == "print('hello')\n"

    driver.find_element("id", "signout").click()
    assert driver.execute_script("return sessionStorage.getItem('flower.token')") is None
    assert driver.find_element("id", "token").is_displayed()


def listed(driver: Any) -> list[str]:
    return list(driver.execute_script(
        "return [...document.querySelectorAll('#diff-files li')].map((li) => li.textContent)"))


def test_a_large_diff_is_listed_by_file_and_a_large_file_fetched_only_on_a_click(
        deployment: Deployment, services: list[Service], browser: Any):
    driver = browser
    ask = "帮我做一个带大文件的 hello 程序"
    with ScriptedModel(hello_rules(ask, more={"big.txt": "".join(f"line {i}\n" for i in range(2500))})) as model:
        service = serve(deployment, services, model)
        driver.get(service.url + "/")
        driver.execute_script("performance.setResourceTimingBufferSize(100000)")  # every request the page makes
        sign_in(driver, service, TOKENS["acme"])
        until(driver, lambda d: d.find_element("id", "app").is_displayed(), "the signed-in page")
        run_id = submit(driver, ask, '{"rounds": 1}')
        question = until(driver, lambda d: d.find_elements("css selector", "#questions .question"), "the question")[0]
        question.find_element("xpath", ".//button[text()='Python']").click()
        until(driver, lambda d: text_of(d, "run-status") == "succeeded", "the run to succeed")
        until(driver, lambda d: d.find_elements("css selector", "#diff .section[data-path='hello.py'] .add"),
              "hello.py's diff, fetched by itself")
        assert listed(driver) == ["big.txt +2500 -0", "hello.py +1 -0"]
        big = driver.find_element("css selector", "#diff .section[data-path='big.txt']")
        assert "Show diff (2500 lines)" in big.text and not big.find_elements("css selector", ".add"), big.text
        driver.save_screenshot(str(ARTIFACTS / "07-large-diff-collapsed.png"))
        asked = driver.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
        diffs = [u.split(f"/v1/runs/{run_id}/", 1)[1] for u in asked if f"/v1/runs/{run_id}/diff" in u]
        assert "diff/files" in diffs and "diff?path=hello.py" in diffs, diffs
        assert not [u for u in diffs if u == "diff" or "big.txt" in u], "neither the whole diff nor big.txt's"
        big.find_element("css selector", "button.show").click()
        until(driver, lambda d: len(big.find_elements("css selector", ".add")) == 2500, "big.txt's diff on a click")
        assert big.find_elements("css selector", ".add")[-1].text == "+line 2499"
        driver.find_element("id", "diff").screenshot(str(ARTIFACTS / "08-large-file-opened.png"))
    assert model.unmatched == [], [(r.system[:40], r.user[:80]) for r in model.unmatched]


def test_interrupt_message_and_cancel_from_the_page(deployment: Deployment, services: list[Service], browser: Any):
    driver = browser
    with ScriptedModel(interrupt_rules("打断我") + interrupt_rules("取消我")) as model:
        service = serve(deployment, services, model)
        acme = service.client("acme")
        driver.get(service.url + "/")
        sign_in(driver, service, TOKENS["acme"])
        until(driver, lambda d: d.find_element("id", "app").is_displayed(), "the signed-in page")

        run_id = submit(driver, "打断我", '{"clarify_only": true}')
        until(driver, lambda d: d.find_elements("css selector", "#questions .question"), "the question")
        driver.find_element("id", "say").send_keys("先记一下:只用标准库")
        driver.find_element("id", "message-btn").click()
        until(driver, lambda d: "Message sent" in text_of(d, "notice"), "the message to be accepted")
        driver.find_element("id", "say").send_keys("别问了,用 Python")
        driver.find_element("id", "interrupt-btn").click()
        until(driver, lambda d: text_of(d, "run-status") == "succeeded", "the interrupted run to finish")
        # the person's words, as theirs; the cut turn reads as interrupted, not failed; none of the CLI's internals
        log = log_of(driver)
        assert "! interrupted, with your words: 别问了,用 Python" in log, log
        assert "确认需求 (clarify) · interrupted, it carries on" in log, log
        assert not any(w in log for w in ("STOP what you are doing", "Request interrupted", "doesn't want")), log
        assert not driver.find_elements("css selector", "#events .bad"), log
        driver.save_screenshot(str(ARTIFACTS / "05-interrupted-run.png"))
        assert wait_status(acme, run_id, ("succeeded",), timeout=10)["status"] == "succeeded"

        other = submit(driver, "取消我", '{"clarify_only": true}')
        assert other != run_id
        until(driver, lambda d: d.find_elements("css selector", "#questions .question"), "the second run's question")
        driver.find_element("id", "cancel-btn").click()
        until(driver, lambda d: text_of(d, "run-status") == "cancelled", "the run to be cancelled")
        until(driver, lambda d: "ended" in text_of(d, "stream-state"), "the stream to end")
        until(driver, lambda d: text_of(d, "run-why") == "Why it ended: cancelled on request", "why it ended")
        until(driver, lambda d: text_of(d, "diff") == NOTHING_BACK, "the diff to say nothing was handed back")
        assert not driver.find_elements("css selector", "#questions .question")
        badge = f"#runs li[data-id='{other}'] .badge"
        until(driver, lambda d: d.find_element("css selector", badge).text == "cancelled", "the list to show it")
        driver.save_screenshot(str(ARTIFACTS / "06-cancelled-run.png"))
        # each run shows its short id, in the list and beside its id; the address takes one, or `last`
        shorts = {r: acme.get(f"/v1/runs/{r}").json()["short"] for r in (run_id, other)}
        assert text_of(driver, "run-short") == shorts[other]
        assert [e.text for e in driver.find_elements("css selector", "#runs li .short")] == [shorts[other], shorts[run_id]]
        for typed, named in ((shorts[run_id], run_id), ("last", other), (run_id, run_id)):
            driver.get(f"{service.url}/#{typed}")
            driver.refresh()  # a new page: the token stays in the tab
            until(driver, lambda d: text_of(d, "run-id") == named, f"the page at #{typed} to open {named}")
    assert wait_status(acme, other, ("cancelled",), timeout=10)["status"] == "cancelled"
    assert any("别问了,用 Python" in str(r.messages) for r in model.requests)
    mailbox = deployment.data / "runs" / run_id / "mailbox"  # the message went where the run's inbox reads
    assert any("先记一下:只用标准库" in f.read_text() for f in mailbox.rglob("*") if f.is_file()), \
        [str(f) for f in mailbox.rglob("*")]


def test_a_queued_run_says_why_it_waits_and_a_deleted_one_why_it_has_no_events(
        deployment: Deployment, services: list[Service], browser: Any, tmp_path: Path):
    """A run queued behind its tenant's quota says so (the page, the API, `flower remote show`), until it starts;
    a deleted run's events read as deleted, not as an HTTP status."""
    driver = browser
    with ScriptedModel(interrupt_rules("先占着") + interrupt_rules("排队的")) as model:
        service = serve(deployment, services, model)
        acme = service.client("acme")
        driver.get(service.url + "/")
        sign_in(driver, service, TOKENS["acme"])
        until(driver, lambda d: d.find_element("id", "app").is_displayed(), "the signed-in page")
        first = submit(driver, "先占着", '{"clarify_only": true}')
        until(driver, lambda d: d.find_elements("css selector", "#questions .question"), "the first run's question")
        second = submit(driver, "排队的", '{"clarify_only": true}')
        waits = "your tenant's quota of 1 run at once is in use: it starts when one of them ends"
        until(driver, lambda d: text_of(d, "run-why") == f"Why it waits: {waits}", "why the run waits")
        assert text_of(driver, "run-status") == "queued"
        driver.save_screenshot(str(ARTIFACTS / "09-queued-run-waits.png"))
        assert acme.get(f"/v1/runs/{second}").json()["waiting"] == waits
        assert acme.get(f"/v1/runs/{first}").json()["waiting"] is None
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
        shown = subprocess.run([sys.executable, "-m", "flower.cli", "remote", "show", "last"], capture_output=True,
                               text=True, timeout=120, env={**env, "HOME": str(tmp_path), "FLOWER_LANG": "en",
                                                            "FLOWER_SERVER": service.url, "FLOWER_TOKEN": TOKENS["acme"]})
        assert re.search(rf"^\s*waiting\s+{re.escape(waits)}$", shown.stdout, re.M), shown
        assert acme.post(f"/v1/runs/{first}/cancel").status_code == 200
        until(driver, lambda d: text_of(d, "run-status") == "running", "the queued run to start")
        assert not driver.find_element("id", "run-why").is_displayed()
        assert acme.post(f"/v1/runs/{second}/cancel").status_code == 200
        assert acme.delete(f"/v1/runs/{first}").status_code == 200
        driver.find_element("css selector", f"#runs li[data-id='{first}']").click()
        until(driver, lambda d: text_of(d, "run-id") == first, "the deleted run to be selected")
        until(driver, lambda d: text_of(d, "stream-state") != "(live)" and text_of(d, "stream-state"), "the stream")
        assert text_of(driver, "stream-state") == "(none: the run was deleted, its events with its files)"


def took(seconds: float) -> str:
    """The page's way of writing a duration (messages.js ``took``), in English."""
    s = max(0.0, seconds)
    t = math.floor(s)
    if s < 60:
        return f"{math.floor(s * 10) / 10:.1f}s"
    return f"{t // 60}m {t % 60:02d}s" if t < 3600 else f"{t // 3600}h {t % 3600 // 60:02d}m"


def epoch(iso: str) -> float:
    """An API time as the page's Date.parse reads it: whole milliseconds."""
    whole, _, ms = iso.rstrip("Z").partition(".")
    return (calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) * 1000 + int(ms or 0)) / 1000


def polls_of_the_list(driver: Any) -> int:
    return int(driver.execute_script(
        "return performance.getEntriesByType('resource').filter((e) => e.name.endsWith('/v1/runs?limit=100')).length"))


def test_a_run_page_says_who_where_how_long_and_why_and_fits_a_phone(
        deployment: Deployment, services: list[Service], browser: Any, tmp_path: Path):
    """Issue 24's page: the tenant, the run's branch/base/commit, each step's time (folding), a .patch download,
    360 px without a horizontal scroll, the elapsed time stopped at the end, and why a run failed."""
    driver = browser
    deployment.write_tenants(beta={"budget_usd.run": 0.01})
    wide = "x = '" + "a long line " * 60 + "'\n"  # 700 characters: it scrolls inside the diff's box
    over = "帮我做一个超预算的程序"
    rules = hello_rules(more={"wide.py": wide}) + [  # beta's clarifier spends $0.075 of its $0.01 at once
        Rule(say(BRIEF, usage={"input_tokens": 20_000, "output_tokens": 1_000}), system=CLARIFIER, prompt=over)]
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model)
        acme = service.client("acme")
        driver.get(service.url + "/")
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        sign_in(driver, service, TOKENS["acme"])
        until(driver, lambda d: text_of(d, "who") == "signed in as acme", "the tenant's name")
        run_id = submit(driver, ASK_TEXT, '{"rounds": 1}')
        question = until(driver, lambda d: d.find_elements("css selector", "#questions .question"), "the question")[0]
        question.find_element("xpath", ".//button[text()='Python']").click()
        until(driver, lambda d: text_of(d, "run-status") == "succeeded", "the run to succeed")
        run = wait_status(acme, run_id, ("succeeded",), timeout=10)
        where = f"branch {run['branch']} · base {run['base'][:12]} · commit {run['commit'][:12]}"
        until(driver, lambda d: text_of(d, "run-where") == where, "the branch, base and commit")
        assert not driver.find_element("id", "run-why").is_displayed(), "a run that succeeded has nothing to explain"

        # each step's time: from its step event to the next one, the last one to the run's end
        events = [e["data"] for e in sse(acme, run_id) if e.get("event") == "step"]
        ats = [e["at"] for e in events] + [epoch(run["ended"])]
        steps = [" · " + took(b - a) for a, b in zip(ats, ats[1:])]
        assert len(steps) == 3, events
        shown = "return [...document.querySelectorAll('#events summary .took')].map((e) => e.textContent)"
        until(driver, lambda d: d.execute_script(shown) == steps, f"the steps' times {steps}")
        elapsed = "elapsed " + took(epoch(run["ended"]) - epoch(run["started"]))
        until(driver, lambda d: text_of(d, "run-elapsed") == elapsed, f"the run's time {elapsed}")
        # stopped: an hour later by the page's clock, and two polls of the run list on, nothing moved
        driver.execute_script("performance.clearResourceTimings(); const real = Date.now; "
                              "Date.now = () => real.call(Date) + 3600e3")
        until(driver, lambda d: polls_of_the_list(d) >= 2, "two more polls of the run list")
        assert (text_of(driver, "run-elapsed"), driver.execute_script(shown)) == (elapsed, steps)
        assert text_of(driver, "stream-state") == "(ended)"
        assert "live" not in driver.find_element("id", "stream-state").get_attribute("class")

        # the steps fold: the finished ones folded, the last one open; a click folds or opens one
        folds = driver.find_elements("css selector", "#events details.step")
        assert [f.get_attribute("open") is not None for f in folds] == [False, False, True]
        verdict = folds[2].find_element("css selector", ".verdict")
        assert verdict.is_displayed()
        folds[2].find_element("tag name", "summary").click()
        until(driver, lambda d: not verdict.is_displayed(), "the last step to fold on a click")
        folds[0].find_element("tag name", "summary").click()
        answer = folds[0].find_element("xpath", ".//div[text()='+ Python']")
        until(driver, lambda d: answer.is_displayed(), "the first step to open on a click")
        driver.save_screenshot(str(ARTIFACTS / "09-steps-timed-and-folded.png"))

        # the .patch: the diff's bytes, saved under the run's name
        driver.find_element("id", "patch-btn").click()
        patch = downloads / f"{run_id}.patch"
        until(driver, lambda d: patch.is_file(), "the .patch download")
        assert patch.read_bytes() == acme.get(f"/v1/runs/{run_id}/diff").content
        assert b"+++ b/hello.py" in patch.read_bytes() and b"+++ b/wide.py" in patch.read_bytes()

        # a phone: nothing wider than 360 px; the wide line scrolls inside the diff's own box
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 360, "height": 1400, "deviceScaleFactor": 1, "mobile": False})
        width = "return [document.documentElement.scrollWidth, window.innerWidth]"
        until(driver, lambda d: d.execute_script(width)[1] == 360, "the 360 px viewport")
        assert driver.execute_script(width)[0] <= 360, driver.execute_script(width)
        diff = driver.execute_script("const d = document.getElementById('diff'); return [d.scrollWidth, d.clientWidth]")
        assert diff[0] > diff[1], f"the wide line scrolls inside the diff: {diff}"
        driver.save_screenshot(str(ARTIFACTS / "10-phone-360px.png"))
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

        # beta's run over its budget: why it failed, on the page
        driver.find_element("id", "signout").click()
        sign_in(driver, service, TOKENS["beta"])
        until(driver, lambda d: text_of(d, "who") == "signed in as beta", "the other tenant's name")
        failed_id = submit(driver, over, '{"rounds": 1}')
        failed = wait_status(service.client("beta"), failed_id, ("failed", "succeeded"), timeout=WAIT_S)
        assert failed["status"] == "failed" and "over budget" in failed["error"], failed
        until(driver, lambda d: text_of(d, "run-why") == "Why it failed: " + failed["error"], "why it failed")
        assert driver.find_element("id", "run-why").get_attribute("role") == "alert"
        until(driver, lambda d: text_of(d, "diff") == NOTHING_BACK, "the diff to say nothing was handed back")
        driver.save_screenshot(str(ARTIFACTS / "11-failed-run-reason.png"))
    assert model.unmatched == [], [(r.system[:40], r.user[:80]) for r in model.unmatched]



def test_a_parked_run_shows_parked_keeps_its_question_and_resumes_when_answered_in_the_page(
        tmp_path: Path, services: list[Service], browser: Any):
    """The tenant parks runs that wait half a second: the page says parked (its list too), keeps the question
    answerable, and once it is answered there shows the run resumed in a new sandbox and succeeding."""
    driver = browser
    deployment = Deployment(tmp_path)
    deployment.write_tenants(acme={"park_after_s": 0.5})
    rules = [Rule(say(BRIEF), system=CLARIFIER, prompt="停着等", repeat=True, when=lambda req: "Go" in req.user),
             Rule(lambda req: tool(ASK, {"question": "停着等:用什么语言?", "options": ["Python", "Go"]}),
                  system=CLARIFIER, prompt="停着等", repeat=True)]
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model)
        driver.get(service.url + "/")
        sign_in(driver, service, TOKENS["acme"])
        until(driver, lambda d: d.find_element("id", "app").is_displayed(), "the signed-in page")
        run_id = submit(driver, "停着等", '{"clarify_only": true}')
        until(driver, lambda d: text_of(d, "run-status") == "parked", "the run to be parked")
        badge = f"#runs li[data-id='{run_id}'] .badge"
        until(driver, lambda d: d.find_element("css selector", badge).text == "parked", "the list to say parked")
        question = until(driver, lambda d: d.find_elements("css selector", "#questions .question"), "the question")[0]
        assert "停着等:用什么语言?" in question.text
        assert driver.find_element("id", "message-btn").is_enabled(), "a parked run takes messages (they wake it)"
        driver.save_screenshot(str(ARTIFACTS / "20-parked.png"))
        question.find_element("xpath", ".//button[text()='Go']").click()
        until(driver, lambda d: "resumed in a new sandbox: it was parked while it waited, and woken" in log_of(d),
              "the resume in the event log")
        until(driver, lambda d: text_of(d, "run-status") == "succeeded", "the run to succeed")
        until(driver, lambda d: "resumed 1×" in text_of(d, "run-where"), "the page to say it was resumed once")
        driver.save_screenshot(str(ARTIFACTS / "21-resumed-and-succeeded.png"))
    done = wait_status(service.client("acme"), run_id, ("succeeded",), timeout=10)
    assert done["sandboxes"] == 2


@pytest.mark.docker
def test_a_run_preparing_its_teams_environment_says_so_in_the_page(docker_engine, tmp_path: Path,
                                                                    services: list[Service], browser: Any):
    """A first setup takes minutes: meanwhile the run is `starting`, and the page (and the API) say why it is not
    running yet, with what the setup said last."""
    from _service_helpers import remove_prepared, stop_services
    from sandbox.image import build_base

    build_base()
    d = Deployment(tmp_path, backend="docker", extra_config='network_mode = "host"\n')
    d.write_tenants(acme={"image": "flower/base:bookworm", "setup": ["echo fetching the toolchain; sleep 600"]})
    driver = browser
    try:
        with ScriptedModel([]) as model:
            service = serve(d, services, model, timeout=600)  # the first Docker test of a tree builds its image
            driver.get(service.url + "/")
            sign_in(driver, service, TOKENS["acme"])
            until(driver, lambda d: d.find_element("id", "app").is_displayed(), "the signed-in page")
            run_id = submit(driver, "先准备环境", "{}")
            until(driver, lambda d: "fetching the toolchain" in text_of(d, "run-why"), "what the setup said",
                  timeout=300)
            assert text_of(driver, "run-status") == "starting"
            assert text_of(driver, "run-why").startswith("Why it waits: its team's environment is being prepared")
            driver.save_screenshot(str(ARTIFACTS / "12-preparing-the-teams-environment.png"))
            row = service.client("acme").get(f"/v1/runs/{run_id}").json()
            assert row["status"] == "starting" and "fetching the toolchain" in row["waiting"], row
    finally:
        stop_services(services)  # its setup ends with the service
        remove_prepared("acme")
