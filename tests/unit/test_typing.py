"""mypy --strict over flower/, sandbox/ and service/ is clean (configuration: [tool.mypy] in pyproject.toml); CI runs this test."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_strict_is_clean_over_flower_sandbox_and_service() -> None:
    cache = Path(tempfile.gettempdir()) / "flower-mypy-cache"
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout


def test_a_name_flower_does_not_export_is_a_type_error() -> None:
    """The lazy ``__getattr__`` is hidden from the type checker: it would make every name importable."""
    cache = Path(tempfile.gettempdir()) / "flower-mypy-cache"
    with tempfile.TemporaryDirectory() as tmp:
        snippet = Path(tmp) / "uses_flower.py"
        snippet.write_text("from flower import Runtime, Workflow\nfrom flower import NoSuchName\n"
                           "from flower.workflow import NoSuchStep\n")
        done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), str(snippet)],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert [e.split(":")[1] for e in errors] == ["2", "3"], done.stdout + done.stderr
    assert '"NoSuchName"' in errors[0] and '"NoSuchStep"' in errors[1]


def test_every_public_annotation_resolves_at_run_time() -> None:
    """``typing.get_type_hints`` on each public class, its methods and each public function: no name is left
    behind ``if TYPE_CHECKING`` (``Workflow.channel`` once was)."""
    import inspect
    import typing

    import flower
    import flower.store
    import flower.workflow

    checked = 0
    for module in (flower, flower.workflow, flower.store):
        for name in module.__all__:
            obj = getattr(module, name)
            targets = [obj, *(v for v in vars(obj).values() if inspect.isfunction(v))] if inspect.isclass(obj) \
                else [obj] if inspect.isfunction(obj) else []
            for target in targets:
                typing.get_type_hints(target)
                checked += 1
    assert checked > 100
