"""Operators at run time: a task over message bodies, an optional window count, a sink or not.

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
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable
from typing import Any

from emu.agent.config import OperatorConfig
from emu.agent.protocol import Envelope, matches, output_topic, valid_filter

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
    if window is not None and (isinstance(window, bool) or not isinstance(window, (int, float))):
        raise ValueError("operator field 'window' must be a number of seconds or null")
    selectivity = data.get("selectivity", 1.0)
    if isinstance(selectivity, bool) or not isinstance(selectivity, (int, float)):
        raise ValueError("operator field 'selectivity' must be a number from 0 to 1")
    if data.get("records") is not None and not isinstance(data["records"], str):
        raise ValueError("operator field 'records' must be a directory path or null")
    return OperatorConfig(**data)


# Below 1 + this, a credit passes: ten times 0.1 must pass one input, as in the simulator.
CREDIT_EPSILON = 1e-9
FILTERED = ("id", "stream", "source", "node", "operator", "sink", "reason", "t")


def _csv_field(value: object) -> str:
    text = str(value)
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


class FilteredLog:
    """filtered.csv in a node's records directory: a row per input an operator passed nothing
    on for. Each row is written at once, unbuffered: the agent ends with os._exit once its own
    records are flushed, so rows held here would lose the run's last second."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "filtered.csv")
        self.fd: int | None = None

    def write(self, row: tuple) -> None:
        if self.fd is None:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if os.fstat(self.fd).st_size == 0:
                os.write(self.fd, (",".join(FILTERED) + "\n").encode())
        os.write(self.fd, (",".join(map(_csv_field, row)) + "\n").encode())

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@dataclasses.dataclass(slots=True)
class WindowCount:
    """A tumbling processing-time window on the run's clock: window k spans
    [epoch + k * size, epoch + (k + 1) * size); each window that counted something gives one
    output when it ends, carrying the first counted message's identity (as the simulator's
    window output carries its first event's time)."""

    size: float
    epoch: float
    index: int = -1
    count: int = 0
    first: Envelope | None = None
    last_id: int = -1
    armed: bool = False  # a timer is set for the end of the open window

    @property
    def end(self) -> float:
        return self.epoch + (self.index + 1) * self.size

    def add(self, envelopes: list[Envelope], now: float) -> None:
        for envelope in envelopes:
            if self.count == 0:
                self.index = math.floor((now - self.epoch) / self.size)
                self.first = envelope
            self.count += 1
            self.last_id = envelope.id

    def close(self, now: float, operator: str, node: str) -> list[Envelope]:
        """The open window's output if it has ended by now."""
        if not self.count or now < self.end or self.first is None:
            return []
        body = json.dumps({"operator": operator, "node": node, "window": self.index,
                           "start": self.end - self.size, "end": self.end, "count": self.count,
                           "first": self.first.id, "last": self.last_id},
                          separators=(",", ":"))
        first = self.first  # counted as the task's output: one hop on from its input
        output = Envelope(first.id, first.stream, first.src, first.t, first.hops, body)
        self.count, self.first, self.last_id = 0, None, -1
        return [output]


class Operator:
    """An installed operator instance: built from its config (a ValueError says what is wrong),
    run by the agent on its scheduler thread."""

    def __init__(self, config: OperatorConfig, node: str, epoch: float) -> None:
        name = config.name
        if config.engine != "python":
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
        window = config.window
        if window is not None and not (math.isfinite(window) and window > 0):
            raise ValueError(f"operator {name!r}: window must be > 0 seconds, not {window}")
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
        self.window = WindowCount(float(window), epoch) if window is not None else None
        self.running = True
        self.token = 0  # stopping or removing the operator makes its window timer a stale one
        self.processed = 0
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
            self.errors += 1
            self.last_error = f"{type(error).__name__}: {error}"
            bodies, reason = [], "error"
        kept = self.passes()
        if not kept:
            bodies = []
        if self.sink:
            # The agent has recorded its arrival: only the sink's selectivity takes that back.
            reason = None if kept else "selectivity"
        elif reason is None and not bodies:
            reason = "task" if kept else "selectivity"
        if reason is not None and self.window is None:
            self.filtered += 1
            if self.filtered_log is not None:
                self.filtered_log.write((envelope.id, envelope.stream, envelope.src, self.node,
                                         self.name, int(self.sink), reason, now))
        outputs = [envelope.passed_on(body) for body in bodies]
        if self.window is None:
            return outputs
        closed = self.window.close(now, self.name, self.node)
        self.window.add(outputs, now)
        return closed

    def status(self) -> dict[str, Any]:
        return {"task": self.config.task, "running": self.running, "processed": self.processed,
                "errors": self.errors, "last_error": self.last_error, "filtered": self.filtered,
                "params": self.config.params}
