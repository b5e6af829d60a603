"""The agents' records, read back as the result tables the simulator writes (same meaning).

A node's records directory holds `sent.csv` (every message its drivers emitted, with `dropped`
set when the emulated device link lost it), `received.csv` (every message a sink operator of
the node got), `filtered.csv` (every input an operator of the node passed nothing on for:
its selectivity, its task giving no output, or the task's error; emu.agent.operators) and
`windows.csv` (every window output of its window operators; emu.agent.records.WINDOWS).

The `messages` table has, as the simulator's: a row per message delivered to a sink (its first
arrival there: QoS 1 is at least once, and a second copy counts as duplicated); a lost row per
message a device link dropped (`hops` 0); a lost row per message that was sent, read by some
operator on its way to a sink, and neither filtered nor delivered (lost past the device link:
`hops` 1, the links it is known to have crossed, as the records cannot say where it went on).
A filtered message has no row, as on sim; nor has a message of a stream no sink reads. A lost
row's `sink`, `t_received` and `latency` are null. Only messages sent within the run's duration
count. Times are seconds since the run's epoch, on the host clock every container shares.

`hops` counts the links a message crossed from its device to the sink, as the simulator counts
them (sim.network: one per link a message object arrives over, kept through every operator
that passes it on): the device's link to its gateway, and for each step between operators on
different nodes the publisher's path to its broker and the broker's path to the reader. The
agents count operators, not links; `Paths` turns a message's device, sink and count of operators
passed into links from the cluster's plan (which node reads which topic, each node's broker and
its path to it), following the agents' rules: a driver's message goes to the broker only when
no operator on its gateway reads it, an operator's output goes to local readers and the broker.
Where the records cannot tell which of an operator's instances passed a message on and their
paths differ in length, the shortest counts.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from emu.agent.protocol import SEQUENCE_BITS, matches, output_topic, stream_topic
from emu.agent.records import read_record
from workloads.operator_engines import operator_engine

SENT_COLUMNS = {"id": "int64", "stream": "string", "source": "string", "t_sent": "float64",
                "dropped": "int64"}
RECEIVED_COLUMNS = {"id": "int64", "stream": "string", "source": "string", "sink": "string",
                    "t_sent": "float64", "t_received": "float64", "hops": "int64"}
FILTERED_COLUMNS = {"id": "int64", "stream": "string", "source": "string", "node": "string",
                    "operator": "string", "sink": "int64", "reason": "string", "t": "float64"}
WINDOW_COLUMNS = {"t": "float64", "operator": "string", "node": "string", "window": "int64",
                  "start": "float64", "end": "float64", "first_sn": "int64", "last_sn": "int64",
                  "count": "int64", "value": "float64", "t_first": "float64",
                  "migration": "int64", "adjusted": "int64"}
# Columns a node's windows.csv may lack (written before they were added): their value then.
WINDOW_DEFAULTS = {"migration": -1, "adjusted": 0}
# The agent drops an output after this many operators (emu.agent.agent.MAX_HOPS).
MAX_OPERATORS = 32
# The links a message crossed once its device link delivered it: that link.
PAST_DEVICE_LINK = 1


def _read(directories: list[Path], name: str, columns: dict[str, str]) -> pd.DataFrame:
    """Each node's `name`, opened as emu.agent.records.read_record opens it (a link planted
    in the node's writable records folder is skipped with a warning, never followed)."""
    frames = []
    for directory in directories:
        rows = read_record(directory, name)
        if rows is None:
            continue
        with rows:
            if os.fstat(rows.fileno()).st_size > 0:
                frames.append(pd.read_csv(rows, dtype=columns, keep_default_na=False))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})
    return pd.concat(frames, ignore_index=True)


def _node_directories(root: Path) -> list[Path]:
    """The nodes' records folders under `root`: folders, not links to one (skipped)."""
    directories = sorted(p for p in Path(root).iterdir() if p.is_dir() and not p.is_symlink())
    if not directories:
        raise FileNotFoundError(f"no node records under {root}")
    return directories


