"""scenario.broadcasts on containers (emu.features.broadcasts): a naive and a tree broadcast
from a cloud
VM to 6 cloud-VM workers reach every worker once, at the right depths, children after their
parents, the naive one after its N sends; compared with sim on the same file. And emu's
refusal of a sender or worker that runs no agent, before any container starts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from experiments.loader import parse_text
from experiments.runner import run_experiment
from experiments.schema import TABLES, conform
from tests.foundation.helpers import run
from topologies.errors import SpecError

# Every link 1 ms: sim sends coord -> switch -> worker (2 ms a hop); emu sends through
# broker-1 (coord -> switch -> broker-1 -> switch -> worker: 4 ms, and Mosquitto's handling).
# 20 ms of CPU per send, so the sends, not the links, make most of the figures.
CLUSTER = """
name: bcast-emu
topology:
  name: cluster
  nodes:
    - {name: coord, kind: cloud_vm, profile: vm.small}
    - {name: worker, kind: cloud_vm, profile: vm.small, replicas: 6}
    - {name: switch, kind: switch}
    - {name: broker-1, kind: broker, profile: vm.small}
    - {name: sensor, kind: device}
  links:
    - {from: [coord, worker-*, broker-1], to: switch, latency: 1ms}
    - {from: sensor, to: broker-1, latency: 1ms}
workload:
  name: beat
  streams:
    - {name: beat, sources: sensor, rate: 1/s, arrivals: periodic, size: 64B}
pipeline:
  - {name: monitor, on: coord, reads: beat, cost: 50us}
scenario:
  broadcasts: BROADCASTS
