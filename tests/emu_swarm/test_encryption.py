"""`run.swarm_encrypted`: the experiment's switch reaches the overlay network's options
(`--opt encrypted`), is refused on engine docker naming the field, and on this host, whose
kernel has no ESP, a run asking for it is refused before anything starts, naming the field and
what the kernel answered (a real probe: an IPsec state added in a namespace of its own)."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

import emu.run.emulate
from emu.cluster.plan import plan_cluster
from emu.engines import ENGINE_LABEL, engine_options
from emu.engines.base import Made
from emu.engines.swarm import ipsec
from emu.engines.swarm.engine import RELAY_SHAPER, SwarmCluster, check_encryption
from experiments.loader import parse_text
from experiments.runner import run_experiment
from tests.emu_cluster.test_cluster import small_topology
from tests.emu_swarm.test_engine import EXPERIMENT
from tests.engine import docker_engine
from topologies.errors import SpecError

ENCRYPTED = EXPERIMENT.replace("engine: swarm,", "engine: swarm, swarm_encrypted: true,")


class Captured(Exception):
    """Raised by the stand-in for emu.run.emulate.emulate once it has the run's request."""


class NetworksAPI:
    """An engine's API that records the networks asked of it."""

    def __init__(self) -> None:
        self.networks: list[dict] = []

    def create_network(self, name: str, **options) -> dict:
        self.networks.append({"name": name, **options})
        return {"Id": name}


class FakeClient:
    def __init__(self) -> None:
        self.api = NetworksAPI()


def overlay_options(client: FakeClient, scratch: Path, **options) -> dict | None:
    """The options the swarm engine gives its overlay network, as `up` makes it."""
    cluster = SwarmCluster(plan_cluster(small_topology(1), f"enc-{secrets.token_hex(3)}"),
                           client, overlay=True, **options)
    cluster.shaper, cluster._made = RELAY_SHAPER, Made(scratch=scratch)  # as up() does
    cluster._create_networks()
    (overlay, _host) = client.api.networks
    assert overlay["driver"] == "overlay" and _host["driver"] == "bridge"
    return overlay["options"]


def test_the_experiments_switch_reaches_the_overlays_options(monkeypatch, tmp_path) -> None:
    assert ENCRYPTED != EXPERIMENT
    spec = parse_text(ENCRYPTED)
    assert spec.spec.run.swarm_encrypted is True
    assert parse_text(EXPERIMENT).spec.run.swarm_encrypted is False
    requests = []

    def emulate(request, *args, **kwargs):
        requests.append(request)
        raise Captured

    monkeypatch.setattr(emu.run.emulate, "emulate", emulate)
    (outcome,) = run_experiment(spec, tmp_path, sweep_id="encrypted")
    assert outcome.error is not None and len(requests) == 1
    (request,) = requests
    assert request.engine == "swarm" and request.swarm_encrypted is True
    options = engine_options(request.engine, swarm_encrypted=request.swarm_encrypted)
    assert options == {"encrypted": True}
    assert engine_options("swarm") == {} == engine_options("docker")
    # The swarm engine gives the overlay Docker's `--opt encrypted`; none without the switch.
    assert overlay_options(FakeClient(), tmp_path, **options) == {"encrypted": ""}
    assert overlay_options(FakeClient(), tmp_path) is None


def test_an_encrypted_overlay_on_engine_docker_is_refused_naming_the_field() -> None:
    with pytest.raises(SpecError, match=r"run\.swarm_encrypted: an encrypted overlay network is "
                                        r"not engine docker's: set run\.engine swarm, or drop "
                                        r"run\.swarm_encrypted \(got True\)"):
        engine_options("docker", swarm_encrypted=True)


@pytest.mark.emu
def test_this_hosts_kernel_refuses_an_encrypted_overlay_before_anything_starts(
        tmp_path) -> None:
    refusal = ipsec.kernel_refusal()
    if refusal is None:
        pytest.skip("this host's kernel takes ESP with AES-GCM: the overlay can be encrypted")
    host = docker_engine()
    # The probe's own answer, from the kernel: not a stand-in.
    with pytest.raises(Exception, match=r"run\.swarm_encrypted: the overlay cannot be "
                                        r"encrypted here \(this host's engine\): the kernel "
                                        r"refused an IPsec ESP state") as refused:
        check_encryption(host, None)
    assert "ip xfrm state add" in str(refused.value)
    swarm = {"label": [f"{ENGINE_LABEL}=swarm"]}
    before = (len(host.api.containers(all=True, filters=swarm)),
              len(host.api.networks(filters=swarm)))
    (outcome,) = run_experiment(parse_text(ENCRYPTED), tmp_path, sweep_id="refused")
    assert outcome.error is not None and "run.swarm_encrypted" in outcome.error, outcome.error
    assert refusal.split(":")[0] in outcome.error, outcome.error
    # Refused before any container, network or service was made.
    assert (len(host.api.containers(all=True, filters=swarm)),
            len(host.api.networks(filters=swarm))) == before
