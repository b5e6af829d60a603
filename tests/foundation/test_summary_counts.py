"""The summary's counts: each reading once, by its best copy's state, adding up to what was
emitted; each feature's own figures; and what `foglab run` and `results show` print of them."""

from __future__ import annotations

import math

from typer.testing import CliRunner

from experiments.cli import app
from experiments.schema import conform
from experiments.summary import reading_counts, summarise

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
    assert summary["loss_rate"] == 0.25 and summary["throughput_per_s"] == 0.2


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


