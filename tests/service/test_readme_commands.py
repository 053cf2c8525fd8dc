"""Every shell command the READMEs show, run as written against a real service in a temporary deployment (issue 24:
a new user's `flower remote login --server URL` failed) — and the run-id prefixes and the exit code 3 they rely on.

The commands are read out of the markdown's fenced ``bash``/``sh`` blocks. What cannot run here is skipped by name,
each with its reason (SKIPPED). What the commands name that only the reader knows — the service's address, the
tenant token, a run id, the backup folder — is filled in from PLACEHOLDERS; nothing else of a command is changed.
Each runs under ``bash -c`` from the folder that holds the deployment's ``service.toml``, with the venv first on
PATH, a fresh HOME and no FLOWER_* variables.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _hello import hello_rules
from _service_helpers import (ROOT, TOKENS, Deployment, Service, end_leftover_runs, wait_for, wait_question,
                              wait_status)
from flower.testing import ScriptedModel

pytestmark = pytest.mark.cli

READMES = ("README.md", "service/README.md", "helm/README.md")
ASK = "make a hello.py"
SKIPPED = {  # command (as written, comment cut) → why it cannot run here
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[service]' && .venv/bin/flower demo":
        "installs from the package index; its `flower demo` runs as written in tests/e2e/test_first_minutes.py",
    "bash scripts/test": "the whole suite, this test included",
    'flower "帮我做一个 X"': "a run against a real model (a key); the scripted example below is run by test_first_minutes",
    "flower": "continues that real-model run",
    'flower ask "到哪了?"': "asks a real model (a key)",
    ".venv/bin/pip install -e '.[service]'": "installs from the package index (this venv already has it)",
    "python -m sandbox.image": "builds the Docker run image (minutes); tests/docker build and use it",
    "python -m sandbox.image --target sandbox": "builds a Docker image (minutes); tests/docker/test_service_image.py",
    "python -m sandbox.image --target service": "builds a Docker image (minutes); tests/docker/test_service_image.py",
    "FLOWER_SERVICE_IMAGE=flower/service:<tag> DOCKER_GID=$(stat -c %g /var/run/docker.sock) "
    "docker compose -f service/compose.yaml up -d": "needs the built service image; tests/docker/test_service_image.py "
                                                   "starts it with the file's settings",
    'python -m flower.testing examples/hello_script.py -- flower -w ~/flower-try "make a hello.py"':
        "run verbatim, from the repository root, by tests/e2e/test_first_minutes.py (the `example` fixture)",
    "kubectl create secret generic flower-tenants --from-file=tenants.toml": "needs a Kubernetes cluster",
    "kubectl create secret generic flower-credentials --from-file=acme.env --from-file=beta.env":
        "needs a Kubernetes cluster",
    "kubectl create secret generic flower-db --from-literal=url='postgresql://flower:…@db.internal/flower'":
        "needs a Kubernetes cluster",
    'kubectl create secret generic flower-scrape --from-literal=scrape="$(openssl rand -hex 32)"':
        "needs a Kubernetes cluster",
    "pip wheel -w build/wheelhouse '.[service]'": "downloads wheels from the package index",
    "docker build --target service -t registry.example.com/flower/service:0.1.0 .": "an image for a registry",
    "docker build --target sandbox -t registry.example.com/flower/sandbox:0.1.0 .": "an image for a registry",
    "helm test <release>": "needs a Kubernetes cluster and a release",
    ".venv/bin/python -m pytest tests/kubernetes -q": "another suite (the chart's), run by CI on its own",
}
SERVE = "python -m service --config service.toml"
"""The README's way to start the service: it serves until stopped, so it is started first (split as the shell would,
without one, so that SIGTERM reaches it) and stopped before the restore."""
EXPECTED = {f'flower remote submit "{ASK}"': 3}  # documented: without a terminal, its question, then exit 3


def shell_commands(markdown: str) -> list[str]:
    """The commands of the fenced bash/sh blocks: one a line, ``\\`` continuations joined, comments cut."""
    out: list[str] = []
    for block in re.findall(r"^\s*```(?:bash|sh|shell)\n(.*?)^\s*```", markdown, re.S | re.M):
        for line in re.sub(r"\\\n\s*", "", block).splitlines():
            command = re.sub(r"(^|\s)#.*$", "", line).strip()
            if command:
                out.append(command)
    return out


def test_the_shell_commands_of_every_readme_run_as_written(tmp_path: Path):
    commands = list(dict.fromkeys(c for name in READMES for c in shell_commands((ROOT / name).read_text("utf-8"))))
    assert SERVE in commands and 'flower remote login --server http://127.0.0.1:8080 --token TOKEN' in commands
    assert not [c for c in SKIPPED if c not in commands], "a skipped command is no longer in a README"
    to_run = [c for c in commands if c not in SKIPPED and c != SERVE]
    deployment = Deployment(tmp_path, extra_config="port = 0\nlog_format = \"json\"\n")
    home, backups = tmp_path / "home", tmp_path / "backups"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
    env.update(HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}", PYTHONUNBUFFERED="1")
    log = tmp_path / "readme-service.log"
    with ScriptedModel(hello_rules(ASK)) as model:
        deployment.set_credentials(model.env)
        with open(log, "ab") as out:
            proc = subprocess.Popen(shlex.split(SERVE), cwd=deployment.root, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            url = _listening(log, proc)
            service = Service(deployment)
            service.url = url
            api = service.client("acme")
            fill = {"http://127.0.0.1:8080": url, "TOKEN": TOKENS["acme"], "/var/backups/flower": str(backups)}
            results: dict[str, subprocess.CompletedProcess[str]] = {}
            for command in to_run:
                if "20261201-2304" in command and "20261201-2304" not in fill:  # the run the README submitted
                    run_id = api.get("/v1/runs").json()["runs"][0]["id"]
                    question = wait_question(api, run_id)
                    assert api.post(f"/v1/runs/{run_id}/answers",
                                    json={"question_id": question["id"], "text": "Python"}).status_code == 200
                    assert wait_status(api, run_id, ("succeeded",))["status"] == "succeeded"
                    fill["20261201-2304"] = run_id[:13]
                if "restore" in command:  # with the service stopped, as the README says
                    os.killpg(proc.pid, signal.SIGTERM)  # uvicorn shuts down, then re-raises the signal it caught
                    assert proc.wait(30) in (0, -signal.SIGTERM) and '"service.stopped"' in log.read_text()
                    # stopped means every process of it: its gateway ends by itself a moment later (slower on a
                    # loaded machine), and a restore refuses while anything still holds the registry
                    from service.registry.users import holders

                    db = deployment.data / "registry.sqlite3"
                    wait_for(lambda: not holders(db), 60, every=0.2, what=f"the service's processes to let go of {db}")
                    shutil.copy(next(backups.glob("registry-*.sqlite3")), backups / "registry-2026-12-01.sqlite3")
                results[command] = p = _run(command, fill, deployment.root, env)
                wanted = EXPECTED.get(command, 0)
                assert p.returncode == wanted, (command, wanted, p.returncode, p.stdout[-2000:], p.stderr[-2000:])
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(30)
            end_leftover_runs(deployment.data / "runs")
    submitted = results[f'flower remote submit "{ASK}"']
    assert f"{ASK} 用什么语言?" in submitted.stdout and "1) Python" in submitted.stdout, submitted.stdout
    assert "exit 3" in submitted.stderr and "--wait" in submitted.stderr, submitted.stderr
    shown = results["flower remote show 20261201-2304"].stdout
    assert "succeeded" in shown and fill["20261201-2304"] in shown, shown
    assert "hello.py" in results["flower remote diff 20261201-2304 --files"].stdout
    assert all(json.loads(x) for x in results["flower remote --json logs 20261201-2304"].stdout.splitlines())
    assert "restored" in results[[c for c in to_run if "restore" in c][0]].stdout


def _listening(log: Path, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log.read_text("utf-8", "replace").splitlines():
            if '"service.listening"' in line:
                return str(json.loads(line)["url"])
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.05)
    raise AssertionError(log.read_text()[-3000:])


def _run(command: str, fill: dict[str, str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    for name, value in fill.items():
        command = command.replace(name, value)
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)


def test_a_unique_start_of_a_run_id_names_the_run_and_never_another_tenants(deployment: Deployment,
                                                                           services: list[Service], tmp_path: Path):
    """GET /v1/runs/<start> and `flower remote show <start>`: unique → that run; shared by two of the tenant's runs
    → 409 naming both; shorter than 8 characters, or only another tenant's → 404."""
    from _service_helpers import serve

    with ScriptedModel([]) as model:  # the runs need not get anywhere: their ids are what is looked up
        service = serve(deployment, services, model)
        acme, beta = service.client("acme"), service.client("beta")
        ours = [acme.post("/v1/runs", json={"ask": f"ask {i}"}).json()["id"] for i in range(2)]
        theirs = beta.post("/v1/runs", json={"ask": "beta's"}).json()["id"]
        start = next(n for n in range(8, 48) if ours[0][:n] != ours[1][:n])
        got = acme.get(f"/v1/runs/{ours[0][:start]}")
        assert got.status_code == 200 and got.json()["id"] == ours[0], got.text
        both = acme.get(f"/v1/runs/{ours[0][:start - 1]}")
        assert both.status_code == 409 and all(i in both.json()["error"] for i in ours), both.text
        assert theirs not in both.json()["error"]
        assert acme.get(f"/v1/runs/{theirs[:start + 4]}").status_code == 404, "another tenant's run is not found"
        short = acme.get(f"/v1/runs/{ours[0][:3]}")
        assert short.status_code == 404 and "at least 4 characters" in short.json()["error"], short.text
        assert acme.post(f"/v1/runs/{ours[1][:start]}/cancel").status_code in (200, 202)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
        cli = [sys.executable, "-m", "flower.cli", "remote", "show", "--server", service.url, "--token", TOKENS["acme"]]
        shown = subprocess.run([*cli, ours[0][:start]], env={**env, "HOME": str(tmp_path)}, capture_output=True,
                               text=True, timeout=120)
        assert shown.returncode == 0 and ours[0] in shown.stdout, shown.stderr
        ambiguous = subprocess.run([*cli, ours[0][:start - 1]], env={**env, "HOME": str(tmp_path)},
                                   capture_output=True, text=True, timeout=120)
        assert ambiguous.returncode == 1 and "ambiguous" in ambiguous.stderr, ambiguous.stderr


