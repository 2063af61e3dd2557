"""Fixtures for the image tests: the images ``hack/build-images.sh`` built, in its buildah store.

Without that store (named in the environment, :mod:`tests.images.buildah`), without root or
without buildah, every test that asks for an image is skipped with the reason; the tests that
read only the Dockerfiles and the chart run everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.images.buildah import (
    ENV_OPERATOR,
    ENV_PROBE,
    HOW_TO_BUILD,
    Container,
    Store,
    unavailable,
)


@pytest.fixture(scope="session")
def store() -> Store:
    why = unavailable()
    if why:
        pytest.skip(why)
    found = Store.from_env()
    if found is None:
        pytest.skip(f"no built images: {HOW_TO_BUILD}")
    return found


def _image(env: str) -> str:
    name = os.environ.get(env, "")
    if not name:
        pytest.skip(f"{env} is not set: {HOW_TO_BUILD}")
    return name


@pytest.fixture(scope="session")
def operator_image(store: Store) -> str:
    return _image(ENV_OPERATOR)


@pytest.fixture(scope="session")
def probe_image(store: Store) -> str:
    return _image(ENV_PROBE)


@pytest.fixture(scope="module")
def operator(store: Store, operator_image: str) -> Iterator[Container]:
    with store.container(operator_image) as ctr:
        yield ctr


@pytest.fixture(scope="module")
def probe(store: Store, probe_image: str) -> Iterator[Container]:
    with store.container(probe_image) as ctr:
        yield ctr
