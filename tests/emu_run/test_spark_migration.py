"""A STATS query on Spark moved live between two cloud VMs' containers: a move whose target
dies rolls back to the source with nothing lost, and the next move carries the query's state by
checkpoint, its per-sensor aggregates and windows going on as those of an unmoved query reading
the same input (no reading lost or processed twice). An emulated run is a cluster of four Spark
VMs, minutes on two cores: both behaviours share one."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from emu.run.emulate import Request, Timing, emulate
from tests.conftest import build_experiment

# The catalog's migrate-spark (four sensors at 2 readings/s through a gateway and the broker,
# STATS on Spark on cloud-1) with a cloud VM more or two: the query `stats` moves to cloud-2,
# `unmoved` reads the same input on cloud-3 and never moves: the reference.
PARAMS = "{window: 10 seconds, slide: 5 seconds, watermark: 2 seconds}"
KEY = ["sensor", "field", "statistic", "time"]
PER_READING = ["kalman", "predicted"]
WINDOWS = ["average", "distinct_count"]


@pytest.fixture(scope="module")
def engine():
    from engine import docker_engine

    return docker_engine()


MOVE = "[{at: 20s, operator: stats, to: cloud-2}]"
# First to cloud-4, which dies when the source is asked to stop (rolled back), then to cloud-2.
DOOMED_THEN_MOVE = ("[{at: 20s, operator: stats, to: cloud-4}, "
                    "{at: 21s, operator: stats, to: cloud-2}]")


def experiment(way: str, moves: str = MOVE, *sets: str):
    """migrate-spark on emu for 40 s, moved by `way`, with the unmoved reference query; `sets`
    change it further."""
    clouds = 4 if "cloud-4" in moves else 3
    queries = ", ".join(f"{{name: {name}, task: stats, engine: spark, on: {on}, reads: city, "
                        f"params: {PARAMS}}}" for name, on in (("stats", "cloud-1"),
                                                             ("unmoved", "cloud-3")))
    return build_experiment("migrate-spark", [
        "name=spark-move", "topology.name=spark-move", f"topology.nodes.3.replicas={clouds}",
        f"pipeline=[{queries}]",
        # launch is the model's start-up of a target (the emulation starts a real one): at the
        # default 2 s, validation would refuse the move 1 s after the doomed one.
        f"scenario.migration={{strategy: pause_transfer, spark: {way}, launch: 0s}}",
        f"scenario.migrations={moves}",
        "run={backend: emu, duration: 40s, seed: 3, drain: 2s}", *sets])


def emulated(records: Path, way: str, moves: str = MOVE, during=None):
    """Run EXPERIMENT on containers, keeping the nodes' records; `during(records)` runs on a
    thread of its own meanwhile."""
    point = experiment(way, moves).points[0]
    spec = point.spec
    if during is not None:
        threading.Thread(target=during, args=(records,), daemon=True).start()
    return emulate(Request(point.topology, spec.workload, spec.pipeline,
                           Timing(spec.run.duration, spec.run.sample, spec.run.drain),
                           spec.run.seed, dict(spec.scenario)), records=records)


def sink_rows(output: Path) -> pd.DataFrame:
    """The rows a job's Parquet sink committed (its log's files in this directory: a log
    copied with a checkpoint also names the source's), as STATS' output columns."""
    log = output / "_spark_metadata"
    files: set[str] = set()
    for entry in sorted(log.iterdir()) if log.exists() else []:
        if entry.name.removesuffix(".compact").isdigit():
            for line in entry.read_text().splitlines()[1:]:
                path = json.loads(line)["path"]
                if f"/{output.parent.name}/output/" in path:
                    files.add(Path(path).name)
    frames = [pq.read_table(output / name).column("payload").to_pylist()
              for name in sorted(files)]
    return pd.DataFrame([json.loads(p) for rows in frames for p in rows])


def per_reading(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows[rows["statistic"].isin(PER_READING)][[*KEY, "value"]]
    return rows.sort_values([*KEY, "value"]).reset_index(drop=True)


def assert_carries_on(moved: pd.DataFrame, unmoved: pd.DataFrame) -> None:
    """Every reading gave the same Kalman estimates and predictions as unmoved, once."""
    got, expected = per_reading(moved), per_reading(unmoved)
    assert len(expected) > 500, len(expected)
    assert len(got) == len(expected), (len(got), len(expected))
    assert got[KEY].equals(expected[KEY]), "readings lost or processed twice"
    assert (got["value"] - expected["value"]).abs().max() < 1e-9


def moves_of(result) -> list[dict]:
    return [dict(zip(result.tables["migrations"], values, strict=True))
            for values in zip(*result.tables["migrations"].values(), strict=True)]


@pytest.mark.emu
@pytest.mark.slow
def test_a_target_that_dies_rolls_back_and_the_next_move_carries_the_state_by_checkpoint(
        tmp_path: Path, engine) -> None:
    # One emulated run for both behaviours: a cluster of Spark VMs takes minutes of the suite
    # on a two-core host. The export way moves between job processes (tests/spark_apps) and
    # in benchmarks/spark_migration.py --emu.
    def kill_target_at_the_stop(records: Path) -> None:
        # The host has asked the source to stop: the target VM dies before the handover.
        stop = records / "cloud-1" / "stats" / "stop"
        deadline = time.monotonic() + 900
        while not stop.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        for container in engine.containers.list(
                filters={"label": f"foglab.records={records}"}):
            if container.name.endswith("-cloud-4"):
                container.kill()

    result = emulated(tmp_path, "checkpoint", DOOMED_THEN_MOVE, kill_target_at_the_stop)
    doomed, moved = result.facts["migrations"]
    assert doomed["status"] == "failed" and "rolled back" in doomed["phases"], doomed
    assert "pause" in doomed["phases"] and "cloud-4" in result.failed
    assert moved["status"] == "done", moved
    first, second = moves_of(result)
    assert math.isnan(first["downtime"]) and first["target"] == "cloud-4"
    assert (second["source"], second["target"], second["strategy"], second["spark_way"]) == (
        "cloud-1", "cloud-2", "pause_transfer", "checkpoint")
    assert 21.0 <= second["start"] < second["end"]
    # A loaded two-core host stretches the first batch after the move to tens of seconds.
    assert 0 < second["downtime"] < 180.0 and second["held"] > 0 and second["state_bytes"] > 0
    assert (second["lost"], second["duplicates"], second["chunks"]) == (0, 0, 0)
    assert math.isnan(second["output_gap"])
    phases = moved["phases"]
    assert phases["source paused"] < phases["handed over"] < phases["first batch"]
    # The source stopped, started again on its checkpoint, journal and broker session (its
    # batches number on), then moved with its checkpoint to cloud-2.
    progress = [json.loads(line) for line in
                (tmp_path / "cloud-1" / "stats" / "progress.jsonl").read_text().splitlines()]
    assert [p["batchId"] for p in progress] == sorted({p["batchId"] for p in progress})
    assert not (tmp_path / "cloud-4" / "stats.1" / "handover").exists()
    assert result.facts["spark_caught_up"]["cloud-1/stats"] is not None
    assert result.facts["spark_caught_up"]["cloud-3/unmoved"] is not None
    source = sink_rows(tmp_path / "cloud-1" / "stats" / "output")
    target = sink_rows(tmp_path / "cloud-2" / "stats.1" / "output")
    unmoved = sink_rows(tmp_path / "cloud-3" / "unmoved" / "output")
    assert len(source) and len(target)
    assert_carries_on(pd.concat([source, target]), unmoved)
    kalman = "statistic == 'kalman'"
    assert source.query(kalman)["time"].max() < target.query(kalman)["time"].min()
    windows = pd.concat([source, target])
    windows = windows[windows["statistic"].isin(WINDOWS)].set_index(KEY)["value"]
    reference = unmoved[unmoved["statistic"].isin(WINDOWS)].set_index(KEY)["value"]
    assert not windows.index.duplicated().any(), "a window emitted twice"
    # The windows' state moved too: every window emitted is the unmoved one's.
    both = windows.index.intersection(reference.index)
    assert len(both) >= len(windows) - 5 * 4 * 2 and len(both) > 20  # the last may lag
    assert (windows[both] - reference[both]).abs().max() < 1e-9


@pytest.mark.parametrize(("change", "says"), [
    ("scenario.migration.strategy=pause_drain", "pause_transfer: stats is a Spark query"),
    ("scenario.migrations.0.to=gw", "a cloud VM: stats is a Spark query"),
    ("scenario.migration.spark=copy",
     "scenario.migration.spark: 'checkpoint' or 'export' (got 'copy')"),
])
def test_a_spark_move_the_emulation_cannot_make_is_refused_when_the_file_is_checked(
        change: str, says: str) -> None:
    from topologies.errors import SpecError

    experiment("export")  # valid as it is
    with pytest.raises(SpecError) as error:
        experiment("export", MOVE, change)
    assert says in str(error.value)


def test_a_spark_move_refused_before_anything_happens_says_why() -> None:
    from emu.features.moves.dispatch import MigrationError, migrate

    def records(node: str) -> Path:
        return Path("/nonexistent") / node

    for kwargs, says in [({"strategy": "pause_drain"}, "strategy pause_transfer"),
                         ({"records": None}, "give records(node)"),
                         ({"target": "cloud-1"}, "source and target are both cloud-1")]:
        call = {"strategy": "pause_transfer", "records": records, "target": "cloud-2",
                **kwargs}
        with pytest.raises(MigrationError, match=re.escape(says)):
            migrate("127.0.0.1:1", "stats", "cloud-1", call["target"], call["strategy"],
                    engine="spark", records=call["records"])
    with pytest.raises(MigrationError, match="by export or checkpoint, not 'copy'"):
        from emu.features.moves.spark_query import migrate_query

        migrate_query("127.0.0.1:1", "stats", "cloud-1", "cloud-2", records=records, way="copy")
