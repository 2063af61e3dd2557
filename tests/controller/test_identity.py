"""The operator's kopf identity never needs a passwd entry for its user id."""

from __future__ import annotations

import getpass
import re

import pytest

from gpu_sizer.controller.identity import operator_identity


def test_pod_id_then_pod_name() -> None:
    assert operator_identity({"POD_ID": "a", "POD_NAME": "b"}) == "a"
    assert operator_identity({"POD_NAME": "gs-gpu-sizer-7d9f-x2"}) == "gs-gpu-sizer-7d9f-x2"
    assert operator_identity({"POD_NAME": " "}) != " "


def test_a_user_id_without_a_passwd_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a pod whose runAsUser the image does not list: getpass raises KeyError (kopf's
    own detect_own_id then kills the operator at start-up)."""

    def no_entry() -> str:
        raise KeyError("getpwuid(): uid not found: 1000650000")

    monkeypatch.setattr(getpass, "getuser", no_entry)
    monkeypatch.setattr("os.getuid", lambda: 1000650000)
    assert re.fullmatch(r"uid1000650000@[^/]+/\d{14}/[0-9a-f]{4}", operator_identity({}))


def test_named_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(getpass, "getuser", lambda: "alice")
    assert operator_identity({}).startswith("alice@")
