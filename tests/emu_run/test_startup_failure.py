"""An agent that exits while the cluster starts fails the run at once, with its own words,
not after the registration timeout; and leaves nothing behind."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

import emu.live.agents
import emu.run.emulate
from emu.engines.docker.engine import Cluster, ClusterError
from experiments.loader import parse_text

pytestmark = [pytest.mark.emu]

EXPERIMENT = """
name: broken
topology:
  name: broken
  nodes:
    - {name: s, kind: device, replicas: 2}
    - {name: gw, kind: gateway, replicas: 2}
    - {name: broker, kind: broker}
  links:
    - {from: s-1, to: gw-1, latency: 2ms}
    - {from: s-2, to: gw-2, latency: 2ms}
    - {from: gw-*, to: broker, latency: 1ms}
workload:
  name: w
  streams: [{name: c, sources: s-*, rate: 2/s}]
pipeline:
  - {name: sink, on: gateways, reads: c}
run: {backend: emu, duration: 10s, seed: 1}
"""


def test_an_agent_that_exits_at_start_fails_the_run_with_its_reason(monkeypatch):
    from engine import docker_engine

    client = docker_engine()
    made = []
    configs = emu.run.emulate.agent_configs

    def broken(*args, **kwargs):  # gw-2's driver asks for a format no agent knows
        found = configs(*args, **kwargs)
        found["gw-2"] = replace(found["gw-2"], drivers=[
            replace(d, format="xml") for d in found["gw-2"].drivers])
        return found

    up = Cluster.up

    def noted(self, *args, **kwargs):
        made.append(self.name)
        return up(self, *args, **kwargs)

    monkeypatch.setattr(emu.run.emulate, "agent_configs", broken)
    monkeypatch.setattr(Cluster, "up", noted)
    point = parse_text(EXPERIMENT).points[0]
    began = time.monotonic()
    # Seen while the cluster starts (its agents must run: ClusterError) or while they register
    # (EmuError), depending on how soon the agent exits: either way the reason, from its log.
    with pytest.raises((emu.run.emulate.EmuError, ClusterError),
                       match=r"(?s)gw-2 .*(exited while the cluster started|ended as it started)"
                             r".*format must be one of"):
        emu.run.emulate.emulate(emu.run.emulate.Request(point.topology, point.spec.workload,
                                        point.spec.pipeline, emu.run.emulate.Timing(10.0), 1))
    assert time.monotonic() - began < emu.live.agents.REGISTER_TIMEOUT_S / 2
    assert client.containers.list(all=True, filters={"label": f"foglab.cluster={made[0]}"}) == []
