"""No run is ever root on the host, on the local (bubblewrap) and the Docker backend: through a live service and the
real CLI, the run's worker (the scripted model's Bash) makes files and tries to write the kernel's settings.

What a file is owned by is read from the host (``stat``): the run's own view of its uid map can mislead, since
bubblewrap may nest a second user namespace. The writes are harmless when they succeed (``core_pattern`` gets its
own value back; ``sysrq-trigger`` is opened, nothing is written), so the test can show a hole without using it."""

from __future__ import annotations

from pathlib import Path

import pytest

from _service_helpers import Service, serve, wait_status
from _hostile import DONE, ENDED, hostile_deployment, worker_rules
from flower.testing import ScriptedModel

pytestmark = pytest.mark.cli

ASK = "看看我是谁"
MADE = "made-by-run.txt"
READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")  # as Docker keeps them
SCRIPT = f"""set +e
echo made > "$HOME/{MADE}"
echo "inside: uid $(id -u), uid_map $(tr -s ' ' < /proc/self/uid_map)"
v=$(cat /proc/sys/kernel/core_pattern)
if ( printf '%s\\n' "$v" >> /proc/sys/kernel/core_pattern ) 2>/dev/null; then echo "core_pattern: WRITTEN"
else echo "core_pattern: refused"; fi
if [ ! -e /proc/sysrq-trigger ]; then echo "sysrq-trigger: absent"
elif ( : >> /proc/sysrq-trigger ) 2>/dev/null; then echo "sysrq-trigger: OPENED"
else echo "sysrq-trigger: refused"; fi
if ( : > ../mailbox/planted && chmod 666 ../mailbox/spec.json ) 2>/dev/null; then echo "mailbox: WRITTEN"
else echo "mailbox: refused ($(stat -c %u ../mailbox/spec.json) owns the spec)"; fi
for p in {' '.join(READ_ONLY)}; do
  [ -e /proc/$p ] && echo "/proc/$p mounted \
$(awk -v m=/proc/$p '$5 == m {{o = substr($6, 1, 2)}} END {{print o}}' /proc/self/mountinfo)"
done
echo {DONE}"""


def test_a_run_is_not_root_on_the_host_and_cannot_write_the_kernels_settings(tmp_path: Path, services: list[Service],
                                                                               backend_name: str) -> None:
    dep = hostile_deployment(tmp_path / "dep", backend_name)
    with ScriptedModel(worker_rules(ASK, SCRIPT)) as model:
        service = serve(dep, services, model, timeout=120)
        r = service.client("acme").post("/v1/runs", json={"ask": ASK, "options": {"rounds": 1, "timeout_s": 30}})
        assert r.status_code == 201, r.text
        run = wait_status(service.client("acme"), r.json()["id"], ENDED, timeout=240)
        said = [x["text"] for req in model.conversation for x in req.results if DONE in x["text"]]
    assert run["status"] == "succeeded", (run["status"], run["error"], service.log_path.read_text()[-3000:])
    out = max(said, key=len)
    made = list((dep.data / "runs").glob(f"*/home/{MADE}"))
    assert len(made) == 1, (made, out)
    events = made[0].parent.parent / "outbox" / "events.jsonl"  # written by the run's entrypoint
    owners = {p.name: p.stat().st_uid for p in (made[0], events)}
    holes = [f"{name} is root's on the host" for name, uid in owners.items() if uid == 0]
    if "core_pattern: refused" not in out:
        holes.append("/proc/sys/kernel/core_pattern was written from inside")
    sysrq = "refused" if Path("/proc/sysrq-trigger").exists() else "absent"  # not in every kernel (MAGIC_SYSRQ)
    if f"sysrq-trigger: {sysrq}" not in out:
        holes.append("/proc/sysrq-trigger was opened for writing from inside")
    if "mailbox: refused" not in out:  # the run's uid owns its mail now: the read-only mount must hold
        holes.append("the mailbox was written from inside")
    holes += [f"/proc/{p} is not a read-only mount inside" for p in READ_ONLY
              if Path("/proc", p).exists() and f"/proc/{p} mounted ro\n" not in out]
    assert holes == [], f"{holes}; the run said: {out}"
    print(f"[{backend_name}] owners on the host {owners}; {' | '.join(out.splitlines()[:4])}")
