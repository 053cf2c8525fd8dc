"""The web page at ``/`` in a real headless Chromium (Debian ``chromium`` + ``chromium-driver``, Selenium):
sign in with a tenant token, submit a scripted run, answer its question in the page, watch its events and
verdict arrive over SSE, read its coloured diff (a large one file by file, a large file on a click); interrupt
and cancel from the page. Screenshots go to
tests/artifacts/web/ (gitignored)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _hello import ASK_TEXT, QUESTION, hello_rules, interrupt_rules
from _service_helpers import TOKENS, Deployment, Service, git, serve, wait_status
from flower.testing import ScriptedModel

pytestmark = pytest.mark.cli

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "web"
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
WAIT_S = 120


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
        until(driver, lambda d: f"? {QUESTION}" in text_of(d, "events"), "the ask in the event log")
        assert "running" in text_of(driver, "run-status")
        driver.save_screenshot(str(ARTIFACTS / "02-question-open.png"))
        question.find_element("xpath", ".//button[text()='Python']").click()  # answered in the page

        until(driver, lambda d: "verdict: achieved (达成)" in text_of(d, "events"), "the judge's verdict")
        until(driver, lambda d: text_of(d, "run-status") == "succeeded", "the run to succeed")
        until(driver, lambda d: d.find_elements("css selector", "#diff .add"), "the diff")
        log = text_of(driver, "events")
        for expected in ("== 确认需求 (clarify) · step 1 of 3", "+ Python", "== 设定目标 (set the goal) · step 2 of 3",
                         "== 工作 (work) · step 3 of 3", "> dispatched to coder: 实现 hello.py", "* Write hello.py",
                         "<- report handed back: 写好了 hello.py",
                         "- 工作·判定#1 (work, verdict 1): the judge checks this round", "verdict: achieved (达成)"):
            assert expected in log, (expected, log)
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
        assert "interrupted" in text_of(driver, "events")
        driver.save_screenshot(str(ARTIFACTS / "05-interrupted-run.png"))
        assert wait_status(acme, run_id, ("succeeded",), timeout=10)["status"] == "succeeded"

        other = submit(driver, "取消我", '{"clarify_only": true}')
        assert other != run_id
        until(driver, lambda d: d.find_elements("css selector", "#questions .question"), "the second run's question")
        driver.find_element("id", "cancel-btn").click()
        until(driver, lambda d: text_of(d, "run-status") == "cancelled", "the run to be cancelled")
        until(driver, lambda d: "ended" in text_of(d, "stream-state"), "the stream to end")
        assert not driver.find_elements("css selector", "#questions .question")
        badge = f"#runs li[data-id='{other}'] .badge"
        until(driver, lambda d: d.find_element("css selector", badge).text == "cancelled", "the list to show it")
        driver.save_screenshot(str(ARTIFACTS / "06-cancelled-run.png"))
    assert wait_status(acme, other, ("cancelled",), timeout=10)["status"] == "cancelled"
    assert any("别问了,用 Python" in str(r.messages) for r in model.requests)
    mailbox = deployment.data / "runs" / run_id / "mailbox"  # the message went where the run's inbox reads
    assert any("先记一下:只用标准库" in f.read_text() for f in mailbox.rglob("*") if f.is_file()), \
        [str(f) for f in mailbox.rglob("*")]
