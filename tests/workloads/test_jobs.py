"""Jobs composed across sites (workloads.jobs): they expand to the flat pipeline's own
operators, run on sim, and every mistake is refused with its file, field path and value."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments.apply_cli import load_composed
from experiments.loader import parse_text
from experiments.runner import run_experiment
from topologies.errors import SpecError, Withheld
from workloads.pipeline import placement

EXPERIMENTS = Path(__file__).parents[2] / "experiments"

# What speck-jobs.yaml says, written as the flat pipeline by hand.
FLAT = """
name: speck-flat
topology: smart-city
workload: city-sensors
pipeline:
{operators}
  - {{name: merge, on: site:cloud, writes: merged,
     reads: [clean-north, clean-east, clean-south, clean-west]}}
  - {{name: global-stats, task: stats, engine: spark, on: cloud-1, reads: merged, cost: 300us}}
  - {{name: global-count, on: cloud-1, reads: merged, window: {{size: 30s}}}}
run: {{backend: sim, duration: 1m, seed: 7}}
"""
EDGE = """  - {{name: clean-{site}, task: range_filter, on: site:{site}, reads: city,
     writes: clean-{site}, cost: 150us, params: {{ranges: {{temperature: [-20, {high}]}}}}}}
  - {{name: local-{site}, on: site:{site}, reads: clean-{site}, window: {{size: 10s}}}}"""


@pytest.fixture(scope="module")
def speck():
    return load_composed("speck-jobs")


def test_the_jobs_expand_to_the_flat_pipelines_operators(speck) -> None:
    experiment, jobs = speck
    highs = {"north": 50, "east": 50, "south": 45, "west": 50}
    flat = parse_text(FLAT.format(operators="\n".join(
        EDGE.format(site=site, high=high) for site, high in highs.items())), "flat.yaml")
    assert experiment.spec.pipeline == flat.spec.pipeline
    assert [op.name for op in experiment.spec.pipeline][-3:] == [
        "merge", "global-stats", "global-count"]
    # Each job holds the validated pipeline's own objects, in the file's order.
    assert list(jobs) == ["clean-north", "local-north", "clean-east", "local-east",
                          "clean-south", "local-south", "clean-west", "local-west", "merge",
                          "global"]
    assert [op.name for op in jobs["global"]] == ["global-stats", "global-count"]
    assert jobs["global"][1] is experiment.spec.pipeline[-1]
    assert experiment.spec.pipeline[4].params == {"ranges": {"temperature": [-20, 45]}}


def test_a_site_places_on_its_gateways_and_cloud_vms_only(speck) -> None:
    topology = speck[0].points[0].topology
    assert placement(topology, ["site:north"]) == ["gw-1"]
    assert placement(topology, ["site:cloud"]) == ["cloud-1"]  # not broker-1
    assert placement(topology, ["site:east", "site:west", "gw-2"]) == ["gw-2", "gw-4"]


def test_the_composition_runs_on_sim(speck, tmp_path) -> None:
    experiment = speck[0]
    (outcome,) = run_experiment(experiment, tmp_path)
    assert outcome.error is None, outcome.error
    summary = outcome.summary
    # 200 sensors at 1/s (Poisson) for a minute; the radio loses 0.5 % of them.
    assert 11_400 <= summary["emitted"] <= 12_600
    assert 0 < summary["lost"] <= 0.02 * summary["emitted"]
    windows = pd.read_parquet(outcome.folder / "windows.parquet")
    # Each site's local statistics and the cloud's count closed their windows.
    assert set(windows["operator"]) >= {"local-north", "local-east", "local-south",
                                        "local-west", "global-count"}


def _write(folder: Path, experiment: dict, include: dict | None = None) -> Path:
    (folder / "inc").mkdir(exist_ok=True)
    if include is not None:
        (folder / "inc" / "edge.yaml").write_text(yaml.safe_dump(include, sort_keys=False))
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    return path


BASE = {"name": "jobs-test", "topology": "smart-city", "workload": "city-sensors",
        "run": {"backend": "sim", "duration": "10s"}}
EDGE_FILE = {"params": {"site": None},
             "jobs": [{"name": "clean-${site}", "on": "site:${site}", "reads": "city",
                       "writes": "clean-${site}"}]}


def _refused(tmp_path: Path, jobs: list, include: dict | None = None, **more) -> SpecError:
    path = _write(tmp_path, {**BASE, **more, "jobs": jobs}, include)
    with pytest.raises(SpecError) as caught:
        load_composed(path)
    return caught.value


def test_a_job_naming_a_missing_site_is_refused(tmp_path) -> None:
    error = _refused(tmp_path, [{"name": "a", "on": "site:harbour", "reads": "city"}])
    assert error.file.endswith("exp.yaml") and error.line is not None
    assert error.path == ("jobs", 0, "on") and error.value == "site:harbour"
    assert "cloud, east, north, south, west" in str(error)


def test_a_missing_site_inside_an_include_names_the_include(tmp_path) -> None:
    error = _refused(tmp_path, [{"include": "inc/edge.yaml", "with": {"site": "harbour"}}],
                     EDGE_FILE)
    assert error.file.endswith("inc/edge.yaml") and error.line == 5  # its `on:`
    # An include's values are not shown (topologies.errors.Withheld): its column instead.
    assert error.path == ("jobs", 0, "on") and error.value == Withheld("site:harbour")
    assert error.column == 9 and "harbour" not in str(error)


def test_a_missing_include_is_refused_with_where_it_resolves(tmp_path) -> None:
    error = _refused(tmp_path, [{"include": "inc/nosuch.yaml"}])
    assert error.path == ("jobs", 0, "include") and error.value == "inc/nosuch.yaml"
    assert str(tmp_path / "inc" / "nosuch.yaml") in str(error)


def test_an_unknown_parameter_is_refused(tmp_path) -> None:
    error = _refused(tmp_path, [{"name": "a", "on": "gw-1", "reads": "${stream}"}],
                     params={"streem": "city"})
    assert error.path == ("jobs", 0, "reads") and error.value == "${stream}"
    assert "streem" in str(error)
    error = _refused(tmp_path, [{"include": "inc/edge.yaml", "with": {"site": "north",
                                                                      "rate": 3}}], EDGE_FILE)
    assert error.path == ("jobs", 0, "with", "rate") and "(site)" in str(error)
    error = _refused(tmp_path, [{"include": "inc/edge.yaml"}], EDGE_FILE)
    assert error.path == ("jobs", 0, "with") and "a value for site" in str(error)


def test_a_cycle_between_jobs_is_refused(tmp_path) -> None:
    error = _refused(tmp_path, [
        {"name": "a", "on": "gw-1", "reads": ["city", "back"], "writes": "ahead"},
        {"name": "b", "on": "cloud-1", "reads": "ahead", "writes": "back"},
        {"name": "c", "on": "cloud-1", "reads": "ahead"}])
    assert error.path == ("jobs", 1) and error.value == "b"
    assert "a (ahead) -> b (back) -> a" in str(error)


def test_an_operators_own_mistake_is_placed_in_its_job(tmp_path) -> None:
    error = _refused(tmp_path, [{"name": "g", "on": "cloud-1", "operators": [
        {"name": "x", "reads": "city"}, {"name": "y", "reads": "city", "task": "nosuch"}]}])
    assert error.path == ("jobs", 0, "operators", 1, "task") and error.value == "nosuch"
    error = _refused(tmp_path, [{"name": "a", "on": "gw-1", "reads": "city"}],
                     pipeline=[{"name": "b", "on": "gw-1", "reads": "city"}])
    assert error.path == ("pipeline",) and "not both" in str(error)


def test_an_include_resolves_against_the_including_files_folder(tmp_path) -> None:
    shutil.copytree(EXPERIMENTS / "speck-jobs", tmp_path / "speck-jobs")
    shutil.copy(EXPERIMENTS / "speck-jobs.yaml", tmp_path / "speck-jobs.yaml")
    experiment, jobs = load_composed(tmp_path / "speck-jobs.yaml")
    assert len(jobs) == 10 and len(experiment.spec.pipeline) == 11


def test_the_experiments_checks_of_the_pipeline_are_placed_at_the_job(tmp_path) -> None:
    # A stream nobody writes is found by the experiment's checks, on the expanded pipeline.
    error = _refused(tmp_path, [{"include": "inc/edge.yaml", "with": {"site": "north"}},
                                {"name": "g", "on": "cloud-1", "operators": [
                                    {"name": "x", "reads": ["clean-north", "clean-west"]}]}],
                     EDGE_FILE)
    assert error.path == ("jobs", 1, "operators", 0, "reads", 1)
    assert error.value == "clean-west" and error.file.endswith("exp.yaml")
    lines = (tmp_path / "exp.yaml").read_text().splitlines()
    assert lines[error.line - 1].strip() == "- clean-west"


def test_the_file_schema_for_editors_takes_a_pipeline_or_jobs() -> None:
    from experiments.spec import ExperimentFile, ExperimentSpec

    schema = ExperimentFile.model_json_schema()
    assert schema["oneOf"] == [{"required": ["pipeline"]}, {"required": ["jobs"]}]
    assert "pipeline" not in schema["required"] and {"jobs", "params"} <= set(
        schema["properties"])
    # What runs is validated as before: a pipeline, required.
    assert "pipeline" in ExperimentSpec.model_json_schema()["required"]
