"""Issue 34's acceptance, end to end: two teams, each with its own image, a project whose dependencies come from a
real registry on 127.0.0.1 behind a login, and a failing test.

- acme: a Node project needing ``@team/greet`` from verdaccio (the token in its setup secrets file);
- beta: a Python project needing ``teamcalc`` and pytest from pypiserver (the password likewise).

Setup installs through the tenant's allow-list (squid; the registries are named, never addressed), the scripted
worker runs the project's tests and fixes the file, the judge's verify command (``npm test``, ``python3 -m pytest
-q``) passes and the verdict is achieved with the exit code in its evidence; with the fix withheld it is not. The
second run of each starts from the prepared environment (no setup), and no secret reaches an agent phase.
Docker backend, real CLI, scripted model."""

from __future__ import annotations

import json

import pytest

from _service_helpers import Deployment, Service, git, remove_prepared, serve, wait_question, wait_status
from _team_images import team_image
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ACHIEVED, ASK, BRIEF, CLARIFIER, GOAL, JUDGE, LEAD, REPORT

pytestmark = [pytest.mark.docker, pytest.mark.cli]

ENDED = ("succeeded", "failed", "aborted", "killed", "cancelled")
NPM_HOST, PYPI_HOST = "npm.team.test", "pypi.team.test"
NODE_BUGGY = 'const { greet } = require("@team/greet");\nexports.welcome = (n) => greet(n).toUpperCase();\n'
NODE_FIXED = 'const { greet } = require("@team/greet");\nexports.welcome = (n) => greet(n);\n'
NODE_TEST = ('const assert = require("assert");\nconst { welcome } = require("./app");\n'
             'assert.strictEqual(welcome("ada"), "hello, ada");\nconsole.log("welcome ok");\n')
PY_BUGGY = "from teamcalc import add\n\n\ndef total(xs):\n    t = 0\n    for x in xs[1:]:\n        t = add(t, x)\n    return t\n"
PY_FIXED = PY_BUGGY.replace("xs[1:]", "xs")
PY_TEST = "from stats import total\n\n\ndef test_total():\n    assert total([1, 2, 3]) == 6\n"


def rules(ask: str, test: str, fix: tuple[str, str] | None) -> list[Rule]:
    """Clarify → goal → the worker runs the project's tests, fixes ``fix`` (path, content) if given, runs them
    again and reports → the judge says 达成 (the verify command decides whether that stands)."""
    work = [tool("Bash", {"command": f"{test} 2>&1; echo exit=$?", "description": "the team's tests"})]
    if fix is not None:
        work += [tool("Write", {"file_path": fix[0], "content": fix[1]}),
                 tool("Bash", {"command": f"{test} 2>&1; echo exit=$?", "description": "again"})]
    task = f"WORKER-TASK {ask}"
    return [
        Rule(tool(ASK, {"question": "用什么语言?", "options": ["Python", "Go"]}), system=CLARIFIER, prompt=ask),
        Rule(say(BRIEF.replace("做一个 hello.py", f"做一个 hello.py ({ask})")), system=CLARIFIER, prompt=ask,
             result="Python"),
        Rule(say(GOAL), system=JUDGE, prompt=ask),
        Rule(tool("Agent", {"description": "fix", "prompt": task, "subagent_type": "coder",
                            "run_in_background": False}), system=LEAD, agent=False, prompt=ask),
        Rule(*work, say(REPORT), agent=True, prompt=task),
        Rule(say("done"), system=LEAD, agent=False, prompt=ask, result=REPORT[:6]),
    ]


JUDGE_SAYS_YES = Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了", repeat=True)


def node_repo(d: Deployment, port: int) -> None:
    repo = d.repos["acme"]
    (repo / "package.json").write_text(json.dumps({"name": "team-app", "version": "1.0.0", "private": True,
                                                   "scripts": {"test": "node test.js"},
                                                   "dependencies": {"@team/greet": "1.0.0"}}, indent=2))
    (repo / ".npmrc").write_text(f"@team:registry=http://{NPM_HOST}:{port}/\n"
                                 f"//{NPM_HOST}:{port}/:_authToken=${{NPM_TOKEN}}\n")
    (repo / ".gitignore").write_text("node_modules/\n")
    (repo / "app.js").write_text(NODE_BUGGY)
    (repo / "test.js").write_text(NODE_TEST)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "a node project with a failing test")


