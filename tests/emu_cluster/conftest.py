"""The Docker Engine the cluster tests share."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from emu.images import DOCKER_TIMEOUT_S

if TYPE_CHECKING:
    import docker


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    if os.geteuid() != 0:
        pytest.skip("containers need root here")
    docker = pytest.importorskip("docker", reason="the docker SDK is not installed")
    try:
        made = docker.from_env(timeout=DOCKER_TIMEOUT_S, max_pool_size=24)
        made.ping()
    except docker.errors.DockerException as error:
        pytest.skip(f"no Docker Engine: {error}")
    return made