run: {backend: BACKEND, duration: 4s, seed: 1, drain: 1s}
"""
TWO = ("[{at: 1s, from: coord, to: worker-*, mode: naive, cost: 20ms},"
       " {at: 2s, from: coord, to: worker-*, mode: tree, fanout: 2, cost: 20ms}]")
N, COST = 6, 0.020
WORKERS = [f"worker-{i}" for i in range(1, N + 1)]
# A binary tree of 6: coord -> 1, 2; 1 -> 3, 4; 2 -> 5, 6.
PARENT = {"worker-3": "worker-1", "worker-4": "worker-1", "worker-5": "worker-2",
          "worker-6": "worker-2"}


def text(broadcasts: str, backend: str) -> str:
    return CLUSTER.replace("BROADCASTS", broadcasts).replace("BACKEND", backend)


@pytest.mark.parametrize(("broadcasts", "field", "said"), [
    ("[{at: 1s, from: broker-1, to: worker-*}]", "scenario.broadcasts[0].from",
     "a gateway or cloud VM on emu"),
    ("[{at: 1s, from: coord, to: [worker-1, broker-1]}]", "scenario.broadcasts[0].to[1]",
     "but broker-1 is a broker"),
])
def test_emu_refuses_a_node_without_an_agent_before_any_container(broadcasts, field,
                                                                 said) -> None:
    # parse_text checks the file (experiments.checks): it raises before the runner would
    # plan a cluster, so nothing starts.
    with pytest.raises(SpecError) as error:
        parse_text(text(broadcasts, "emu"))
    message = str(error.value)
    assert field in message and said in message, message
    parse_text(text(broadcasts, "sim"))  # sim runs code on brokers: it takes them


def test_emu_refuses_the_shipped_coordinator_and_takes_its_emu_variant() -> None:
    from experiments.loader import load

    spec = load("experiments/broadcast-tree.yaml").points[0].spec
    assert spec.run.backend == "sim"
    with pytest.raises(SpecError, match=r"scenario\.broadcasts\[0\]\.from.*coord"):
        parse_text(Path("experiments/broadcast-tree.yaml").read_text().replace(
            "backend: sim", "backend: emu"))
    assert len(load("experiments/broadcast-tree-emu.yaml").points) == 2


def test_each_sending_node_gets_its_children_and_only_the_sender_a_start() -> None:
    from emu.features.broadcasts import check, parts

    (point,) = parse_text(text(TWO, "emu")).points
    got = parts(check(point.spec.scenario.broadcasts, point.topology, point.spec.run.duration))
    assert {node: [(p["index"], p["children"], p["at"]) for p in mine]
            for node, mine in got.items()} == {
        "coord": [(0, WORKERS, 1.0), (1, ["worker-1", "worker-2"], 2.0)],
        "worker-1": [(1, ["worker-3", "worker-4"], None)],
        "worker-2": [(1, ["worker-5", "worker-6"], None)]}  # leaves get no part
    assert {(p["size"], p["cost"]) for mine in got.values() for p in mine} == {(1024, COST)}


@pytest.mark.emu
@pytest.mark.slow
def test_naive_and_tree_reach_every_worker_once_and_compare_with_sim(tmp_path) -> None:
    (outcome,) = run_experiment(parse_text(text(TWO, "emu")), tmp_path)
    assert outcome.error is None, outcome.error
    folder = outcome.folder
    facts = json.loads((folder / "manifest.json").read_text())["facts"]
    table = pq.read_table(folder / "broadcasts.parquet")
    assert table.schema.equals(TABLES["broadcasts"])
    rows = table.to_pylist()
    assert facts["broadcast"]["errors"] == [] and facts["broadcast"]["duplicates"] == 0, facts
    naive = [r for r in rows if r["broadcast"] == 0]
    tree = {r["worker"]: r for r in rows if r["broadcast"] == 1}
    # Every worker once each; the naive one's sends one after another, COST apart: the k-th
    # arrives no sooner than k sends after the broadcast's start. (Not the arrival order: on
    # CI's loaded host one worker's agent took its message after the next one's did.)
    arrived = {r["worker"]: r["t_received"] for r in naive}
    assert len(naive) == len(arrived) and sorted(arrived) == WORKERS
    for k, worker in enumerate(WORKERS):
        assert arrived[worker] >= naive[0]["t_sent"] + k * COST * 0.9, (worker, arrived)
    assert sorted(tree) == WORKERS
    assert {r["depth"] for r in naive} == {1} and all(r["fanout"] == 0 for r in naive)
    assert {w: r["depth"] for w, r in tree.items()} == {
        w: 2 if w in PARENT else 1 for w in WORKERS}
    for worker, parent in PARENT.items():  # forwarded once the parent had it, a send later
        assert tree[worker]["t_received"] >= tree[parent]["t_received"] + COST * 0.9, worker
    assert all(r["t_sent"] == 2.0 and r["t_received"] > 2.0 for r in tree.values())
    emu = {f["mode"]: f["completion"] for f in facts["broadcasts"]}
    assert all(f["reached"] == N for f in facts["broadcasts"])
    assert emu["naive"] >= N * COST  # N sends of COST one after the other
    # Not `tree < naive` on the containers: the tree's gain is its senders working at once,
    # three 1-core VMs on this 2-core host (a CI run alone measured tree 0.21 s, naive 0.17 s);
    # the model, whose nodes each have their core, must show it. The model on the same file:
    # its hop is two links, emu's four and the broker's handling, so emu is never below sim
    # (less a timer's slack). No bound above: CI's loaded parallel phase stretched emu's
    # completions; how near emu stays to the model is benchmarks/broadcast.py's figure.
    model = run(text(TWO, "sim"))
    conform(model.tables)
    sim = {f["mode"]: f["completion"] for f in model.facts["broadcasts"]}
    print(f"completion_s naive emu={emu['naive']:.4f} sim={sim['naive']:.4f} "
          f"tree emu={emu['tree']:.4f} sim={sim['tree']:.4f} "
          f"start_lag={facts['broadcast']['start_lag']}")
    assert sim["tree"] < sim["naive"]
    for mode in ("naive", "tree"):
        assert sim[mode] - 0.003 <= emu[mode], (mode, emu, sim)
