"""What a researcher tripped on (issue 43's friction list), each fixed and kept so: swept
values that sort as numbers, a sweep of the experiment's name, validate naming every backend
a sweep runs on."""

from __future__ import annotations

import subprocess
import sys

import pytest

import foglab
from experiments import results as stored
from topologies.errors import SpecError

QUICK = ["run.duration=2s", "run.drain=1s"]


def test_swept_rates_come_back_as_numbers_that_sort_as_rates(tmp_path) -> None:
    result = foglab.run("quickstart", set=QUICK,
                        sweep=["workload.streams.0.rate=[100/s, 12.5/s]"], out=tmp_path)
    rates = result.summary["workload.streams.0.rate"]
    assert rates.dtype.kind == "f" and sorted(rates) == [12.5, 100.0]  # not '100/s' < '12.5/s'
    messages = result.table("messages")
    assert set(messages["workload.streams.0.rate"]) == {12.5, 100.0}
    # The lower layer types them too, and gives them as written when asked.
    assert set(stored.load_summaries(result.runs)["workload.streams.0.rate"]) == {12.5, 100.0}
    assert set(stored.load_summaries(result.runs, typed=False)["workload.streams.0.rate"]) == {
        "100/s", "12.5/s"}


def test_a_sweep_of_the_experiments_name_is_refused() -> None:
    with pytest.raises(SpecError) as caught:
        foglab.load("quickstart", sweep=["name=[a, b]"])
    assert caught.value.path == ("sweep", "name") and "results/<name>/" in caught.value.expected


