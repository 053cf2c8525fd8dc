"""Real-CLI fixtures: a scripted model whose env the whole process (and so the CLI) sees."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import pytest

from flower.testing import Rule, ScriptedModel


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch):
    """`with scripted(rules) as model:` — credentials and base URL set as a user would set them."""

    @contextmanager
    def start(rules: list[Rule], **kw) -> Iterator[ScriptedModel]:
        with ScriptedModel(rules, **kw) as model:
            for key, value in model.env.items():
                monkeypatch.setenv(key, value)
            yield model

    return start
