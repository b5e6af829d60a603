"""Operators at run time: a task over message bodies, an optional window, a sink or not.

Selectivity (outputs per input, at most 1 here) is decided as the simulator decides it
(sim.operators.OperatorInstance._passes): a running credit per operator instance, with no
random stream. Each input adds the selectivity to the credit; the input's outputs go on when
the credit reaches 1, which takes 1 from it: 0.25 passes every fourth input. Both backends so
pass the same count of an instance's inputs, and the same ones by their order of arrival (the
k-th input passes on both); message ids are numbered differently by the backends, so the same
seed gives the same counts and positions, not the same ids. The decision is taken per input
after the task ran (its CPU time is spent, as sim's cost is), whatever the task gave.

An input an operator passes nothing on for is noted in the node's records (`filtered.csv`,
with why: `selectivity`, `task` (the task gave no output) or `error`), so the result tables
count it as filtered, not lost. A sink records every arrival before it runs (the agent's
`received.csv`): a sink's selectivity notes the inputs it did not keep (`sink` 1), which the
tables take back out of the delivered ones, as sim's sink records only those it keeps.

An operator with a `window` runs the window operator of workloads.windows (count, sum or
average; tumbling or sliding; time or count based) over its task's outputs. Time is
processing time, as on sim: an event's timestamp is when the operator took it, in seconds since
the run's epoch, so window k spans [k * slide, k * slide + size) of the run's clock; a time
window closes at the first event at or past its end, or on the agent's timer at its end
(`WindowStage.close`). Each closed window is one output downstream, with its first event's
message identity, and one row of the node's `windows.csv` (emu.agent.records.WINDOWS).

Stateful operators (a window, or a RIoTBench task that keeps state) give their state as bytes
(`Operator.snapshot`) and continue from it in a fresh instance (`Operator.restore`) exactly as
the unmoved one would have. A window holds the events of its open windows, as the migration
thesis's operator does, so its state grows with them (see `Held`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import Any, NamedTuple

from emu.agent.config import OperatorConfig
from emu.agent.protocol import Envelope, matches, output_topic, valid_filter
from emu.agent.records import WINDOWS, RowLog
from workloads.operator_engines import OPERATOR_ENGINES

BUILTINS = ("passthrough",)
# workloads.riot.tasks.base: "Parse tasks take the wire form (SenML text, a CSV line) and the
# rest take Readings". These are the ones that take the wire form; the others get the
# readings of the body's SenML pack (or plain JSON reading).
WIRE_TASKS = frozenset({"senml_parse", "csv_to_senml", "mqtt_publish"})
_FIELDS = {f.name: f for f in dataclasses.fields(OperatorConfig)}

Stage = Callable[[str], list[str]]


def passthrough(body: str) -> list[str]:
    return [body]


class TaskStage:
    """A RIoTBench task on message bodies: SenML or JSON readings in, SenML or text out."""

    def __init__(self, task: Any, wire: bool) -> None:
        self.task = task
        self.wire = wire

    def __call__(self, body: str) -> list[str]:
        from workloads.riot.senml import Reading, encode_senml

        outputs: list[str] = []
        for message in ([body] if self.wire else _readings(body)):
            for out in self.task.process(message):
                if isinstance(out, Reading):
                    outputs.append(encode_senml(out))
                elif isinstance(out, bytes):
                    outputs.append(out.decode(errors="replace"))
                else:
                    outputs.append(str(out))
        return outputs


def _readings(body: str) -> list:
    from workloads.riot.senml import decode_senml, from_json

    start = body.lstrip()[:1]
    if start == "[":
        return decode_senml(body)
    if start == "{":
        return [from_json(body)]
    raise ValueError("the body is neither a SenML pack nor a JSON reading")


def make_stage(task: str, params: dict[str, Any]) -> Stage:
    """The stage running `task`: a built-in, or a RIoTBench task (ValueError naming a bad one)."""
    if not isinstance(params, dict):
        raise ValueError(f"params must be a JSON object, not {type(params).__name__}")
    if task == "passthrough":
        if params:
            raise ValueError(f"task 'passthrough' has no parameters; got {', '.join(params)}")
        return passthrough
    # The registry imports numpy (the CITY dataset): only nodes running such a task pay for it.
    from workloads.riot.tasks import make_task

    try:
        return TaskStage(make_task(task, **params), task in WIRE_TASKS)
    except ValueError as error:
        if "unknown task" in str(error):
            raise ValueError(f"{error}, {', '.join(BUILTINS)}") from None
        raise
    except TypeError as error:  # a parameter the task's constructor rejects
        raise ValueError(f"task {task!r}: {error}") from None


def operator_config(args: dict[str, Any]) -> OperatorConfig:
    """An OperatorConfig from a request's JSON, checking names and types of its fields."""
    unknown = sorted(set(args) - set(_FIELDS))
    if unknown:
        raise ValueError(f"unknown operator field {unknown[0]!r}; fields: {', '.join(_FIELDS)}")
    if not isinstance(args.get("name"), str) or not args["name"]:
        raise ValueError("an operator needs a 'name' (a non-empty string)")
    data = dict(args)
    if isinstance(data.get("reads"), str):
        data["reads"] = [data["reads"]]
    expected = {"task": str, "params": dict, "reads": list, "engine": str}
    for name, kind in expected.items():
        if name in data and not isinstance(data[name], kind):
            raise ValueError(f"operator field {name!r} must be a {kind.__name__}, not "
                             f"{type(data[name]).__name__}")
    if data.get("writes") is not None and not isinstance(data["writes"], str):
        raise ValueError("operator field 'writes' must be a string or null")
    window = data.get("window")
    if window is not None and (isinstance(window, bool)
                               or not isinstance(window, (int, float, dict))):
        raise ValueError("operator field 'window' must be a number of seconds, an object of "
                         f"window fields ({', '.join(WINDOW_FIELDS)}) or null")
    selectivity = data.get("selectivity", 1.0)
    if isinstance(selectivity, bool) or not isinstance(selectivity, (int, float)):
        raise ValueError("operator field 'selectivity' must be a number from 0 to 1")
    if data.get("records") is not None and not isinstance(data["records"], str):
        raise ValueError("operator field 'records' must be a directory path or null")
    return OperatorConfig(**data)


