"""Control-message broadcasts in the agent (`scenario.broadcasts`: workloads.broadcast says
what they are, emu.features.broadcasts how the host sets them up and reads them back).

The messages are MQTT messages between agents through their broker, as IoTCloud sends its
control messages: QoS 1, the broadcast's `size` bytes, each on its receiver's own topic
(`topic(index, sender, node)`, under the `foglab/` prefix of the testbed's own topics, which no
stream's topic has). The agent subscribes to its own (`node_filter`) with its requests, and
takes them apart from the data (a callback of their own on the MQTT client).

The host gives each node that sends its part of the plan (`broadcast.plan`): per broadcast
the message's size, the CPU `cost` of one send, the children the node sends to (in order)
and, for the sender, `at` (seconds after the run's epoch, which the request carries). The
sender starts on its own scheduler at epoch + at (not on the host's request, whose latency
would count). A send is one action of the scheduler's thread: `cost` seconds of the thread's
CPU spent hashing (`spend`), then the publish; the next send is the next action, so what else the
node runs interleaves, as on sim's CPU. The container's CPU limit (its profile's cores times
its speed: emu.cluster.plan) makes those seconds last what they do on that node, as it does
for the tasks operators run, whose CPU on emu is what sim's `cost` stands for. A node forwards
to its children as soon as it has the message (the first copy: QoS 1 may deliver twice).

Every node writes to its records folder (`broadcasts.csv`, a row at once: a crash keeps it)
when the message reached it (time.time() as the MQTT client took it: the containers share the
host's clock), the sender when it began, and each send once published.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

from emu.agent.records import RowLog

if TYPE_CHECKING:
    from emu.agent.parts import AgentSurface

PREFIX = "foglab/broadcast"
RECORDS = "broadcasts.csv"
# A row per event: `start` (the sender began), `sent` (to `peer`, once published), `received`
# (the first copy; `peer` empty), `duplicate` (a later copy). `t`: host clock.
COLUMNS = ("broadcast", "node", "event", "t", "peer")
_BLOCK = bytes(16 * 1024)  # hashed in tens of microseconds, the GIL released (over 2 KiB)


def topic(index: int, sender: str, node: str) -> str:
    """Where broadcast `index`'s message from `sender` for `node` goes: the sender's name at
    the third level, which a closed cluster's ACL lets only the sender write (%u), so no node
    sends a message as another (emu.cluster.access)."""
    return f"{PREFIX}/{sender}/{index}/{node}"


def node_filter(node: str) -> str:
    """What `node` subscribes to: its messages of every broadcast, from any sender."""
    return f"{PREFIX}/+/+/{node}"


def spend(seconds: float) -> None:
    """Spend `seconds` of this thread's CPU (what a send's serialising and the framework's
    call stand for) hashing a block, which CPython does without the GIL: the agent's other
    threads run meanwhile, above all the MQTT client's, which writes out the message just
    published (a loop of Python code would hold the GIL and keep that message in paho's queue
    for up to the interpreter's switch interval, 5 ms, per send)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        hashlib.sha256(_BLOCK)


class Broadcasts:
    """One node's part of the run's broadcasts. `plan` on the scheduler thread (a request);
    messages arrive on the MQTT client's thread and are handed to the scheduler."""

    def __init__(self, agent: AgentSurface) -> None:
        self.agent = agent
        self.parts: dict[int, dict[str, Any]] = {}  # index -> this node's part of it
        self.reached: dict[int, float] = {}         # index -> when the message got here
        self._log = RowLog(agent.config.records, RECORDS, COLUMNS)
        agent.client.message_callback_add(node_filter(agent.node), self._arrived)

    def plan(self, args: dict[str, Any]) -> dict[str, Any]:
        """Take this node's parts (`parts`: node -> [{index, size, cost, children, at}]; `at`
        null but for the sender) of broadcasts that begin at `epoch` + at."""
        epoch, parts = args.get("epoch"), args.get("parts")
        if isinstance(epoch, bool) or not isinstance(epoch, (int, float)):
            raise ValueError(f"args need 'epoch', the run's epoch (host clock), not {epoch!r}")
        if not isinstance(parts, dict):
            raise ValueError("args need 'parts', node -> its parts of the broadcasts")
        mine = parts.get(self.agent.node, [])
        for part in mine:
            index, children = part.get("index"), part.get("children")
            if not isinstance(index, int) or index in self.parts:
                raise ValueError(f"part {part!r}: a broadcast's 'index' given once")
            if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
                raise ValueError(f"broadcast {index}: 'children' are node names")
            if not isinstance(part.get("size"), int) or part["size"] <= 0:
                raise ValueError(f"broadcast {index}: 'size' is bytes > 0")
            if not isinstance(part.get("cost"), (int, float)) or part["cost"] < 0:
                raise ValueError(f"broadcast {index}: 'cost' is seconds >= 0")
        for part in mine:
            index = part["index"]
            self.parts[index] = part
            if part.get("at") is not None:  # the sender
                self.agent.scheduler.at(epoch + float(part["at"]), self._begin, index)
            elif index in self.reached:  # the message came before the plan did
                self._send(index, 0)
        return {"parts": len(mine)}

    def _arrived(self, client: Any, userdata: Any, message: Any) -> None:
        """On the MQTT client's thread: the time first, then on to the scheduler."""
        t = self.agent.clock()
        self.agent.scheduler.call(self._received, message.topic, t)

    def _received(self, name: str, t: float) -> None:
        try:
            index = int(name.split("/")[3])
        except (IndexError, ValueError):
            self.agent.unreadable += 1
            return
        if index in self.reached:
            self._log.write((index, self.agent.node, "duplicate", t, ""))
            return
        self.reached[index] = t
        self._log.write((index, self.agent.node, "received", t, ""))
        if index in self.parts:
            self._send(index, 0)

    def _begin(self, index: int) -> None:
        self._log.write((index, self.agent.node, "start", self.agent.clock(), ""))
        self._send(index, 0)

    def _send(self, index: int, k: int) -> None:
        """The k-th send of this node's part of broadcast `index`; the next one after it."""
        part = self.parts[index]
        children = part["children"]
        if k >= len(children):
            return
        spend(part["cost"])
        child = children[k]
        self.agent.client.publish(topic(index, self.agent.node, child), bytes(part["size"]),
                                  qos=1)
        self._log.write((index, self.agent.node, "sent", self.agent.clock(), child))
        self.agent.scheduler.call(self._send, index, k + 1)

    def close(self) -> None:
        self._log.close()
