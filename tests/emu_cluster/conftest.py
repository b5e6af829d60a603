"""The Docker Engine the cluster tests share."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.engine import docker_engine

if TYPE_CHECKING:
    import docker


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    return docker_engine()
