"""Fixtures of the service tests (helpers live in _service_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from _service_helpers import Deployment, Service


@pytest.fixture
def deployment(tmp_path: Path) -> Deployment:
    return Deployment(tmp_path)



@pytest.fixture
def service(deployment: Deployment, services: list[Service]) -> Service:
    s = Service(deployment).start()
    services.append(s)
    return s

