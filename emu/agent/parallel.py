"""The agent's part of parallel migration (thesis chapter 6): the source as sequencer and
mirror, the target's consistency checker, and the divert, sync, handover and rollback steps.

emu.agent.migration receives every `migrate.*` request and takes the steps of chapter 5 (an
instance's input session is emu.agent.input_session's); a request with `parallel` (and
`migrate.divert`, `migrate.sync`) it hands to `ParallelSteps` here, which drives the source's
part (emu.agent.parallel_source), the target's and its checker (emu.agent.parallel_target),
each on a client of its own (emu.agent.parallel_link).

The steps, in the order emu.features.moves.by_agents sends them:

- `migrate.prepare` with `parallel` (to the target): builds and starts the instance on a
  client of its own (`MigrationLink`) subscribed to the migration's mirror topic
  (`foglab/migration/<source>/<target>/<tag>/input`) and to the source's diverted outputs
  (`.../old`), with the consistency checker (workloads.migration.Synchroniser, S = `sync`);
  answers once the broker has confirmed those subscriptions, so nothing the source sends
  from then is missed.
- `migrate.divert` (to the source): from now the source is the sequencer. Mosquitto cannot
  stamp serial numbers (the thesis's broker interceptor, notes 4.5), and SNs made by each
  producer only work with one producer; so the source, which reads the one input session,
  gives each input it takes the SN its window uses anyway (the stamped one, else the next
  of its own count), and republishes it so stamped at QoS 1 on the mirror topic before it
  processes it. Both instances see one SN per event, in the source's order. Its window
  outputs go to `.../old` instead of downstream (and not to its windows.csv), and it keeps
  each until the checker says it is covered (`.../covered`: the highest SN that went
  downstream), to send what is not covered itself on a rollback.
- `migrate.sync` (to the target): answered when the checker is synchronised (mode, offset,
  suppressed outputs): then the target's outputs alone go downstream.
- `migrate.pause` with `parallel` (to the source): the input handover. The source leaves its
  session without ending it (the broker holds the input), drains, stops, and answers the last
  SN it stamped and the keys it saw; no state moves.
- `migrate.resume` with `parallel` (to the target): once the target has taken the mirror up
  to that SN, it drops the mirror, connects the input session with the same client id
  (dropping inputs whose keys the source saw), and numbers on from that SN + 1.
- `migrate.release`: the source's instance goes; on the target, with `parallel`, the checker
  goes and the outputs leave as the instance's own. `migrate.rollback` with `parallel` (to the
  source, on a failure): mirroring stops, outputs go downstream again, after the uncovered
  ones it kept (those partly covered cut to the SNs above `covered`, as Alg. 6.3 trims),
  once a barrier it sent itself came back through the broker (`ParallelSource` says why),
  and a paused session is taken up again; the target's part goes with `release` + `abort`.

Why the checker runs in the target's agent, not in the broker's node as in the thesis: the
broker here is Mosquitto, which runs no code of ours, and a third process would add a hop
to every output twice (to the checker, then downstream). In the target, its own outputs
reach the checker with no broker between, only the source's cross the broker (as they would
anyway), and once consistent the outputs leave from where the operator will run, so the
end of the migration changes nothing downstream.
"""
from __future__ import annotations

from collections.abc import Callable, Container
from typing import TYPE_CHECKING, Any

from emu.agent.input_session import InputSession, watch_resume
from emu.agent.operators import Operator
from emu.agent.parallel_source import ParallelSource
from emu.agent.parallel_target import ParallelTarget
from emu.agent.protocol import operator_name, output_topic

if TYPE_CHECKING:
    from emu.agent.parts import AgentSurface


