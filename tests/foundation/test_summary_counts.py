"""The summary's counts: each reading once, by its best copy's state, adding up to what was
emitted; each feature's own figures; and what `foglab run` and `results show` print of them."""

from __future__ import annotations

import json
import math

from typer.testing import CliRunner

from experiments.cli import app
from experiments.schema import conform
from experiments.summary import reading_counts, summarise, throughputs

cli = CliRunner()


def _messages(rows: list[tuple]) -> dict:
    """Rows of (id, sink, state) as the messages columns."""
    delivered = [state == "delivered" for _, _, state in rows]
    return {"id": [r[0] for r in rows], "stream": ["s"] * len(rows),
            "source": ["d"] * len(rows), "sink": [r[1] for r in rows],
            "t_sent": [1.0] * len(rows),
            "t_received": [1.5 if d else math.nan for d in delivered],
            "latency": [0.5 if d else math.nan for d in delivered],
            "hops": [2] * len(rows), "lost": [state == "lost" for _, _, state in rows],
            "state": [r[2] for r in rows]}


def test_a_reading_counts_once_in_its_best_copy_s_state() -> None:
    import numpy as np

    ids = np.array([1, 1, 2, 2, 3, 4, 5])
    state = np.array(["lost", "delivered", "filtered", "in_flight", "filtered", "lost",
                      "delivered"], dtype=object)
    assert reading_counts(ids, state) == {"delivered": 2, "in_flight": 1, "filtered": 1,
                                          "lost": 1}


def test_the_summary_adds_up_to_emitted_and_keeps_every_copy_delivered() -> None:
    tables = conform({"messages": _messages([
        (1, "a", "delivered"), (1, "b", "delivered"), (2, None, "filtered"),
        (3, None, "in_flight"), (4, None, "lost")])})
    summary = summarise(tables, 10.0, 1.0)
    assert (summary["emitted"], summary["delivered"], summary["filtered"], summary["lost"],
            summary["in_flight"], summary["deliveries"]) == (4, 1, 1, 1, 1, 2)
    assert summary["loss_rate"] == 0.25
    # Throughput is of readings (one delivered in 10 s), the sinks' copies beside it (two).
    assert summary["throughput_per_s"] == 0.1 and summary["deliveries_per_s"] == 0.2


def test_a_table_written_before_states_counts_delivered_unless_lost() -> None:
    columns = _messages([(1, "a", "delivered"), (2, None, "lost")])
    del columns["state"]
    summary = summarise(conform({"messages": columns}), 10.0, 1.0)
    assert (summary["delivered"], summary["lost"], summary["in_flight"]) == (1, 1, 0)


def test_each_feature_that_ran_adds_its_figures_and_the_others_none() -> None:
    tables = conform({
        "messages": _messages([(1, "a", "delivered"), (2, None, "lost")]),
        "faults": {"kind": ["crash"], "target": ["gw-1"], "t_start": [0.5],
                   "t_end": [2.0], "params": ["{}"]},
        "replicas": {"t": [3.0, 4.0, 5.0], "operator": ["op", "op", "broker"],
                     "action": ["start", "retire", "broker_join"],
                     "node": ["gw-2", "gw-2", "broker-2"], "instances": [2, 1, 2],
                     "latency": [0.3, 0.1, 0.2], "slo": [0.2, 0.2, 0.1]},
    })
    features = summarise(tables, 10.0, 1.0)["features"]
    assert features == {
        "faults": {"faults": 1, "kinds": "crash x1", "lost while in force": 1},
        "replication": {"started": 1, "retired": 1, "instances max": 2,
                        "latency max s": 0.3},
        "broker_scaling": {"broker joins": 1, "first join s": 5.0,
                           "brokers serving max": 2}}