def test_validate_names_every_backend_a_sweep_runs_on() -> None:
    shown = subprocess.run([sys.executable, "-m", "foglab", "validate", "quickstart", "--sweep",
                            "run.backend=[sim, emu]"], capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "2 sweep point(s) x 1 repetition(s) on sim and emu;" in shown.stdout


def test_compare_against_labels_the_first_run_with_what_the_key_was() -> None:
    """`foglab compare --against`'s first label: the value before the change, found by the
    names and indices --set takes, a one-item list as its item, a number in the change's
    unit (it was `(none)` for pipeline.0.on and `20000000.0` for a bandwidth)."""
    from experiments.compare import written_before

    changes = ["pipeline.0.on=cloud-1", "topology.links.1.bandwidth=80kbit",
               "pipeline.filter.cost=1ms", "run.seed=8"]
    before = foglab.load("quickstart").spec.model_dump(mode="json")
    after = foglab.load("quickstart", set=changes).spec.model_dump(mode="json")
    assert written_before(changes, before, after) == (
        "pipeline.0.on=gateways, topology.links.1.bandwidth=20000kbit, "
        "pipeline.filter.cost=0.15ms, run.seed=7")


def test_sweep_plots_makes_its_folder_and_draws_no_figure_across_one_value(tmp_path) -> None:
    from experiments.plots import sweep_plots

    result = foglab.run("quickstart", set=QUICK,
                        sweep=["run.seed=[1, 2]", "workload.streams.0.rate=[2/s]"],
                        out=tmp_path)
    (points,) = (tmp_path / "quickstart").glob("*-sweep/points.parquet")
    written = sweep_plots(points, tmp_path / "figures" / "new")  # a folder not there yet
    assert written and all(path.exists() for path in written)
    assert {path.name.split("-")[0] for path in written} == {"run.seed"}, written
    assert len(result.outcomes) == 2


def test_the_points_table_prints_the_swept_values_as_written(tmp_path) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "foglab", "run", "quickstart", "--set", "run.drain=1s",
         "--sweep", "run.duration=[2s, 3s]", "--sweep", "pipeline.0.on=[gateways, cloud-1]",
         "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    table = shown.stdout[shown.stdout.index("points (mean"):]
    rows = [line.split()[:2] for line in table.splitlines()
            if line.strip().startswith(("2s", "3s"))]
    assert rows == [["2s", "gateways"], ["2s", "cloud-1"], ["3s", "gateways"], ["3s", "cloud-1"]]
    assert '["gateways"]' not in table and "2.0 " not in table


def test_foglab_results_names_the_folder_for_every_command_and_an_empty_place_is_no_error(
        tmp_path) -> None:
    import os

    env = {**os.environ, "FOGLAB_RESULTS": str(tmp_path / "kept")}
    made = subprocess.run([sys.executable, "-m", "foglab", "run", "quickstart", "--set",
                           "run.duration=1s"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stdout + made.stderr
    (run,) = (tmp_path / "kept" / "quickstart").iterdir()
    assert not (tmp_path / "results").exists()
    listed = subprocess.run([sys.executable, "-m", "foglab", "results", "list"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert listed.returncode == 0 and run.name in listed.stdout
    env.pop("FOGLAB_RESULTS")
    empty = subprocess.run([sys.executable, "-m", "foglab", "results", "list"],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert empty.returncode == 0 and "no runs here yet" in empty.stdout
    assert "--root results" not in empty.stdout


@pytest.mark.parametrize(("option", "path", "expected"), [
    ("pipeline=[]", ("pipeline",), "at least 1 entry"),
    ("run.backend=simx", ("run", "backend"), "'sim', 'emu' or 'hybrid'"),
    ("run.repetitions=1.5", ("run", "repetitions"), "a whole number"),
    ("pipeline.0.selectivity=-5%", ("pipeline", 0, "selectivity"),
     "expected a proportion such as 95% or 0.95"),
])
def test_a_bad_value_is_said_in_foglabs_words_not_pydantics(option, path, expected) -> None:
    with pytest.raises(SpecError) as caught:
        foglab.load("quickstart", set=[option])
    assert caught.value.path[:len(path)] == path
    assert caught.value.expected.startswith(expected), caught.value.expected
    assert "Input should be" not in caught.value.expected
    assert "List should have" not in caught.value.expected


def test_a_selectivity_takes_a_percentage_as_the_docs_say() -> None:
    spec = foglab.load("quickstart", set=["pipeline.0.selectivity=95%"]).spec
    assert spec.pipeline[0].selectivity == pytest.approx(0.95)
    more = foglab.load("quickstart", set=["pipeline.0.selectivity=150%"]).spec
    assert more.pipeline[0].selectivity == pytest.approx(1.5)  # outputs per input may pass 1


def test_a_topology_swept_by_name_is_refused_saying_what_to_do() -> None:
    with pytest.raises(SpecError) as caught:
        foglab.load("quickstart", sweep=["topology=[smart-city, thesis-azure]"])
    assert caught.value.path == ("sweep", "topology")
    assert "--set topology=NAME" in caught.value.expected


def test_results_show_on_a_sweeps_folder_shows_its_points_again(tmp_path) -> None:
    foglab.run("quickstart", set=QUICK, sweep=["run.seed=[1, 2]"], out=tmp_path)
    (sweep,) = (tmp_path / "quickstart").glob("*-sweep")
    shown = subprocess.run([sys.executable, "-m", "foglab", "results", "show", str(sweep)],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"sweep {sweep.name.removesuffix('-sweep')}: 2 runs" in shown.stdout
    rows = [line.split()[0] for line in shown.stdout.splitlines()
            if line.strip()[:1].isdigit() and "±" not in line.split()[0]]
    assert rows[-2:] == ["1", "2"]  # a row per point, its seed first


def test_zip_pairs_its_keys_value_by_value_within_each_sweep_point() -> None:
    experiment = foglab.load("quickstart", sweep=["run.duration=[1s, 2s]"],
                             paired=["workload.streams.0.rate=[1/s, 4/s]", "run.seed=[3, 4]"])
    assert [point.values for point in experiment.points] == [
        {"run.duration": "1s", "workload.streams.0.rate": "1/s", "run.seed": 3},
        {"run.duration": "1s", "workload.streams.0.rate": "4/s", "run.seed": 4},
        {"run.duration": "2s", "workload.streams.0.rate": "1/s", "run.seed": 3},
        {"run.duration": "2s", "workload.streams.0.rate": "4/s", "run.seed": 4}]
    assert [(p.spec.workload.streams[0].rate, p.spec.run.seed) for p in experiment.points][:2] \
        == [(1.0, 3), (4.0, 4)]


def test_zipped_keys_of_different_lengths_or_swept_twice_are_refused() -> None:
    with pytest.raises(SpecError) as caught:
        foglab.load("quickstart", paired=["run.seed=[1, 2]", "run.duration=[1s, 2s, 3s]"])
    assert caught.value.path == ("zip", "run.duration")
    assert "3 values" not in caught.value.expected and "2 values, as many as run.seed's" in \
        caught.value.expected
    with pytest.raises(SpecError) as caught:
        foglab.load("quickstart", sweep=["run.seed=[1, 2]"], paired=["run.seed=[1, 2]"])
    assert caught.value.path[0] == "zip" and "sweep or zip, not both" in caught.value.expected


def test_resume_runs_only_the_points_without_an_ok_run_and_keeps_each_at_its_point(
        tmp_path) -> None:
    import json

    import pandas as pd

    first = foglab.run("quickstart", set=QUICK, sweep=["run.seed=[2, 1]"], out=tmp_path)
    by_seed = {o.point["run.seed"]: o.folder for o in first.outcomes}
    # A run that did not end ok is run again.
    manifest = json.loads((by_seed[1] / "manifest.json").read_text())
    (by_seed[1] / "manifest.json").write_text(json.dumps({**manifest, "status": "failed"}))
    again = foglab.run("quickstart", set=QUICK, sweep=["run.seed=[1, 2, 3]"], out=tmp_path,
                       resume=True)
    folders = [o.folder for o in again.outcomes]
    assert folders[1] == by_seed[2]                         # kept: seed 2 ended ok
    assert folders[0] != by_seed[1] and folders[2] not in by_seed.values()  # run (again)
    assert [o.index for o in again.outcomes] == [0, 1, 2]
    (sweep,) = [f for f in (tmp_path / "quickstart").glob("*-sweep")
                if (f / "runs.json").read_text().count('"run"') == 3]
    table = pd.read_parquet(sweep / "points.parquet")
    assert table["run.seed"].tolist() == [1, 2, 3]
    delivered = [json.loads((f / "summary.json").read_text())["delivered"] for f in folders]
    assert table["delivered"].tolist() == delivered


def test_resume_with_a_key_swept_now_at_the_value_an_earlier_run_had_takes_that_run(
        tmp_path) -> None:
    """A run of seed 1 at the file's rate is the point (seed 1, rate 1/s) of a sweep over both:
    it stands for it, and the points table names it by this sweep's values."""
    import pandas as pd

    (done,) = foglab.run("quickstart", set=QUICK, out=tmp_path).runs
    rate = foglab.load("quickstart").spec.workload.streams[0].rate
    again = foglab.run("quickstart", set=QUICK, sweep=["workload.streams.0.rate=[1/s, 2/s]"],
                       out=tmp_path, resume=True)
    assert rate == 1.0 and again.outcomes[0].folder == done.folder
    assert again.outcomes[0].point == {"workload.streams.0.rate": "1/s"}
    (sweep,) = (tmp_path / "quickstart").glob("*-sweep")
    table = pd.read_parquet(sweep / "points.parquet")
    assert table["workload.streams.0.rate"].tolist() == [1.0, 2.0]


def test_the_points_table_has_each_points_migration_execution_time(tmp_path) -> None:
    # The thesis tables' measure: a migration's execution, start to end, as the mean of each
    # point's finished migrations, beside downtime, in points.parquet and in the printed table.
    result = foglab.run("migrate-pause-drain", set=["run.duration=30s", "run.drain=2s"],
                        sweep=["run.seed=[1, 2]"], out=tmp_path)
    assert result.ok, result.errors
    migrations = result.table("migrations")
    assert len(migrations) == 2 and (migrations["status"] == "done").all()
    expected = (migrations["end"] - migrations["start"]).to_list()
    (points,) = (tmp_path / "migrate-pause-drain").glob("*-sweep/points.parquet")
    import pyarrow.parquet as pq

    table = pq.read_table(points)
    assert table.column("execution").to_pylist() == pytest.approx(expected)
    assert table.schema.field("execution").metadata == {b"unit": b"s"}
    assert table.column("migrations_done").to_pylist() == [1, 1]


def test_a_swept_list_of_names_comes_back_as_written_in_every_table(tmp_path) -> None:
    # `on: [gateways]` is a list once read: typed, it stays the name swept, not its JSON.
    result = foglab.run("quickstart", set=QUICK, sweep=["pipeline.0.on=[gateways, cloud-1]"],
                        out=tmp_path)
    key = "pipeline.0.on"
    assert result.summary[key].tolist() == ["gateways", "cloud-1"]
    assert set(result.table("nodes")[key]) == {"gateways", "cloud-1"}
    (points,) = (tmp_path / "quickstart").glob("*-sweep/points.parquet")
    import pyarrow.parquet as pq

    assert pq.read_table(points).column(key).to_pylist() == ["gateways", "cloud-1"]