# Below 1 + this, a credit passes: ten times 0.1 must pass one input, as in the simulator.
CREDIT_EPSILON = 1e-9
FILTERED = ("id", "stream", "source", "node", "operator", "sink", "reason", "t")
WINDOW_FIELDS = ("kind", "size", "slide", "basis", "aggregate", "field")


class FilteredLog(RowLog):
    """filtered.csv in a node's records directory: a row per input an operator passed nothing
    on for."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory, "filtered.csv", FILTERED)


class Held(NamedTuple):
    """An event a window holds: workloads.windows.Event's four fields (the timestamp in
    seconds since the run's epoch, when the operator took it) and the identity of the message
    it came in, which the window's output carries when it is the window's first. The thesis's
    state is these events (84 bytes each there, Table 5.2); a snapshot packs them by field
    (workloads.windows: the annotations below choose each column's codec), 56 bytes each:
    six 8-byte numbers (the hop count too) and two 4-byte indices into the stream and
    device names. In JSON they took about 83 bytes, and 4 to 5 times as long to write and read.
    The annotations must stay plain names (int, float, str, None)."""

    sn: int
    timestamp: float
    value: float
    key: None
    id: int
    stream: str
    src: str
    t: float
    hops: int


@dataclasses.dataclass(frozen=True)
class WindowConfig:
    """An operator's window: a number is a tumbling time count of that many seconds; an
    object gives workloads.windows.Window's fields, and `field`, the reading field a sum or
    an average takes (default: the reading's first number)."""

    kind: str = "tumbling"
    size: float = 0.0
    slide: float | None = None
    basis: str = "time"
    aggregate: str = "count"
    field: str | None = None

    @classmethod
    def of(cls, window: float | dict) -> WindowConfig:
        """The window a config gives, or a ValueError saying what is wrong with it."""
        if not isinstance(window, dict):
            if not (math.isfinite(window) and window > 0):
                raise ValueError(f"window must be > 0 seconds, not {window}")
            return cls(size=float(window))
        unknown = sorted(set(window) - set(WINDOW_FIELDS))
        if unknown:
            raise ValueError(f"window has no field {unknown[0]!r}; its fields: "
                             f"{', '.join(WINDOW_FIELDS)}")
        if "size" not in window:
            raise ValueError("window needs a 'size' (seconds, or events with basis count)")
        fields = dict(window)
        for name in ("size", "slide"):
            value = fields.get(name)
            if value is None and name == "slide":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"window {name} must be a number, not {value!r}")
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"window {name} must be > 0, not {value}")
            if fields.get("basis") == "count" and float(value).is_integer():
                fields[name] = int(value)  # JSON may write 5.0 for 5 events
        field = fields.get("field")
        if field is not None and not isinstance(field, str):
            raise ValueError(f"window field must be a reading's field name, not {field!r}")
        config = cls(**fields)
        config.build()  # workloads.windows checks the rest (kind, basis, aggregate, slide)
        return config

    def build(self) -> Any:
        from workloads.windows import Window  # only nodes running a window load it

        return Window(self.kind, self.size, self.slide, basis=self.basis,
                      aggregate=self.aggregate, hold=True, event_type=Held)


