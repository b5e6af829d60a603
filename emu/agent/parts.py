"""What a part of the agent may ask of its agent: `AgentSurface`, which emu.agent.agent.Agent
implements and the parts type against (none imports emu.agent.agent).

The parts are the agent's jobs in modules of their own: requests (emu.agent.management),
migration (emu.agent.migration, emu.agent.parallel and its sides, emu.agent.input_session),
checkpoints (emu.agent.checkpoint), spare and other brokers' sessions (emu.agent.brokers),
broadcasts (emu.agent.broadcast) and a cloud VM's Spark steps (emu.agent.spark). Each is built
with the agent and keeps it; it reads and changes the node only through the members below,
on the scheduler's thread unless a member says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from emu.agent.config import AgentConfig
    from emu.agent.drivers import Drivers
    from emu.agent.operators import Operator
    from emu.agent.protocol import Envelope
    from emu.agent.records import Records
    from emu.agent.scheduler import Scheduler
    from emu.agent.subscriptions import Subscriptions


class MigrationSteps(Protocol):
    """The agent's migration steps (emu.agent.migration.Migrations, or a cloud VM's
    emu.agent.spark.SparkMigrations)."""

    def handle(self, command: str, args: dict[str, Any],
               answer: Callable[..., None]) -> None: ...


class BroadcastPlans(Protocol):
    """The node's part of the run's broadcasts (emu.agent.broadcast.Broadcasts)."""

    def plan(self, args: dict[str, Any]) -> dict[str, Any]: ...


class AgentSurface(Protocol):
    """One node's agent as its parts see it."""

    # What the node is, and its time.
    node: str
    config: AgentConfig
    epoch: float  # the run's epoch, on the agent's clock (a held node's is set by `begin`)
    clock: Callable[[], float]  # the run's emulated clock (emu.agent.timebase)
    scheduler: Scheduler  # the one thread everything runs on (`at`, `call` from any thread)

    # Its devices, operators and records.
    drivers: Drivers
    records: Records
    operators: dict[str, Operator]  # installed, by name
    # Instances reading through a session of their own, by operator: an InputSession
    # (emu.agent.input_session), or a parallel migration's link standing for one
    # (emu.agent.parallel_link.MigrationLink).
    sessions: dict[str, Any]
    fenced: dict[str, float]  # instances fenced off (emu.agent.input_session): when
    unreadable: int  # broker messages that were no envelope, counted by every part

    # Its MQTT sessions.
    client: Any  # the node's own session (paho)
    subscriptions: Subscriptions  # the node session's filters and their identifiers
    drivers_client: Any  # the drivers' session on a spare broker, once moved there
    spare_sessions: list  # every session on a spare broker (emu.agent.brokers), closed at stop

    # Its other parts, as the requests reach them (emu.agent.management).
    migrations: MigrationSteps
    broadcasts: BroadcastPlans
    spark_jobs: dict[str, Any]  # a cloud VM's Spark jobs by work directory (emu.agent.spark)

    @property
    def keepalive(self) -> int:
        """Every MQTT session's keepalive, in host seconds."""
        ...

    def host_seconds(self, emulated_s: float) -> float:
        """An emulated span on the host's clock (a timeout given to paho or ZooKeeper)."""
        ...

    def session_filters(self) -> set[str]:
        """The filters the running operators read through the node's session."""
        ...

    def session_ready(self) -> None:
        """A session of the node confirmed its subscriptions: the node may be ready now."""
        ...

    def on_node_message(self, client: Any, userdata: Any, message: Any) -> None:
        """paho's on_message for a session that carries what the node's session does (on the
        MQTT client's thread)."""
        ...

    def take(self, operator: Operator, envelope: Envelope, qos: int = 0,
             record: bool = True) -> None:
        """One input for the operator, come through its own session."""
        ...

    def emit(self, operator: Operator, output: Envelope, qos: int | None = None) -> None:
        """An output of the operator that leaves as its own do."""
        ...

    def operator(self, name: str) -> Operator:
        """The installed operator `name`; a ValueError naming those installed if none."""
        ...

    def install(self, operator: Operator) -> None: ...

    def update(self, name: str, params: dict[str, Any]) -> None: ...

    def uninstall(self, name: str) -> None: ...

    def set_running(self, name: str, running: bool) -> None: ...

    def arm(self, operator: Operator) -> None:
        """Set the timers of an operator that starts with open windows (restored)."""
        ...

    def begin(self, epoch: float) -> None:
        """Start the drivers of a held node at the run's epoch."""
        ...

    def published_on(self, topic: str) -> None:
        """A device that joined publishes on `topic` from here."""
        ...

    def status(self) -> dict[str, Any]:
        """What a ping answers."""
        ...
