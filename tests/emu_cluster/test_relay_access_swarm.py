"""A closed cluster on a one-node swarm: the agents' passwords and ZooKeeper identity, and the
link agents' token, reach them as Docker secrets, not in the services' environment, which
`docker service inspect` and `docker inspect` show to anyone who may use the engine; the
agents still log in and register with them, and `down` removes the secrets."""

from __future__ import annotations

import json
import secrets

import pytest

from emu.cluster.plan import plan_cluster
from emu.engines.swarm.engine import SwarmCluster
from emu.live.agents import wait_agents_registered
from tests.emu_cluster.test_cluster import small_topology
from tests.emu_cluster.test_relay_access import the_runs_secrets
from tests.emu_swarm.test_engine import nothing_left, swarm  # noqa: F401 - the fixture

pytestmark = pytest.mark.emu


def test_a_closed_swarm_keeps_its_secrets_out_of_every_inspect(swarm) -> None:  # noqa: F811
    plan = plan_cluster(small_topology(1), f"sws-{secrets.token_hex(3)}",
                        labels={"foglab.test": "emu_swarm"}, closed=True)
    cluster = SwarmCluster(plan, swarm)
    cluster.up()
    try:
        status = {s.node: s for s in cluster.status()}
        wait_agents_registered(cluster, status, [a.node for a in plan.agents()], timeout=180)
        found = the_runs_secrets(cluster) | {cluster.links.token}
        label = {"label": [f"foglab.cluster={plan.cluster}"]}
        services = swarm.api.services(filters=label)
        assert len(services) == len(plan.containers) + 1  # and the link agents'
        shown = [json.dumps(service["Spec"]) for service in services] + [
            json.dumps(swarm.api.inspect_container(s.container)["Config"])
            for s in status.values()]
        leaked = sorted({secret[:4] + "..." for secret in found for text in shown
                         if secret in text})
        assert leaked == [], f"the swarm's inspects show secrets: {leaked}"
        # The agents' and the token's Docker secrets: one each, which the API never reads back.
        stored = swarm.api.secrets(filters=label)
        assert len(stored) == len(plan.agents()) + 1
        assert all("Data" not in swarm.api.inspect_secret(s["ID"])["Spec"] for s in stored)
    finally:
        cluster.down()
    nothing_left(swarm, plan.cluster)
    assert swarm.api.secrets(filters={"label": [f"foglab.cluster={plan.cluster}"]}) == []