class WindowStage:
    """A window operator (workloads.windows.Window) on the run's clock, as the agent runs it:
    events in, closed windows out as messages and rows of windows.csv.

    The agent's loop reads `count` (nonzero: a time window is open, so a timer must close it
    at `end`, host clock), sets `armed` while that timer waits, calls `close` when it rings,
    and moves `epoch` when the run begins. Count windows close on events only: `count` is 0.

    Serial numbers: an input's `Envelope.sn` when stamped upstream, else the next of the
    operator's own arrival count (`next_sn`, from 1, part of its state). Every output of one
    input carries that input's SN.
    """

    def __init__(self, config: WindowConfig, epoch: float, operator: str, node: str,
                 records: str | None) -> None:
        self.config = config
        self.window = config.build()
        self.epoch = epoch
        self.operator = operator
        self.node = node
        self.time = config.basis == "time"
        self.armed = False
        self.next_sn = 1
        self.log = RowLog(records, "windows.csv", WINDOWS) if records is not None else None
        # Set during a parallel migration (emu.agent.parallel): each closed window goes to
        # divert(output, row) instead of downstream and windows.csv.
        self.divert: Callable[[Envelope, tuple], None] | None = None
        # Told the number of each window sent on (emu.agent.checkpoint marks it in ZooKeeper).
        self.on_closed: Callable[[int], None] | None = None

    @property
    def count(self) -> int:
        """Events in open windows that only a timer may close (time windows)."""
        return self.window.held_events if self.time else 0

    @property
    def end(self) -> float:
        """When the earliest open window ends, on the host clock (inf: none is open)."""
        end = self.window.next_end() if self.time else None
        return math.inf if end is None else self.epoch + end

    def sn(self, envelope: Envelope) -> int:
        """The input's serial number (see the class docstring)."""
        sn = self.next_sn if envelope.sn is None else envelope.sn
        self.next_sn = sn + 1
        return sn

    def value(self, body: str) -> float:
        """What the aggregate takes of an output: nothing for a count, else a reading's
        number (ValueError: the body has none)."""
        if self.config.aggregate == "count":
            return 1.0
        wanted = self.config.field
        for reading in _readings(body):
            for name, value in reading.values.items():
                if (wanted is None or name == wanted) and isinstance(value, (int, float)) \
                        and not isinstance(value, bool):
                    return float(value)
        what = f"field {wanted!r}" if wanted else "a number"
        raise ValueError(f"the window's {self.config.aggregate} found no {what} in the body")

    def add(self, outputs: list[tuple[Envelope, float]], sn: int, now: float) -> list[Envelope]:
        """Push each (output, value) of one input; the windows that closed, as messages."""
        timestamp = max(0.0, now - self.epoch)  # before the epoch: at its start
        closed = []
        for output, value in outputs:
            closed += self.window.push(Held(sn, timestamp, value, None, output.id,
                                            output.stream, output.src, output.t, output.hops))
        return self._emit(closed, now)

    def close(self, now: float, operator: str | None = None,
              node: str | None = None) -> list[Envelope]:
        """The outputs of the time windows that have ended by now (the timer's call)."""
        if not self.time:
            return []
        return self._emit(self.window.advance(max(0.0, now - self.epoch)), now)

    def _emit(self, results: list, now: float) -> list[Envelope]:
        outputs = []
        slide = self.window.grid.slide
        for result in results:
            first: Held = result.first
            index = round(result.start / slide)
            start, end = result.start, result.end
            if self.time:
                start, end = self.epoch + start, self.epoch + end
            body = json.dumps({"operator": self.operator, "node": self.node, "window": index,
                               "start": start, "end": end, "count": result.count,
                               "value": result.value, "first_sn": result.first_sn,
                               "last_sn": result.last_sn, "first": first.id},
                              separators=(",", ":"))
            row = (now, self.operator, self.node, index, result.start, result.end,
                   result.first_sn, result.last_sn, result.count, result.value,
                   self.epoch + first.timestamp, -1, 0)
            # Counted as the task's output: the first event was one hop on from its input.
            output = Envelope(first.id, first.stream, first.src, first.t, first.hops, body)
            if self.divert is not None:
                self.divert(output, row)
                continue
            if self.log is not None:
                self.log.write(row)
            outputs.append(output)
            if self.on_closed is not None:
                self.on_closed(index)
        return outputs

    def forwarded(self, output: Envelope, row: tuple, t: float, last_sn: int, count: int,
                  migration: int, adjusted: bool) -> Envelope:
        """A window output (this operator's or its source instance's, with its windows.csv
        `row`) that a parallel migration's checker sends downstream at `t`, with the SN and
        count it decided: noted in windows.csv with the migration's number; an adjusted
        one's body says the new last SN and count (and first SN; the value of a count)."""
        row = list(row)
        if adjusted:
            data = json.loads(output.body)
            data.update(last_sn=last_sn, count=count, first_sn=last_sn - count + 1)
            row[6], row[7], row[8] = last_sn - count + 1, last_sn, count
            if self.config.aggregate == "count":
                data["value"] = row[9] = count
            output = Envelope(output.id, output.stream, output.src, output.t, output.hops,
                              json.dumps(data, separators=(",", ":")))
        row[0], row[11], row[12] = t, migration, int(adjusted)
        if self.log is not None:
            self.log.write(tuple(row))
        return output

    def snapshot(self) -> bytes:
        return self.window.snapshot()

    def restore(self, data: bytes) -> None:
        self.window.restore(data)


