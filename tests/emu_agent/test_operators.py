"""Operators: local reads, chains to sinks, window counts, RIoTBench tasks, bad input."""

from __future__ import annotations

import json
import time

import pytest

from emu.agent.config import DriverConfig, OperatorConfig
from emu.agent.operators import Operator
from emu.agent.protocol import Envelope

from .conftest import read_csv, wait_for

CITY = DriverConfig("city", ["d-0", "d-1", "d-2"], rate=20.0, arrivals="periodic", qos=1)


def settle(agent, seconds: float) -> None:
    """Let the drivers run, then stop them and let what is in flight arrive."""
    time.sleep(seconds)
    agent.scheduler.call(agent.drivers.set_rate, 0.0)
    time.sleep(0.3)


def test_a_local_read_never_crosses_the_broker(config, agents, listen) -> None:
    listener = listen("#")
    agent = agents(config("gw-1", drivers=[CITY], operators=[
        OperatorConfig("filter", reads=["city/#"], writes="clean")]))
    settle(agent, 1.5)
    heard = listener.snapshot()
    assert {h.topic for h in heard} == {"clean/gw-1"}
    sent = {int(r["id"]) for r in read_csv_now(agent, "sent.csv")}
    outputs = [h.envelope for h in heard]
    assert len(sent) > 50 and {e.id for e in outputs} == sent
    assert all(e.hops == 1 for e in outputs)


def test_a_forwarding_driver_also_feeds_the_broker(config, agents, listen) -> None:
    listener = listen("#")
    forwarded = DriverConfig("city", ["d-0"], rate=20.0, arrivals="periodic", forward=True)
    agent = agents(config("gw-1", drivers=[forwarded], operators=[
        OperatorConfig("filter", reads=["city/#"], writes="clean")]))
    settle(agent, 1.0)
    raw = {h.envelope.id for h in listener.snapshot("city/")}
    out = {h.envelope.id for h in listener.snapshot("clean/")}
    assert len(raw) > 10 and raw == out
    # The operator took each message once: its copy back from the broker is ignored.
    assert agent.operators["filter"].processed == len(raw)


def read_csv_now(agent, name: str):
    agent.scheduler.call(agent.records.flush)
    time.sleep(0.1)
    return read_csv(agent.records.directory / name)


def test_a_passthrough_to_sink_chain_across_nodes_records_every_message(
        config, agents) -> None:
    cloud = agents(config("cloud-1", kind="cloud_vm", index=100, operators=[
        OperatorConfig("store", reads=["clean/+"])]))
    gateways = [agents(config(f"gw-{i}", index=i, drivers=[CITY], operators=[
        OperatorConfig("filter", reads=["city/#"], writes="clean")])) for i in (1, 2)]
    time.sleep(1.5)
    for gateway in gateways:
        gateway.scheduler.call(gateway.drivers.set_rate, 0.0)
    time.sleep(0.5)
    sent = {}
    for gateway in gateways:
        sent |= {int(r["id"]): r for r in read_csv_now(gateway, "sent.csv")}
    received = read_csv_now(cloud, "received.csv")
    assert len(sent) > 100
    assert sorted(int(r["id"]) for r in received) == sorted(sent)
    for row in received:
        origin = sent[int(row["id"])]
        assert (row["stream"], row["source"], row["sink"]) == ("city", origin["source"],
                                                                 "cloud-1")
        assert float(row["t_sent"]) == float(origin["t_sent"])
        assert float(row["t_received"]) >= float(row["t_sent"])
        assert row["hops"] == "1"


def test_a_chain_on_one_node_runs_in_process(config, agents, listen) -> None:
    listener = listen("#")
    agent = agents(config("gw-1", drivers=[CITY], operators=[
        OperatorConfig("filter", reads=["city/#"], writes="clean"),
        OperatorConfig("local-sink", reads=["clean/gw-1"])]))
    settle(agent, 1.0)
    received = read_csv_now(agent, "received.csv")
    sent = read_csv_now(agent, "sent.csv")
    assert len(sent) > 30 and len(received) == len(sent)
    # The output went to the broker as well, for readers elsewhere, but was read once here.
    assert len(listener.snapshot("clean/")) == len(sent)
    assert agent.operators["local-sink"].processed == len(sent)


