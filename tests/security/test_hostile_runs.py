"""Hostile runs, submitted over the API: the scripted model makes the run's worker attack the service with Bash,
through the real CLI, on the local (bubblewrap) and the Docker backend. For each attack: it fails, the service
stays up and serves the other tenant, and nothing outside the run's folder is read, written or executed —
checked by canary secrets grepped for in everything the model was sent, marker files, and byte-for-byte
snapshots of both teams' repositories."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from _service_helpers import TOKENS, Deployment, Service, git, sse, wait_for, wait_status
from _hostile import CANARY, DONE, ENDED, hostile_deployment, worker_rules
from flower.testing import Rule, ScriptedModel

pytestmark = pytest.mark.cli


def benign_rules(ask: str) -> list[Rule]:
    return worker_rules(ask, f"echo hello > hello.txt; echo {DONE}")


def start(dep: Deployment, services: list[Service], model: ScriptedModel) -> Service:
    for name, path in dep.creds.items():  # each tenant's own canary rides in its own credentials
        path.write_text("".join(f"{k}={v}\n" for k, v in {**model.env, "TEAM_SECRET": CANARY[name]}.items()))
    service = Service(dep).start(timeout=120)
    services.append(service)
    return service


def snapshot(repo: Path, branch: str = "") -> dict[str, bytes]:
    """Every file of a repository (work tree and .git), except what taking ``branch`` may add: new packs and
    loose objects, its ref and reflog."""
    out = {}
    for p in sorted(repo.rglob("*")):
        rel = p.relative_to(repo).as_posix()
        if p.is_dir() or (branch and (rel.startswith(".git/objects/") or branch in rel)):
            continue
        out[rel] = p.read_bytes() if not p.is_symlink() else b"-> " + str(p.readlink()).encode()
    return out


def seen_by_model(model: ScriptedModel, ask: str) -> str:
    """Everything the CLI of the run asking ``ask`` sent the model — all it read went there."""
    bodies = [json.dumps(r.body, ensure_ascii=False) for r in model.requests]
    return "\n".join(b for b in bodies if ask in b)


def tool_output(model: ScriptedModel) -> str:
    """What the attack's Bash call printed (the longest tool result that ends the attack)."""
    return max((r["text"] for req in model.conversation for r in req.results if DONE in r["text"]), key=len)


