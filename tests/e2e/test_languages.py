"""English that is English and Chinese that is Chinese, through the real commands (issue 24): under ``LANG=C.UTF-8``
a local ``flower`` run (the real CLI, the scripted model), ``flower status`` and ``flower check`` show Chinese only
inside a gloss of a name the reference fixes or in the run's own text; under ``FLOWER_LANG=zh`` ``flower check``
(credentials and ``--guards``) and ``flower remote`` speak Chinese. The service's screens: tests/service/
test_languages.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))  # the detector, shared with the service's
from _languages import chinese, guarded_rules, model_text, strays
from flower.testing import ScriptedModel
from test_cli import _env, _folders, flower

pytestmark = pytest.mark.cli

ASK = "帮我做一个 hello 程序"
ENGLISH = {"FLOWER_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "C.UTF-8"}


def test_an_english_screen_shows_chinese_only_in_glosses_and_in_the_runs_own_text(tmp_path: Path):
    home, ws = _folders(tmp_path)
    with ScriptedModel(guarded_rules(ASK)) as model:
        env = _env(model, home, **ENGLISH)
        go = flower(ASK, "--timeout", "0", cwd=ws, env=env)
        status = flower("status", cwd=ws, env=env)
    check = flower("check", cwd=ws, env=_env(None, home, **ENGLISH))
    assert go.returncode == 0, go.stdout[-3000:] + go.stderr[-3000:]
    assert check.returncode == 2, check.stderr
    screen = "\n".join(p.stdout + p.stderr for p in (go, status, check))
    assert strays(screen, model_text(ASK)) == [], screen
    for told in ("== 确认需求 (clarify) · step 1 of 3", "+ 设定目标 (set the goal) · ", "== 工作 (work) · step 3 of 3",
                 "- 工作·判定#1 (work, verdict 1): an independent verdict",
                 "! guard stopped coordinator's Write: the coordinator does not do the work itself",
                 "需求.md (the requirement)", "目标.md (the goal)", "+ 工作·判定#1 (work, verdict 1) $",
                 "No Anthropic credentials found"):
        assert told in screen, (told, screen)
    # the guard's own sentence went to the model, as the reference wrote it, and is not drawn twice
    assert any("协调者不亲自动手" in r.result_text for r in model.conversation)
    assert "协调者" not in screen and not (ws / "boss.txt").exists()


ENGLISH_WORDS = re.compile(r"\b[a-z]{2,} [a-z]{2,} [a-z]{2,}\b")
"""Three English words in a row: a sentence of ours left in English."""


def english_sentences(text: str) -> list[str]:
    """Lines that still say something in English, once the names that stay as they are (paths, flags, env names,
    commands, the CLI's own words like setting_sources) are taken out."""
    names = re.compile(r"\S*[/\\~=]\S*|`[^`]*`|flower( \w+)?|--?[\w-]+|\b[A-Z_][A-Z_0-9]+\b|\{[^}]*\}|git \w+"
                       r"|https?\S*")
    return [line for line in text.splitlines() if ENGLISH_WORDS.search(names.sub(" ", line))]


def test_under_flower_lang_zh_check_and_remote_speak_chinese(tmp_path: Path):
    home, ws = _folders(tmp_path)
    env = _env(None, home, FLOWER_LANG="zh")
    runs = {"check": flower("check", cwd=ws, env=env),
            "check --guards": flower("check", "--guards", cwd=ws, env=env, timeout=300),
            "remote list": flower("remote", "list", cwd=ws, env=env),
            "remote bad url": flower("remote", "--server", "ftp://x", "--token", "t", "list", cwd=ws, env=env),
            "remote --help": flower("remote", "--help", cwd=ws, env=env),
            "remote logs --help": flower("remote", "logs", "--help", cwd=ws, env=env)}
    assert runs["check --guards"].returncode == 0, runs["check --guards"].stdout + runs["check --guards"].stderr
    assert runs["check --guards"].stdout.count("✓") == 5
    for what, p in runs.items():
        out = p.stdout + p.stderr
        assert chinese(out), (what, out)
        assert english_sentences(out) == [], (what, out)
    assert "没找到 Anthropic 凭证" in runs["check"].stderr and "进程环境" in runs["check"].stderr
    assert "没有服务地址" in runs["remote list"].stderr
    assert "协调者的 Write 被拦下" in runs["check --guards"].stdout


def test_the_commit_of_a_runs_work_is_in_the_runs_language(monkeypatch):
    from sandbox.entrypoint import commit_message

    monkeypatch.setenv("FLOWER_LANG", "zh")
    assert commit_message("r1", "工作") == "flower 运行 r1:到步骤 工作 为止的成果"
    monkeypatch.setenv("FLOWER_LANG", "en")
    assert commit_message("r1", "工作·判定#1") == "flower run r1: the work up to step 工作·判定#1 (work, verdict 1)"
    assert strays(commit_message("r1", "确认需求") + "\n" + commit_message("r1", "end"), []) == []


def test_the_detector_allows_exactly_the_catalogues_glosses():
    from _languages import GLOSSARY
    from flower.cli import messages

    assert GLOSSARY == messages.GLOSSARY
    web = (Path(__file__).resolve().parents[2] / "service" / "web" / "messages.js").read_text(encoding="utf-8")
    assert all(f'"{word}": "{meaning}"' in web for word, meaning in GLOSSARY.items())
    assert strays("verdict: 达成\n== 工作 (1/3)\n工作 (work)\nachieved (达成)\n  达成", ["## 结论\n达成"]) == \
        ["verdict: 达成", "== 工作 (1/3)"]
