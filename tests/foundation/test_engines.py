"""The engines' registry (emu.engines): one list that the schema, the command line, a run and
`foglab emu down` read; each engine class keeps the protocol (emu.engines.base.Engine); a
third engine is one registry line, and each place that names engines takes it."""

from __future__ import annotations

import inspect

import pytest
from typer.testing import CliRunner

import emu.engines as engines
from emu.engines import (
    ENGINE_LABEL,
    ENGINES,
    EngineEntry,
    engine_class,
    engine_of,
    engine_options,
    register,
)
from emu.engines.base import Engine
from emu.engines.docker.engine import Cluster
from emu.engines.swarm.engine import SwarmCluster
from experiments.spec import RunSpec
from topologies.errors import SpecError

# What the protocol asks of an engine class: its methods and class attributes.
MEMBERS = sorted(name for name in {*Engine.__dict__, *Engine.__annotations__}
                 if not name.startswith("_") and name not in ("plan", "facts"))


class StandIn(Cluster):
    """A third engine, as a user would add one: a class and one registry line."""

    engine_name = "stand-in"


def test_the_registry_lists_docker_and_swarm_with_their_classes() -> None:
    assert list(ENGINES) == ["docker", "swarm"]
    assert engine_class("docker") is Cluster and engine_class(None) is Cluster
    assert engine_class("swarm") is SwarmCluster
    assert all(entry.summary for entry in ENGINES.values())


@pytest.mark.parametrize("name", list(ENGINES))
def test_each_engine_class_keeps_the_protocol(name: str) -> None:
    cls = engine_class(name)
    assert [m for m in MEMBERS if not hasattr(cls, m)] == []
    assert cls.engine_name == name
    for method in ("before_remove", "after_remove"):
        assert inspect.ismethod(getattr(cls, method)), method  # classmethods: no instance


def test_an_unknown_engine_is_named_with_the_field_and_the_known_ones() -> None:
    with pytest.raises(SpecError, match=r"--engine: an engine is one of docker, swarm "
                                        r"\(got 'kubernetes'\)"):
        engine_class("kubernetes", "--engine")
    with pytest.raises(ValueError, match=r"an engine is one of docker, swarm, got 'k8s'"):
        RunSpec.model_validate({"duration": 1, "engine": "k8s"})


def test_a_name_is_registered_once_and_where_is_module_and_class() -> None:
    with pytest.raises(ValueError, match=r"engine 'docker' is registered already"):
        register("docker", "again", "emu.engines.docker.engine:Cluster")
    with pytest.raises(ValueError, match=r"where 'emu.engines.docker.engine' is not module:Class"):
        register("third", "no class", "emu.engines.docker.engine")
    assert "third" not in ENGINES


def test_a_cluster_found_on_the_host_is_its_labels_engine() -> None:
    assert engine_of({ENGINE_LABEL: "swarm"}).load() is SwarmCluster
    # Clusters of the plain engine carry no label (as before engines labelled theirs).
    assert engine_of({}).load() is Cluster and engine_of(None).load() is Cluster


def test_a_run_field_of_one_engine_is_refused_to_another_naming_both() -> None:
    assert engine_options("swarm", swarm_encrypted=True) == {"encrypted": True}
    assert engine_options("swarm", swarm_encrypted=False) == {} == engine_options("docker")
    with pytest.raises(SpecError, match=r"run\.swarm_encrypted: an encrypted overlay network "
                                        r"is not engine docker's: set run\.engine swarm"):
        engine_options("docker", swarm_encrypted=True)


def test_a_third_engine_is_one_registry_line_that_every_reader_takes(monkeypatch) -> None:
    monkeypatch.setitem(ENGINES, "stand-in", EngineEntry(
        "stand-in", "a stand-in of the tests", f"{__name__}:StandIn"))
    assert engine_class("stand-in") is StandIn
    assert RunSpec.model_validate({"duration": 1, "engine": "stand-in"}).engine == "stand-in"
    assert engine_of({ENGINE_LABEL: "stand-in"}).load() is StandIn
    with pytest.raises(SpecError, match=r"not engine stand-in's: set run\.engine swarm"):
        engine_options("stand-in", swarm_encrypted=True)
    # The command line refuses what the registry lacks, and takes what it has (up to Docker).
    from emu.cli.main import app

    runner = CliRunner()
    refused = runner.invoke(app, ["up", "--engine", "k8s"])
    assert refused.exit_code == 3 and "one of docker, swarm, stand-in" in refused.output
    assert engines.engine_names() == ("docker", "swarm", "stand-in")


def test_a_nodes_control_names_its_container_by_id() -> None:
    # A Swarm task's container has Swarm's name, not the plan's: `node` must name the id the
    # engine noted when it made the container (what a run stops, samples and faults by).
    from types import SimpleNamespace

    from emu.cluster.plan import plan_cluster
    from emu.engines.base import Made
    from tests.emu_cluster.test_cluster import small_topology

    plan = plan_cluster(small_topology(1), "ids")
    node = next(iter(plan.agents())).node
    cluster = engine_class("swarm")(plan, SimpleNamespace(api="the routed api"))
    cluster._made = Made(ids={node: "f" * 64})
    control = cluster.node(node)
    assert (control.api, control.container) == ("the routed api", "f" * 64)