def vm_peak_mb(service: Service) -> float:
    assert service.proc is not None
    for line in Path(f"/proc/{service.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def submit(service: Service, tenant: str, ask: str) -> str:
    r = service.client(tenant).post("/v1/runs", json={"ask": ask, "options": {"rounds": 1, "timeout_s": 30}})
    assert r.status_code == 201, r.text
    return r.json()["id"]


# -- 1, 2, 5, 6: git metadata, symlinks, reading the other tenant, the team's refs --------------------------
def test_git_tricks_symlinks_snooping_and_ref_moves_all_fail(tmp_path: Path, services: list[Service],
                                                             backend_name: str) -> None:
    dep = hostile_deployment(tmp_path / "dep", backend_name)
    markers = tmp_path / "markers"
    markers.mkdir()
    acme, beta = dep.repos["acme"], dep.repos["beta"]
    m = markers / "pwned"
    other = CANARY["beta"]
    pattern = f'"{other[:8]}""{other[8:]}"'  # the script must not carry the canary itself
    script = f"""set +e
git config filter.x.clean 'touch {m}-filter'; git config filter.x.smudge 'touch {m}-smudge'
git config core.fsmonitor 'touch {m}-fsmonitor'; git config core.sshCommand 'touch {m}-ssh'
git config diff.x.textconv 'touch {m}-textconv'
mkdir -p .hooks; printf '#!/bin/sh\\ntouch {m}-hook\\n' > .hooks/post-checkout; chmod +x .hooks/post-checkout
cp .hooks/post-checkout .git/hooks/post-checkout; cp .hooks/post-checkout .git/hooks/reference-transaction
git config core.hooksPath .hooks
echo '* filter=x diff=x' > .gitattributes
ln -s /etc/passwd passwd-link; ln -s {dep.creds['beta']} beta-env-link; echo work > work.txt
git -C {acme} branch -f main HEAD 2>&1 | tail -1; echo evil >> {acme}/.git/config 2>&1 | tail -1
touch {acme}/.git/objects/evil 2>&1 | tail -1; git update-ref refs/heads/evil HEAD; git branch -f other HEAD
for f in {dep.creds['beta']} {dep.root}/tenants.toml {beta}/.git/canary {dep.data}/registry.sqlite3 \\
         {dep.data}/runs/*/flower.env {dep.data}/runs/*/outbox/events.jsonl /proc/1/environ; do
  cat "$f" 2>&1 | head -c 300; echo; done
ls {dep.data}/runs {dep.repos['beta'].parent} 2>&1 | head -5
timeout 25 grep -rIl --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr --exclude-dir=dev -e {pattern} / 2>/dev/null
cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c {pattern}
echo {DONE}"""
    before_acme, before_beta = snapshot(acme, "flower/"), snapshot(beta, "flower/")
    with ScriptedModel(worker_rules("git 之乱", script) + benign_rules("beta 的活")) as model:
        service = start(dep, services, model)
        a, b = submit(service, "acme", "git 之乱"), submit(service, "beta", "beta 的活")
        ra = wait_status(service.client("acme"), a, ENDED, timeout=240)
        rb = wait_status(service.client("beta"), b, ENDED, timeout=240)
        out = tool_output(model)
        sent = seen_by_model(model, "git 之乱")
        diff = service.client("acme").get(f"/v1/runs/{a}/diff").text
        assert service.client("acme").get("/healthz").status_code == 200
    assert rb["status"] == "succeeded", (rb["status"], rb["error"])
    assert ra["status"] == "succeeded", (ra["status"], ra["error"], out[-2000:])
    # 5: nothing of the other tenant anywhere the run could reach (the model saw all it read)
    assert other not in sent, "beta's canary reached acme's run"
    assert CANARY["acme"] in sent or "TEAM_SECRET" not in out, "the probe itself ran"
    assert "No such file or directory" in out, out[-3000:]
    # 1: no git configuration, hook, filter or attribute of the run ran on the service's side
    assert sorted(p.name for p in markers.iterdir()) == []
    # 2: symlinks are committed as symlinks; the diff shows links, never their targets' bytes
    tree = git(acme, "ls-tree", f"flower/{a}")
    assert "passwd-link" in tree, (ra, tree, service.log_path.read_text()[-3000:])
    assert "120000 blob" in next(line for line in tree.splitlines() if line.endswith("passwd-link"))
    assert "120000 blob" in next(line for line in tree.splitlines() if line.endswith("beta-env-link"))
    assert "new file mode 120000" in diff and other not in diff and "root:x:0:0" not in diff
    # 6: the team's repository is byte-for-byte what it was, but for flower/<run>; no other ref moved or appeared
    assert snapshot(acme, "flower/") == before_acme
    branches = git(acme, "for-each-ref", "--format=%(refname)").split()
    assert sorted(branches) == sorted(["refs/heads/main", f"refs/heads/flower/{a}"]), branches
    assert git(acme, "fsck", "--no-progress", "--strict").strip() == ""
    assert snapshot(beta, "flower/") == before_beta and f"flower/{b}" in git(beta, "branch", "--list")
    print(f"[{backend_name}] git/symlink/snoop/refs: contained; acme {ra['status']}, beta {rb['status']}")


# -- 3, 4: the run's outbox and the mailbox turned into traps --------------------------------------------------
def test_outbox_and_mailbox_traps_read_nothing_hang_nothing_write_nothing(tmp_path: Path, services: list[Service],
                                                                          backend_name: str) -> None:
    dep = hostile_deployment(tmp_path / "dep", backend_name)
    beta_creds, beta = dep.creds["beta"], dep.repos["beta"]
    script = f"""set +e
O=../outbox
head -c 100000000 /dev/zero | tr '\\0' x >> $O/events.jsonl; echo >> $O/events.jsonl
sleep 2  # the service's passes read the line (as pieces) before the file becomes a trap: no race with their timing
mv $O/events.jsonl $O/events.old; ln -s {beta_creds} $O/events.jsonl
mkfifo $O/questions/fifo.json; ln -s /dev/zero $O/questions/zero.json; ln -s {beta_creds} $O/questions/beta.json
truncate -s 10G $O/work.bundle
rm -rf ../mailbox/answers 2>&1 | tail -1; ln -s {beta} ../mailbox/inbox/x 2>&1 | tail -1
mv $O/questions $O/q.old; ln -s {beta} $O/questions
ln -sf {beta_creds} $O/exit.json; mkfifo $O/manifest.fifo
rm -rf .git; mkfifo .git
echo {DONE}
timeout 5 tail -f /dev/null
kill -9 -1  # every process of the run, its own entrypoint included: nobody writes exit.json
timeout 30 tail -f /dev/null"""
    before_beta = snapshot(beta, "flower/")
    with ScriptedModel(worker_rules("陷阱", script) + benign_rules("beta 的活")) as model:
        service = start(dep, services, model)
        creds_before = beta_creds.read_bytes()
        a, b = submit(service, "acme", "陷阱"), submit(service, "beta", "beta 的活")
        acme = service.client("acme")
        answers: list[httpx.Response] = []
        stream: list[dict] = []
        reader = threading.Thread(target=lambda: stream.extend(sse(service.client("acme"), a, timeout=240)))
        reader.start()
        # the loop hammers the API: past the tenant's pace it is answered 429 (a second later) and goes on
        while (r := acme.get(f"/v1/runs/{a}")).status_code == 429 or r.json()["status"] in ("queued", "starting",
                                                                                         "running"):
            answers.append(acme.get(f"/v1/runs/{a}/questions"))
            answers.append(acme.post(f"/v1/runs/{a}/answers", json={"question_id": "beta", "text": "x"}))
            answers.append(acme.post(f"/v1/runs/{a}/messages", json={"text": "still there?"}))
        ra = wait_status(acme, a, ENDED, timeout=240)
        rb = wait_status(service.client("beta"), b, ENDED, timeout=240)
        reader.join(60)
        assert service.client("beta").get("/healthz").status_code == 200
        peak = vm_peak_mb(service)
        log = service.log_path.read_text()
    assert rb["status"] == "succeeded", (rb["status"], rb["error"])
    # its sandbox was lost (it killed its own entrypoint): not resumed, its checkout no longer a git checkout
    assert ra["status"] == "failed" and "cannot be resumed: its checkout" in ra["error"], ra
    assert [x["cause"] for x in ra["losses"]] == ["crashed"] and "without writing exit.json" in \
        ra["losses"][0]["error"], ra["losses"]
    codes = [r.status_code for r in answers]
    assert answers and all(c in (200, 202, 404, 409, 429) for c in codes), codes
    assert all(r.json()["questions"] == [] for r in answers if r.request.method == "GET" and r.status_code == 200)
    texts = json.dumps(stream, ensure_ascii=False) + "".join(r.text for r in answers)
    assert CANARY["beta"] not in texts and CANARY["beta"] not in log, "nothing of beta came back"
    assert stream and stream[-1]["event"] == "end", "the stream ended"
    assert any(e["data"].get("kind") == "unparsed" for e in stream[:-1]), "the 100 MB line came as pieces"
    assert peak < 600, f"the service's memory stayed bounded (peak {peak:.0f} MB)"
    assert snapshot(beta, "flower/") == before_beta and beta_creds.read_bytes() == creds_before
    assert git(dep.repos["acme"], "rev-parse", f"flower/{a}").strip() == ra["base"], "no work taken from a trap"
    print(f"[{backend_name}] outbox/mailbox traps: contained; service peak RSS {peak:.0f} MB")


# -- 7: resources: the container's limits (Docker), the run's cgroups (local) -------------------------------------
def test_a_fork_flood_and_a_20_gb_allocation_hit_the_runs_limits(tmp_path: Path, services: list[Service],
                                                                 backend_name: str) -> None:
    dep = hostile_deployment(tmp_path / "dep", backend_name)
    script = f"""set +e
sh -c 'n=0; while [ $n -lt 2000 ]; do sleep 30 & n=$((n+1)); done' > flood.txt 2>&1
echo forks: $(grep -c . flood.txt) failed; head -2 flood.txt
echo procs=$(ls -d /proc/[0-9]* | wc -l)
kill $(ls /proc | grep -E '^[0-9]+$' | while read p; do grep -qx sleep /proc/$p/comm 2>/dev/null && echo $p; done) 2>/dev/null
head -c 20G /dev/zero | tail; echo "alloc rc=$?"
echo {DONE}"""
    with ScriptedModel(worker_rules("吃资源", script) + benign_rules("beta 的活")) as model:
        service = start(dep, services, model)
        a, b = submit(service, "acme", "吃资源"), submit(service, "beta", "beta 的活")
        held = wait_for(lambda: limits_of(backend_name, a), 120, what="acme's sandbox and its limits")
        ra = wait_status(service.client("acme"), a, ENDED, timeout=300)
        rb = wait_status(service.client("beta"), b, ENDED, timeout=300)
        outputs = [r["text"] for req in model.conversation for r in req.results if "procs=" in r["text"]]
        assert service.client("beta").get("/healthz").status_code == 200
    assert rb["status"] == "succeeded", (rb["status"], rb["error"])  # the other tenant's run was not hurt
    assert ra["status"] in ENDED
    assert held["memory"] == 2 << 30 and held["pids"] == 512, held  # the defaults, as the kernel holds them
    if outputs:  # the attack's shell survived its own flood: the limits show in what it printed
        assert int(outputs[0].split("procs=")[1].split()[0]) <= 512, outputs[0]
        assert "alloc rc=137" in outputs[0] or "alloc rc=141" in outputs[0], outputs[0]
    print(f"[{backend_name}] limits {held}: acme {ra['status']} ({(ra['error'] or '')[:120]}); beta {rb['status']}; "
          f"attack output {'seen' if outputs else 'lost with the run'}")


def limits_of(backend: str, run_id: str) -> dict | None:
    """The limits the run's sandbox is held to while it lives: Docker's HostConfig, or the local run's cgroups."""
    if backend == "local":  # its cgroups are named for the run and its runs root (the machine's are shared)
        cg = Path("/sys/fs/cgroup")
        found = [*cg.glob(f"memory/flower-{run_id}-*/memory.limit_in_bytes"),
                 *cg.glob(f"pids/flower-{run_id}-*/pids.max")]
        if not (cg / "memory").is_dir():  # cgroup v2
            found = [p for n in ("memory.max", "pids.max") for p in cg.glob(f"flower/{run_id}-*/{n}")]
        try:
            mem, pids = found
            return {"memory": int(mem.read_text()), "pids": int(pids.read_text())}
        except (OSError, ValueError):
            return None
    import docker

    found = docker.from_env().containers.list(filters={"label": f"flower.run={run_id}"})
    if not found:
        return None
    host, user = found[0].attrs["HostConfig"], found[0].attrs["Config"]["User"]
    assert host["MemorySwap"] == host["Memory"] and host["NanoCpus"] == 10**9, "no swap; one CPU"
    assert host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    assert not any("unconfined" in o for o in host["SecurityOpt"]) and user == "10001:10001"
    assert "size=256m" in host["Tmpfs"]["/tmp"] and host["Privileged"] is False
    return {"memory": host["Memory"], "pids": host["PidsLimit"]}


def test_other_tenants_tokens_do_not_open_a_run(tmp_path: Path, services: list[Service]) -> None:
    """A run id of 128 random bits, and a tenant's token only ever shows its own runs."""
    dep = hostile_deployment(tmp_path / "dep", "local")
    with ScriptedModel(benign_rules("beta 的活")) as model:
        service = start(dep, services, model)
        b = submit(service, "beta", "beta 的活")
        assert len(b.rsplit("-", 1)[1]) == 32
        r = httpx.get(f"{service.url}/v1/runs/{b}", headers={"Authorization": f"Bearer {TOKENS['acme']}"})
        assert r.status_code == 404
        wait_status(service.client("beta"), b, ENDED, timeout=240)
