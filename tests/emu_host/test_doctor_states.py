"""The doctor tells apart why the Docker Engine does not answer (no containers needed)."""

from __future__ import annotations

from emu.host.doctor import docker_state

REFUSED = (None, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.")


def test_nothing_installed() -> None:
    assert docker_state(REFUSED, None, None, []) == "docker.io is not installed"


def test_a_docker_client_without_an_engine_is_not_called_missing_docker() -> None:
    said = docker_state(REFUSED, "/usr/local/bin/docker", None, [])
    assert said.startswith("a docker command exists (/usr/local/bin/docker) but no Docker "
                           "Engine (dockerd) is installed")


def test_an_engine_installed_but_not_running() -> None:
    said = docker_state(REFUSED, "/usr/bin/docker", "/usr/sbin/dockerd", [])
    assert said == "Docker Engine is installed (/usr/sbin/dockerd) but no dockerd is running"


def test_an_engine_that_runs_and_does_not_answer_says_why() -> None:
    said = docker_state((None, "permission denied while trying to connect"), "/usr/bin/docker",
                        "/usr/sbin/dockerd", [4242])
    assert said == ("dockerd runs (pid 4242) but `docker info` fails: permission denied while "
                    "trying to connect")
