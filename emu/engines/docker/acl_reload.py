"""A closed cluster's brokers on this host's Docker Engine, for its run-time grants
(emu.cluster.grants): found by the cluster's labels, and given a new ACL that each reads again.

The grants decide (an open cluster, a broker that is not Mosquitto); this module lists the
cluster's broker containers (`listed_brokers`, what emu.cluster.grants.FoundBrokers asks) and
writes their ACL (`ContainerBrokers`): the file put into each container (0644, as the plan
wrote it) and SIGHUP sent (the engine's kill).
"""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from emu.cluster.access import ACL_FILE, Access
from emu.cluster.grants import Brokers, GrantError, Grants, at_once
from emu.cluster.plan import MQTT_PORT
from emu.engines.docker import inventory

if TYPE_CHECKING:
    import docker


class ContainerBrokers(Brokers):
    """Mosquitto brokers in containers of one Docker Engine: the ACL put into each
    (put_archive of ACL_FILE, 0644 as the plan wrote it) and SIGHUP sent
    (the engine's kill)."""

    def __init__(self, client, containers: Mapping[str, str], addresses: Mapping[str, str],
                 tls: Any = None) -> None:
        self.client = client
        self.containers = dict(containers)   # broker -> container id
        self._addresses = dict(addresses)    # broker -> host:port the host reaches
        self.tls = tls

    def write(self, text: str) -> None:
        archive = _archive(ACL_FILE, text)
        api = self.client.api

        def reload(broker: str, container: str) -> None:
            try:
                api.put_archive(container, "/", archive)
                api.kill(container, "SIGHUP")
            except Exception as error:  # noqa: BLE001 - named, with the broker
                raise GrantError(f"broker {broker}: the ACL could not be written and "
                                 f"reloaded ({error})") from None

        at_once([lambda b=broker, c=container: reload(b, c)
                 for broker, container in sorted(self.containers.items())])

    def addresses(self) -> list[str]:
        return [self._addresses[b] for b in sorted(self._addresses)]


@dataclass(frozen=True)
class ListedBrokers:
    """A cluster's brokers as this host's engine lists them (emu.cluster.grants.FoundBrokers):
    the cluster's scratch folder, and each broker's image, container and address."""

    client: Any
    cluster: str
    scratch: str | None
    images: dict[str, str]       # broker -> the name of the image it runs
    containers: dict[str, str]   # broker -> container id
    addresses: dict[str, str]    # broker -> host:port the host reaches

    def brokers(self, tls: Any = None) -> ContainerBrokers:
        return ContainerBrokers(self.client, self.containers, self.addresses, tls)


def listed_brokers(client: docker.DockerClient, cluster: str) -> ListedBrokers:
    """The broker containers of a cluster up on this host's engine, by its labels."""
    listed = inventory.containers(client, cluster)
    labels = [summary.get("Labels") or {} for summary in listed]
    scratch = next((lab[inventory.SCRATCH] for lab in labels if lab.get(inventory.SCRATCH)),
                   None)
    images, containers, addresses = {}, {}, {}
    for summary, label in zip(listed, labels, strict=True):
        if label.get("foglab.role") != "broker":
            continue
        network = label.get("foglab.network", "")
        attached = (summary.get("NetworkSettings") or {}).get("Networks") or {}
        ip = (attached.get(network) or {}).get("IPAddress", "")
        images[label["foglab.node"]] = label.get("foglab.image", "")
        containers[label["foglab.node"]] = summary["Id"]
        addresses[label["foglab.node"]] = f"{ip}:{MQTT_PORT}"
    return ListedBrokers(client, cluster, scratch, images, containers, addresses)


def cluster_grants(cluster: str, client: docker.DockerClient | None = None, tls: Any = None,
                   access: Access | None = None) -> Grants | None:
    """The grants of a cluster up on this host's engine (emu.cluster.grants.Grants.of_cluster
    of its brokers as listed here): None for an open cluster, or one whose brokers are not
    Mosquitto. `access`: the cluster's secrets when its plan is at hand."""
    if client is None:
        import docker

        client = docker.from_env()
    return Grants.of_cluster(listed_brokers(client, cluster), tls=tls, access=access)


def _archive(path: str, text: str) -> bytes:
    buffer = io.BytesIO()
    data = text.encode()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(path.lstrip("/"))
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
