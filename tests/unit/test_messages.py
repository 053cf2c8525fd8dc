"""The message catalogue: one table, two languages, the language picked from the environment, and the
seed's contract strings (step names, document titles, file names) the same in both."""

from __future__ import annotations

import re
import string

import pytest

from flower.cli import messages
from flower.cli.messages import MESSAGES, language, t

CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef「」]")
CONTRACT = ("需求.md", "目标.md", "问答记录.md", "确认需求", "设定目标", "工作", "判定", "未知与假设", "达成")
"""Seed-fixed words an English line may still carry (passed in as fields, or named for what they are)."""


def _fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


@pytest.mark.parametrize("env, lang", [
    ({}, "en"), ({"LANG": "C.UTF-8"}, "en"), ({"LANG": "zh_CN.UTF-8"}, "zh"), ({"LC_ALL": "zh_TW"}, "zh"),
    ({"LANG": "zh_CN.UTF-8", "LC_ALL": "C"}, "en"), ({"LANG": "C", "FLOWER_LANG": "zh"}, "zh"),
    ({"LANG": "zh_CN.UTF-8", "FLOWER_LANG": "en"}, "en"), ({"LC_MESSAGES": "zh_CN.UTF-8"}, "zh"),
    ({"LANG": "", "LC_ALL": "", "FLOWER_LANG": ""}, "en"),
])
def test_the_language_comes_from_flower_lang_then_the_locale(env, lang):
    assert language(env) == lang


@pytest.mark.parametrize("key", sorted(MESSAGES))
def test_every_key_in_both_languages_with_the_same_fields_and_no_mixed_language(key):
    en, zh = MESSAGES[key]
    assert en.strip() or zh.strip(), key
    # {s} is English's plural ending, made from {n} by t() itself; Chinese has none
    assert _fields(en) == _fields(zh) or (_fields(en) - {"s"} == _fields(zh) and "n" in _fields(en)), \
        f"{key}: the two languages take different fields"
    bare = en
    for word in CONTRACT:
        bare = bare.replace(word, "")
    assert not CJK.search(bare), f"{key}: Chinese in the English text: {en!r}"
    letters = re.sub(r"\{[^}]*\}|[^A-Za-z]", "", zh)
    if CJK.search(en) is None and len(re.sub(r"\{[^}]*\}|[^A-Za-z]", "", en)) > 12:
        assert CJK.search(zh), f"{key}: the Chinese text is not Chinese: {zh!r}"
        assert letters != re.sub(r"\{[^}]*\}|[^A-Za-z]", "", en), f"{key}: the Chinese text is the English one"


def test_t_follows_the_environment_at_each_call(monkeypatch):
    for var in messages.LANG_VARS:
        monkeypatch.delenv(var, raising=False)
    assert t("go.empty_ask").startswith("the ask is empty")
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert t("go.empty_ask").startswith("诉求是空的")
    assert t("status.continue", n=2) == "接着上次(第 2 次唤醒)"


def test_no_cli_module_says_a_chinese_word_outside_the_catalogue():
    """Every line a person reads comes from the catalogue; Chinese left in flower/cli is model-facing
    (the oracle's prompt) or a contract name (steps, files)."""
    from pathlib import Path

    allowed = {"oracle.py": ("ORACLE_PROMPT", "什么都没有", "没有事件记录", "旁路问答"),
               "state.py": ("交接-*.md",), "screen.py": ("·判定#", "结论", "step·判定#1"),
               "demo.py": ("## 结论", "达成")}  # the demo's scripted documents: headings the reference fixes
    root = Path(messages.__file__).parent
    for path in sorted(root.glob("*.py")):
        if path.name in ("messages.py", "__init__.py"):
            continue
        in_prompt = False
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("ORACLE_PROMPT"):
                in_prompt = True
            if in_prompt:
                in_prompt = not line.rstrip().endswith('"""') or line.startswith("ORACLE_PROMPT")
                continue
            code = line.split("  # ")[0].replace("？", "")  # the full-width question mark a side question may start with
            if code.lstrip().startswith("#") or '"""' in code or "``" in code:
                continue  # comments and docstrings are for the code's readers
            if CJK.search(code) and not any(a in code for a in allowed.get(path.name, ())):
                raise AssertionError(f"{path.name}:{n} has words outside the catalogue: {line.strip()}")
