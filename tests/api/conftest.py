"""Fixtures for the API tests."""

from __future__ import annotations

from typing import Any

import pytest
from api_docs import inference_doc, training_doc


@pytest.fixture
def doc() -> dict[str, Any]:
    return inference_doc()


@pytest.fixture
def train_doc() -> dict[str, Any]:
    return training_doc()