def test_a_window_count_outputs_one_count_per_window(tmp_path) -> None:
    operator = Operator(OperatorConfig("count", reads=["city/#"], writes="counts", window=2.0,
                                       records=str(tmp_path)), "gw-1", epoch=100.0)
    arrivals = [100.1, 100.5, 101.9, 102.0, 103.99, 104.0, 109.0]
    outputs = []
    for i, now in enumerate(arrivals):
        outputs += operator.take(Envelope(i, "city", "d-0", now - 0.05, 0, "x"), now)
    assert operator.window is not None
    outputs += operator.window.close(200.0, "count", "gw-1")
    counts = [json.loads(o.body) for o in outputs]
    # The operator numbered its inputs 1.. in their order of arrival.
    assert [(c["window"], c["count"], c["first"], c["first_sn"], c["last_sn"])
            for c in counts] == [(0, 3, 0, 1, 3), (1, 2, 3, 4, 5), (2, 1, 5, 6, 6),
                                 (4, 1, 6, 7, 7)]
    assert counts[0]["start"] == 100.0 and counts[0]["end"] == 102.0
    assert [o.id for o in outputs] == [0, 3, 5, 6] and all(o.hops == 1 for o in outputs)
    assert [o.t for o in outputs] == [100.05, 101.95, 103.95, 108.95]
    assert operator.window.close(300.0, "count", "gw-1") == []
    rows = read_csv(tmp_path / "windows.csv")
    assert [(r["window"], r["count"], float(r["t"]), float(r["t_first"])) for r in rows] == [
        ("0", "3", 102.0, 100.1), ("1", "2", 104.0, 102.0), ("2", "1", 109.0, 104.0),
        ("4", "1", 200.0, 109.0)]


def test_window_counts_through_the_broker_add_up_to_the_input(config, agents, listen) -> None:
    listener = listen("counts/#")
    agent = agents(config("gw-1", drivers=[CITY], operators=[
        OperatorConfig("count", reads=["city/#"], writes="counts", window=0.5)]))
    settle(agent, 2.2)
    time.sleep(0.6)  # the last window's timer
    counts = [json.loads(h.envelope.body) for h in listener.snapshot()]
    sent = read_csv_now(agent, "sent.csv")
    assert sum(c["count"] for c in counts) == len(sent) > 100
    windows = [c["window"] for c in counts]
    assert windows == sorted(set(windows))
    # Each window counted the inputs its SNs span, numbered on from the last window's, so
    # none was counted twice or left out; 3 devices at 20 msg/s: 30 messages in a whole half
    # second on average over the inner windows (one window may get a reading late into the
    # next, as a loaded host delays it, but the two together keep it).
    assert all(c["count"] == c["last_sn"] - c["first_sn"] + 1 for c in counts)
    assert all(later["first_sn"] == earlier["last_sn"] + 1
               for earlier, later in zip(counts[:-1], counts[1:], strict=True))
    inner = [c["count"] for c in counts[1:-1]]
    assert sum(inner) / len(inner) == pytest.approx(30, abs=2), inner
    assert all(c["end"] - c["start"] == 0.5 for c in counts)


def test_riot_tasks_read_senml_bodies(config, agents, listen) -> None:
    listener = listen("#")
    agent = agents(config("gw-1", drivers=[CITY], operators=[
        OperatorConfig("valid", task="range_filter", reads=["city/#"], writes="valid",
                       params={"ranges": {"temperature": [-100, 100]}}),
        OperatorConfig("hot", task="range_filter", reads=["city/#"], writes="hot",
                       params={"ranges": {"temperature": [1000, 2000]}}),
        OperatorConfig("parse", task="senml_parse", reads=["city/#"], writes="parsed")]))
    settle(agent, 1.0)
    sent = len(read_csv_now(agent, "sent.csv"))
    assert len(listener.snapshot("valid/")) == sent > 30
    assert listener.snapshot("hot/") == []
    assert len(listener.snapshot("parsed/")) == sent
    body = listener.snapshot("valid/")[0].envelope.body
    assert json.loads(body)[0]["bn"].startswith("d-")
    assert all(op.errors == 0 for op in agent.operators.values())


