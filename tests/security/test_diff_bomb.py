"""A diff bomb from inside a run: the worker's Bash writes a file of 150 MB that git compresses to a few hundred
KB in the run's work bundle, so ``GET /diff`` would expand it in the service. Four concurrent requests each get
the cap's error (or a bounded answer), the service's resident memory stays near where it was, the file list
(``git diff --numstat``) names the file, one small file's diff is served alone, and the other tenant is served
throughout. Local backend: the attack is on the service's side, not the sandbox's."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from _hostile import DONE, ENDED, hostile_deployment, worker_rules
from _service_helpers import Service, wait_status
from flower.testing import ScriptedModel
from test_hostile_runs import start, submit, vm_peak_mb

pytestmark = pytest.mark.cli

BOMB_LINES = 1_500_000  # 1.5M lines of 100 bytes: 150 MB of file, ~150 MB of diff
SCRIPT = f"""set -e
yes "$(head -c 99 /dev/zero | tr '\\0' x)" | head -n {BOMB_LINES} > bomb.txt
printf 'print("small")\\n' > small.py; printf 'glob\\n' > '*.py'
ls -l bomb.txt; echo {DONE}"""


def test_a_diff_bomb_gets_the_caps_error_and_the_service_stays_small(tmp_path: Path, services: list[Service]) -> None:
    dep = hostile_deployment(tmp_path / "dep", "local")
    with ScriptedModel(worker_rules("差异炸弹", SCRIPT)) as model:
        service = start(dep, services, model)
        baseline = vm_peak_mb(service)
        acme, beta = service.client("acme"), service.client("beta")
        run_id = submit(service, "acme", "差异炸弹")
        run = wait_status(acme, run_id, ENDED, timeout=240)
        ended = vm_peak_mb(service)
        answers: list[httpx.Response] = []

        def fetch() -> None:
            with service.client("acme") as c:
                answers.append(c.get(f"/v1/runs/{run_id}/diff", timeout=300))

        fetchers = [threading.Thread(target=fetch) for _ in range(4)]
        for t in fetchers:
            t.start()
        served = [beta.get("/v1/runs").status_code for _ in range(3)]  # while the four are in flight
        for t in fetchers:
            t.join(300)
        peak = vm_peak_mb(service)
        files = acme.get(f"/v1/runs/{run_id}/diff/files")
        small = acme.get(f"/v1/runs/{run_id}/diff", params={"path": "small.py"})
        glob = acme.get(f"/v1/runs/{run_id}/diff", params={"path": "*.py"})
        option = acme.get(f"/v1/runs/{run_id}/diff", params={"path": "--output=/tmp/x"})
        unknown = acme.get(f"/v1/runs/{run_id}/diff", params={"path": "README.md"})
        assert beta.get("/v1/runs").status_code == 200 and beta.get("/healthz").status_code == 200
    print(f"diff bomb: 4 x GET /diff -> {[r.status_code for r in answers]}; service peak RSS (VmHWM) {baseline:.0f} MB "
          f"at start, {ended:.0f} MB once the run ended, {peak:.0f} MB after the four requests")
    assert run["status"] == "succeeded", (run["status"], run["error"])
    assert served == [200, 200, 200], "the other tenant was served while the bomb was asked for"
    assert len(answers) == 4 and all(r.status_code == 422 for r in answers), [r.status_code for r in answers]
    error = answers[0].json()["error"]
    assert "20 MB" in error and "max_diff_mb" in error and "git fetch" in error and f"flower/{run_id}" in error, error
    grew = peak - baseline
    assert grew < 150, f"the service's peak memory grew by {grew:.0f} MB ({baseline:.0f} → {peak:.0f} MB)"
    assert files.status_code == 200, files.text
    listed = {f["path"]: f for f in files.json()["files"]}
    assert listed["bomb.txt"]["insertions"] == BOMB_LINES and not listed["bomb.txt"]["binary"], listed
    assert set(listed) == {"bomb.txt", "small.py", "*.py"} and files.json()["commit"] == run["commit"]
    assert {f["path"] for f in run["diffstat"]["files"]} == set(listed), "the run's diffstat, measured the same way"
    assert small.status_code == 200 and '+print("small")' in small.text and "bomb.txt" not in small.text, small.text
    assert glob.status_code == 200 and "+glob" in glob.text and "small.py" not in glob.text, "a path, never a glob"
    assert option.status_code == 400 and "-" in option.json()["error"], option.text
    assert unknown.status_code == 404 and "/diff/files" in unknown.json()["error"], unknown.text
