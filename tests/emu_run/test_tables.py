"""Agents' records as the messages table: delivered, dropped, lost, filtered, duplicated;
hops as links from the cluster's plan."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from emu.run.tables import Paths, Reader, messages_table, read_filtered, read_records, windows_table
from experiments.schema import conform

EPOCH = 1000.0
SENT = """id,stream,source,t_sent,dropped
1,city,s-1,1000.5,0
2,city,s-1,1001.5,1
3,city,s-2,1002.0,0
4,city,s-2,1003.0,0
5,city,s-2,1011.0,0
"""
RECEIVED = """id,stream,source,sink,t_sent,t_received,hops
3,city,s-2,cloud-1,1002.0,1002.25,1
1,city,s-1,cloud-1,1000.5,1000.53,1
1,city,s-1,cloud-1,1000.5,1000.9,1
5,city,s-2,cloud-1,1011.0,1011.1,1
"""


@pytest.fixture
def records(tmp_path: Path) -> Path:
    (tmp_path / "gw-1").mkdir()
    (tmp_path / "gw-1" / "sent.csv").write_text(SENT)
    (tmp_path / "cloud-1").mkdir()
    (tmp_path / "cloud-1" / "received.csv").write_text(RECEIVED)
    (tmp_path / "broker-1").mkdir()  # a service writes no records
    return tmp_path


def test_messages_are_delivered_first_arrivals_plus_lost_ones(records: Path) -> None:
    columns, facts = messages_table(*read_records(records), epoch=EPOCH, duration=10.0)
    rows = sorted(zip(columns["id"], columns["sink"], columns["t_sent"], columns["t_received"],
                      columns["latency"], columns["lost"], columns["hops"], strict=True))
    assert [r[0] for r in rows] == [1, 2, 3, 4]  # 5 was sent after the run's duration
    one, two, three, four = rows
    assert one[1:5] == ("cloud-1", 0.5, pytest.approx(0.53), pytest.approx(0.03))
    # Dropped on its device link: lost, no sink, nothing crossed.
    assert two[1] is None and math.isnan(two[3]) and math.isnan(two[4]) and two[5]
    assert two[6] == 0
    assert three[4] == pytest.approx(0.25) and not three[5]
    # Sent, never received, not filtered: lost past its device link.
    assert four[1] is None and four[5] and four[6] == 1
    assert facts == {"sent": 4, "received": 2, "dropped": 1, "lost": 1, "filtered": 0,
                     "filtered_by": {}, "duplicated": 1, "unread": 0}


def test_an_empty_run_gives_empty_columns(tmp_path: Path) -> None:
    (tmp_path / "gw-1").mkdir()
    columns, facts = messages_table(*read_records(tmp_path), epoch=EPOCH, duration=10.0)
    assert all(len(values) == 0 for values in columns.values())
    assert facts["sent"] == 0


def test_no_node_folders_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no node records"):
        read_records(tmp_path)


# The quickstart's shape: devices on gw-1 and gw-2, a filter there writing clean/<gw>, a sink
# on cloud-1; gw-2's uplink crosses a switch.
def quickstart_paths(**changes) -> Paths:
    fields = dict(
        starts={("city", "s-1"): [("gw-1", "city/gw-1")],
                ("city", "s-2"): [("gw-1", "city/gw-1")],
                ("city", "s-3"): [("gw-2", "city/gw-2")],
                ("noise", "s-1"): [("gw-1", "noise/gw-1")]},
        readers=[Reader("gw-1", ("city/#",), "clean"), Reader("gw-2", ("city/#",), "clean"),
                 Reader("cloud-1", ("clean/+",), None)],
        uplinks={"gw-1": ("broker-1", 1), "gw-2": ("broker-1", 2), "cloud-1": ("broker-1", 1)})
    fields.update(changes)
    return Paths(**fields)


def test_hops_are_the_links_from_device_to_sink_as_sim_counts_them() -> None:
    paths = quickstart_paths()
    # device link, gateway to broker, broker to cloud
    assert paths.hops("city", "s-1", "cloud-1", 1) == 3
    assert paths.hops("city", "s-3", "cloud-1", 1) == 4  # through the switch
    assert paths.read("city", "s-1") and not paths.read("noise", "s-1")
    with pytest.raises(ValueError, match="reached cloud-1 after 0 operators, which no path"):
        paths.hops("city", "s-1", "cloud-1", 0)
    with pytest.raises(ValueError, match="no driver for device s-9 of stream city"):
        paths.hops("city", "s-9", "cloud-1", 1)


def test_a_local_read_keeps_the_drivers_message_off_the_broker() -> None:
    """A sink on the gateway reads its devices' messages having crossed their link only; a
    remote reader of the raw stream gets nothing while a local operator takes it (the agent
    publishes a driver's message only when no operator of its node reads it)."""
    paths = quickstart_paths(readers=[Reader("gw-1", ("city/#",), None),
                                      Reader("cloud-1", ("city/#",), None)])
    assert paths.hops("city", "s-1", "gw-1", 0) == 1
    assert paths.hops("city", "s-3", "cloud-1", 0) == 1 + 2 + 1  # gw-2 has no local reader
    with pytest.raises(ValueError, match="reached cloud-1 after 0"):
        paths.hops("city", "s-1", "cloud-1", 0)


def test_a_forwarding_driver_reaches_the_local_reader_and_the_remote_one() -> None:
    """A driver whose stream a local operator takes and another node reads too publishes it
    as well (DriverConfig.forward): both sinks are on a path."""
    paths = quickstart_paths(readers=[Reader("gw-1", ("city/#",), None),
                                      Reader("cloud-1", ("city/#",), None)],
                             forwarded={"city/gw-1"})
    assert paths.hops("city", "s-1", "gw-1", 0) == 1
    assert paths.hops("city", "s-1", "cloud-1", 0) == 1 + 1 + 1


def test_readers_on_another_broker_are_out_of_reach() -> None:
    paths = quickstart_paths(uplinks={"gw-1": ("broker-1", 1), "gw-2": ("broker-1", 2),
                                      "cloud-1": ("broker-2", 1)})
    assert not paths.read("city", "s-1")


def test_a_chain_through_two_nodes_adds_each_leg() -> None:
    paths = quickstart_paths(readers=[
        Reader("gw-1", ("city/#",), "clean"), Reader("fog-1", ("clean/+",), "stats"),
        Reader("cloud-1", ("stats/fog-1",), None)],
        uplinks={"gw-1": ("broker-1", 1), "fog-1": ("broker-1", 2), "cloud-1": ("broker-1", 1)})
    assert paths.hops("city", "s-1", "cloud-1", 2) == 1 + (1 + 2) + (2 + 1)


FILTERED = """id,stream,source,node,operator,sink,reason,t
4,city,s-2,gw-1,filter,0,selectivity,1003.0
7,city,s-1,cloud-1,sink,1,selectivity,1004.1
"""


def test_every_sent_message_has_a_row_in_one_state(records: Path) -> None:
    (records / "gw-1" / "sent.csv").write_text(SENT + "6,city,s-1,1003.5,0\n"
                                               "7,city,s-1,1004.0,0\n8,noise,s-1,1004.5,0\n")
    (records / "cloud-1" / "received.csv").write_text(
        RECEIVED + "7,city,s-1,cloud-1,1004.0,1004.1,1\n")
    (records / "gw-1" / "filtered.csv").write_text(FILTERED)
    sent, received = read_records(records)
    columns, facts = messages_table(sent, received, EPOCH, 10.0,
                                    filtered=read_filtered(records), paths=quickstart_paths())
    rows = {i: (sink, hops, lost, state) for i, sink, hops, lost, state in zip(
        columns["id"], columns["sink"], columns["hops"], columns["lost"], columns["state"],
        strict=True)}
    # 4 filtered at gw-1 and 7 by the sink's selectivity; 8's stream has no reader: filtered
    # too (sim's state for a reading nothing reads).
    assert rows == {1: ("cloud-1", 3, False, "delivered"), 3: ("cloud-1", 3, False, "delivered"),
                    2: (None, 0, True, "lost"), 6: (None, 1, True, "lost"),
                    4: (None, 0, False, "filtered"), 7: (None, 0, False, "filtered"),
                    8: (None, 0, False, "filtered")}
    assert facts == {"sent": 7, "received": 2, "dropped": 1, "lost": 1, "filtered": 2,
                     "filtered_by": {"selectivity": 2}, "duplicated": 1, "unread": 1}
    messages = conform({"messages": columns})["messages"]  # the schema's checks pass
    assert messages.column("sink").null_count == 5
    # As on sim, the summary's states add up to what was sent within the run.
    from experiments.summary import summarise
    summary = summarise({**conform({}), "messages": messages}, 10.0, 1.0)
    assert (summary["emitted"], summary["delivered"], summary["lost"], summary["filtered"],
            summary["in_flight"]) == (7, 2, 2, 3, 0)


def test_a_sink_keeps_a_message_it_took_back_once_of_two_copies(records: Path) -> None:
    """QoS 1 delivered message 3 twice; the sink's selectivity dropped one copy: delivered."""
    (records / "cloud-1" / "received.csv").write_text(
        RECEIVED + "3,city,s-2,cloud-1,1002.0,1002.5,1\n")
    (records / "cloud-1" / "filtered.csv").write_text(
        "id,stream,source,node,operator,sink,reason,t\n"
        "3,city,s-2,cloud-1,sink,1,selectivity,1002.5\n")
    sent, received = read_records(records)
    columns, facts = messages_table(sent, received, EPOCH, 10.0,
                                    filtered=read_filtered(records), paths=quickstart_paths())
    assert sorted(i for i, lost in zip(columns["id"], columns["lost"], strict=True)
                  if not lost) == [1, 3]
    assert (facts["filtered"], facts["duplicated"]) == (0, 1)  # 1's second copy


def test_paths_of_a_planned_cluster() -> None:
    """From a real plan (no Docker): each device enters at its gateway, each agent has its
    broker and the path's length there."""
    from emu.cluster.deployment import agent_configs
    from emu.cluster.plan import plan_cluster
    from tests.foundation.helpers import point

    run_point = point("""
name: p
topology:
  name: p
  nodes:
    - {name: s, kind: device, replicas: 4}
    - {name: gw, kind: gateway, replicas: 2}
    - {name: sw, kind: switch}
    - {name: broker-1, kind: broker}
    - {name: cloud-1, kind: cloud_vm}
  links:
    - {from: s-*, to: gw-*, mode: spread, latency: 5ms}
    - {from: gw-*, to: sw, latency: 10ms}
    - {from: sw, to: broker-1, latency: 10ms}
    - {from: broker-1, to: cloud-1, latency: 1ms}
workload:
  name: w
  streams: [{name: city, sources: s-*, rate: 1/s, channel: exclusive}]
pipeline:
  - {name: filter, on: gateways, reads: city, writes: clean, selectivity: 0.5}
  - {name: sink, on: cloud-1, reads: clean}
run: {duration: 10s, backend: emu}
""")
    configs = agent_configs(run_point.topology, run_point.spec.workload,
                            run_point.spec.pipeline, seed=1, epoch=0.0)
    plan = plan_cluster(run_point.topology, "p", agents=configs)
    paths = Paths.of_plan(plan)
    assert paths.starts[("city", "s-1")] == [("gw-1", "city/gw-1/s-1")]
    assert paths.uplinks == {"gw-1": ("broker-1", 2), "gw-2": ("broker-1", 2),
                             "cloud-1": ("broker-1", 1)}
    assert {paths.hops("city", f"s-{i}", "cloud-1", 1) for i in range(1, 5)} == {4}
    # The simulator counts the same for the same experiment.
    from experiments.model_settings import sim_settings
    from sim.model import simulate

    result = simulate(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                      sim_settings(run_point.spec))
    messages = result.tables["messages"]
    assert set(messages["hops"][messages["state"] == "delivered"]) == {4}


# The windows table --------------------------------------------------------------------------

WINDOWS = """t,operator,node,window,start,end,first_sn,last_sn,count,value,t_first
1004.01,count,gw-2,1,2.0,4.0,5,9,5,5,1002.1
1002.02,count,gw-1,0,0.0,2.0,1,4,4,4,1000.3
1012.0,count,gw-1,5,10.0,12.0,10,10,1,1,1011.0
"""


def test_window_outputs_become_sim_s_windows_table(records: Path) -> None:
    (records / "gw-1" / "windows.csv").write_text(WINDOWS)
    columns = windows_table(records, EPOCH, duration=10.0)
    # The window that closed after the run's duration has no row, as on sim.
    assert list(columns["t"]) == pytest.approx([2.02, 4.01])
    assert list(columns["node"]) == ["gw-1", "gw-2"]
    assert list(columns["window"]) == [0, 1] and list(columns["last_sn"]) == [4, 9]
    assert list(columns["count"]) == [4, 5]
    # From the first event's arrival at the operator until the window went downstream.
    assert list(columns["processing_time"]) == pytest.approx([1.72, 1.91])
    assert list(columns["migration"]) == [-1, -1] and not columns["adjusted"].any()
    table = conform({"windows": columns})["windows"]
    assert table.num_rows == 2 and table.column_names == [
        "t", "operator", "node", "window", "last_sn", "count", "processing_time", "migration",
        "adjusted"]
    assert len(windows_table(records, EPOCH)["t"]) == 3  # no duration: every row


def test_a_run_without_windows_gives_an_empty_windows_table(records: Path) -> None:
    columns = windows_table(records, EPOCH, duration=10.0)
    assert all(len(values) == 0 for values in columns.values())
    assert conform({"windows": columns})["windows"].num_rows == 0


# An emulated run with window operators --------------------------------------------------------

DEVICES, RATE, DURATION = 6, 5.0, 12.0
WINDOWED = f"""
name: emu-windows
topology:
  name: emu-windows
  nodes:
    - {{name: s, kind: device, replicas: {DEVICES}}}
    - {{name: gw, kind: gateway, profile: rpi4, replicas: 2}}
    - {{name: broker-1, kind: broker}}
    - {{name: cloud-1, kind: cloud_vm, profile: vm.small}}
  links:
    - {{from: s-*, to: gw-*, mode: spread, latency: 5ms}}
    - {{from: gw-*, to: broker-1, latency: 20ms}}
    - {{from: broker-1, to: cloud-1, latency: 1ms}}
workload:
  name: w
  streams: [{{name: city, sources: s-*, rate: {RATE}/s, arrivals: periodic, qos: 1}}]
pipeline:
  - {{name: relay, on: gateways, reads: city, writes: clean}}
  - {{name: local, on: gateways, reads: city, window: {{size: 1s}}}}
  - {{name: count, on: cloud-1, reads: clean, window: {{size: 2s}}}}
run: {{backend: emu, duration: {DURATION}s, seed: 3, drain: 2s}}
"""


@pytest.mark.emu
@pytest.mark.slow
def test_an_emulated_run_writes_sim_s_windows_table(tmp_path: Path) -> None:
    import os

    if os.geteuid() != 0:
        pytest.skip("the emulation needs root")
    pytest.importorskip("docker")
    from emu.run.emulate import Request, Timing, emulate
    from tests.foundation.helpers import arrivals_per_window, point

    run_point = point(WINDOWED)
    records = tmp_path / "records"
    result = emulate(Request(run_point.topology, run_point.spec.workload,
                             run_point.spec.pipeline, Timing(DURATION, 1.0, 2.0), seed=3),
                     records=records)
    assert result.failed == {}
    columns = windows_table(records, result.facts["epoch"], DURATION)
    table = conform({"windows": columns})["windows"].to_pandas()
    assert set(zip(table["operator"], table["node"], strict=True)) == {
        ("local", "gw-1"), ("local", "gw-2"), ("count", "cloud-1")}
    assert (table["t"] < DURATION).all() and (table["migration"] == -1).all()
    assert not table["adjusted"].any()
    messages = result.tables["messages"]
    for (operator, node), rows in table.groupby(["operator", "node"], observed=True):
        size = 2.0 if operator == "count" else 1.0
        # A window closes at its end on the run's clock, never before, and before the next
        # one ends: its timer, not the next window's events (the window's size, 1 or 2 s, is
        # the margin for a loaded host's late timer, where the bound was 0.5 s); a window still
        # open at the end has no row.
        assert list(rows["window"]) == list(range(int(DURATION / size) - 1)), (operator, node)
        ends = (rows["window"] + 1) * size
        assert ((rows["t"] >= ends) & (rows["t"] < ends + size)).all(), (operator, node)
        # Each window counted the readings that reached its node in its span, as the node's
        # records say (not rate x size +- 1: a reading delayed across a window's edge by a
        # loaded host moves to the next window; a dry run saw 12 and 18).
        got = arrivals_per_window(rows, messages, size)
        assert all(count == arrived for _, count, arrived in got), (operator, node, got)
        # SNs number the operator's inputs in arrival order: the last of each window is
        # the count so far.
        assert list(rows["last_sn"]) == list(rows["count"].cumsum()), (operator, node)
        # The thesis's processing latency: from the first event's arrival, inside the window,
        # to the output, at the window's close.
        starts = rows["window"] * size
        assert ((rows["processing_time"] > 0)
                & (rows["processing_time"] <= rows["t"] - starts + 1e-6)).all(), (operator, node)


def test_a_device_handed_over_enters_at_each_of_its_gateways() -> None:
    # s-3 starts on gw-2 and is handed to gw-1: its messages take either gateway's filter.
    paths = quickstart_paths(starts={("city", "s-3"): [("gw-2", "city/gw-2"),
                                                       ("gw-1", "city/gw-1")]},
                             nodes={1: "gw-1", 2: "gw-2"})
    assert paths.read("city", "s-3")
    # The gateway whose agent numbered the message: gw-2's uplink has one link more.
    from_gw1 = paths.hops("city", "s-3", "cloud-1", 1, origin=1)
    assert from_gw1 == quickstart_paths().hops("city", "s-1", "cloud-1", 1)
    assert paths.hops("city", "s-3", "cloud-1", 1, origin=2) == from_gw1 + 1
    with pytest.raises(ValueError, match="which no path of the plan does"):
        paths.hops("city", "s-3", "gw-1", 0)