class ParallelSteps:
    """The parallel migrations of one agent, as source (`diverted`) and as target (`targets`),
    each step as emu.agent.migration.Migrations hands it over; on the scheduler thread.
    `answer(result=None, error=None)` answers a request, at once or later."""

    def __init__(self, agent: AgentSurface) -> None:
        self.agent = agent
        self.diverted: dict[str, ParallelSource] = {}  # source: operator -> its part
        self.targets: dict[str, ParallelTarget] = {}   # target: operator -> its part

    def close(self) -> None:
        """The agent stops: end the parallel migrations' own sessions."""
        for part in (*self.diverted.values(), *self.targets.values()):
            part.link.close()

    # Role assignment --------------------------------------------------------------------------

    def prepare(self, operator: Operator, parallel: Any, answer: Callable[..., None]) -> None:
        """The target of a parallel migration starts on the mirror, beside its checker;
        answers once the broker has its subscriptions."""
        agent = self.agent
        if not isinstance(parallel, dict) or not isinstance(parallel.get("tag"), str) \
                or not parallel["tag"]:
            raise ValueError("'parallel' must be an object with the migration's 'tag'")
        sync = parallel.get("sync", 2)
        if isinstance(sync, bool) or not isinstance(sync, int) or sync < 0:
            raise ValueError(f"parallel 'sync' (the synchronisation factor S) must be a "
                             f"whole number >= 0, not {sync!r}")
        refused = parallel_refusal(operator, sync)
        if refused:
            raise ValueError(refused)
        epoch = parallel.get("epoch")
        if epoch is not None:
            if isinstance(epoch, bool) or not isinstance(epoch, (int, float)):
                raise ValueError(f"parallel 'epoch' must be the source window's epoch (host "
                                 f"clock), not {epoch!r}")
            # The two instances' windows must span the same times to be paired.
            operator.window.epoch = float(epoch)
        name = operator.name
        if name in self.targets:
            raise ValueError(f"operator {name!r} is in a parallel migration on {agent.node} "
                             "already")

        def ready() -> None:
            answer({"t": agent.clock()})

        source = parallel.get("source")
        if not isinstance(source, str) or not source:
            raise ValueError(f"parallel 'source' must name the migration's source node (its "
                             f"topics name it), not {source!r}")
        part = self.targets[name] = ParallelTarget(agent, operator, parallel["tag"], sync,
                                              int(parallel.get("migration", -1)), ready, source)
        agent.sessions[name] = part.link  # it reads the mirror, not the node's session
        try:
            agent.install(operator)  # connects the link
        except Exception:
            del self.targets[name]
            agent.sessions.pop(name, None)
            part.link.close()
            raise

    # Source -----------------------------------------------------------------------------------

    def divert(self, args: dict[str, Any], answer: Callable[..., None],
               paused: Container[str]) -> None:
        """A parallel migration's source starts mirroring its input and diverting its
        outputs, once its own client's subscription is confirmed (`paused`: the operators
        a pause has stopped, which cannot move again)."""
        agent = self.agent
        operator = agent.operator(operator_name(args))
        session = agent.sessions.get(operator.name)
        tag = args.get("tag")
        if not isinstance(session, InputSession):
            raise ValueError(f"operator {operator.name!r} has no input session on {agent.node}")
        if not isinstance(tag, str) or not tag:
            raise ValueError("args need 'tag', the migration's name for its topics")
        if operator.name in self.diverted or operator.name in paused:
            raise ValueError(f"operator {operator.name!r} is moving already")
        refused = parallel_refusal(operator, 0)
        if refused:
            raise ValueError(refused)
        target = args.get("target")
        if not isinstance(target, str) or not target:
            raise ValueError(f"args need 'target', the migration's target node (its topics "
                             f"name it), not {target!r}")
        watch = output_topic(operator.config.writes, target) if operator.config.writes else None
        part = self.diverted[operator.name] = ParallelSource(agent, operator, session, tag,
                                                        int(args.get("migration", -1)), watch,
                                                        target)

        def start() -> None:
            window = operator.window
            assert window is not None
            if self.diverted.get(operator.name) is not part:
                return  # rolled back meanwhile
            session.mirror = part.mirror
            window.divert = part.output
            answer({"t": agent.clock(), "next_sn": window.next_sn})

        part.link.ready = start
        part.link.connect()

    def handed_over(self, operator: Operator, session: InputSession) -> dict[str, Any]:
        """The source has paused and drained (the input handover): what its pause answers,
        the last SN it stamped and the keys it saw; no state moves, the target has it all."""
        window = operator.window
        assert window is not None
        seen = session.last_seen()
        return {"last_sn": window.next_sn - 1,
                "mirrored": self.diverted[operator.name].mirrored,
                "seen": seen, "last": seen[-64:]}

    def take_back(self, name: str, covered: Any,
                  then: Callable[[dict[str, Any]], None]) -> bool:
        """A rollback on the source: mirroring stops and what did not go downstream goes from
        here, then `then(what the rollback answers)`; False (and `then` not called) if the
        operator was not diverted. The host passes on what a live target said it `covered`:
        its last word to this agent may still be on its way."""
        diverted = self.diverted.pop(name, None)
        if diverted is None:
            return False
        if isinstance(covered, int) and not isinstance(covered, bool):
            diverted.cover(covered)
        diverted.roll_back(lambda sent: then({"taken_back": sent,
                                              "covered": diverted.covered}))
        return True

    def stop(self, name: str) -> None:
        """The source's instance goes (release): it mirrors and diverts no more."""
        diverted = self.diverted.pop(name, None)
        if diverted is not None:
            diverted.stop()

    # Target -----------------------------------------------------------------------------------

    def sync(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        """Answered when the target's checker is synchronised (at once if it is)."""
        name = operator_name(args)
        part = self.targets.get(name)
        if part is None:
            raise ValueError(f"operator {name!r} is not a parallel migration's target on "
                             f"{self.agent.node}")
        if part.error:
            raise ValueError(part.error)
        if part.checker.synchronised:
            answer(part.report())
        else:
            part.on_sync = answer

    def handover(self, name: str, handover: Any, answer: Callable[..., None]) -> None:
        """A parallel migration's target takes the input session over once it has taken
        the mirror up to the source's last SN; it numbers on from there."""
        agent = self.agent
        part = self.targets.get(name)
        if part is None:
            raise ValueError(f"operator {name!r} is not a parallel migration's target on "
                             f"{agent.node}")
        if not isinstance(handover, dict) or not isinstance(handover.get("last_sn"), int):
            raise ValueError("'parallel' must be an object with the source's 'last_sn'")
        last_sn = handover["last_sn"]
        seen = handover.get("seen") or []
        timeout = float(handover.get("timeout", 30.0))
        t_asked = agent.clock()

        def go() -> None:
            operator = part.operator
            window = operator.window
            assert window is not None
            t_mirrored = agent.clock()
            part.link.close()  # the mirror ends: the source stamped nothing after last_sn
            window.next_sn = last_sn + 1
            session = InputSession(agent, operator)
            session.remember(seen)
            watch_resume(agent, session, answer, {
                "t_asked": t_asked, "t_mirrored": t_mirrored, **part.report()})
            agent.sessions[name] = session
            session.connect()

        def late() -> None:
            if part.waiting is not None and part.waiting[1] is go:
                part.waiting = None
                answer(error=f"the mirror reached SN {part.mirror_sn}, not the source's last "
                       f"{last_sn}, within {timeout:g} s")

        if part.mirror_sn >= last_sn:
            go()
        else:
            part.waiting = (last_sn, go)
            agent.scheduler.at(agent.clock() + timeout, late)

    def release(self, name: str, abort: bool) -> dict[str, Any] | None:
        """The target's part goes: the checker, and with `abort` the instance too; what the
        release answers, or None if the operator is no parallel migration's target here."""
        agent = self.agent
        part = self.targets.pop(name, None)
        if part is None:
            return None
        part.finish()
        if abort:
            if name in agent.operators:
                agent.uninstall(name)
            return {"t": agent.clock(), "dropped": True, "covered": part.covered}
        return {"t": agent.clock(), **part.report()}


def parallel_refusal(operator: Operator, sync: int) -> str:
    """Why the operator cannot move by parallel migration ('' if it can): the checker pairs
    the outputs of tumbling windows on time, whose SNs say which events each covered, and
    weak synchronisation adjusts counts by numbers of events (workloads.migration)."""
    name = operator.name
    window = operator.window
    if window is None:
        return (f"operator {name!r} has no window: parallel migration synchronises window "
                "outputs; move it with pause_drain or pause_transfer")
    config = window.config
    if config.kind != "tumbling" or config.basis != "time":
        return (f"operator {name!r} has a {config.kind} {config.basis} window: parallel "
                "migration pairs tumbling time windows (two instances count events from "
                "different starts); move it with pause_transfer")
    if config.aggregate != "count" and sync > 0:
        return (f"operator {name!r} computes a {config.aggregate}: weak synchronisation "
                f"adjusts counts only, so parallel migration needs sync 0 for it, not {sync}")
    return ""


__all__ = ["ParallelSteps", "parallel_refusal"]
