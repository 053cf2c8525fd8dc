"""A bench run side by side against another commit in the same run, so that a refactor's figures are compared with
the ones it started from on the same machine under the same load.

    .venv/bin/python -m bench.sidebyside --base main [--rounds 3] -- bench.gateway --rps 500 --metered --seconds 5
    .venv/bin/python -m bench.sidebyside --base main -- bench.registry --seconds 5

``--base`` (a branch, tag or commit) is checked out into a temporary ``git worktree add --detach``, removed at the
end (Ctrl-C, SIGTERM and errors included). The bench module then runs as a subprocess of this interpreter
(``sys.executable``), alternately from the base tree and from this tree (its working files, uncommitted changes
included): base, this, base, this … for ``--rounds`` rounds, so that a drift of the machine's load hits both. Each
run's cwd and ``PYTHONPATH`` are its own tree, so each imports its own ``service``, ``sandbox``, ``flower`` and
``bench`` (checked before the first round). Every run's output is printed, labelled, and a run that fails stops
it. Then the summary. A figure line is one that both trees print with the same text once its numbers are taken out
(``gateway # # #``, ``transitions on SQLite # writes/s …``); it is shown with ``[k]`` for its k-th compared number,
and for each the base's median over the rounds, this tree's median and this / base (only for a positive base and a
non-negative figure). A number that is the same in every run on both sides (a setting such as ``2 cores``) stays in
the line's text as printed. Prints, never asserts; ``--rounds`` defaults to 3.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("service", "sandbox", "flower", "bench")
# a number standing alone (not the 50 of p50, nor a part of 1.2.3): optional sign, thousands by commas, decimals
NUMBER = re.compile(r"(?<![\w.,])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d.]*\d)")
SLOT = "\0"  # where a number was, in a line's key: a character no bench prints, and not a blank to str.split
STOP_WAIT = 30.0  # seconds a bench is given to clean up (stop its servers) after SIGINT, before SIGKILL


class UsageError(Exception):
    """Bad input: the message is one sentence saying what to do."""


# -- parsing and the summary (pure) ------------------------------------------------------------------------------
def figures(output: str) -> dict[str, tuple[str, ...]]:
    """A bench's numbers by line, as printed: the line with each number as SLOT and blanks collapsed → its numbers.
    A line printed twice keeps both, the second as ``… (2)``."""
    out: dict[str, tuple[str, ...]] = {}
    for line in output.splitlines():
        numbers = tuple(m.group() for m in NUMBER.finditer(line))
        if not numbers:
            continue
        key = " ".join(NUMBER.sub(SLOT, line).split())
        seen, n = key, 1
        while seen in out:
            n += 1
            seen = f"{key} ({n})"
        out[seen] = numbers
    return out


@dataclass(frozen=True)
class Figure:
    """One number of a line both trees print: the medians over the rounds."""

    base: float
    this: float

    @property
    def ratio(self) -> float | None:
        return self.this / self.base if self.base > 0 and self.this >= 0 else None


@dataclass(frozen=True)
class Line:
    """A line both trees print; ``text`` shows its settings and ``[k]`` for each compared number."""

    text: str
    figures: tuple[Figure, ...]


def compare(base: Sequence[str], this: Sequence[str]) -> list[Line]:
    """The lines printed by at least one run on each side, in the base's order; each number's medians."""
    parsed = [figures(o) for o in base], [figures(o) for o in this]
    keys = list(dict.fromkeys(k for f in parsed[0] for k in f))
    lines = []
    for key in keys:
        side_runs = [[tuple(float(n.replace(",", "")) for n in f[key]) for f in side if key in f] for side in parsed]
        if not all(side_runs):
            continue
        runs = side_runs[0] + side_runs[1]
        parts = key.split(SLOT)
        text, compared = parts[0], []
        for i, part in enumerate(parts[1:]):
            if len({r[i] for r in runs}) == 1:  # the same in every run (a setting, mostly): shown as printed
                text += next(f[key] for f in parsed[0] if key in f)[i] + part
                continue
            compared.append(Figure(statistics.median(r[i] for r in side_runs[0]),
                                   statistics.median(r[i] for r in side_runs[1])))
            text += f"[{len(compared)}]" + part
        if compared:
            lines.append(Line(text, tuple(compared)))
    return lines


def table(lines: Sequence[Line], base_name: str = "base", this_name: str = "this") -> str:
    """The summary: each line's text, then per compared number the two medians and this / base."""
    if not lines:
        return "(no common figures)"
    out = [f"{'':6}{base_name:>14} {this_name:>14} {'this/base':>10}"]
    for line in lines:
        out.append(line.text)
        for k, f in enumerate(line.figures, 1):
            ratio = "n/a" if f.ratio is None else f"{f.ratio:.3f}"
            out.append(f"{f'[{k}]':>6}{_number(f.base):>14} {_number(f.this):>14} {ratio:>10}")
    return "\n".join(out)


def _number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


# -- the trees and the runs --------------------------------------------------------------------------------------
def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if done.returncode:
        raise UsageError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


