"""A real tracing backend on 127.0.0.1 for the traces tests: Arize Phoenix from PyPI, which receives OTLP/HTTP.

**Phoenix 20.26.1** (``arize-phoenix`` on PyPI) is installed once per machine into a venv of its own,
``~/.cache/flower-tests/phoenix-20.26.1`` (``python -m venv`` + ``pip install arize-phoenix==20.26.1``: a few
minutes, ~250 packages; a file lock keeps two sessions from installing at once, and the venv is built aside and
renamed, so an interrupted install is never taken for one). It is started as ``<venv>/bin/python -m
phoenix.server.main serve`` — the module, not the ``phoenix`` script, whose shebang would name the staging path —
with a temporary ``PHOENIX_WORKING_DIR`` (its SQLite database) and both ports chosen per session (up in 15–35 s on
two cores). What worked:
- ``PHOENIX_HOST=127.0.0.1``, ``PHOENIX_PORT`` (the UI, its REST API under ``/v1`` and OTLP/HTTP at
  ``/v1/traces``), ``PHOENIX_GRPC_PORT`` (OTLP/gRPC: unused, but it binds one).
- It reaches the internet on its own unless told not to (seen here: a WASM binary download and a docs MCP client,
  both "Name or service not known"): ``PHOENIX_ALLOW_EXTERNAL_RESOURCES=false``, ``PHOENIX_TELEMETRY_ENABLED=false``,
  ``PHOENIX_DISABLE_AGENT_ASSISTANT=true``, ``PHOENIX_ENABLE_MCP_SERVER=false``,
  ``PHOENIX_ALLOWED_SANDBOX_PROVIDERS=NONE`` silence all of it.
- Spans are read back with ``GET /v1/projects/default/spans?limit=…`` (``data``: name, ``context.trace_id`` and
  ``span_id`` in hex, ``parent_id``, ``attributes`` as a flat map, ``status_code``; ``next_cursor`` pages). A
  span is there about a second after the POST that carried it. Resource attributes are not kept by Phoenix (it
  reads only ``openinference.project.name`` from them), so the tenant's resource attribute is checked against a
  plain OTLP receiver instead (tests/service/test_traces_parts.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from _registries import RegistryDidNotStart, _Process, _run, _spawn, cache_lock, cache_root, free_port

PHOENIX_VERSION = "20.26.1"
PHOENIX_START_S = 180.0  # a cold two-core machine migrates its database first
QUIET = {"PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false", "PHOENIX_TELEMETRY_ENABLED": "false",
         "PHOENIX_DISABLE_AGENT_ASSISTANT": "true", "PHOENIX_ENABLE_MCP_SERVER": "false",
         "PHOENIX_ALLOWED_SANDBOX_PROVIDERS": "NONE"}


def phoenix_python(version: str = PHOENIX_VERSION) -> Path:
    """The python of Phoenix's own venv, installed from PyPI once per machine (by version)."""
    prefix = cache_root() / f"phoenix-{version}"
    python = prefix / "bin" / "python"
    marker = prefix / ".installed"
    if marker.is_file():
        return python
    with cache_lock(f"phoenix-{version}"):
        if marker.is_file():  # another session installed it while this one waited
            return python
        staging = Path(tempfile.mkdtemp(prefix=f".phoenix-{version}-", dir=cache_root()))
        try:
            _run([sys.executable, "-m", "venv", str(staging)], "python -m venv (Phoenix's own)")
            _run([str(staging / "bin" / "python"), "-m", "pip", "install", "-q", f"arize-phoenix=={version}"],
                 f"pip install arize-phoenix=={version}")
            (staging / ".installed").write_text(f"arize-phoenix=={version}\n")
            shutil.rmtree(prefix, ignore_errors=True)
            staging.rename(prefix)  # whole or not at all
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return python


@dataclass
class Phoenix:
    """A running Phoenix: ``url`` is both its OTLP endpoint (``otlp_endpoint``) and its REST API's base."""

    url: str
    process: _Process

    def spans(self, project: str = "default") -> list[dict[str, Any]]:
        """Every span the project holds, oldest pages first."""
        found: list[dict[str, Any]] = []
        cursor = ""
        while True:
            query = urllib.parse.urlencode({"limit": 1000, **({"cursor": cursor} if cursor else {})})
            with urllib.request.urlopen(f"{self.url}/v1/projects/{project}/spans?{query}", timeout=30) as resp:
                page = json.loads(resp.read())
            found += page["data"]
            cursor = page.get("next_cursor") or ""
            if not cursor:
                return found

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        return [s for s in self.spans() if s["context"]["trace_id"] == trace_id]


@contextmanager
def serving_phoenix(root: Path) -> Iterator[Phoenix]:
    python = phoenix_python()
    port, grpc = free_port(), free_port()
    work = root / "phoenix"
    work.mkdir(parents=True)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}, **QUIET,
           "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(grpc),
           "PHOENIX_WORKING_DIR": str(work)}
    server = _spawn([str(python), "-m", "phoenix.server.main", "serve"], root / "phoenix.log", root, env)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + PHOENIX_START_S
        while True:
            if server.proc.poll() is not None:
                raise RegistryDidNotStart(f"Phoenix exited with {server.proc.returncode}:\n{server.tail()}")
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=5).close()
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise RegistryDidNotStart(f"Phoenix did not answer within {PHOENIX_START_S:.0f}s:\n"
                                              f"{server.tail()}") from None
                time.sleep(0.2)
        yield Phoenix(url, server)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    with serving_phoenix(tmp_path_factory.mktemp("phoenix")) as running:
        yield running
