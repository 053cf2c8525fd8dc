"""The verify command's pieces, with real files and real processes: the copy it runs in, its timeout, its tail."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from sandbox.verify import TAIL_BYTES, TAIL_LINES, copy_worktree, run_check, still_there, tail_of, verify


def _gone(pid: int) -> bool:
    """The process stops running (gone, or a zombie waiting for whoever adopted it) once its SIGKILL lands."""
    for _ in range(500):
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.01)
    return False


def test_the_copy_holds_untracked_and_ignored_files_and_git_but_no_fifo(git_workspace: Path, tmp_path: Path) -> None:
    ws = git_workspace
    (ws / ".gitignore").write_text("node_modules/\n")
    (ws / "node_modules" / ".bin").mkdir(parents=True)
    (ws / "node_modules" / "left-pad.js").write_text("module.exports = 1\n")
    os.symlink("../left-pad.js", ws / "node_modules" / ".bin" / "left-pad")
    (ws / "new.py").write_text("print('untracked')\n")
    (ws / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (ws / "run.sh").chmod(0o755)
    os.mkfifo(ws / "pipe")
    (ws / "poetry.lock").write_text("# a team's lock file\n")
    (ws / ".git" / "index.lock").write_text("")  # a commit in flight in the worktree (the run's checkpoint)
    copy = copy_worktree(ws, tmp_path / "scratch")
    assert (copy / "poetry.lock").is_file() and not (copy / ".git" / "index.lock").exists(), \
        "git's own locks stay behind: nobody in the copy holds them"
    (ws / ".git" / "index.lock").unlink()
    assert copy == tmp_path / "scratch" / ws.name
    assert (copy / "node_modules" / "left-pad.js").read_text() == "module.exports = 1\n"
    assert os.readlink(copy / "node_modules" / ".bin" / "left-pad") == "../left-pad.js", "symlinks stay symlinks"
    assert (copy / "new.py").is_file() and os.access(copy / "run.sh", os.X_OK)
    assert not (copy / "pipe").exists(), "a FIFO is left out, never read"
    status = subprocess.run(["git", "status", "--porcelain"], cwd=copy, capture_output=True, text=True, check=True)
    assert sorted(status.stdout.split("\n")[:-1]) == ["?? .gitignore", "?? new.py", "?? poetry.lock", "?? run.sh"], \
        "the copy is the run's repository as it stands: git answers there as in the worktree"


def test_a_check_writes_into_its_copy_never_the_worktree(git_workspace: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "bench"
    check = verify("echo made > made.txt && ls && test -f README.md", git_workspace, scratch=scratch)
    assert check.passed and check.exit_code == 0 and "made.txt" in check.tail
    assert not (git_workspace / "made.txt").exists() and list(scratch.iterdir()) == [], "the copy is removed after"
    assert check.summary() == "verify `echo made > made.txt && ls && test -f README.md` exited 0"


def test_a_failing_check_says_its_exit_code_and_tail(git_workspace: Path, tmp_path: Path) -> None:
    check = verify("echo out; echo err >&2; exit 3", git_workspace, scratch=tmp_path)
    assert (check.passed, check.exit_code, check.timed_out) == (False, 3, False)
    assert check.tail == "out\nerr" and check.summary().endswith("exited 3")
    evidence = check.evidence()
    assert (evidence.summary, evidence.detail, evidence.passed) == (check.summary(), "out\nerr", False)
    assert check.payload()["exit_code"] == 3 and check.payload()["tail"] == "out\nerr"


def test_a_check_past_its_timeout_is_killed_with_everything_it_started(tmp_path: Path) -> None:
    check = run_check("sleep 300 & echo $!; echo started; wait", tmp_path, timeout_s=1)
    assert check.timed_out and check.exit_code is None and not check.passed
    assert check.summary() == "verify `sleep 300 & echo $!; echo started; wait` timed out after 1 s (stopped)"
    pid = int(check.tail.split("\n")[0])
    assert _gone(pid), "the whole process group went at the timeout"


def test_what_a_check_leaves_running_neither_holds_it_up_nor_outlives_it(tmp_path: Path) -> None:
    check = run_check("sleep 300 & echo $!", tmp_path, timeout_s=120)
    assert check.exit_code == 0 and not check.timed_out, "the shell's end is the check's end"
    assert _gone(int(check.tail)), "the server a test forgot is stopped"


def test_the_tail_is_the_last_lines_and_bytes_cleaned_for_a_terminal(tmp_path: Path) -> None:
    many = run_check("i=0; while [ $i -lt 1000 ]; do echo line $i; i=$((i+1)); done; exit 1", tmp_path)
    lines = many.tail.split("\n")
    assert lines[0] == "…" and lines[1:] == [f"line {i}" for i in range(1000 - TAIL_LINES, 1000)]
    wide = run_check("head -c 200000 /dev/zero | tr '\\0' 'x'; printf '\\033[31mred\\033[0m\\r\\n\\007end'", tmp_path)
    assert wide.tail.endswith("xred\nend") and len(wide.tail.encode()) <= TAIL_BYTES
    assert "\x1b" not in wide.tail and "\x07" not in wide.tail and wide.tail.startswith("…\n")
    cut = tail_of("é".encode() * 5000, max_bytes=104)
    assert cut == "…\n" + "é" * 50, "cut on a character, the mark counted in the bytes"


def test_a_check_that_cannot_start_or_copy_says_why(tmp_path: Path) -> None:
    missing = verify("true", tmp_path / "no-such-worktree", scratch=tmp_path / "bench")
    assert missing.exit_code is None and not missing.passed
    assert missing.summary().startswith("verify `true` could not run: the worktree could not be copied for the check")
    assert list((tmp_path / "bench").iterdir()) == []
    nowhere = run_check("true", tmp_path / "gone")
    assert nowhere.summary().startswith("verify `true` could not run: cannot start `sh` in")


def test_the_check_does_not_see_the_runs_model_credentials(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "run-token")
    monkeypatch.setenv("TEAM_SETTING", "kept")
    check = run_check("echo key=${ANTHROPIC_API_KEY:-none} team=$TEAM_SETTING", tmp_path)
    assert check.tail == "key=none team=kept"


def test_what_vanished_while_it_was_copied_is_not_missed(tmp_path: Path) -> None:
    """The run's checkpoint may commit while the worktree is copied: a file gone meanwhile is not a failed copy."""
    (tmp_path / "kept.py").write_text("x = 1\n")
    errors = [(str(tmp_path / "kept.py"), str(tmp_path / "c" / "kept.py"), "Permission denied"),
              (str(tmp_path / ".git" / "index.lock"), str(tmp_path / "c" / ".git" / "index.lock"), "No such file")]
    assert still_there(errors) == errors[:1]