def test_a_task_failing_on_a_message_counts_an_error_and_goes_on(config, agents,
                                                                 listen) -> None:
    listener = listen("valid/#")
    csv_city = DriverConfig("city", ["d-0"], rate=20.0, arrivals="periodic", format="csv")
    agent = agents(config("gw-1", drivers=[csv_city], operators=[
        OperatorConfig("valid", task="range_filter", reads=["city/#"], writes="valid")]))
    settle(agent, 1.0)
    operator = agent.operators["valid"]
    assert operator.errors == operator.processed > 10
    assert "neither a SenML pack nor a JSON reading" in operator.last_error
    assert listener.snapshot() == []
    wait_for(lambda: agent.scheduler.failures == 0)


@pytest.mark.parametrize("fields,message", [
    ({"task": "no_such_task"}, "unknown task 'no_such_task'"),
    ({"task": "range_filter", "params": {"bogus": 1}}, "no parameter 'bogus'"),
    ({"params": {"x": 1}}, "'passthrough' has no parameters"),
    ({"reads": []}, "reads nothing"),
    ({"reads": ["city/#/x"]}, "not an MQTT topic filter"),
    ({"window": 0}, "window must be > 0"),
    ({"engine": "spark"}, "engine 'spark'"),
    ({"writes": "out/#"}, "not a topic name"),
])
def test_a_bad_operator_config_says_what_is_wrong(fields: dict, message: str) -> None:
    fields = {"reads": ["city/#"], **fields}
    with pytest.raises(ValueError, match=message):
        Operator(OperatorConfig("op", **fields), "gw-1", 0.0)


def test_overlapping_filters_take_a_message_once_and_shared_ids_all(config, agents,
                                                                    broker) -> None:
    import paho.mqtt.client as mqtt

    agent = agents(config("cloud-1", operators=[
        OperatorConfig("a", reads=["x/#"]), OperatorConfig("b", reads=["x/+", "x/#"])]))
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    publisher.connect(broker.host, broker.port)
    publisher.loop_start()
    try:
        # Two outputs of one input share its id; one client's overlapping subscriptions get
        # one copy of each message from the broker.
        for message_id, body in ((1, "p"), (1, "q"), (2, "p")):
            envelope = Envelope(message_id, "city", "d-0", time.time(), 1, body)
            publisher.publish("x/gw-9", envelope.encode(), qos=1).wait_for_publish(5)
        wait_for(lambda: agent.operators["b"].processed >= 3)
        time.sleep(0.3)
    finally:
        publisher.disconnect()
        publisher.loop_stop()
    assert (agent.operators["a"].processed, agent.operators["b"].processed) == (3, 3)
    received = read_csv_now(agent, "received.csv")
    assert sorted((r["id"], r["sink"]) for r in received) == [("1", "cloud-1")] * 4 + \
        [("2", "cloud-1")] * 2


# Selectivity and what an operator filters -----------------------------------------------------


def sim_decisions(selectivity: float, inputs: int) -> list[int]:
    """What the simulator's operator instance passes of each input, in order."""
    from sim.operators import OperatorInstance

    instance = OperatorInstance.__new__(OperatorInstance)  # only its credit is used here
    instance.selectivity, instance._credit = selectivity, 0.0
    return [instance._passes() for _ in range(inputs)]


@pytest.mark.parametrize("selectivity", [0.0, 0.1, 0.25, 1 / 3, 0.5, 0.95, 1.0])
def test_selectivity_passes_the_inputs_the_simulator_passes(selectivity: float) -> None:
    operator = Operator(OperatorConfig("f", reads=["city/#"], writes="clean",
                                       selectivity=selectivity), "gw-1", 0.0)
    decisions = [len(operator.take(Envelope(i, "city", "d-0", 0.0, 0, "x"), 0.0))
                 for i in range(1000)]
    assert decisions == sim_decisions(selectivity, 1000)
    assert sum(decisions) == round(1000 * selectivity)
    assert operator.filtered == 1000 - sum(decisions)


