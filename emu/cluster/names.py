"""The names and labels of a cluster's Docker objects: its containers, its networks and the
labels every object of the cluster carries."""

from __future__ import annotations

import re

# Docker's own rule for container and network names; the length keeps names readable.
CLUSTER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,39}$")


def container_name(cluster: str, node: str) -> str:
    return f"foglab-{cluster}-{node}"


def network_name(cluster: str, segment: str) -> str:
    return f"foglab-{cluster}-{segment}"


def cluster_labels(cluster: str) -> dict[str, str]:
    return {"foglab": "1", "foglab.cluster": cluster}
