"""scenario.broadcasts on sim (issue 19 item 3, seed 000's Fig. 5): exact latencies of a small
naive and tree broadcast computed by hand, the broadcasts table, the validation, and the
shipped experiment's naive latency rising with the workers while the tree's stays nearly flat
(no containers)."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.loader import load, parse_text
from experiments.schema import SchemaError, conform
from sim.model import simulate
from tests.foundation.helpers import run, settings
from topologies.errors import SpecError

# A coordinator and 4 workers behind a switch, 1 ms per link and no bandwidth limit (no
# serialisation), 2 ms of CPU per send on vm.small (speed 1): every time follows by hand.
# The heartbeat's sink runs on the broker, which no broadcast crosses.
CLUSTER = """
name: bcast
topology:
  name: cluster
  nodes:
    - {name: coord, kind: coordinator, profile: vm.small}
    - {name: worker, kind: cloud_vm, profile: vm.small, replicas: 4}
    - {name: switch, kind: switch}
    - {name: broker-1, kind: broker, profile: vm.small}
    - {name: sensor, kind: device}
  links:
    - {from: [coord, worker-*], to: switch, latency: 1ms}
    - {from: sensor, to: broker-1, latency: 1ms}
workload:
  name: beat
  streams:
    - {name: beat, sources: sensor, rate: 1/s, arrivals: periodic, size: 64B}
pipeline:
  - {name: monitor, on: broker-1, reads: beat, cost: 50us}
scenario:
  broadcasts: BROADCASTS
