"""What agents and the host say over MQTT: topics, the message envelope, requests and replies."""

from __future__ import annotations

import json
import json.encoder
from dataclasses import dataclass, field
from typing import Any

# The topic rules are workloads.topics', which the gateway image carries; the agent's modules
# take them from here with the rest of what agents and the host say.
from workloads.topics import matches, valid_filter  # noqa: F401 - re-exported

# Message ids: the node's index in the high bits, its own sequence number in the low ones.
SEQUENCE_BITS = 40

MANAGEMENT = "foglab/mgmt"
ALL_REQUESTS = f"{MANAGEMENT}/all/req"
COMMANDS = ("install", "update", "uninstall", "start", "stop", "set", "ping",
            # the steps of an operator's migration (emu.agent.migration)
            "migrate.prepare", "migrate.pause", "migrate.resume", "migrate.rollback",
            "migrate.release", "migrate.divert", "migrate.sync",
            # a crashed node's instance started again from its checkpoint (workloads.recovery)
            "migrate.recover",
            # a replica of an operator over its latency bound (workloads.replication): the
            # delays its inputs took since the last ask; a replica leaving, its input drained
            "operator.delays", "replica.retire",
            # what runs, read back by `foglab emu apply` (emu.live.apply): each operator's config
            "operators.list",
            # a Spark query's move between cloud VMs (emu.agent.spark)
            "migrate.spark.status", "migrate.spark.standby", "migrate.spark.release",
            "migrate.spark.rollback",
            # a moving device (emu.agent.drivers): its access link, its handover
            "device.link", "device.leave", "device.join",
            # a spare broker joining (workloads.broker_scaling): the operators read there too,
            # the drivers publish there
            "readers.broker", "drivers.broker",
            # a node's part of the run's control-message broadcasts (emu.agent.broadcast)
            "broadcast.plan")
SETTINGS = ("publish.rate", "run.epoch")

_COMPACT = (",", ":")
_string = json.encoder.encode_basestring_ascii  # json.dumps of a str


def request_topic(node: str) -> str:
    """Where the host sends requests for one node (every node also reads ALL_REQUESTS)."""
    return f"{MANAGEMENT}/{node}/req"


# Replies go to the controller on a topic of the request's, with the replying node's name at
# the fourth level: `foglab/mgmt/controller/<node>/<controller>/<request id>`. A closed
# cluster's ACL lets a node write there under its own name only (emu.cluster.access), and the
# controller takes a reply for the node its topic names: no node answers for another. A
# request to every node names NODE_LEVEL there, which each node replaces with its name.
CONTROLLER = f"{MANAGEMENT}/controller"
NODE_LEVEL = "{node}"


def reply_topic(node: str, controller: str, request_id: str) -> str:
    return f"{CONTROLLER}/{node}/{controller}/{request_id}"


def replies_filter(controller: str) -> str:
    """What a controller reads: every node's replies to its requests."""
    return f"{CONTROLLER}/+/{controller}/+"


def replier(topic: str) -> tuple[str, str] | None:
    """(node, request id) a reply's topic names; None for a topic not a reply's."""
    levels = topic.split("/")
    if len(levels) != 6 or "/".join(levels[:3]) != CONTROLLER:
        return None
    return levels[3], levels[5]


def reply_for(reply: str, node: str) -> str:
    """The topic `node` answers a request on: its `reply`, NODE_LEVEL made the node's name."""
    return "/".join(node if level == NODE_LEVEL else level for level in reply.split("/"))


# The host's load generator (hybrid's simulated load, experiments.hybrid.load) numbers a
# gateway's simulated devices' messages from here in the gateway's own index: ids as its
# drivers', apart from its emulated devices' (which count from 0).
LOAD_SEQUENCE = 1 << (SEQUENCE_BITS - 1)
# An agent started again after its node crashed numbers its drivers' messages from its
# incarnation's block (2**32 ids each), apart from its earlier incarnations' and the load's.
INCARNATION_BITS = 32


def incarnation_sequence(incarnation: int) -> int:
    """The first sequence number of an agent's incarnation (0: its first start)."""
    first = incarnation << INCARNATION_BITS
    if not 0 <= first < LOAD_SEQUENCE:
        raise ValueError(f"incarnation {incarnation}: at most "
                         f"{LOAD_SEQUENCE >> INCARNATION_BITS} starts of an agent in a run")
    return first


def load_topic(node: str) -> str:
    """Where the host's load generator publishes the readings of a gateway's simulated devices:
    a batch of envelopes, one per line (`load_batch`), that the gateway's agent takes as its
    drivers' (emu.agent.agent)."""
    return f"foglab/load/{node}"


def load_batch(envelopes: list[bytes]) -> bytes:
    """Encoded envelopes in one payload: an encoded envelope has no raw newline (JSON escapes
    it), so a newline separates them."""
    return b"\n".join(envelopes)


