"""Turn a topology into running containers: plan it, start it, shape its links, remove it."""

from emu.cluster.engine import Cluster, ClusterError, ExecResult
from emu.cluster.plan import ClusterPlan, ContainerPlan, LinkPlan, path_shape, plan_cluster
from emu.engines.base import NodeStatus, Removed

__all__ = [
    "Cluster",
    "ClusterError",
    "ClusterPlan",
    "ContainerPlan",
    "ExecResult",
    "LinkPlan",
    "NodeStatus",
    "Removed",
    "path_shape",
    "plan_cluster",
]