def read_records(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every node's sent and received rows under `root` (one folder per node)."""
    directories = _node_directories(root)
    return (_read(directories, "sent.csv", SENT_COLUMNS),
            _read(directories, "received.csv", RECEIVED_COLUMNS))


def read_filtered(root: Path) -> pd.DataFrame:
    """Every node's filtered rows under `root`: what its operators passed nothing on for."""
    return _read(_node_directories(root), "filtered.csv", FILTERED_COLUMNS)


def read_windows(root: Path) -> pd.DataFrame:
    """Every node's window outputs under `root` (what went downstream: during a parallel
    migration, the rows its consistency checker wrote, emu.agent.parallel)."""
    rows = _read(_node_directories(root), "windows.csv", WINDOW_COLUMNS)
    for column, value in WINDOW_DEFAULTS.items():
        rows[column] = (rows[column].fillna(value) if column in rows else value)
        rows[column] = rows[column].astype("int64")
    return rows


def windows_table(root: Path, epoch: float, duration: float | None = None) -> dict:
    """The `windows` columns of a run from its nodes' records under `root`, as the simulator
    writes them: a row per window output, `t` when the window closed and went downstream and
    `processing_time` from when its operator took the window's first event until then (the
    thesis's processing latency), both on the host clock, `t` in seconds since the run's
    epoch. Only outputs within the run's `duration` count: as on sim, a window still open at
    the end gives no row. `migration` is the number of the parallel migration whose checker
    forwarded the output (-1 otherwise), `adjusted` whether it changed its SN and count, as
    sim's Coordinator.forwarded."""
    rows = read_windows(root)
    t = rows["t"] - epoch
    if duration is not None:
        rows, t = rows[t < duration], t[t < duration]
    order = t.sort_values(kind="stable").index
    rows, t = rows.loc[order], t.loc[order]
    return {
        "t": t.to_numpy(dtype="float64"),
        "operator": rows["operator"].to_numpy(dtype=object),
        "node": rows["node"].to_numpy(dtype=object),
        "window": rows["window"].to_numpy(dtype="int64"),
        "last_sn": rows["last_sn"].to_numpy(dtype="int64"),
        "count": rows["count"].to_numpy(dtype="int64"),
        "processing_time": (rows["t"] - rows["t_first"]).to_numpy(dtype="float64"),
        "migration": rows["migration"].to_numpy(dtype="int64"),
        "adjusted": rows["adjusted"].to_numpy(dtype="int64") != 0,
    }


@dataclass(frozen=True)
class Reader:
    """An operator instance as routing sees it: its node, the topic filters it reads, the
    topic it writes (None: it records arrivals, a sink), and whether it reads through its own
    broker session (an instance that may move: never locally, emu.agent.migration)."""

    node: str
    filters: tuple[str, ...]
    writes: str | None
    own_session: bool = False

    def reads(self, topic: str) -> bool:
        return any(matches(f, topic) for f in self.filters)


class Paths:
    """The links a message crosses on emu from its device to a sink (see the module's
    docstring), from where each device's messages enter (its gateway and topic), the operator
    instances, and each node's broker with the links of its path there."""

    def __init__(self, starts: dict[tuple[str, str], list[tuple[str, str]]],
                 readers: list[Reader], uplinks: dict[str, tuple[str, int]],
                 nodes: dict[int, str] | None = None,
                 elsewhere: dict[tuple[str, str], int] | None = None,
                 forwarded: set[str] | None = None):
        """`starts`: (stream, device) -> where its messages enter, (gateway, topic), one for
        each gateway the device sent from (a moving device hands over: hybrid);
        `uplinks`: node -> (its broker, links from the node to it); `nodes`: an agent's index
        (the high bits of the message ids it makes) -> its node; `elsewhere`: (node, another
        broker) -> links from the broker to the node, for a node whose operators read on the
        run's other brokers too (emu.cluster.plan); `forwarded`: the topics of drivers that
        publish to the broker what a local operator takes in-process (DriverConfig.forward),
        for readers on other nodes."""
        self.starts = starts
        self.forwarded = forwarded or set()
        self.elsewhere = elsewhere or {}
        self.nodes = nodes or {}
        self.readers = readers
        self.uplinks = uplinks
        self._reached: dict[tuple[str, str], dict[tuple[str, int], int]] = {}

    @classmethod
    def of_plan(cls, plan, moves: dict[str, list[str]] | None = None,
                handovers: dict[str, list[str]] | None = None) -> Paths:
        """From an emu.cluster.plan.ClusterPlan: its agents' drivers and operators, each
        agent's broker and the path of its link there. An operator whose job writes its own
        outputs (a Spark one: OperatorEngine.writes_its_own) counts as a sink: the agent
        records what reaches its node for it. `moves`: operator -> the nodes its
        instance migrates to during the run, where it reads as on its first node;
        `handovers`: device -> the gateways it was handed to during the run, where its
        messages enter as on its first one."""
        starts: dict[tuple[str, str], list[tuple[str, str]]] = {}
        readers: list[Reader] = []
        uplinks: dict[str, tuple[str, int]] = {}
        nodes: dict[int, str] = {}
        elsewhere: dict[tuple[str, str], int] = {}
        forwarded: set[str] = set()
        for container in plan.agents():
            node, agent = container.node, container.agent
            nodes[agent.index] = node
            broker = plan.brokers[node]
            links = len(plan.link(node, broker).path) - 1
            # A device group's container (emu.cluster.deployment.device_hosts) stands at a device:
            # its path begins with the device's link, which PAST_DEVICE_LINK counts already.
            uplinks[node] = (broker, links - 1 if container.kind == "device" else links)
            for other in agent.other_brokers:
                elsewhere[node, other] = len(plan.link(node, other).path) - 1
            for driver in agent.drivers:
                for device in driver.devices:
                    starts[driver.stream, device] = [
                        (gateway, stream_topic(driver.stream, gateway, device, driver.channel))
                        for gateway in [node, *(handovers or {}).get(device, [])]]
                    if driver.forward:
                        forwarded.add(starts[driver.stream, device][0][1])
            for op in agent.operators:
                writes = None if operator_engine(op.engine).writes_its_own else op.writes
                own = getattr(op, "session", None) is not None
                readers.append(Reader(node, tuple(op.reads), writes, own))
                readers += [Reader(target, tuple(op.reads), writes, True)
                            for target in (moves or {}).get(op.name, [])]
        return cls(starts, readers, uplinks, nodes, elsewhere, forwarded)

    def _leg(self, publisher: str, reader: Reader) -> int | None:
        """Links from a node to a reader through the publisher's broker (none when the reader
        is on the node and reads there); None when the reader does not read on that broker
        (the emulation does not bridge brokers: a node's operators read on another broker
        only over its links there, AgentConfig.other_brokers)."""
        if publisher == reader.node and not reader.own_session:
            return 0
        broker, up = self.uplinks[publisher]
        theirs, down = self.uplinks[reader.node]
        if broker == theirs:
            return up + down
        # A node reads another broker over its link there: through its session, or through
        # an instance's own that it took over (the session stays on the broker it began on).
        there = self.elsewhere.get((reader.node, broker))
        return None if there is None else up + there

    def _reach(self, start: tuple[str, str]) -> dict[tuple[str, int], int]:
        """(sink node, operators passed) -> fewest links, for a message entering at start."""
        found = self._reached.get(start)
        if found is not None:
            return found
        found = {}
        best: dict[tuple, int] = {}
        gateway, topic = start
        stack = [(gateway, topic, PAST_DEVICE_LINK, 0, True)]
        while stack:
            node, topic, links, passed, from_driver = stack.pop()
            readers = [r for r in self.readers if r.reads(topic)]
            if from_driver and topic not in self.forwarded and any(
                    r.node == node and not r.own_session for r in readers):
                # taken locally, not published
                readers = [r for r in readers if r.node == node and not r.own_session]
            for reader in readers:
                leg = self._leg(node, reader)
                if leg is None:
                    continue
                total = links + leg
                if reader.writes is None:
                    key = (reader.node, passed)
                    if total < found.get(key, math.inf):
                        found[key] = total
                    continue
                state = (reader.node, reader.writes, passed + 1)
                if passed < MAX_OPERATORS and total < best.get(state, math.inf):
                    best[state] = total
                    stack.append((reader.node, output_topic(reader.writes, reader.node), total,
                                  passed + 1, False))
        self._reached[start] = found
        return found

    def _starts(self, stream: str, device: str) -> list[tuple[str, str]]:
        starts = self.starts.get((stream, device))
        if starts is None:
            raise ValueError(f"no driver for device {device} of stream {stream} in the plan: "
                             "the records are of another run")
        return starts

    def read(self, stream: str, device: str) -> bool:
        """Whether the device's messages of the stream have a way to a sink."""
        return any(self._reach(start) for start in self._starts(stream, device))

    def hops(self, stream: str, device: str, sink: str, passed: int,
             origin: int | None = None) -> int:
        """Links crossed by a message of the device that reached sink after `passed`
        operators; a moving device's from the gateway whose agent made its id (`origin`, the
        id's high bits)."""
        starts = self._starts(stream, device)
        if len(starts) > 1 and origin is not None:
            starts = [start for start in starts if start[0] == self.nodes.get(origin)]
        found = [self._reach(start).get((sink, passed)) for start in starts]
        links = min((n for n in found if n is not None), default=None)
        if links is None:
            raise ValueError(f"a message of stream {stream} from device {device} reached "
                             f"{sink} after {passed} operators, which no path of the plan "
                             "does: the records do not fit the plan")
        return links


def messages_table(sent: pd.DataFrame, received: pd.DataFrame, epoch: float,
                   duration: float, *, filtered: pd.DataFrame | None = None,
                   paths: Paths | None = None) -> tuple[dict, dict]:
    """The `messages` columns, and facts: sent, received (distinct messages delivered),
    dropped, lost, filtered (and by why), duplicated, unread. Each row has sim's `state`:
    delivered, lost (dropped on the device link, or lost past it) or filtered (an operator
    dropped it, or no operator reads it: unread); never in_flight, which the records cannot
    tell from lost.

    `filtered`: the operators' filtered rows (read_filtered); `paths`: the run's Paths.
    Without `paths`, hops stay as the agents counted them (operators passed, not links) and
    every message is taken to have a reader: a caller with the plan passes it.
    """
    sent = sent[(sent["t_sent"] - epoch) < duration]
    if filtered is None:
        filtered = pd.DataFrame({c: pd.Series(dtype=t) for c, t in FILTERED_COLUMNS.items()})
    received = received[received["id"].isin(sent["id"])]
    filtered = filtered[filtered["id"].isin(sent["id"])]
    received = received.sort_values("t_received", kind="stable")
    # A sink recorded each arrival before its selectivity decided: per message and sink, the
    # arrivals it did not keep come off; the first arrival stands for the ones it kept.
    arrivals = received.groupby(["id", "sink"]).size()
    at_sink = filtered[filtered["sink"] != 0]
    taken_back = at_sink.groupby(["id", "node"]).size().rename_axis(["id", "sink"])
    kept = arrivals.sub(taken_back.reindex(arrivals.index, fill_value=0))
    first = received.drop_duplicates(subset=["id", "sink"])
    first = first[kept.reindex(pd.MultiIndex.from_frame(first[["id", "sink"]])).to_numpy() > 0]
    dropped = sent[sent["dropped"] != 0]
    passed_on = set(first["id"]) | set(filtered["id"]) | set(dropped["id"])
    unheard = sent[~sent["id"].isin(passed_on)]
    if paths is not None:
        read = {key: paths.read(*key)
                for key in set(zip(unheard["stream"], unheard["source"], strict=True))}
        is_read = [read[key] for key in zip(unheard["stream"], unheard["source"], strict=True)]
        lost, unread = unheard[is_read], unheard[[not r for r in is_read]]
        hops = _links(first, paths)
    else:
        lost, unread = unheard, unheard.iloc[:0]
        hops = list(first["hops"])
    delivered = set(first["id"])
    only_filtered = filtered[~filtered["id"].isin(delivered)].drop_duplicates("id")
    # A reading an operator dropped, or that no operator reads, is filtered: a row of its own
    # (sim's states), at the links the records cannot tell (0).
    kept_back = pd.concat([sent[sent["id"].isin(only_filtered["id"])],
                           unread]).drop_duplicates("id")
    gone = pd.concat([dropped, lost, kept_back])
    nan = [math.nan] * len(gone)
    columns = {
        "id": [*first["id"], *gone["id"]],
        "stream": [*first["stream"], *gone["stream"]],
        "source": [*first["source"], *gone["source"]],
        "sink": [*first["sink"], *[None] * len(gone)],
        "t_sent": [*(first["t_sent"] - epoch), *(gone["t_sent"] - epoch)],
        "t_received": [*(first["t_received"] - epoch), *nan],
        "latency": [*(first["t_received"] - first["t_sent"]), *nan],
        "hops": [*hops, *[0] * len(dropped), *[PAST_DEVICE_LINK] * len(lost),
                 *[0] * len(kept_back)],
        "lost": [False] * len(first) + [True] * (len(dropped) + len(lost))
        + [False] * len(kept_back),
        # The records cannot tell a reading in flight at the end from one lost: no in_flight.
        "state": ["delivered"] * len(first) + ["lost"] * (len(dropped) + len(lost))
        + ["filtered"] * len(kept_back),
    }
    facts = {"sent": len(sent), "received": len(delivered), "dropped": len(dropped),
             "lost": len(lost), "filtered": len(only_filtered),
             "filtered_by": {str(k): int(v) for k, v in
                             only_filtered["reason"].value_counts().sort_index().items()},
             "duplicated": int(kept[kept > 0].sum()) - len(first),
             "unread": len(unread)}
    return columns, facts


def _links(first: pd.DataFrame, paths: Paths) -> list[int]:
    """Each delivered row's links, computed once per stream, device, sink and count."""
    moving = {device for (_, device), starts in paths.starts.items() if len(starts) > 1}
    origins = [int(i) >> SEQUENCE_BITS if device in moving else None
               for i, device in zip(first["id"], first["source"], strict=True)]
    keys = list(zip(first["stream"], first["source"], first["sink"], first["hops"], origins,
                    strict=True))
    links = {key: paths.hops(key[0], key[1], key[2], int(key[3]), key[4]) for key in set(keys)}
    return [links[key] for key in keys]


def run_messages(root: Path, plan, epoch: float, duration: float,
                 moves: dict[str, list[str]] | None = None,
                 handovers: dict[str, list[str]] | None = None) -> tuple[dict, dict]:
    """The `messages` columns and facts of a run: its records under `root` read with its
    cluster plan (emu.cluster.plan.ClusterPlan), the operators' migrations (`moves`,
    operator -> target nodes) and the devices' handovers (device -> gateways) for the links
    messages crossed."""
    sent, received = read_records(root)
    columns, facts = messages_table(sent, received, epoch, duration,
                                    filtered=read_filtered(root),
                                    paths=Paths.of_plan(plan, moves, handovers))
    facts.update(emitted(sent, epoch, duration, plan_devices(plan)))
    return columns, facts


def plan_devices(plan) -> list[str]:
    """Every device an agent of the plan emulates (its drivers'), in the plan's order."""
    return list(dict.fromkeys(device for container in plan.agents()
                              for driver in container.agent.drivers
                              for device in driver.devices))


def emitted(sent: pd.DataFrame, epoch: float, duration: float,
            devices: list[str] = ()) -> dict:
    """What the drivers emitted within the run's duration, as sim's sources count it (every
    reading a device made, a device link's loss included): `emitted` and
    `emitted_by_device` (device -> count; 0 for a device of `devices` that emitted nothing:
    its node never started). Every emitted reading is delivered, filtered, dropped on the
    device link, lost past it or unread (no reader): the records cannot tell a reading in
    flight at the end from one lost, so `in_flight` is 0 on emu."""
    sent = sent[(sent["t_sent"] - epoch) < duration]
    by_device = dict.fromkeys(devices, 0)
    by_device.update({str(device): int(count) for device, count in
                      sent.drop_duplicates("id")["source"].value_counts().sort_index().items()})
    return {"emitted": int(sent["id"].nunique()), "emitted_by_device": by_device,
            "in_flight": 0}
