"""The operator engines: what runs an operator's task, and what each part of foglab asks of it.

An operator's `engine` (workloads.pipeline.OperatorSpec, emu.agent.config.OperatorConfig)
names one of OPERATOR_ENGINES. Code that treats engines differently asks the engine's
descriptor the capability it branches on, which says why, and never compares the name: an
engine is one OperatorEngine line in the registry (and, for one that runs beside the agent,
the job that runs it and its mover in emu.features.moves.dispatch.MOVERS if it moves another way).

The standard library only: the gateway's agent imports it (emu.images.GATEWAY ships it).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Move(Enum):
    """How an instance moves between nodes; emu.features.moves.dispatch.MOVERS has a mover for
    each."""

    # The agents' protocol: the source pauses, its state crosses ZooKeeper, the target resumes
    # on the input session the broker held (emu.agent.migration); or the parallel strategy.
    AGENTS = "agents"
    # A warm standby job the target starts ahead takes the query's checkpoint or exported
    # state and the source's broker session (emu.features.moves.spark_query), strategy
    # pause_transfer.
    STANDBY = "standby"


@dataclass(frozen=True)
class OperatorEngine:
    """An operator engine and its capabilities, each named for the decision it makes."""

    name: str
    # As messages name it ("runs on Spark").
    title: str
    # The agent runs the task in its own process: it holds the instance's state (windows,
    # checkpoints, its input session), applies the window and selectivity, and builds the task
    # once to check it; recovery and replication re-place such instances. False: a job beside
    # the agent (emu.agent.spark), whose arrivals at its node the agent records.
    in_agent: bool
    # The job runs on a JVM: Spark's driver, with its own memory and threads (emu.cluster.capacity),
    # on the cloud VMs' image (the one with a JRE), driving the topology's Spark standalone
    # cluster when it has one (emu.cluster.plan).
    jvm: bool
    # It reads through an MQTT client of its own, not the agent's node session: on its node's
    # broker only, and not through the session a spare broker's readers take over.
    own_session: bool
    # Its instances on several nodes form one shared subscription (each message reaches one).
    # False: the node's agent records what reaches the job on the same filter, and would
    # share the messages with it.
    shares_reads: bool
    # Its MQTT clients connect over TLS (run.tls).
    tls: bool
    # It publishes its outputs from its own process: routing counts the instance as a sink,
    # whose arrivals the agent records (emu.run.tables).
    writes_its_own: bool
    # It processes its input in micro-batches: the model charges the job's CPU per batch
    # (sim.costs.SparkBatch) on top of, or in place of, a cost per message.
    micro_batches: bool
    # How a move carries the instance and its state.
    moves_by: Move


# Every engine by name, one entry each; an operator's `engine` is one of these names, the first
# its default.
OPERATOR_ENGINES: dict[str, OperatorEngine] = {engine.name: engine for engine in (
    OperatorEngine("python", "Python", in_agent=True, jvm=False, own_session=False,
                   shares_reads=True, tls=True, writes_its_own=False, micro_batches=False,
                   moves_by=Move.AGENTS),
    OperatorEngine("spark", "Spark", in_agent=False, jvm=True, own_session=True,
                   shares_reads=False, tls=False, writes_its_own=True, micro_batches=True,
                   moves_by=Move.STANDBY),
)}
ENGINE_NAMES = tuple(OPERATOR_ENGINES)
DEFAULT_ENGINE = ENGINE_NAMES[0]


def operator_engine(name: str) -> OperatorEngine:
    """The engine named `name`; a ValueError naming it and the known engines otherwise."""
    engine = OPERATOR_ENGINES.get(name)
    if engine is None:
        raise ValueError(f"unknown operator engine {name!r}; known engines: "
                         f"{', '.join(OPERATOR_ENGINES)}")
    return engine
