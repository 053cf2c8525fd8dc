"""One error root per layer, the tree drawn where a reader looks for it, the builtin mixins kept."""

from __future__ import annotations

import inspect
import types

import pytest

import sandbox.errors
import service.errors
from flower.core.answers import ChannelClosed
from flower.core.errors import FlowerError
from flower.remote import RemoteError


@pytest.mark.parametrize("module, root", [(sandbox.errors, sandbox.errors.SandboxError),
                                          (service.errors, service.errors.ServiceError)])
def test_every_error_of_a_layer_is_under_its_root_and_in_its_drawn_tree(module: types.ModuleType,
                                                                         root: type[Exception]) -> None:
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    assert set(module.__all__) == {c.__name__ for c in classes}
    for cls in classes:
        assert issubclass(cls, root), cls
        assert f"{cls.__name__}  " in (module.__doc__ or "") or f"{cls.__name__}\n" in (module.__doc__ or ""), \
            f"{cls.__name__} is missing from the tree in the module docstring"


def test_the_builtin_mixins_stay_and_the_names_are_where_they_were() -> None:
    from sandbox.backends.base import BackendError
    from sandbox.runfiles import RunFileError
    from sandbox.worktree import BranchExists, NotAGitRepo
    from service.tenants import TenantError

    assert issubclass(NotAGitRepo, ValueError) and issubclass(BranchExists, sandbox.errors.WorktreeError)
    assert issubclass(RunFileError, OSError) and RunFileError(2, "x").errno == 2
    assert issubclass(BackendError, RuntimeError) and issubclass(sandbox.errors.BackendUnavailable, BackendError)
    assert issubclass(TenantError, ValueError) and issubclass(service.errors.ServiceConfigError, ValueError)
    assert not issubclass(service.errors.ServiceConfigError, FlowerError), "the service's config error is its own"


def test_the_librarys_errors_are_all_under_flower_error() -> None:
    from flower.remote.url import BadSetting

    assert issubclass(ChannelClosed, FlowerError) and issubclass(RemoteError, FlowerError)
    assert issubclass(BadSetting, FlowerError) and issubclass(BadSetting, ValueError)
    assert RemoteError(404, "gone").status == 404