def test_a_run_goes_by_its_short_id_and_the_newest_by_last(deployment: Deployment, services: list[Service],
                                                           tmp_path: Path):
    """Ids start with the date, so their first 8 characters name every run of the day: the API gives each run a
    short id (the start of its hex part, unique among the tenant's runs) that names it in the API and in
    `flower remote`, as does any 4 or more of its hex digits; `last` is the newest; the date alone is answered
    with a sentence listing the candidates by their short ids; the whole id keeps working."""
    from _service_helpers import serve

    with ScriptedModel([]) as model:
        service = serve(deployment, services, model)
        acme, beta = service.client("acme"), service.client("beta")
        made = [acme.post("/v1/runs", json={"ask": f"ask {i}"}).json() for i in range(3)]
        theirs = beta.post("/v1/runs", json={"ask": "beta's newest"}).json()
        ids = [m["id"] for m in made]
        shorts = [m["short"] for m in made]
        assert all(len(s) == 8 and s in i and not i.startswith(s) for s, i in zip(shorts, ids)), made
        assert len(set(shorts)) == 3
        for run_id, short in zip(ids, shorts):
            for typed in (short, short[:4], run_id):
                got = acme.get(f"/v1/runs/{typed}")
                assert got.status_code == 200 and got.json()["id"] == run_id and got.json()["short"] == short, got.text
        last = acme.get("/v1/runs/last")
        assert last.status_code == 200 and last.json()["id"] == ids[-1], last.text  # not beta's, newer still
        assert acme.get(f"/v1/runs/{theirs['short']}").status_code == 404, "another tenant's short id names nothing"
        assert [r["short"] for r in acme.get("/v1/runs").json()["runs"]] == shorts[::-1]
        day = acme.get(f"/v1/runs/{ids[0][:8]}")  # the date: every run of today starts so
        assert day.status_code == 409, day.text
        said = day.json()["error"]
        assert "ambiguous" in said and all(f"{s} ({i})" in said for s, i in zip(shorts, ids)), said
        assert said.count("\n") == 0 and theirs["id"] not in said

        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
        env = {**env, "HOME": str(tmp_path), "FLOWER_SERVER": service.url, "FLOWER_TOKEN": TOKENS["acme"],
               "FLOWER_LANG": "en", "COLUMNS": "200"}

        def remote(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "flower.cli", "remote", *args], env=env,
                                  capture_output=True, text=True, timeout=120)

        listed = remote("list")
        assert listed.returncode == 0, listed.stderr
        assert [line.split()[0] for line in listed.stdout.splitlines()] == shorts[::-1], listed.stdout
        shown = remote("show", shorts[1])
        assert shown.returncode == 0 and ids[1] in shown.stdout, shown.stdout
        assert re.search(rf"^\s*short\s+{shorts[1]}$", shown.stdout, re.M), shown.stdout
        newest = remote("show", "last", "--json")
        assert newest.returncode == 0 and json.loads(newest.stdout)["id"] == ids[-1], newest.stdout
        dated = remote("show", ids[0][:8])
        assert dated.returncode == 1 and all(s in dated.stderr for s in shorts), dated.stderr
        for run_id in ids:
            acme.post(f"/v1/runs/{run_id}/cancel")
        acme.post(f"/v1/runs/{theirs['id']}/cancel")
