"""The Docker Engine for the container tests: a client, or a skip that says why there is none."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from emu.engines.docker.image_store import DOCKER_TIMEOUT_S

if TYPE_CHECKING:
    import docker


def docker_engine(why_root: str = "containers need root here",
                  max_pool_size: int = 24) -> docker.DockerClient:
    """A client of a running engine; skips the test when not root, without the SDK, or when
    no engine answers."""
    if os.geteuid() != 0:
        pytest.skip(why_root)
    docker = pytest.importorskip("docker", reason="the docker SDK is not installed")
    try:
        client = docker.from_env(timeout=DOCKER_TIMEOUT_S, max_pool_size=max_pool_size)
        client.ping()
    except docker.errors.DockerException as error:
        pytest.skip(f"no Docker Engine: {error}")
    return client
