"""What gpu-sizer relies on in kopf's private modules, pinned to the release it was written for.

The operator reaches into kopf in three places kopf does not publish: its API client
(``kopf._cogs.clients``, :mod:`gpu_sizer.controller.kube`), ``ToggleSet`` (replaced by
:mod:`gpu_sizer.controller.kopf_fixes`) and the wording of a retried request's log line
(filtered by :mod:`gpu_sizer.controller.log_levels`). pyproject pins kopf to the 1.45 minor; these
tests fail when the installed kopf's code there differs from 1.45.2's, so that an upgrade
re-reads each use (and hack/upstream/'s patches) before the fingerprint is updated. A
fingerprint is the AST of the function (comments and formatting do not count), so only a code
change fails it.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import inspect
import re
from pathlib import Path

import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import api as kopf_api
from kopf._cogs.clients import errors as kopf_errors

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


def _fingerprint(module: object, qualname: str) -> str:
    """sha256 of the AST of ``qualname`` (``Class.method`` or ``function``) in ``module``'s
    source file as installed (not the live object, which kopf_fixes may have replaced)."""
    tree = ast.parse(Path(inspect.getfile(module)).read_text())  # type: ignore[arg-type]
    node: ast.AST = tree
    for part in qualname.split("."):
        node = next(
            n
            for n in ast.iter_child_nodes(node)
            if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.name == part
        )
    return hashlib.sha256(ast.dump(node).encode()).hexdigest()[:16]


def test_kopf_is_the_minor_the_patches_were_written_for() -> None:
    version = importlib.metadata.version("kopf")
    assert version.startswith("1.45."), version
    assert re.search(r'"kopf>=1\.45\.\d+,<1\.46"', PYPROJECT.read_text())


#: ToggleSet 1.45.2: every change of the set calls notify_all (kopf_fixes replaces these three).
TOGGLESET = {
    "ToggleSet.make_toggle": "4453a46d1d6ef812",
    "ToggleSet.drop_toggle": "d91ec97f130fa13c",
    "ToggleSet.drop_toggles": "5f733ee86aa27587",
    "ToggleSet.is_on": "d55057f0a5f1ae47",
    "ToggleSet.wait_for": "7953d9e14d80b2bd",
    "Toggle.turn_to": "0aebc4fb765bfe40",
}
#: The client function and the error mapping gpu_sizer.controller.kube calls into.
CLIENT = {"request": "a8c00ac3ec37ea8e", "errors.check_response": "94d4f64c9efc0995"}


@pytest.mark.parametrize(("qualname", "expected"), TOGGLESET.items())
def test_toggleset_is_1_45_2s(qualname: str, expected: str) -> None:
    assert _fingerprint(aiotoggles, qualname) == expected, (
        f"kopf's {qualname} changed: re-read gpu_sizer/controller/kopf_fixes.py and "
        "hack/upstream/kopf-1.45.2-toggleset-notify-on-change.patch against it"
    )


@pytest.mark.parametrize(("qualname", "expected"), CLIENT.items())
def test_the_private_client_is_1_45_2s(qualname: str, expected: str) -> None:
    module, _, name = qualname.rpartition(".")
    assert _fingerprint(kopf_errors if module else kopf_api, name) == expected, (
        f"kopf's {qualname} changed: re-read gpu_sizer/controller/kube.py (and log_levels.py) "
        "against it"
    )


def test_the_client_takes_what_kube_passes() -> None:
    params = inspect.signature(kopf_api.request).parameters
    for name in ("method", "url", "payload", "headers", "settings", "backoffs", "logger"):
        assert name in params, name
    for cls in (
        "APIError",
        "APINotFoundError",
        "APIConflictError",
        "APIServerError",
        "APITooManyRequestsError",
        "APISessionClosed",
    ):
        assert isinstance(getattr(kopf_errors, cls), type), cls


def test_a_retried_attempt_is_logged_as_log_levels_expects() -> None:
    """log_levels.RetriedThrottling matches this line: ERROR, "failed; will retry:", and the
    exception's repr (APITooManyRequestsError(...))."""
    source = inspect.getsource(kopf_api)
    assert 'logger.error(f"Request attempt {idx} failed; will retry: {what} -> {e!r}")' in source