SNAPSHOT_MAGIC = b"foglab-operator 1\n"


class Operator:
    """An installed operator instance: built from its config (a ValueError says what is wrong),
    run by the agent on its scheduler thread."""

    def __init__(self, config: OperatorConfig, node: str, epoch: float) -> None:
        name = config.name
        engine = OPERATOR_ENGINES.get(config.engine)
        if engine is None or not engine.in_agent:
            raise ValueError(f"operator {name!r}: engine {config.engine!r} is not run by this "
                             "agent; it runs engine 'python'")
        if not config.reads:
            raise ValueError(f"operator {name!r} reads nothing: give 'reads' topic filters")
        for topic_filter in config.reads:
            if not isinstance(topic_filter, str) or not valid_filter(topic_filter):
                raise ValueError(f"operator {name!r}: {topic_filter!r} is not an MQTT topic "
                                 "filter")
        if config.writes is not None and (not config.writes or "+" in config.writes
                                          or "#" in config.writes):
            raise ValueError(f"operator {name!r}: writes {config.writes!r} is not a topic name")
        window = None
        if config.window is not None:
            try:
                window = WindowConfig.of(config.window)
            except (ValueError, TypeError) as error:
                raise ValueError(f"operator {name!r}: {error}") from None
        selectivity = config.selectivity
        if not 0.0 <= selectivity <= 1.0:
            raise ValueError(f"operator {name!r}: selectivity must be from 0 to 1 (outputs per "
                             f"input; more than one is not yet on emu), not {selectivity}")
        if window is not None and selectivity != 1.0:
            raise ValueError(f"operator {name!r}: a window counts every input: selectivity must "
                             f"be 1 with a window, not {selectivity}")
        try:
            self.stage = make_stage(config.task, config.params)
        except ValueError as error:
            raise ValueError(f"operator {name!r}: {error}") from None
        self.config = config
        self.name = name
        self.node = node
        self.filters = list(config.reads)
        self.out_topic = output_topic(config.writes, node) if config.writes else None
        self.window = (WindowStage(window, epoch, name, node, config.records)
                       if window is not None else None)
        self.running = True
        self.token = 0  # stopping or removing the operator makes its window timer a stale one
        self.processed = 0
        # Each input's latency, emitted to processed, since the host last read them
        # (workloads.replication); None: the operator has no latency bound.
        self.delays: list[float] | None = [] if config.slo is not None else None
        self.errors = 0
        self.last_error: str | None = None
        self.selectivity = float(selectivity)
        self.credit = 0.0
        self.filtered = 0
        # A window passes on one output per window: the inputs it absorbs are not filtered.
        self.filtered_log = (FilteredLog(config.records)
                             if config.records is not None and window is None else None)

    @property
    def sink(self) -> bool:
        return self.out_topic is None

    @property
    def stateful(self) -> bool:
        """Whether the operator has state to move: a window, or a task that keeps some."""
        task = getattr(self.stage, "task", None)
        return self.window is not None or bool(getattr(task, "stateful", False))

    def snapshot(self) -> bytes:
        """The instance's state: its task's and its window's, and the selectivity credit.

        A header line (JSON, with the parts' lengths) then the parts' own bytes, so a window
        of many events is not copied into an escaped JSON string."""
        task = getattr(self.stage, "task", None)
        task_state = task.snapshot() if getattr(task, "stateful", False) else b""
        window_state = self.window.snapshot() if self.window is not None else b""
        header = {"task": self.config.task, "credit": self.credit,
                  "next_sn": self.window.next_sn if self.window is not None else None,
                  "parts": [len(task_state), len(window_state)]}
        return (SNAPSHOT_MAGIC + json.dumps(header, sort_keys=True, separators=(",", ":"))
                .encode() + b"\n" + task_state + window_state)

    def restore(self, data: bytes) -> None:
        """Continue from another instance's snapshot: call before this one takes anything."""
        where = f"operator {self.name!r}"
        if not data.startswith(SNAPSHOT_MAGIC):
            raise ValueError(f"{where}: not an operator snapshot (it starts "
                             f"{bytes(data[:20])!r})")
        line_end = data.index(b"\n", len(SNAPSHOT_MAGIC))
        header = json.loads(data[len(SNAPSHOT_MAGIC):line_end])
        if header["task"] != self.config.task:
            raise ValueError(f"{where}: a snapshot of task {header['task']!r} cannot restore "
                             f"task {self.config.task!r}")
        task_length, window_length = header["parts"]
        body = memoryview(data)[line_end + 1:]
        if len(body) != task_length + window_length:
            raise ValueError(f"{where}: the snapshot is cut: {len(body)} bytes of state, its "
                             f"header says {task_length + window_length}")
        if (self.window is None) != (window_length == 0 and header["next_sn"] is None):
            raise ValueError(f"{where}: a snapshot {'with' if window_length else 'without'} "
                             f"a window cannot restore an operator "
                             f"{'without' if self.window is None else 'with'} one")
        if task_length:
            self.stage.task.restore(bytes(body[:task_length]))
        if self.window is not None:
            self.window.restore(bytes(body[task_length:]))
            self.window.next_sn = header["next_sn"]
        self.credit = header["credit"]

    def reads(self, topic: str) -> bool:
        return any(matches(f, topic) for f in self.filters)

    def restaged(self, params: dict[str, Any]) -> tuple[Stage, dict[str, Any]]:
        """The stage with `params` merged over the current ones (the task's state restarts)."""
        if not isinstance(params, dict):
            raise ValueError(f"params must be a JSON object, not {type(params).__name__}")
        merged = {**self.config.params, **params}
        return make_stage(self.config.task, merged), merged

    def passes(self) -> bool:
        """Whether the next input's outputs go on: the simulator's running credit."""
        if self.selectivity == 1.0:
            return True
        self.credit += self.selectivity
        if self.credit + CREDIT_EPSILON >= 1.0:
            self.credit -= 1.0
            return True
        return False

    def take(self, envelope: Envelope, now: float) -> list[Envelope]:
        """The outputs of one input: the task's, or the windows it closed."""
        self.processed += 1
        reason = None
        try:
            bodies = self.stage(envelope.body)
        except Exception as error:  # a bad message or a task's failure must not stop the node
            self._failed(error)
            bodies, reason = [], "error"
        if self.window is not None:
            return self._window_take(envelope, bodies, now)
        kept = self.passes()
        if not kept:
            bodies = []
        if self.sink:
            # The agent has recorded its arrival: only the sink's selectivity takes that back.
            reason = None if kept else "selectivity"
        elif reason is None and not bodies:
            reason = "task" if kept else "selectivity"
        if reason is not None:
            self.filtered += 1
            if self.filtered_log is not None:
                self.filtered_log.write((envelope.id, envelope.stream, envelope.src, self.node,
                                         self.name, int(self.sink), reason, now))
        return [envelope.passed_on(body) for body in bodies]

    def _failed(self, error: Exception) -> None:
        self.errors += 1
        self.last_error = f"{type(error).__name__}: {error}"

    def _window_take(self, envelope: Envelope, bodies: list[str],
                     now: float) -> list[Envelope]:
        """A window takes every input (selectivity 1) and notes none as filtered: it passes
        one output on per window."""
        window = self.window
        assert window is not None
        sn = window.sn(envelope)
        events = []
        for body in bodies:
            try:
                events.append((envelope.passed_on(body), window.value(body)))
            except ValueError as error:
                self._failed(error)
        return window.add(events, sn, now)

    def status(self) -> dict[str, Any]:
        return {"task": self.config.task, "running": self.running, "processed": self.processed,
                "errors": self.errors, "last_error": self.last_error, "filtered": self.filtered,
                "params": self.config.params}
