"""Stateful operators on the gateway agent: windows of workloads.windows, snapshots that
continue exactly, the size of a window's state, and window counts over a real broker."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from emu.agent.config import DriverConfig, OperatorConfig
from emu.agent.operators import Operator
from emu.agent.protocol import Envelope, message_id
from workloads.windows import Event, Window

from .conftest import read_csv, wait_for

EPOCH = 1_700_000_000.0

WINDOWS = {  # name: the operator's window
    "tumbling-time-count": 2.0,
    "tumbling-time-sum": {"size": 2.0, "aggregate": "sum", "field": "temperature"},
    "tumbling-time-average": {"size": 1.5, "aggregate": "average"},
    "sliding-time-count": {"kind": "sliding", "size": 2.0, "slide": 0.5},
    "sliding-time-sum": {"kind": "sliding", "size": 3.0, "slide": 1.0, "aggregate": "sum"},
    "sliding-time-average": {"kind": "sliding", "size": 2.0, "slide": 1.0,
                             "aggregate": "average", "field": "humidity"},
    "tumbling-count-count": {"size": 7, "basis": "count"},
    "tumbling-count-sum": {"size": 5, "basis": "count", "aggregate": "sum"},
    "tumbling-count-average": {"size": 6.0, "basis": "count", "aggregate": "average"},
    "sliding-count-count": {"kind": "sliding", "size": 6, "slide": 2, "basis": "count"},
    "sliding-count-sum": {"kind": "sliding", "size": 5, "slide": 3, "basis": "count",
                          "aggregate": "sum"},
    "sliding-count-average": {"kind": "sliding", "size": 4, "slide": 1, "basis": "count",
                              "aggregate": "average", "field": "temperature"},
}
TASKS = {  # the stateful RIoTBench tasks (tests/riot/test_snapshots.py) and their parameters
    "interpolation": {"fields": ["temperature", "humidity"]},
    "join": {"fields": ["temperature", "humidity"], "tolerance": 2.0},
    "kalman_filter": {},
    "distinct_count": {"field": "temperature", "precision": 6},
    "sliding_linear_regression": {"field": "temperature", "window": 3, "horizon": 2},
}
KINDS = {**{f"window {name}": {"window": window} for name, window in WINDOWS.items()},
         **{f"task {name}": {"task": name, "params": params} for name, params in TASKS.items()},
         "task and window": {"task": "kalman_filter",
                             "window": {"size": 1.0, "aggregate": "average"}}}


def senml(device: str, t: float, temperature: float, humidity: float | None) -> str:
    records = [{"bn": f"{device}/", "bt": t, "n": "temperature", "v": temperature}]
    if humidity is not None:
        records.append({"n": "humidity", "v": humidity})
    return json.dumps(records, separators=(",", ":"))


def stream(n: int, seed: int = 5, stamped: bool = False) -> list[tuple[float, Envelope]]:
    """n messages from three devices at irregular times over about n / 8 seconds (gaps long
    enough for empty windows too): (arrival at the operator, the message)."""
    rng = random.Random(seed)
    now, items = EPOCH + 0.3, []
    for sequence in range(n):
        now += rng.expovariate(8.0) if rng.random() > 0.02 else 3.5
        device = f"d-{rng.randrange(3)}"
        sent = round(now - 0.01, 6)
        humidity = None if rng.random() < 0.2 else round(rng.uniform(20, 90), 2)
        body = senml(device, round(sent - EPOCH, 6), round(rng.gauss(20, 5), 3), humidity)
        items.append((now, Envelope(message_id(3, sequence), "city", device, sent, 0, body,
                                    1000 + 2 * sequence if stamped else None)))
    return items


def feed(operator: Operator, items: list[tuple[float, Envelope]]) -> list[bytes]:
    """What the agent's loop does: each input at its time, and a window's timer ringing at
    its end when no input came first; the outputs, as they go on the wire."""
    outputs: list[Envelope] = []
    for now, envelope in items:
        window = operator.window
        while window is not None and window.count and window.end <= now:
            outputs += window.close(window.end, operator.name, operator.node)
        outputs += operator.take(envelope, now)
    return [output.encode() for output in outputs]


def make(kind: str, records: Path) -> Operator:
    records.mkdir(parents=True, exist_ok=True)  # the agent's Records make it
    fields = {"reads": ["city/#"], "writes": "out", "records": str(records), **KINDS[kind]}
    return Operator(OperatorConfig("op", **fields), "gw-1", EPOCH)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_restored_operator_continues_exactly_as_the_unmoved_one(kind: str,
                                                                  tmp_path: Path) -> None:
    items = stream(240)
    unmoved = make(kind, tmp_path / "unmoved")
    expected = feed(unmoved, items)
    windows = read_csv(tmp_path / "unmoved" / "windows.csv")
    if "window" in kind:
        assert len(windows) >= 8 and len(expected) == len(windows)
    else:
        assert len(expected) > 100
    # Only the average of humidity meets bodies without it (a fifth of them lack it).
    assert (unmoved.errors > 0) == (kind == "window sliding-time-average"), unmoved.last_error
    for cut in (0, 1, 57, 120, 239, 240):
        records = tmp_path / f"moved-{cut}"
        source = make(kind, records)
        outputs = feed(source, items[:cut])
        snapshot = source.snapshot()
        target = make(kind, records)
        target.restore(snapshot)
        assert target.snapshot() == snapshot
        outputs += feed(target, items[cut:])
        assert outputs == expected, cut
        assert source.errors + target.errors == unmoved.errors
        # Window boundaries, counts, SNs and values, and when each closed.
        assert read_csv(records / "windows.csv") == windows, cut
        assert target.snapshot() == unmoved.snapshot(), cut


def test_window_outputs_say_their_window_and_serial_numbers(tmp_path: Path) -> None:
    operator = make("window sliding-time-sum", tmp_path)
    outputs = [json.loads(Envelope.decode(o).body) for o in feed(operator, stream(200))]
    events = [Event(sn, now - EPOCH, json.loads(e.body)[0]["v"])
              for sn, (now, e) in enumerate(stream(200), start=1)]
    window = Window("sliding", 3.0, 1.0, aggregate="sum")
    results = [r for event in events for r in window.push(event)]
    # The timer closed the windows that ended before the next input, as that input would.
    assert [(o["window"], o["first_sn"], o["last_sn"], o["count"]) for o in outputs] == [
        (round(r.start), r.first_sn, r.last_sn, r.count) for r in results]
    assert [o["value"] for o in outputs] == pytest.approx([r.value for r in results])
    assert all(o["end"] - o["start"] == 3.0 and o["operator"] == "op" for o in outputs)


def test_stamped_serial_numbers_are_the_windows_own(tmp_path: Path) -> None:
    operator = make("window tumbling-count-count", tmp_path)
    outputs = [json.loads(Envelope.decode(o).body) for o in feed(operator,
                                                                 stream(21, stamped=True))]
    assert [(o["first_sn"], o["last_sn"], o["count"]) for o in outputs] == [
        (1000, 1012, 7), (1014, 1026, 7), (1028, 1040, 7)]
    assert operator.window.next_sn == 1041


def test_an_envelope_carries_a_serial_number_only_when_stamped() -> None:
    plain = Envelope(7, "city", "d-0", 1.5, 0, "x")
    stamped = Envelope(7, "city", "d-0", 1.5, 0, "x", 42)
    assert b'"sn"' not in plain.encode() and Envelope.decode(plain.encode()).sn is None
    assert Envelope.decode(stamped.encode()) == stamped
    assert json.loads(stamped.encode())["sn"] == 42
    # An output is the next operator's input, numbered for it.
    assert stamped.passed_on("y").sn is None


def test_a_window_s_state_grows_with_the_events_it_holds(tmp_path: Path) -> None:
    """The thesis's state is the events of the open window, 84 bytes each (Table 5.2); here
    56, as packed columns (workloads.windows): 8.4 MB is 150,000 events."""
    operator = Operator(OperatorConfig("count", reads=["events/#"], writes="counts",
                                       window=1000.0), "gw-1", EPOCH)
    sizes = {}
    for sequence in range(100_000):
        now = EPOCH + 1 + sequence * 0.005
        operator.take(Envelope(message_id(12, sequence), "events", f"producer-{sequence % 4}",
                               round(now - 0.0123, 6), 0, "x" * 100), now)
        if sequence + 1 in (1, 1000, 100_000):
            sizes[sequence + 1] = len(operator.snapshot())
    per_event = (sizes[100_000] - sizes[1]) / 99_999
    assert 55 <= per_event <= 57, per_event
    assert (sizes[1000] - sizes[1]) / 999 == pytest.approx(per_event, rel=0.05)
    assert 5.5e6 <= sizes[100_000] <= 5.7e6
    started = time.perf_counter()
    snapshot = operator.snapshot()
    taken = time.perf_counter() - started
    target = Operator(OperatorConfig("count", reads=["events/#"], writes="counts",
                                     window=1000.0), "gw-1", EPOCH)
    started = time.perf_counter()
    target.restore(snapshot)
    restored = time.perf_counter() - started
    assert target.window.window.held_events == 100_000
    print(f"\nwindow state: {per_event:.1f} B per event; 100,000 events: {len(snapshot)} B, "
          f"snapshot {taken * 1e3:.0f} ms, restore {restored * 1e3:.0f} ms")
    (output,) = target.window.close(EPOCH + 1001)
    assert json.loads(output.body)["count"] == 100_000 and output.id == message_id(12, 0)


@pytest.mark.parametrize(("fields", "message"), [
    ({"window": {"size": 2, "colour": "red"}}, "window has no field 'colour'"),
    ({"window": {"kind": "sliding"}}, "window needs a 'size'"),
    ({"window": {"size": 2.5, "basis": "count"}}, "count windows need whole-number size"),
    ({"window": {"size": 2, "slide": 3, "kind": "sliding"}}, "need 0 < slide <= size"),
    ({"window": {"size": 2, "aggregate": "median"}}, "'median' is not a valid Aggregate"),
    ({"window": {"size": "5s"}}, "window size must be a number, not '5s'"),
    ({"window": {"size": -1}}, "window size must be > 0, not -1"),
])
def test_a_bad_window_says_what_is_wrong(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"operator 'op': .*{message}"):
        Operator(OperatorConfig("op", reads=["city/#"], **fields), "gw-1", 0.0)


def test_a_snapshot_restores_only_an_operator_of_its_kind(tmp_path: Path) -> None:
    window = make("window tumbling-time-count", tmp_path)
    feed(window, stream(10))
    snapshot = window.snapshot()
    with pytest.raises(ValueError, match="snapshot of task 'passthrough' cannot restore task "
                                         "'kalman_filter'"):
        make("task kalman_filter", tmp_path).restore(snapshot)
    with pytest.raises(ValueError, match="with a window cannot restore an operator without"):
        Operator(OperatorConfig("op", reads=["city/#"]), "gw-1", EPOCH).restore(snapshot)
    with pytest.raises(ValueError, match="the snapshot is cut"):
        make("window tumbling-time-count", tmp_path).restore(snapshot[:-10])
    with pytest.raises(ValueError, match="cannot restore"):
        make("window sliding-time-count", tmp_path).restore(snapshot)
    with pytest.raises(ValueError, match="not an operator snapshot"):
        make("window tumbling-time-count", tmp_path).restore(b'{"config":{}}')


def test_a_sum_over_a_body_without_numbers_counts_an_error(tmp_path: Path) -> None:
    operator = make("window tumbling-time-sum", tmp_path)
    operator.take(Envelope(1, "city", "d-0", EPOCH, 0, '[{"bn":"d-0/","n":"x","vs":"a"}]'),
                  EPOCH + 0.1)
    assert operator.errors == 1 and "no field 'temperature'" in operator.last_error
    assert operator.window.count == 0


# On a real broker -----------------------------------------------------------------------------


CITY = DriverConfig("city", ["d-0", "d-1", "d-2"], rate=20.0, arrivals="poisson", qos=1)


def computed(arrivals: list[float], window: Window, end: float) -> list[tuple]:
    """What workloads.windows gives on the arrivals (seconds since the epoch), the windows
    still open at `end` closed by time."""
    results = [r for sn, t in enumerate(arrivals, start=1)
               for r in window.push(Event(sn, t, 1.0))]
    results += window.advance(end)
    return [(round(r.start / window.grid.slide), r.first_sn, r.last_sn, r.count)
            for r in results]


def test_window_counts_on_a_real_agent_are_those_of_workloads_windows(config, agents,
                                                                      tmp_path: Path) -> None:
    epoch = time.time()
    windows = {"cloud-1": (0.5, Window("tumbling", 0.5)),
               "cloud-2": ({"kind": "sliding", "size": 0.6, "slide": 0.2},
                           Window("sliding", 0.6, 0.2))}
    sinks = {node: agents(config(node, kind="cloud_vm", index=i, epoch=epoch, operators=[
        OperatorConfig("count", reads=["city/#"], window=window, records=str(tmp_path / node))]))
        for i, (node, (window, _)) in enumerate(windows.items(), start=10)}
    gateway = agents(config("gw-1", index=1, drivers=[CITY]))
    time.sleep(2.5)
    gateway.scheduler.call(gateway.drivers.set_rate, 0.0)
    time.sleep(1.0)  # in flight, then the last windows' timers
    sent = len(read_csv(wait_for(lambda: _flushed(gateway, "sent.csv"))))
    assert sent > 100
    for node, agent in sinks.items():
        received = read_csv(wait_for(lambda agent=agent: _flushed(agent, "received.csv")))
        assert len(received) == sent  # QoS 1 on a loopback broker: each message once
        arrivals = [float(r["t_received"]) - epoch for r in received]
        rows = read_csv(agent.records.directory / "windows.csv")
        got = [(int(r["window"]), int(r["first_sn"]), int(r["last_sn"]), int(r["count"]))
               for r in rows]
        assert got == computed(arrivals, windows[node][1], time.time() - epoch), node
        # Each closed within the scheduler's delay of its end, after its first event.
        for row in rows:
            closed = float(row["t"]) - epoch
            assert float(row["end"]) <= closed <= float(row["end"]) + 0.2
            assert float(row["start"]) <= float(row["t_first"]) - epoch < float(row["end"])
    tumbling = [int(r["count"]) for r in read_csv(sinks["cloud-1"].records.directory /
                                                  "windows.csv")]
    assert sum(tumbling) == sent
    # 3 devices, 20 messages per second each: 30 per half second, Poisson.
    assert 20 <= sum(tumbling[1:-1]) / len(tumbling[1:-1]) <= 40


def _flushed(agent, name: str) -> Path | None:
    agent.scheduler.call(agent.records.flush)
    time.sleep(0.1)
    path = agent.records.directory / name
    return path if path.exists() else None