def filtered_rows(directory) -> list[dict[str, str]]:
    return read_csv(directory / "filtered.csv")


def test_what_an_operator_passes_nothing_on_for_is_noted_with_why(tmp_path) -> None:
    def operator(name: str, **fields) -> Operator:
        return Operator(OperatorConfig(name, reads=["city/#"], records=str(tmp_path),
                                       **fields), "gw-1", 0.0)

    half = operator("half", writes="clean", selectivity=0.5)
    none_hot = operator("hot", task="range_filter", writes="hot",
                        params={"ranges": {"temperature": [1000, 2000]}})
    sink = operator("sink", selectivity=0.5, task="range_filter")
    body = '[{"bn":"d-0/","bt":1.0,"n":"temperature","v":20.0}]'
    for i in range(4):
        envelope = Envelope(i, "city", "d-0", 0.5, 0, body if i < 3 else "not senml")
        for op in (half, none_hot, sink):
            op.take(envelope, 10.0 + i)
    rows = [(r["id"], r["operator"], r["sink"], r["reason"]) for r in filtered_rows(tmp_path)]
    assert sorted(rows) == sorted([
        ("0", "half", "0", "selectivity"), ("2", "half", "0", "selectivity"),
        ("0", "hot", "0", "task"), ("1", "hot", "0", "task"), ("2", "hot", "0", "task"),
        ("3", "hot", "0", "error"),
        # A sink recorded every arrival: only what its selectivity drops is taken back; a
        # task's error or empty output there does not undo the delivery.
        ("0", "sink", "1", "selectivity"), ("2", "sink", "1", "selectivity")])
    first = filtered_rows(tmp_path)[0]
    assert (first["stream"], first["source"], first["node"], float(first["t"])) == (
        "city", "d-0", "gw-1", 10.0)
    assert (half.filtered, none_hot.filtered, sink.filtered) == (2, 4, 2)


def test_a_window_notes_nothing_it_counts(tmp_path) -> None:
    operator = Operator(OperatorConfig("count", reads=["city/#"], writes="counts", window=1.0,
                                       records=str(tmp_path)), "gw-1", 0.0)
    for i in range(5):
        operator.take(Envelope(i, "city", "d-0", 0.1 * i, 0, "x"), 0.1 * i)
    assert not (tmp_path / "filtered.csv").exists() and operator.filtered == 0


@pytest.mark.parametrize(("fields", "message"), [
    ({"selectivity": 1.5}, "selectivity must be from 0 to 1 .* not 1.5"),
    ({"selectivity": -0.1}, "selectivity must be from 0 to 1"),
    ({"selectivity": 0.5, "window": 2.0}, "selectivity must be 1 with a window, not 0.5"),
])
def test_a_bad_selectivity_is_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Operator(OperatorConfig("op", reads=["city/#"], **fields), "gw-1", 0.0)


def test_an_install_request_checks_selectivity_and_records_types() -> None:
    from emu.agent.operators import operator_config

    assert operator_config({"name": "f", "selectivity": 0.5}).selectivity == 0.5
    with pytest.raises(ValueError, match="'selectivity' must be a number"):
        operator_config({"name": "f", "selectivity": "half"})
    with pytest.raises(ValueError, match="'records' must be a directory path"):
        operator_config({"name": "f", "records": 3})


def test_a_gateway_filter_sends_on_half_and_notes_the_rest(config, agents, listen,
                                                           tmp_path) -> None:
    listener = listen("clean/#")
    records = tmp_path / "gw-1"
    agent = agents(config("gw-1", drivers=[CITY], operators=[
        OperatorConfig("filter", reads=["city/#"], writes="clean", selectivity=0.5,
                       records=str(records))]))
    settle(agent, 1.5)
    sent = {int(r["id"]) for r in read_csv_now(agent, "sent.csv")}
    passed = {h.envelope.id for h in listener.snapshot()}
    filtered = {int(r["id"]) for r in filtered_rows(records)}
    assert len(sent) > 50
    assert passed | filtered == sent and not passed & filtered
    assert len(passed) == len(sent) // 2