def stream_topic(stream: str, node: str, device: str, channel: str) -> str:
    """A device's messages leave its gateway on `<stream>/<node>` (shared channel) or
    `<stream>/<node>/<device>` (exclusive): workloads.spec.StreamSpec.topic's rule."""
    if channel == "shared":
        return f"{stream}/{node}"
    return f"{stream}/{node}/{device}"


def output_topic(writes: str, node: str) -> str:
    return f"{writes}/{node}"


def message_id(index: int, sequence: int) -> int:
    """Unique in a run: nodes have distinct indexes, and each counts its own messages."""
    if not 0 <= sequence < 1 << SEQUENCE_BITS:
        raise ValueError(f"sequence {sequence} does not fit in {SEQUENCE_BITS} bits")
    return (index << SEQUENCE_BITS) | sequence


@dataclass(slots=True)
class Envelope:
    """One message on the wire: its id, stream and source device, when the device sent it
    (host clock, shared by every container), how many operators it passed, and its body.

    `sn` is the serial number of the message in the input stream of the stateful operator
    reading it, None when nobody stamped one. A window operator takes a stamped SN as its
    Event.sn and otherwise numbers its inputs itself in their order of arrival at it
    (emu.agent.operators). The parallel migration strategy needs the former: the source and
    the target operator must see one SN per event, so it is stamped once for both, where the
    simulator's broker stamps it per operator group (sim.pubsub); Mosquitto cannot, so on
    emu the source instance does, in its order of arrival, on the copy of each input it
    mirrors to the target (emu.agent.parallel). An operator's outputs carry no SN: they
    are the next operator's input stream, numbered for it.
    """

    id: int
    stream: str
    src: str
    t: float
    hops: int
    body: str
    sn: int | None = None

    def encode(self) -> bytes:
        """What json.dumps writes for the envelope as a compact object, written directly:
        this is every message's cost."""
        sn = "" if self.sn is None else f',"sn":{self.sn}'
        return (f'{{"id":{self.id},"stream":{_string(self.stream)},"src":{_string(self.src)},'
                f'"t":{self.t!r},"hops":{self.hops},"body":{_string(self.body)}{sn}}}').encode()

    @classmethod
    def decode(cls, payload: bytes | str) -> Envelope:
        try:
            data = json.loads(payload)
            sn = data.get("sn")
            return cls(int(data["id"]), str(data["stream"]), str(data["src"]), float(data["t"]),
                       int(data["hops"]), str(data["body"]), None if sn is None else int(sn))
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise ValueError(f"not a foglab message envelope: {error!r}") from None

    def passed_on(self, body: str) -> Envelope:
        """An operator's output: the input's identity and send time, one more hop."""
        return Envelope(self.id, self.stream, self.src, self.t, self.hops + 1, body)


# Management -----------------------------------------------------------------------------------


class RequestError(ValueError):
    """A request that cannot be carried out; `request_id` and `reply` when it had them."""

    def __init__(self, message: str, request_id: str | None = None, reply: str | None = None):
        super().__init__(message)
        self.request_id = request_id
        self.reply = reply


@dataclass
class Request:
    """{"id": str, "command": str, "reply": topic, "args": {...}}"""

    id: str
    command: str
    reply: str
    args: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps({"id": self.id, "command": self.command, "reply": self.reply,
                           "args": self.args}, separators=_COMPACT).encode()

    @classmethod
    def decode(cls, payload: bytes | str) -> Request:
        """The request, or a RequestError saying what is wrong with it."""
        try:
            data = json.loads(payload)
        except ValueError as error:
            raise RequestError(f"request is not JSON: {error}") from None
        if not isinstance(data, dict):
            raise RequestError("request must be a JSON object")
        request_id, reply = data.get("id"), data.get("reply")
        request_id = None if request_id is None else str(request_id)
        if not isinstance(reply, str) or not reply or any(c in reply for c in "+#"):
            raise RequestError("request needs a 'reply' topic (no wildcards)", request_id)
        if request_id is None:
            raise RequestError("request needs an 'id'", None, reply)
        command = data.get("command")
        if command not in COMMANDS:
            raise RequestError(f"unknown command {command!r}; commands: {', '.join(COMMANDS)}",
                               request_id, reply)
        args = data.get("args", {})
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise RequestError(f"{command}: 'args' must be a JSON object, not "
                               f"{type(args).__name__}", request_id, reply)
        return cls(request_id, command, reply, args)


def operator_name(args: dict[str, Any]) -> str:
    """The operator a request's args name (`operator`); a ValueError if they name none."""
    name = args.get("operator")
    if not isinstance(name, str) or not name:
        raise ValueError("args need 'operator', the operator's name")
    return name


def response(request_id: str | None, node: str, ok: bool, error: str | None, t: float,
             result: Any = None) -> bytes:
    """{"id", "node", "ok", "error", "t"}, and "result" for commands that answer something."""
    data: dict[str, Any] = {"id": request_id, "node": node, "ok": ok, "error": error, "t": t}
    if result is not None:
        data["result"] = result
    return json.dumps(data, separators=_COMPACT).encode()