def test_run_prints_the_in_flight_count_and_the_saturated_nodes(tmp_path) -> None:
    # The case: 150 ms a reading on the gateways; the run said "lost 100 %" before.
    result = cli.invoke(app, ["run", "quickstart", "--set", "pipeline.0.cost=150ms",
                              "--set", "run.duration=20s", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "in flight" in text and "were still queued or on a link" in text
    assert "could not keep up" in text and "gw-1" in text
    (folder,) = (tmp_path / "quickstart").iterdir()
    shown = cli.invoke(app, ["results", "show", str(folder)])
    assert shown.exit_code == 0, shown.output
    assert "in flight" in shown.output and "could not keep up" in shown.output


def test_results_show_prints_each_feature_s_figures(tmp_path) -> None:
    result = cli.invoke(app, ["run", "recovery", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "recoveries" in result.output and "detect mean s" in result.output
    (folder,) = (tmp_path / "recovery").iterdir()
    shown = cli.invoke(app, ["results", "show", str(folder)])
    assert "recoveries" in shown.output and "faults" in shown.output
    assert "detect mean s" in shown.output




def _lost_readings(sent: list[float]) -> dict:
    """One lost reading (one copy) sent at each time in `sent`."""
    n = len(sent)
    return {"id": list(range(1, n + 1)), "stream": ["s"] * n, "source": ["d"] * n,
            "sink": [None] * n, "t_sent": sent, "t_received": [math.nan] * n,
            "latency": [math.nan] * n, "hops": [1] * n, "lost": [True] * n,
            "state": ["lost"] * n}


def _faults(spans: list[tuple[float, float | None]]) -> dict:
    return {"kind": ["battery"] * len(spans), "target": [f"d-{i}" for i in range(len(spans))],
            "t_start": [a for a, _ in spans], "t_end": [b for _, b in spans],
            "params": ["{}"] * len(spans)}


def test_a_lost_reading_counts_once_however_many_faults_were_in_force() -> None:
    # Three faults over [1, 5] at once, one for good from 8: a reading sent in both spans
    # counts once, a reading sent between them or before not at all.
    messages = _lost_readings([0.5, 1.0, 2.0, 3.0, 5.0, 6.0, 8.0, 9.0])
    tables = conform({"messages": messages,
                      "faults": _faults([(1.0, 5.0), (1.0, 4.0), (2.0, 5.0), (8.0, None),
                                         (8.5, 9.5)])})
    summary = summarise(tables, 10.0, 1.0)
    figure = summary["features"]["faults"]["lost while in force"]
    assert figure == 6  # 1, 2, 3, 5, 8, 9
    assert figure <= summary["lost"] == 8


def test_a_reading_one_sink_had_is_not_lost_while_a_fault_was_in_force() -> None:
    # Reading 1: one copy lost, one delivered (delivered, in the summary); reading 2: both
    # copies lost (one lost reading, one figure).
    rows = _messages([(1, "a", "delivered"), (1, None, "lost"), (2, None, "lost"),
                      (2, None, "lost")])
    tables = conform({"messages": rows, "faults": _faults([(0.0, 2.0), (0.5, None)])})
    summary = summarise(tables, 10.0, 1.0)
    assert summary["lost"] == 1
    assert summary["features"]["faults"]["lost while in force"] == 1


def test_battery_deaths_attribute_no_more_than_the_run_lost(tmp_path) -> None:
    # The case: a hundred batteries dying one after the other, each in force to the
    # end, said 1,443 lost while in force of 45 lost.
    result = cli.invoke(app, ["run", "quickstart", "--set", "run.duration=60s", "--set",
                              "scenario.energy={batteries: [{devices: sensor-1*, joules: 2}]}",
                              "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (folder,) = (tmp_path / "quickstart").iterdir()
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    faults = summary["features"]["faults"]
    assert faults["faults"] > 1
    assert 0 < faults["lost while in force"] <= summary["lost"]


def test_a_summary_written_when_throughput_counted_copies_reads_as_readings() -> None:
    # Before deliveries_per_s, throughput_per_s counted every sink's copy.
    old = {"delivered": 10, "deliveries": 120, "throughput_per_s": 12.0}
    assert throughputs(old) == (1.0, 12.0)
    new = {"delivered": 10, "deliveries": 120, "throughput_per_s": 1.0,
           "deliveries_per_s": 12.0}
    assert throughputs(new) == (1.0, 12.0)
    assert throughputs({"delivered": 5, "throughput_per_s": 0.5}) == (0.5, 0.5)


def _header(output: str) -> str:
    return next(line for line in output.splitlines() if "delivered" in line)


def test_run_and_results_show_head_throughput_with_what_it_counts(tmp_path) -> None:
    # speck-jobs: twelve sinks read each reading; msg/s said 12 times the readings a second.
    result = cli.invoke(app, ["run", "speck-jobs", "--out", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    (folder,) = (tmp_path / "speck-jobs").iterdir()
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert summary["deliveries"] > 10 * summary["delivered"]
    assert summary["throughput_per_s"] == summary["delivered"] / 60.0
    assert summary["deliveries_per_s"] == summary["deliveries"] / 60.0
    shown = cli.invoke(app, ["results", "show", str(folder)], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    for output in (result.output, shown.output):
        header = _header(output)
        assert "msg/s" not in header
        assert "readings/s" in header and "deliveries/s" in header
        row = output.splitlines()[output.splitlines().index(header) + 2]
        assert f"{summary['throughput_per_s']:.1f}" in row
        assert f"{summary['deliveries_per_s']:.1f}" in row


def _broadcast_rows(rows: list[tuple]) -> dict:
    """Rows of (broadcast, mode, fanout, worker, latency) as the broadcasts columns."""
    return {"broadcast": [r[0] for r in rows], "mode": [r[1] for r in rows],
            "fanout": [r[2] for r in rows], "worker": [r[3] for r in rows],
            "depth": [1] * len(rows), "t_sent": [1.0] * len(rows),
            "t_received": [1.0 + r[4] for r in rows], "latency": [r[4] for r in rows]}


def test_each_broadcast_strategy_has_its_completion() -> None:
    # broadcast-tree's case: a naive broadcast and a tree one to the same two workers; the
    # summary showed only the slowest (the naive one's) completion.
    rows = [(0, "naive", 0, "w-1", 0.010), (0, "naive", 0, "w-2", 0.020),
            (1, "tree", 2, "w-1", 0.004), (1, "tree", 2, "w-2", 0.006)]
    planned = [{"id": 0, "mode": "naive", "fanout": 0, "workers": 2, "reached": 2,
                "completion": 0.020},
               {"id": 1, "mode": "tree", "fanout": 2, "workers": 2, "reached": 2,
                "completion": 0.006}]
    tables = conform({"messages": _messages([(1, "a", "delivered")]),
                      "broadcasts": _broadcast_rows(rows)})
    figures = summarise(tables, 10.0, 1.0, {"broadcasts": planned})["features"]["broadcasts"]
    assert figures == {"broadcasts": 2, "complete": 2, "naive completion ms": 20.0,
                       "tree fanout 2 completion ms": 6.0}
    # Without the facts, each broadcast's last worker reached, by strategy.
    figures = summarise(tables, 10.0, 1.0)["features"]["broadcasts"]
    assert figures == {"broadcasts": 2, "naive completion ms": 20.0,
                       "tree fanout 2 completion ms": 6.0}


def test_a_broadcast_some_worker_never_had_has_no_completion() -> None:
    rows = [(0, "tree", 2, "w-1", 0.004), (1, "tree", 2, "w-1", 0.005)]
    planned = [{"id": 0, "mode": "tree", "fanout": 2, "workers": 1, "reached": 1,
                "completion": 0.004},
               {"id": 1, "mode": "tree", "fanout": 2, "workers": 2, "reached": 1,
                "completion": None}]
    tables = conform({"messages": _messages([(1, "a", "delivered")]),
                      "broadcasts": _broadcast_rows(rows)})
    figures = summarise(tables, 10.0, 1.0, {"broadcasts": planned})["features"]["broadcasts"]
    assert figures == {"broadcasts": 2, "complete": 1, "tree fanout 2 completion ms": None}


def test_broadcast_tree_shows_the_tree_s_completion(tmp_path) -> None:
    result = cli.invoke(app, ["run", "broadcast-tree", "--set", "run.duration=3s",
                              "--out", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "naive completion ms" in text and "tree fanout 2 completion ms" in text
    # 20 workers: the tree 6.9 ms; 200: naive 200.2 ms, the tree 14.5 ms (docs/faults.md).
    assert "6.864" in text and "200.216" in text and "14.512" in text


def test_recovery_figures_count_operators_inputs_not_readings() -> None:
    # Two operators on the crashed gateway each lost their copy of reading 1; a third copy
    # reached its sink: the run lost no reading, the operators two inputs.
    tables = conform({
        "messages": _messages([(1, "a", "delivered"), (1, None, "lost"), (1, None, "lost")]),
        "recoveries": {"node": ["gw-1", "gw-1"], "operator": ["f", "g"],
                       "target": ["gw-2", "gw-2"], "t_crash": [1.0, 1.0],
                       "t_detected": [2.0, 2.0], "t_recovered": [3.0, 3.0],
                       "detect": [1.0, 1.0], "recover": [2.0, 2.0],
                       "t_checkpoint": [math.nan, math.nan], "state_bytes": [0, 0],
                       "held": [3, 4], "rolled_back": [0, 1], "lost": [1, 1]}})
    summary = summarise(tables, 10.0, 1.0)
    figures = summary["features"]["recovery"]
    assert summary["lost"] == 0 and "lost" not in figures
    assert (figures["inputs held"], figures["inputs rolled back"],
            figures["inputs lost"]) == (7, 1, 2)
