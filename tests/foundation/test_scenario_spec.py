"""The scenario's cross-field checks, each by the feature that owns the field
(workloads.features): every mistake refused with its file, line, field and value, and its
valid neighbour accepted; files named relative to the experiment file; keys written twice."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from experiments.loader import load, parse_text
from experiments.spec import ExperimentSpec, ScenarioSpec
from tests.foundation.helpers import simulate_point
from topologies.errors import SpecError
from workloads.features import FEATURES

CATALOG = Path(__file__).parents[2] / "experiments"
MOVE = "migrate-pause-transfer"  # count (2 s window) on gw-1, moved to gw-2 at 20 s of 45 s
MOVE_DRAIN = "migrate-pause-drain"  # keep (no window) on gw-1, moved to gw-2 at 20 s of 45 s
SCALING = "broker-scaling"  # broker-1 watched, broker-2 its spare; 30 s
RECOVERY = "recovery"  # 30 s; a checkpointed count


def refused(experiment: str, sets: list[str]) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load(experiment, overrides=sets)
    return caught.value


def test_scenario_spec_is_composed_from_the_features_in_their_order():
    assert list(ScenarioSpec.model_fields) == [feature.key for feature in FEATURES]
    schema = ExperimentSpec.model_json_schema()["$defs"]["ScenarioSpec"]
    assert schema["additionalProperties"] is False
    assert "coordinator to workers" in schema["properties"]["broadcasts"]["description"]


@pytest.mark.parametrize(("key", "value", "backend"), [
    ("broadcasts", "[{at: 1s, from: gw-1, to: gw-2}]", "hybrid"),
    ("recovery", "{}", "hybrid"),
    ("mobility", "{}", "emu"),
])
def test_a_feature_on_a_backend_it_does_not_run_on_is_refused_by_one_message(key, value,
                                                                             backend):
    error = refused(MOVE, [f"scenario.{key}={value}", f"run.backend={backend}"])
    feature = next(f for f in FEATURES if f.key == key)
    assert error.path == ("scenario", key)
    assert f"not yet on {backend}" in str(error)
    assert " or ".join(feature.backends) in str(error)


def test_a_migration_at_or_past_the_run_is_refused_and_one_before_its_end_accepted():
    error = refused(MOVE, ["scenario.migrations.0.at=45s"])
    assert error.path == ("scenario", "migrations", 0, "at") and error.value == 45.0
    assert "run.duration: 45 s" in str(error)
    load(MOVE, overrides=["scenario.migrations.0.at=44s"])


def test_a_migration_within_a_window_must_start_a_window_before_the_end():
    error = refused(MOVE, ["scenario.migrations.0.at=44s",
                           "scenario.migrations.0.within_window=true"])
    assert error.path == ("scenario", "migrations", 0, "at")
    load(MOVE, overrides=["scenario.migrations.0.at=43s",
                          "scenario.migrations.0.within_window=true"])


def test_a_migration_file_error_names_its_line():
    text = (CATALOG / f"{MOVE}.yaml").read_text().replace("at: 20s", "at: 50s")
    with pytest.raises(SpecError) as caught:
        parse_text(text, str(CATALOG / "moved.yaml"))
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "at: 50s" in row)
    assert str(caught.value).startswith(f"{CATALOG / 'moved.yaml'}:{line}: "
                                        "scenario.migrations[0].at:")
    assert "(got 50.0)" in str(caught.value)


def test_a_move_to_where_the_operator_runs_is_refused():
    error = refused(MOVE, ["scenario.migrations.0.to=gw-1"])
    assert error.path == ("scenario", "migrations", 0, "to") and error.value == "gw-1"
    assert "moves nothing" in str(error)


def back_again(second_at: str) -> list[str]:
    return ["scenario.migrations=[{at: 20s, operator: count, to: gw-2}, "
            f"{{at: {second_at}, operator: count, from: gw-2, to: gw-1}}]"]


def test_a_move_back_from_where_the_first_move_took_it_is_accepted():
    point = load(MOVE, overrides=back_again("30s")).points[0]
    assert [m.target for m in point.spec.scenario.migrations] == ["gw-2", "gw-1"]


def test_a_move_from_where_the_operator_no_longer_runs_is_refused():
    error = refused(MOVE, ["scenario.migrations=[{at: 20s, operator: count, to: gw-2}, "
                           "{at: 30s, operator: count, from: gw-1, to: gw-2}]"])
    assert error.path == ("scenario", "migrations", 1, "from") and error.value == "gw-1"
    assert "runs on at 30 s (gw-2)" in str(error)


def test_two_moves_of_one_instance_closer_than_a_migration_lasts_are_refused():
    # launch 2 s + command 10 ms + housekeeping 0: the second may start at 22.01 s at least.
    error = refused(MOVE, back_again("22s"))
    assert error.path == ("scenario", "migrations", 1, "at") and error.value == 22.0
    assert "scenario.migrations[0]" in str(error) and "22.01" in str(error)
    load(MOVE, overrides=back_again("22.01s"))


def test_two_moves_written_out_of_time_order_are_checked_in_time_order():
    load(MOVE, overrides=["scenario.migrations=[{at: 30s, operator: count, from: gw-2, "
                          "to: gw-1}, {at: 20s, operator: count, to: gw-2}]"])


def test_a_duplicated_migration_is_refused():
    error = refused(MOVE_DRAIN, ["scenario.migrations=[{at: 20s, operator: keep, to: gw-2}, "
                                 "{at: 20s, operator: keep, to: gw-2}]"])
    assert error.path[:3] == ("scenario", "migrations", 1)


def test_a_probe_longer_than_the_interval_that_decides_on_it_is_refused():
    error = refused(SCALING, ["scenario.broker_scaling.0.probe=2s"])
    assert error.path == ("scenario", "broker_scaling", 0, "probe") and error.value == 2.0
    assert "interval: 1 s" in str(error)
    load(SCALING, overrides=["scenario.broker_scaling.0.probe=1s"])


def test_a_scaling_interval_as_long_as_the_run_is_refused():
    error = refused(SCALING, ["scenario.broker_scaling.0.interval=30s"])
    assert error.path == ("scenario", "broker_scaling", 0, "interval")
    load(SCALING, overrides=["scenario.broker_scaling.0.interval=29s"])


def test_a_replication_interval_as_long_as_the_run_is_refused():
    error = refused("replication-burst", ["scenario.replication.interval=50s"])
    assert error.path == ("scenario", "replication", "interval") and error.value == 50.0
    load("replication-burst", overrides=["scenario.replication.interval=49s"])


def test_a_checkpoint_period_whose_first_checkpoint_is_past_the_run_is_refused():
    index = next(i for i, op in enumerate(load(RECOVERY).spec.pipeline) if op.checkpoint)
    error = refused(RECOVERY, [f"pipeline.{index}.checkpoint=60s"])
    assert error.path == ("pipeline", index, "checkpoint") and error.value == 60.0
    load(RECOVERY, overrides=[f"pipeline.{index}.checkpoint=59s"])


def test_a_window_longer_than_the_run_is_refused():
    error = refused(MOVE, ["pipeline.0.window.size=46s"])
    assert error.path == ("pipeline", 0, "window", "size")
    load(MOVE, overrides=["pipeline.0.window.size=45s", "scenario.migrations=[]"])


def test_a_sample_period_written_longer_than_the_run_is_refused_the_default_is_not():
    error = refused(MOVE, ["run.sample=46s"])
    assert error.path == ("run", "sample")
    load(MOVE, overrides=["run.duration=0.5s", "scenario.migrations=[]",
                          "pipeline.0.window.size=0.5s"])


def test_a_mobility_update_as_long_as_the_run_is_refused():
    error = refused("hybrid-mobility", ["run.backend=sim", "scenario.mobility.update=3m"])
    assert error.path == ("scenario", "mobility", "update")
    load("hybrid-mobility", overrides=["run.backend=sim", "scenario.mobility.update=2m"])


def trace(users: int) -> str:
    """A CSV trace of `users` users walking east."""
    return "time,user,x,y\n" + "".join(f"{t},u{u},{100 * t + u},0\n"
                                       for u in range(users) for t in (0, 10))


def moving_devices() -> int:
    point = load("hybrid-mobility", overrides=["run.backend=sim"]).points[0]
    devices = point.spec.scenario.mobility.devices
    return len(point.topology.select(devices or [
        n.name for n in point.topology.of_kind("device")]))


def trace_experiment(folder: Path, trace: str) -> Path:
    """hybrid-mobility on sim, its users replaying `trace` (a path as written)."""
    shutil.copy(CATALOG / "hybrid-mobility.yaml", folder / "moving.yaml")
    text = (folder / "moving.yaml").read_text()
    assert "run: {backend: hybrid," in text
    text = text.replace("run: {backend: hybrid,", "run: {backend: sim,")
    written = "    model: {kind: random_waypoint, margin: 250, speed: [1, 12], pause: [0s, 20s]}"
    assert written in text
    text = text.replace(written, f"    model: {{kind: trace, path: {trace}}}")
    (folder / "moving.yaml").write_text(text)
    return folder / "moving.yaml"


def test_a_trace_resolves_relative_to_the_experiment_file(tmp_path, monkeypatch):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "walk.csv").write_text(trace(moving_devices()))
    file = trace_experiment(tmp_path, "traces/walk.csv")
    monkeypatch.chdir(CATALOG)  # somewhere else: the file's folder decides, not this one
    point = load(str(file), overrides=["run.duration=12s"]).points[0]
    assert point.spec.scenario.mobility.model.path == tmp_path / "traces" / "walk.csv"
    assert len(simulate_point(point).tables["messages"]["latency"]) > 0  # replayed from there


def test_a_missing_trace_is_refused_with_the_path_as_written_and_as_resolved(tmp_path):
    file = trace_experiment(tmp_path, "traces/nosuch.csv")
    with pytest.raises(SpecError) as caught:
        load(str(file))
    error = caught.value
    assert error.path == ("scenario", "mobility", "model", "path")
    assert error.file == str(file) and error.line is not None
    assert "'traces/nosuch.csv'" in str(error)
    assert repr(str(tmp_path / "traces" / "nosuch.csv")) in str(error)


def test_a_trace_with_a_track_count_other_than_the_moving_devices_is_refused(tmp_path):
    (tmp_path / "walk.csv").write_text(trace(moving_devices() + 1))
    with pytest.raises(SpecError) as caught:
        load(str(trace_experiment(tmp_path, "walk.csv")))
    assert caught.value.path == ("scenario", "mobility", "model", "path")
    assert f"it has {moving_devices() + 1} for {moving_devices()}" in str(caught.value)


def test_a_calibration_file_resolves_relative_to_the_experiment_file(tmp_path):
    shipped = Path(__file__).parents[2] / "workloads" / "calibrations" / "reference.yaml"
    if not shipped.is_file():
        pytest.skip("no shipped reference calibration")
    (tmp_path / "profiles").mkdir()
    shutil.copy(shipped, tmp_path / "profiles" / "mine.yaml")
    text = (CATALOG / "replication-burst.yaml").read_text()
    assert "calibration: reference" in text
    (tmp_path / "burst.yaml").write_text(
        text.replace("calibration: reference", "calibration: profiles/mine.yaml"))
    spec = load(str(tmp_path / "burst.yaml")).spec
    assert spec.run.calibration == str(tmp_path / "profiles" / "mine.yaml")
    (tmp_path / "profiles" / "mine.yaml").unlink()
    with pytest.raises(SpecError) as caught:
        load(str(tmp_path / "burst.yaml"))
    assert caught.value.path == ("run", "calibration")
    assert "'profiles/mine.yaml'" in str(caught.value)


def test_a_key_written_twice_is_refused_with_both_lines():
    text = (CATALOG / f"{MOVE}.yaml").read_text().replace(
        "run: {duration: 45s, seed: 3, drain: 3s}", "run: {duration: 45s, seed: 3, drain: 3s}\n"
        "name: again")
    lines = text.splitlines()
    second = len(lines)
    with pytest.raises(SpecError) as caught:
        parse_text(text, "twice.yaml")
    assert caught.value.path == ("name",) and caught.value.line == second
    first = 1 + next(n for n, line in enumerate(lines) if line.startswith("name:"))
    assert first == 2  # under the language server's modeline
    assert f"on line {first} and again on line {second}" in str(caught.value)


def test_a_key_written_twice_inside_a_flow_mapping_or_a_referenced_file_is_refused(tmp_path):
    text = (CATALOG / f"{MOVE}.yaml").read_text()
    with pytest.raises(SpecError) as caught:
        parse_text(text.replace("at: 20s,", "at: 20s, at: 30s,"), "flow.yaml")
    assert caught.value.path == ("scenario", "migrations", 0, "at")
    topology = tmp_path / "city.yaml"
    topology.write_text("name: city\nnodes:\n  - {name: gw, kind: gateway}\n"
                        "links: []\nnodes: []\n")
    (tmp_path / "e.yaml").write_text(text.split("topology:")[0] + "topology: city.yaml\n"
                                     + "workload:" + text.split("workload:")[1])
    with pytest.raises(SpecError) as caught:
        load(str(tmp_path / "e.yaml"))
    assert caught.value.file == str(topology) and caught.value.line == 5
    assert "on line 2 and again on line 5" in str(caught.value)


def test_a_merge_key_may_still_be_overridden():
    text = (CATALOG / f"{MOVE}.yaml").read_text().replace(
        "run: {duration: 45s, seed: 3, drain: 3s}",
        "base: &base {duration: 45s, seed: 3, drain: 3s}\nrun: {<<: *base, seed: 4}")
    with pytest.raises(SpecError) as caught:  # `base` is no field; the merge itself is fine
        parse_text(text, "merge.yaml")
    assert caught.value.path == ("base",)


def test_a_move_from_a_node_crashed_at_its_time_is_refused():
    # recovery.yaml: count on gw-1, which crashes at 9.5 s for good (re-placed by recovery).
    error = refused(RECOVERY, ["scenario.migrations=[{at: 12s, operator: count, to: gw-2}]"])
    assert error.path == ("scenario", "migrations", 0, "at") and error.value == 12.0
    assert "scenario.faults[0]" in str(error) and "crash of gw-1" in str(error)
    point = load(RECOVERY, overrides=["scenario.migrations=[{at: 9s, operator: count, "
                                      "to: gw-2}]"]).points[0]
    simulate_point(point)  # moved before the crash: it runs


def test_a_move_after_a_crash_recovery_did_not_notice_is_accepted():
    load(RECOVERY, overrides=["scenario.faults=[{at: 9.5s, crash: gw-1, for: 0.2s}]",
                              "scenario.migrations=[{at: 10s, operator: count, to: gw-2}]"])
    error = refused(RECOVERY, ["scenario.faults=[{at: 9.5s, crash: gw-1, for: 2s}]",
                               "scenario.migrations=[{at: 12s, operator: count, to: gw-2}]"])
    assert "re-placed" in str(error)


def test_a_key_written_twice_in_a_set_value_is_refused_by_its_option():
    option = "scenario.migrations=[{at: 20s, at: 30s, operator: count, to: gw-2}]"
    error = refused(MOVE, [option])
    assert error.file == f"--set {option}" and "'at' is written twice" in str(error)


def test_a_move_to_a_node_crashed_at_its_time_is_refused():
    error = refused(MOVE, ["scenario.faults=[{at: 19s, crash: gw-2, for: 10s}]"])
    assert error.path == ("scenario", "migrations", 0, "to") and error.value == "gw-2"
    assert "crash of gw-2 from 19 s to 29 s" in str(error)
    load(MOVE, overrides=["scenario.faults=[{at: 19s, crash: gw-2, for: 1s}]"])