FAULTS
run: {backend: BACKEND, duration: 3s, seed: 1, drain: 1s}
"""
AT, SEND, HOP = 1.0, 2e-3, 2 * 1e-3  # coord -> switch -> worker: two links


def text(broadcasts: str, backend: str = "sim", faults: str = "") -> str:
    return (CLUSTER.replace("BROADCASTS", broadcasts).replace("BACKEND", backend)
            .replace("FAULTS", f"  faults: {faults}" if faults else ""))


def simulate_text(broadcasts: str, faults: str = ""):
    result = run(text(broadcasts, faults=faults))
    conform(result.tables)  # the tables pass the schema's checks
    return result


def test_naive_the_ith_worker_has_it_after_i_sends() -> None:
    result = simulate_text("[{at: 1s, from: coord, to: worker-*, mode: naive, cost: 2ms}]")
    table = result.tables["broadcasts"]
    assert list(table["worker"]) == ["worker-1", "worker-2", "worker-3", "worker-4"]
    expected = [i * SEND + HOP for i in (1, 2, 3, 4)]
    np.testing.assert_allclose(table["latency"], expected, atol=1e-12)
    np.testing.assert_allclose(table["t_received"], np.add(expected, AT), atol=1e-12)
    assert list(table["t_sent"]) == [AT] * 4
    assert list(table["depth"]) == [1] * 4
    assert list(table["mode"]) == ["naive"] * 4 and list(table["fanout"]) == [0] * 4
    [fact] = result.facts["broadcasts"]
    assert fact["reached"] == fact["workers"] == 4
    assert fact["completion"] == pytest.approx(4 * SEND + HOP, abs=1e-12)


def test_a_binary_tree_of_four_is_two_levels_deep() -> None:
    result = simulate_text(
        "[{at: 1s, from: coord, to: worker-*, mode: tree, fanout: 2, cost: 2ms}]")
    table = result.tables["broadcasts"]
    # coord sends to worker-1 then worker-2; worker-1, once it has it, to worker-3 then -4.
    got = dict(zip(table["worker"], zip(table["depth"], table["latency"], strict=True),
                   strict=True))
    expected = {"worker-1": (1, SEND + HOP), "worker-2": (1, 2 * SEND + HOP),
                "worker-3": (2, 2 * SEND + 2 * HOP), "worker-4": (2, 3 * SEND + 2 * HOP)}
    assert set(got) == set(expected)
    for worker, (depth, latency) in expected.items():
        assert got[worker][0] == depth
        assert got[worker][1] == pytest.approx(latency, abs=1e-12), worker
    assert list(table["fanout"]) == [2] * 4
    [fact] = result.facts["broadcasts"]
    assert fact["completion"] == pytest.approx(3 * SEND + 2 * HOP, abs=1e-12)  # naive: 4 sends
    assert fact["depth"] == 2


def test_a_crashed_worker_cuts_its_subtree_off() -> None:
    result = simulate_text(
        "[{at: 1s, from: coord, to: worker-*, mode: tree, fanout: 2, cost: 2ms}]",
        faults="[{at: 0.5s, crash: worker-1}]")
    assert list(result.tables["broadcasts"]["worker"]) == ["worker-2"]
    [fact] = result.facts["broadcasts"]
    assert fact["reached"] == 1 and fact["completion"] is None
    # The control message resent to the dead worker is not a lost row of the messages table.
    assert set(result.tables["messages"]["stream"]) == {"beat"}


def test_a_run_without_broadcasts_has_an_empty_table() -> None:
    result = run(text("[]"))
    tables = conform(result.tables)
    assert tables["broadcasts"].num_rows == 0
    assert "broadcasts" not in result.facts


@pytest.mark.parametrize(("broadcasts", "field", "said"), [
    ("[{at: 1s, from: nobody, to: worker-*}]", "scenario.broadcasts[0].from", "nobody"),
    ("[{at: 1s, from: coord, to: workr-*}]", "scenario.broadcasts[0].to", "workr-*"),
    ("[{at: 1s, from: coord, to: [worker-1, sensor]}]", "scenario.broadcasts[0].to[1]",
     "sensor is a device"),
    ("[{at: 1s, from: coord, to: [worker-*, coord]}]", "scenario.broadcasts[0].to[1]",
     "other than the sender"),
    ("[{at: 1s, from: switch, to: worker-*}]", "scenario.broadcasts[0].from",
     "switch is a switch"),
    ("[{at: 3s, from: coord, to: worker-*}]", "scenario.broadcasts[0].at", "run.duration"),
    ("[{at: 1s, from: coord, to: worker-*, mode: tree, fanout: 0}]",
     "scenario.broadcasts[0].fanout", "0"),
    ("[{at: 1s, from: coord, to: worker-*, mode: star}]", "scenario.broadcasts[0].mode",
     "star"),
])
def test_a_bad_broadcast_is_refused_naming_field_and_value(broadcasts, field, said) -> None:
    with pytest.raises(SpecError) as error:
        parse_text(text(broadcasts))
    message = str(error.value)
    assert field in message and said in message, message


def test_hybrid_refuses_broadcasts_by_name() -> None:
    # emu runs them (tests/emu_run/test_broadcast.py), from a gateway or cloud VM
    with pytest.raises(SpecError) as error:
        parse_text(text("[{at: 1s, from: coord, to: worker-*}]", backend="hybrid"))
    message = str(error.value)
    assert "scenario.broadcasts" in message and "not yet on hybrid" in message, message


def test_the_shipped_sweep_naive_rises_and_the_tree_stays_nearly_flat() -> None:
    experiment = load("experiments/broadcast-tree.yaml")
    completion: dict[str, dict[int, float]] = {"naive": {}, "tree": {}}
    for point in experiment.points:
        result = simulate(point.topology, point.spec.workload, point.spec.pipeline,
                          settings(point))
        for fact in result.facts["broadcasts"]:
            assert fact["reached"] == fact["workers"]
            completion[fact["mode"]][fact["workers"]] = fact["completion"]
    sizes = sorted(completion["naive"])
    assert sizes == [20, 50, 100, 150, 200]
    naive = [completion["naive"][n] for n in sizes]
    tree = [completion["tree"][n] for n in sizes]
    # naive: one 1 ms send per worker, one after the other, plus the two links
    np.testing.assert_allclose(naive, [n * 1e-3 + 2 * (0.1e-3 + 8e-6) for n in sizes],
                               rtol=1e-9)
    assert all(b > a for a, b in zip(tree, tree[1:], strict=False))  # deeper trees
    assert tree[-1] / tree[0] < 2.5  # ten times the workers, about log2 of it
    assert tree[-1] < naive[-1] / 10 and tree[0] < naive[0] / 2


def test_the_schema_refuses_a_row_whose_latency_is_not_its_times() -> None:
    table = run(text("[{at: 1s, from: coord, to: worker-*, cost: 2ms}]")).tables["broadcasts"]
    table["latency"] = table["latency"] + 1.0
    with pytest.raises(SchemaError, match="table broadcasts: latency is t_received - t_sent"):
        conform({"broadcasts": table})


def test_two_broadcasts_from_one_sender_share_its_cpu() -> None:
    # vm.small has one core: the two senders' jobs interleave (a1 b1 a2 b2 ...), so the first
    # broadcast's last send ends after 7 sends, the second's after 8.
    result = simulate_text("[{at: 1s, from: coord, to: worker-*, cost: 2ms},"
                           " {at: 1s, from: coord, to: worker-*, cost: 2ms}]")
    first, second = result.facts["broadcasts"]
    assert first["completion"] == pytest.approx(7 * SEND + HOP, abs=1e-12)
    assert second["completion"] == pytest.approx(8 * SEND + HOP, abs=1e-12)
    assert list(result.tables["broadcasts"]["broadcast"]) == [0] * 4 + [1] * 4
