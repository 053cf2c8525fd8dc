"""bench/sidebyside.py: its summary read from real outputs of the two benches the issue compares, its base tree.

fixtures/bench/ holds what the benches printed on this machine, captured by the side-by-side runs:
    python -m bench.sidebyside --base HEAD --rounds 1 -- bench.gateway --rps 100 --seconds 1 --rounds 1
    python -m bench.sidebyside --base HEAD --rounds 1 -- bench.registry --seconds 1 --runs 20 --live 5
and ``bench.gateway --rps 100 --seconds 1 --metered`` (gateway_metered.txt).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.sidebyside import (
    ROOT,
    SLOT,
    Line,
    UsageError,
    _bench_args,
    base_tree,
    check_imports,
    compare,
    figures,
    table,
)

OUT = Path(__file__).parent / "fixtures" / "bench"


def _read(name: str) -> str:
    return (OUT / f"{name}.txt").read_text()


def _line(lines: list[Line], start: str) -> Line:
    [found] = [ln for ln in lines if ln.text.startswith(start)]
    return found


def _ratios(line: Line) -> list[float | None]:
    return [None if f.ratio is None else round(f.ratio, 3) for f in line.figures]


def test_figures_reads_each_number_as_printed_not_the_digits_of_a_name() -> None:
    got = figures(_read("registry_base"))
    [claim] = [v for k, v in got.items() if k.startswith("enqueue→claim on SQLite")]
    assert claim[:4] == ("2", "5.9", "21.2", "23.4")  # "2 replicas", then p50/p99/max: not the 50 of p50
    assert got[f"transitions on SQLite {SLOT} writes/s {SLOT}x of pgbench TPS {SLOT}x of psycopg's goal >= {SLOT} of "
               f"pgbench ({SLOT} lifecycles/s × {SLOT} writes)"] == ("2,302", "0.31", "0.18", "0.50", "230", "10")
    added = figures(_read("gateway_metered"))
    assert added[f"added by the gateway: p50 {SLOT} ms, p99 {SLOT} ms (p50 {SLOT}x direct); target p50 <= {SLOT} ms, "
                 f"p99 <= {SLOT} ms"] == ("1.58", "-10.45", "1.83", "1", "5")
    assert not any(k.startswith("path") for k in added)  # a heading: no numbers, no figure


def test_gateway_summary_gives_each_percentile_both_medians_and_their_ratio() -> None:
    lines = compare([_read("gateway_base")], [_read("gateway_this")])
    gateway = _line(lines, "gateway ")
    assert gateway.text == "gateway [1] [2] 200"  # the request count, the same in both, stays in the text
    assert [(f.base, f.this) for f in gateway.figures] == [(2.63, 2.90), (7.39, 34.22)]
    assert _ratios(gateway) == [round(2.90 / 2.63, 3), round(34.22 / 7.39, 3)]
    added = _line(lines, "added by the gateway:")
    assert added.text == ("added by the gateway: p50 [1] ms, p99 [2] ms (p50 [3]x direct); "
                          "target p50 <= 1 ms, p99 <= 5 ms")
    assert _ratios(added) == [round(1.07 / 1.03, 3), round(27.35 / 2.21, 3), round(1.58 / 1.64, 3)]
    text = table(lines)
    assert "gateway [1] [2] 200\n   [1]          2.63            2.9      1.103\n" in text
    assert "   [2]          7.39          34.22      4.631\n" in text


def test_registry_summary_reads_thousands_and_keeps_a_sign_that_is_not_the_numbers() -> None:
    lines = compare([_read("registry_base")], [_read("registry_this")])
    pg = _line(lines, "transitions on PostgreSQL")
    assert (pg.figures[0].base, pg.figures[0].this) == (1221.0, 949.0)
    assert _ratios(pg)[0] == round(949 / 1221, 3)
    assert "goal >= 0.50 of pgbench" in pg.text and "× 10 writes" in pg.text
    memory = _line(lines, "memory of a replica on SQLite")
    assert "(+[7] PSS)" in memory.text and (memory.figures[6].base, memory.figures[6].this) == (0.6, 0.5)
    assert len(lines) == 9  # every line of the registry bench is a figure line on both sides
    assert "   [1]         1,221            949      0.777" in table(lines)


def test_medians_over_rounds_and_lines_one_side_never_printed_are_left_out() -> None:
    base = [_read("gateway_base"), _read("gateway_this"), _read("gateway_metered")]
    lines = compare(base, [_read("gateway_base")])
    direct = _line(lines, "direct ")
    assert (direct.figures[0].base, direct.figures[1].base) == (1.83, 6.87)  # medians of 1.61/1.83/1.90 and 5.18/…
    assert (direct.figures[0].this, direct.figures[1].this) == (1.61, 5.18)
    assert not [ln for ln in lines if ln.text.startswith(("metered", "added by the gateway with a budget"))]


def test_a_ratio_only_of_a_positive_base_and_no_common_lines_says_so() -> None:
    lines = compare([_read("gateway_metered")], [_read("gateway_base")])
    added = _line(lines, "added by the gateway:")
    assert added.figures[1].base == -10.45 and _ratios(added)[1] is None
    assert "n/a" in table(lines)
    assert table(compare([_read("registry_base")], [_read("gateway_base")])) == "(no common figures)"
    assert table(compare(["no numbers here"], [""])) == "(no common figures)"


@pytest.mark.parametrize("argv, says", [
    (["--rounds", "2", "--", "bench.gateway"], "--base REF"),
    (["--base", "main"], "name the bench module after --"),
    (["--base", "main", "--rounds", "0", "--", "bench.gateway"], "whole number"),
    (["--base", "main", "--seconds", "5", "--", "bench.gateway"], "unknown or incomplete option '--seconds'"),
])
def test_bad_arguments_say_what_to_do(argv: list[str], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        _bench_args(argv)


def test_arguments_after_the_separator_are_the_bench_s() -> None:
    assert _bench_args(["--base", "main", "--", "bench/registry.py", "--rounds", "1"]) == \
        ("main", 3, ["bench.registry", "--rounds", "1"])


def _worktrees() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout


def test_base_tree_imports_its_own_packages_and_is_removed_even_on_an_error() -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    with pytest.raises(RuntimeError), base_tree("HEAD") as (tree, commit):
        assert commit == head.strip() and str(tree) in _worktrees()
        check_imports(tree)  # service, sandbox, flower, bench from the base tree, not this one
        raise RuntimeError("the bench broke")
    assert not tree.exists() and str(tree) not in _worktrees()
    with pytest.raises(UsageError, match="names no commit"), base_tree("no-such-ref-anywhere"):
        pass
