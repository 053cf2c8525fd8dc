"""Fixtures of the service tests (helpers live in _service_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from _service_helpers import Deployment, Service, stop_services


@pytest.fixture
def deployment(tmp_path: Path) -> Deployment:
    return Deployment(tmp_path)


@pytest.fixture
def services() -> Iterator[list[Service]]:
    """Services started by a test are stopped after it, and every run sandbox they left is ended."""
    started: list[Service] = []
    yield started
    stop_services(started)


@pytest.fixture
def service(deployment: Deployment, services: list[Service]) -> Service:
    s = Service(deployment).start()
    services.append(s)
    return s

