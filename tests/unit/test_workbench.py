"""Workbench: layout, self-descriptions, the index and the prompt block."""

from __future__ import annotations

from pathlib import Path

from flower.core.workbench import Workbench


def make(wb: Workbench, rel: str, text: str) -> Path:
    p = wb.root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_layout_defaults(tmp_path: Path):
    wb = Workbench(tmp_path)
    assert wb.dirname == ".flower" and wb.max_index_entries == 40 and wb.home is None
    assert wb.root == tmp_path.resolve() / ".flower"
    assert (wb.scripts, wb.artifacts, wb.notes) == (wb.root / "scripts", wb.root / "artifacts", wb.root / "notes")
    assert wb.index_path == wb.root / "INDEX.md"
    assert not wb.external
    assert not wb.root.exists()  # constructing writes nothing
    assert wb.ensure() is wb and wb.scripts.is_dir() and wb.artifacts.is_dir() and wb.notes.is_dir()


def test_home_overrides_dirname_and_is_external(tmp_path: Path):
    wb = Workbench(tmp_path / "ws", dirname="ignored", home=tmp_path / "bench")
    assert wb.root == (tmp_path / "bench").resolve() and wb.external
    assert wb.show(wb.artifacts) == str(wb.artifacts)
    inner = Workbench(tmp_path, home=tmp_path / "inside")
    assert not inner.external and inner.show(inner.artifacts) == "inside/artifacts"
    assert Workbench(str(tmp_path)).workspace == tmp_path.resolve()  # str accepted, resolved


def test_descriptions(tmp_path: Path):
    wb = Workbench(tmp_path)
    make(wb, "scripts/a.py", "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\nimport os\n# desc: 跑全部测试\n")
    make(wb, "scripts/b.js", "'use strict'\n// desc: 打包前端\n")
    make(wb, "scripts/c.sql", "-- desc: 统计订单\nselect 1;\n")
    make(wb, "scripts/d.sh", "#!/bin/sh\n# 清理构建目录\nrm -rf build\n")
    make(wb, "scripts/e.py", '"""生成报表。"""\nimport csv\n')
    make(wb, "scripts/f.py", '"""\n多行文档的第一行\n更多\n"""\n')
    make(wb, "scripts/g.py", "x = 1\n" * 8 + "# desc: 太晚了\n")
    make(wb, "scripts/h.py", "# desc: " + "长" * 150 + "\n")
    make(wb, "scripts/i.bin", "\x00\x01binary")
    make(wb, "scripts/.hidden.py", "# desc: 不该出现\n")
    got = {Path(p).name: (d, n) for p, d, n in wb.scan(wb.scripts)}
    assert got["a.py"][0] == "跑全部测试"
    assert got["b.js"][0] == "打包前端"
    assert got["c.sql"][0] == "统计订单"
    assert got["d.sh"][0] == "清理构建目录"
    assert got["e.py"][0] == "生成报表。"
    assert got["f.py"][0] == "多行文档的第一行"
    assert got["g.py"][0] == ""  # the marker must be within the first 8 lines
    assert got["h.py"][0] == "长" * 100
    assert got["i.bin"][0] == ""
    assert ".hidden.py" not in got
    assert got["c.sql"][1] == len("-- desc: 统计订单\nselect 1;\n".encode())
    assert wb.scan(wb.root / "missing") == []


def test_refresh_writes_every_entry(tmp_path: Path):
    wb = Workbench(tmp_path, max_index_entries=2)
    for i in range(5):
        make(wb, f"scripts/s{i}.sh", f"# desc: 脚本{i}\n")
    make(wb, "notes/用 sqlite.md", "# 决定:用 SQLite 存会话\n")
    make(wb, "artifacts/report.txt", "x" * 3000)
    text = wb.refresh()
    assert wb.index_path.read_text() == text
    assert all(f"脚本{i}" in text for i in range(5))  # INDEX.md itself is unbounded
    assert "决定:用 SQLite 存会话" in text and ".flower/artifacts/report.txt" in text and "3000B" in text


def test_refresh_leaves_an_unchanged_index_alone(tmp_path: Path):
    wb = Workbench(tmp_path)
    make(wb, "scripts/a.sh", "# desc: 甲\n")
    first = wb.refresh()
    inode = wb.index_path.stat().st_ino
    assert wb.refresh() == first and wb.index_path.stat().st_ino == inode  # same text: not rewritten
    make(wb, "scripts/b.sh", "# desc: 乙\n")
    assert "乙" in wb.refresh() and "乙" in wb.index_path.read_text() and wb.index_path.stat().st_ino != inode
    wb.index_path.write_text("stale")
    assert wb.refresh() == wb.index_path.read_text() != "stale"


def test_prompt_block_rules_and_bounded_index(tmp_path: Path):
    wb = Workbench(tmp_path, max_index_entries=2)
    for i in range(5):
        make(wb, f"scripts/s{i}.sh", f"# desc: 脚本{i}\n")
    block = wb.prompt_block()
    assert "`.flower/scripts/`" in block and "# desc:" in block
    assert "2000" in block and "`.flower/artifacts/`" in block and "路径和结论" in block
    assert "`.flower/notes/`" in block and "一个决定一个文件" in block
    assert "绝对路径" not in block.split("三条规矩")[1]
    assert "脚本0" in block and "脚本1" in block and "脚本2" not in block and "还有 3 个" in block
    assert not wb.index_path.exists()  # the prompt block only reads


def test_prompt_block_external_says_absolute_paths(tmp_path: Path):
    wb = Workbench(tmp_path / "ws", home=tmp_path / "bench")
    make(wb, "notes/n.md", "# 选了方案 B\n")
    block = wb.prompt_block()
    assert "一律用绝对路径" in block
    assert f"`{wb.artifacts}/`" in block and "选了方案 B" in block
