"""Remove a Swarm cluster: its services and configs first (Swarm holds their containers and
networks, and removes the containers itself), then what is left, as `foglab emu down`'s
hooks (SwarmCluster.before_remove, after_remove) and SwarmCluster.down do."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from emu.engines.base import ClusterError, Removed
from emu.engines.docker import inventory

if TYPE_CHECKING:
    import docker

REMOVE_RETRY_S = 15
# How long Swarm may take to remove the containers of a cluster's removed services: about 0.2 s
# each on foglab's loaded 2-core host (200 in 40 s).
REMOVE_CONTAINERS_S = 180


def remove_cluster(client: docker.DockerClient, cluster: str) -> Removed:
    """Everything of a cluster by its label: services and configs, then the containers and
    networks left (once Swarm let the networks go); its services counted as containers."""
    services, _ = remove_swarm_objects(client, cluster)
    removed = remove_rest(client, cluster)
    wait_networks_gone(client, cluster)
    return Removed(max(services, removed.containers), removed.networks, removed.scratch,
                   removed.owner_ended)


def remove_swarm_objects(client: docker.DockerClient, cluster: str) -> tuple[int, int]:
    """Remove a cluster's services, wait until Swarm has removed their containers (here: this
    node's), then remove its configs (freed once no service uses them); (services, configs)
    removed, (0, 0) on an engine that is no swarm manager. Removing a task's container
    meanwhile would race Swarm's own removal ("removal already in progress"). What is left
    (networks, a container Swarm did not remove in time) is inventory.remove's, which
    `foglab emu down` runs after this."""
    from docker.errors import APIError, NotFound

    label = {"label": [f"{inventory.CLUSTER}={cluster}"]}
    try:
        services = client.api.services(filters=label)
    except APIError as error:
        if error.status_code == 503:  # not a swarm manager: no services of any cluster here
            return 0, 0
        raise
    for service in services:
        with contextlib.suppress(NotFound):
            client.api.remove_service(service["ID"])
    deadline = time.monotonic() + REMOVE_CONTAINERS_S
    while services and inventory.containers(client, cluster) and time.monotonic() < deadline:
        time.sleep(0.5)
    configs = client.api.configs(filters=label)
    stored = [(client.api.remove_config, c["ID"]) for c in configs] + [
        (client.api.remove_secret, s["ID"]) for s in client.api.secrets(filters=label)]
    deadline = time.monotonic() + REMOVE_RETRY_S
    for remove, stored_id in stored:
        while True:
            try:
                remove(stored_id)
                break
            except NotFound:
                break
            except APIError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    return len(services), len(configs)


def wait_networks_gone(client: docker.DockerClient, cluster: str) -> None:
    """Wait until a cluster's networks are gone: the manager removes a swarm network after
    the API call returned, once its services' tasks have let it go; so `down` returns when
    nothing is left, not before."""
    from docker.errors import APIError, NotFound

    deadline = time.monotonic() + REMOVE_RETRY_S
    while left := inventory.networks(client, cluster):
        if time.monotonic() > deadline:
            raise ClusterError(f"cluster {cluster}: Swarm still holds network(s) "
                               f"{', '.join(n['Name'] for n in left)} {REMOVE_RETRY_S} s after "
                               f"their removal; `foglab emu down --cluster {cluster}` again")
        time.sleep(0.25)
        for network in left:
            with contextlib.suppress(APIError, NotFound):
                client.api.remove_network(network["Id"])


def remove_rest(client: docker.DockerClient, cluster: str) -> Removed:
    """inventory.remove, again if it met a container Swarm was still removing (409)."""
    from docker.errors import APIError

    for attempt in range(3):
        try:
            return inventory.remove(client, cluster, end_owner_process=False)
        except APIError as error:
            if error.status_code != 409 or attempt == 2:
                raise
            time.sleep(2)
    raise AssertionError("unreachable")