def python_repo(d: Deployment) -> None:
    repo = d.repos["beta"]
    (repo / "requirements.txt").write_text("teamcalc==1.0.0\npytest==9.2.0\n")
    (repo / "stats.py").write_text(PY_BUGGY)
    (repo / "test_stats.py").write_text(PY_TEST)
    (repo / ".gitignore").write_text(".pytest_cache/\n__pycache__/\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "a python project with a failing test")


def submit(service: Service, tenant: str, ask: str) -> str:
    client = service.client(tenant)
    r = client.post("/v1/runs", json={"ask": ask, "options": {"rounds": 1, "timeout_s": 300}})
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    q = wait_question(client, run_id, timeout=900)  # a first setup installs before the run asks
    assert client.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": "1"}).status_code == 200
    return run_id


def checks(d: Deployment, run_id: str) -> list[dict]:
    lines = (d.data / "runs" / run_id / "outbox" / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("kind") == "verify"]


@pytest.fixture(autouse=True)
def no_prepared_images(docker_engine):
    """acme's and beta's prepared images are this test's alone: a killed earlier run's would be counted."""
    remove_prepared("acme", "beta")
    yield


def test_two_teams_install_through_their_allow_list_and_the_judge_runs_their_tests(
        docker_engine, npm_registry, package_index, tmp_path, services: list[Service]):
    import docker

    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 {NPM_HOST} {PYPI_HOST}\n")
    d = Deployment(tmp_path, backend="docker",
                   extra_config=f'network_mode = "host"\negress_internal = ["127.0.0.1/32"]\n'
                                f'egress_hosts_file = "{hosts}"\n')
    node_repo(d, npm_registry.port)
    python_repo(d)
    secrets = {name: tmp_path / "secrets" / f"{name}.setup.env" for name in ("acme", "beta")}
    secrets["acme"].write_text(f"NPM_TOKEN={npm_registry.token}\n")
    secrets["beta"].write_text(f"PYPI_PASSWORD={package_index.password}\n")
    index = f"http://{package_index.user}:${{PYPI_PASSWORD}}@{PYPI_HOST}:{package_index.port}/simple/"
    d.write_tenants(
        acme={"image": team_image("node"), "setup": ["npm install --no-audit --no-fund"],
              "setup_secrets_file": str(secrets["acme"]), "egress": [f"{NPM_HOST}:{npm_registry.port}"],
              "verify": "npm test"},
        beta={"image": team_image("python"), "egress": [f"{PYPI_HOST}:{package_index.port}"],
              "setup": [f'pip install --no-input --no-cache-dir --break-system-packages --trusted-host {PYPI_HOST} '
                        f'--index-url "{index}" '
                        "-r requirements.txt"],
              "setup_secrets_file": str(secrets["beta"]), "verify": "python3 -m pytest -q"})
    leaks = (npm_registry.token, package_index.password)
    asks = {"acme fixes": ("acme", "npm test", ("app.js", NODE_FIXED)),
            "beta fixes": ("beta", "python3 -m pytest -q", ("stats.py", PY_FIXED)),
            "acme withholds": ("acme", "npm test", None),
            "beta withholds": ("beta", "python3 -m pytest -q", None)}
    client = docker.from_env()
    try:
        script = [r for ask, (_, test, fix) in asks.items() for r in rules(ask, test, fix)] + [JUDGE_SAYS_YES]
        with ScriptedModel(script) as model:
            service = serve(d, services, model, timeout=600)
            ended = {}
            for ask, (tenant, _, _) in asks.items():
                run_id = submit(service, tenant, ask)
                ended[ask] = wait_status(service.client(tenant), run_id, ENDED, timeout=600)
            assert model.unmatched == []
        for ask in ("acme fixes", "beta fixes"):
            run = ended[ask]
            assert run["status"] == "succeeded", run
            found = checks(d, run["id"])
            assert found and found[-1]["payload"]["exit_code"] == 0 and found[-1]["payload"]["passed"], found
        for ask in ("acme withholds", "beta withholds"):
            run = ended[ask]
            assert run["status"] == "failed", run
            found = checks(d, run["id"])
            assert found and found[-1]["payload"]["exit_code"] != 0 and not found[-1]["payload"]["passed"], found
        assert "welcome ok" in checks(d, ended["acme fixes"]["id"])[-1]["payload"]["tail"]
        assert "1 passed" in checks(d, ended["beta fixes"]["id"])[-1]["payload"]["tail"]
        # the judge read the exit code as evidence
        judged = [r.prompt for r in model.conversation if "第 1 轮工作结束了" in r.prompt]
        assert any("verify `npm test` exited 0" in p for p in judged)
        assert any("verify `python3 -m pytest -q` exited 0" in p for p in judged)
        # the worker saw its project's tests fail, then pass, in the team's image
        results = [r["text"] for req in model.conversation for r in req.results]
        assert any("AssertionError" in t and "exit=1" in t for t in results)
        assert any("welcome ok" in t and "exit=0" in t for t in results)
        assert any("1 passed" in t and "exit=0" in t for t in results)
        # prepared once each: the second run of each tenant found its image
        for tenant in ("acme", "beta"):
            assert len(client.images.list(name=f"flower-env/{tenant}")) == 1
        # no secret in any run's files (events, transcripts, the checkout) or the prepared images' layers
        for run in ended.values():
            for path in (d.data / "runs" / run["id"]).rglob("*"):
                if path.is_file() and not path.is_symlink():
                    data = path.read_bytes()
                    assert not any(s.encode() in data for s in leaks), path
        for tenant in ("acme", "beta"):
            saved = b"".join(client.images.get(client.images.list(name=f"flower-env/{tenant}")[0].id).save())
            assert not any(s.encode() in saved for s in leaks)
        audit = [line for line in service.lines() if line.get("event") == "audit.egress"]
        assert {line["host"] for line in audit} >= {NPM_HOST, PYPI_HOST}, audit[-5:]
    finally:
        remove_prepared("acme", "beta")