@contextmanager
def base_tree(ref: str) -> Iterator[tuple[Path, str]]:
    """``ref`` checked out in a temporary detached worktree, and its commit; removed on the way out, however."""
    found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                           capture_output=True, text=True)
    if found.returncode:
        raise UsageError(f"--base {ref!r} names no commit in {ROOT}: give a branch, tag or commit, e.g. --base main.")
    commit = found.stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="flower-sidebyside-"))
    tree = tmp / "base"
    try:
        _git("worktree", "add", "--detach", str(tree), commit)
        yield tree, commit
    finally:
        if subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                          capture_output=True).returncode:
            shutil.rmtree(tree, ignore_errors=True)
            subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def check_imports(tree: Path) -> None:
    """Each of PACKAGES imported from ``tree`` is ``tree``'s own (not this tree's by the editable install)."""
    code = "import importlib\nfor p in %r: print(importlib.import_module(p).__file__)" % (PACKAGES,)
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=_env(tree), capture_output=True, text=True)
    if done.returncode:
        raise UsageError(f"importing {', '.join(PACKAGES)} from {tree} failed: {done.stderr.strip().splitlines()[-1]}"
                         " — is the base too old for this bench?")
    for name, file in zip(PACKAGES, done.stdout.splitlines()):
        if not Path(file).resolve().is_relative_to(tree.resolve()):
            raise UsageError(f"{name} imported in {tree} came from {file}: use a venv whose site-packages puts no "
                             "other tree ahead of PYTHONPATH.")


@dataclass(frozen=True)
class Run:
    stdout: str
    stderr: str
    code: int
    seconds: float


def run_bench(tree: Path, bench: Sequence[str]) -> Run:
    """``python -m <bench>`` in ``tree``; on Ctrl-C or an error, SIGINT to its process group (as a terminal's Ctrl-C
    would: the benches stop their servers on it), SIGKILL after STOP_WAIT."""
    t0 = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", *bench], cwd=tree, env=_env(tree), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = child.communicate()
    except BaseException:
        with suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGINT)
        try:
            child.communicate(timeout=STOP_WAIT)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
        raise
    return Run(out, err, child.returncode, time.monotonic() - t0)


def _bench_args(argv: Sequence[str]) -> tuple[str, int, list[str]]:
    """(--base, --rounds, the bench module and its args) from ``--base REF [--rounds N] -- MODULE ARGS…``."""
    usage = "usage: python -m bench.sidebyside --base REF [--rounds N] -- bench.gateway --rps 500 --metered"
    cut = list(argv).index("--") if "--" in argv else len(argv)
    own, bench = list(argv[:cut]), list(argv[cut + 1:])
    base, rounds = None, 3
    while own:
        opt = own.pop(0)
        if opt in ("-h", "--help"):
            print(usage + "\n\n" + __doc__)
            sys.exit(0)
        if opt not in ("--base", "--rounds") or not own:
            raise UsageError(f"unknown or incomplete option {opt!r}; {usage}")
        value = own.pop(0)
        if opt == "--base":
            base = value
        elif value.isdigit() and int(value) > 0:
            rounds = int(value)
        else:
            raise UsageError(f"--rounds takes a whole number of rounds from 1 up, not {value!r}.")
    if base is None:
        raise UsageError(f"say which commit to compare with: --base REF (e.g. --base main); {usage}")
    if not bench:
        raise UsageError(f"name the bench module after --, e.g. {usage.split(' ', 1)[1]}")
    if bench[0].endswith(".py"):  # bench/registry.py, as its docstring runs it → bench.registry
        bench[0] = bench[0].removesuffix(".py").replace("/", ".")
    return base, rounds, bench


def _print_run(label: str, run: Run) -> None:
    print(f"── {label}: {run.seconds:.0f} s" + (f", exit {run.code}" if run.code else "") + " ──")
    print(run.stdout.rstrip())
    if run.stderr.strip():
        print("(stderr)\n" + run.stderr.rstrip())
    sys.stdout.flush()


def main(argv: Sequence[str]) -> None:
    base_ref, rounds, bench = _bench_args(argv)
    head = _git("rev-parse", "--short", "HEAD")
    dirty = " + uncommitted changes" if _git("status", "--porcelain", "--untracked-files=no") else ""
    with base_tree(base_ref) as (tree, commit):
        names = {"base": f"base {base_ref} ({commit[:7]})", "this": f"this tree ({head}{dirty})"}
        trees = {"base": tree, "this": ROOT}
        for t in trees.values():
            check_imports(t)
        print(f"side by side: {' '.join(bench)}; {names['base']} vs {names['this']}; {rounds} round(s), "
              f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}", flush=True)
        outputs: dict[str, list[str]] = {"base": [], "this": []}
        for r in range(1, rounds + 1):
            for side in ("base", "this"):
                run = run_bench(trees[side], bench)
                _print_run(f"round {r} of {rounds} · {names[side]}", run)
                if run.code:
                    raise UsageError(f"the bench failed in {names[side]} (exit {run.code}, its output above): "
                                     "fix it there or pick another --base.")
                outputs[side].append(run.stdout)
    print(f"\n── summary: medians over {rounds} round(s) of {names['base']} and {names['this']} ──")
    print(table(compare(outputs["base"], outputs["this"])))


def _terminated(_sig: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM: the same way out as Ctrl-C, through every finally


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminated)
    try:
        main(sys.argv[1:])
    except UsageError as e:
        sys.exit(str(e))
    except KeyboardInterrupt:
        sys.exit(130)
