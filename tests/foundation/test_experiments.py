"""Experiment files: catalog references, overrides, sweeps, repetitions and located errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments import catalog
from experiments.loader import load, parse_text
from experiments.runner import repetition_seed
from tests.foundation.helpers import BLOCK
from topologies.documents import load_text
from topologies.errors import SpecError

QUICKSTART = catalog.find("experiment", "quickstart").read_text(encoding="utf-8")

DURATION_LINE = 13


def spec_error(text: str, **kwargs) -> SpecError:
    with pytest.raises(SpecError) as caught:
        parse_text(text, **kwargs)
    return caught.value


# -- loading ---------------------------------------------------------------------------------

def test_catalog_lists_the_shipped_experiments() -> None:
    assert {"quickstart", "iotcloud-brokers"} <= set(catalog.names("experiment"))


def test_load_a_catalog_experiment_by_name_resolves_its_references() -> None:
    experiment = load("quickstart")
    spec = experiment.spec
    assert experiment.name == "quickstart"
    assert experiment.references == {"topology": "smart-city", "workload": "city-sensors"}
    assert spec.topology.name == "smart-city" and spec.workload.name == "city-sensors"
    assert (spec.run.backend, spec.run.duration, spec.run.seed) == ("sim", 600.0, 7)
    assert [op.name for op in spec.pipeline] == ["filter", "stats"]
    assert experiment.points[0].topology.counts()["device"] == 200


def test_load_by_path_gives_the_same_experiment_as_by_name() -> None:
    path = catalog.find("experiment", "quickstart")
    by_path, by_name = load(path), load("quickstart")
    assert by_path.spec == by_name.spec
    assert by_path.points[0].config_hash == by_name.points[0].config_hash


def test_references_resolve_relative_to_the_experiment_file(tmp_path: Path) -> None:
    topology = catalog.find("topology", "smart-city").read_text(encoding="utf-8")
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "town.yaml").write_text(topology.replace("name: smart-city",
                                                                   "name: town"))
    file = tmp_path / "exp.yaml"
    file.write_text(BLOCK.replace("topology: smart-city", "topology: parts/town.yaml"))
    experiment = load(file)
    assert experiment.spec.topology.name == "town"
    assert experiment.references["topology"] == "parts/town.yaml"


def test_config_hash_is_stable_and_follows_the_content() -> None:
    assert load("quickstart").points[0].config_hash == load("quickstart").points[0].config_hash
    assert len(load("quickstart").points[0].config_hash) == 64
    changed = load("quickstart", overrides=["run.seed=8"]).points[0].config_hash
    assert changed != load("quickstart").points[0].config_hash


# -- overrides -------------------------------------------------------------------------------

def test_set_overrides_a_run_field_with_a_yaml_value() -> None:
    spec = load("quickstart", overrides=["run.seed=3"]).spec
    assert spec.run.seed == 3


def test_set_reaches_into_a_referenced_topology_by_index() -> None:
    point = load("quickstart", overrides=["topology.links.0.latency=30ms"]).points[0]
    assert point.spec.topology.links[0].latency == pytest.approx(0.030)
    radio = [link for link in point.topology.links if link.a.startswith("sensor-")]
    assert len(radio) == 200
    assert all(link.latency == pytest.approx(0.030) for link in radio)


def test_set_takes_lists_and_several_options_in_order() -> None:
    spec = load("quickstart", overrides=["pipeline.0.on=[gw-1, gw-2]", "run.seed=1",
                                         "run.seed=2"]).spec
    assert spec.pipeline[0].on == ["gw-1", "gw-2"]
    assert spec.run.seed == 2


def test_set_of_a_path_that_is_not_there_names_the_option() -> None:
    with pytest.raises(SpecError) as caught:
        load("quickstart", overrides=["pipeline.7.cost=1ms"])
    assert caught.value.file == "--set pipeline.7.cost=1ms"
    assert "pipeline[7]" in str(caught.value)


def test_set_without_a_value_is_an_error_naming_the_option() -> None:
    with pytest.raises(SpecError, match="--set run.seed"):
        load("quickstart", overrides=["run.seed"])


def test_an_error_in_an_overridden_value_names_the_set_option() -> None:
    with pytest.raises(SpecError) as caught:
        load("quickstart", overrides=["run.duration=10 parsecs"])
    error = caught.value
    assert error.file == "--set run.duration=10 parsecs"
    assert error.path == ("run", "duration")
    assert str(error).startswith("--set run.duration=10 parsecs: run.duration:")
    assert "parsecs" in error.expected


def test_set_can_name_a_catalog_topology_like_the_file_can() -> None:
    assert load("quickstart", overrides=["topology=smart-city"]).spec == load("quickstart").spec


# -- sweeps and repetitions ------------------------------------------------------------------

def test_a_sweep_section_gives_one_point_per_value() -> None:
    experiment = parse_text(BLOCK + "sweep:\n  run.seed: [1, 2, 3]\n")
    assert [p.values for p in experiment.points] == [{"run.seed": s} for s in (1, 2, 3)]
    assert [p.spec.run.seed for p in experiment.points] == [1, 2, 3]
    assert [p.index for p in experiment.points] == [0, 1, 2]
    assert len({p.config_hash for p in experiment.points}) == 3


def test_a_sweep_option_gives_one_point_per_value() -> None:
    experiment = load("quickstart", sweeps=["run.seed=[1,2,3]"])
    assert [p.spec.run.seed for p in experiment.points] == [1, 2, 3]


def test_two_sweep_keys_give_their_product_in_order() -> None:
    experiment = load("quickstart", sweeps=["run.seed=[1,2,3]",
                                            "topology.links.0.latency=[5ms, 50ms]"])
    assert [(p.spec.run.seed, p.spec.topology.links[0].latency) for p in experiment.points] == [
        (1, 0.005), (1, 0.05), (2, 0.005), (2, 0.05), (3, 0.005), (3, 0.05)]


def test_the_catalog_broker_study_sweeps_two_models_by_three_sizes() -> None:
    experiment = load("iotcloud-brokers")
    assert len(experiment.points) == 6
    sizes = sorted({p.spec.workload.streams[0].size for p in experiment.points})
    assert sizes == [1000, 50_000, 200_000]
    models = [p.spec.topology.nodes[2].broker.model for p in experiment.points]
    assert sorted(set(models)) == ["kafka-like", "rabbitmq-like"]


def test_a_set_option_on_a_swept_key_sets_it_for_every_run() -> None:
    experiment = parse_text(BLOCK + "sweep:\n  run.seed: [1, 2, 3]\n  run.duration: [5s, 9s]\n",
                            overrides=["run.seed=42"])
    assert [(p.spec.run.seed, p.spec.run.duration) for p in experiment.points] == [
        (42, 5.0), (42, 9.0)]
    assert [p.values for p in experiment.points] == [{"run.duration": "5s"},
                                                      {"run.duration": "9s"}]


def test_one_key_cannot_be_both_set_and_swept() -> None:
    with pytest.raises(SpecError, match=r"--sweep run.seed=\[1,2\].*not both"):
        load("quickstart", overrides=["run.seed=3"], sweeps=["run.seed=[1,2]"])


def test_a_sweep_option_needs_a_list() -> None:
    with pytest.raises(SpecError, match="--sweep run.seed=3"):
        load("quickstart", sweeps=["run.seed=3"])


def test_a_bad_sweep_value_names_the_option_and_the_point() -> None:
    with pytest.raises(SpecError) as caught:
        load("quickstart", sweeps=["run.seed=[1, x]"])
    assert caught.value.file == "--sweep run.seed=[1, x]"
    assert "'run.seed': 'x'" in str(caught.value)


def test_a_bad_value_in_a_sweep_section_names_the_point() -> None:
    error = spec_error(BLOCK + "sweep:\n  run.duration: [10s, 10 parsecs]\n")
    assert error.path == ("run", "duration")
    assert "sweep point" in str(error) and "parsecs" in str(error)


def test_repetition_zero_runs_with_the_seed_as_written() -> None:
    assert repetition_seed(7, 0) == 7
    assert repetition_seed(0, 0) == 0


def test_later_repetitions_get_distinct_deterministic_seeds() -> None:
    seeds = [repetition_seed(7, r) for r in range(1, 50)]
    assert seeds == [repetition_seed(7, r) for r in range(1, 50)]
    assert len(set(seeds) | {7}) == 50
    assert all(0 <= s < 2**63 for s in seeds)
    assert repetition_seed(8, 1) != repetition_seed(7, 1)


# -- located errors --------------------------------------------------------------------------

def test_a_validation_error_names_file_field_value_and_line(tmp_path: Path) -> None:
    file = tmp_path / "far-away.yaml"
    file.write_text(BLOCK.replace("duration: 60s", "duration: 10 parsecs"))
    with pytest.raises(SpecError) as caught:
        load(file)
    error = caught.value
    assert (error.file, error.line, error.path) == (str(file), DURATION_LINE,
                                                   ("run", "duration"))
    assert str(error).startswith(f"{file}:{DURATION_LINE}: run.duration:")
    assert "parsecs" in str(error)


def test_an_error_in_a_referenced_file_names_that_file_and_line(tmp_path: Path) -> None:
    topology = catalog.find("topology", "smart-city").read_text(encoding="utf-8")
    lines = topology.splitlines()
    (index,) = [i for i, line in enumerate(lines) if "to: broker-1, latency: 20ms" in line]
    (tmp_path / "town.yaml").write_text(topology.replace("latency: 20ms", "latency: 20 furlongs"))
    file = tmp_path / "exp.yaml"
    file.write_text(BLOCK.replace("topology: smart-city", "topology: town.yaml"))
    with pytest.raises(SpecError) as caught:
        load(file)
    error = caught.value
    assert error.file == str(tmp_path / "town.yaml")
    assert error.line == index + 1
    assert error.path == ("links", 1, "latency")


def test_an_unknown_field_is_named_with_its_line() -> None:
    error = spec_error(BLOCK.replace("  seed: 4", "  sede: 4"))
    assert error.path == ("run", "sede")
    assert error.line == DURATION_LINE + 1
    assert "no such field" in str(error)


def test_a_missing_field_is_named() -> None:
    error = spec_error(BLOCK.replace("  duration: 60s\n", ""))
    assert error.path == ("run", "duration")
    assert "required" in str(error)


def test_invalid_yaml_is_a_spec_error_with_its_line() -> None:
    error = spec_error("name: x\npipeline: [\n  {a: 1}\nrun: ]\n", file="broken.yaml")
    assert error.file == "broken.yaml"
    assert error.line == 4
    assert "valid YAML" in str(error)


def test_a_file_that_is_not_a_mapping_is_an_error() -> None:
    error = spec_error("- just\n- a list\n")
    assert error.path == () and "mapping" in str(error)


def test_a_missing_file_names_the_catalog_choices() -> None:
    with pytest.raises(SpecError) as caught:
        load("no-such-experiment")
    assert "quickstart" in str(caught.value) and "iotcloud-brokers" in str(caught.value)


def test_an_unknown_catalog_topology_names_the_choices() -> None:
    error = spec_error(BLOCK.replace("topology: smart-city", "topology: atlantis"))
    assert error.path == ("topology",) and error.line == 2
    for name in ("smart-city", "metro-10k", "iotcloud-futuregrid"):
        assert name in str(error)


def test_on_is_a_key_not_the_boolean_true() -> None:
    # under YAML 1.1 `on: gateways` would read as {True: "gateways"}
    spec = parse_text(BLOCK).spec
    assert spec.pipeline[0].on == ["gateways"]
    assert load_text("{on: gateways, off: 1, yes: no, y: n}") == {
        "on": "gateways", "off": 1, "yes": "no", "y": "n"}
    assert load_text("[true, false, True, FALSE]") == [True, False, True, False]


def test_a_stream_that_no_operator_reads_is_an_error() -> None:
    text = QUICKSTART.replace("workload: city-sensors", """workload:
  name: two
  streams:
    - {name: city, sources: sensor-*, rate: 1/s}
    - {name: noise, sources: sensor-*, rate: 1/s}""")
    error = spec_error(text)
    assert error.path == ("workload", "streams", 1, "name")
    assert error.value == "noise"


def test_a_pipeline_without_a_sink_is_an_error() -> None:
    error = spec_error(BLOCK.replace("    reads: clean\n", "    reads: clean\n    writes: out\n"))
    assert error.path == ("pipeline",)
    assert "sink" in str(error)


@pytest.mark.parametrize(("change", "path"), [
    (("on: cloud-1", "on: sensor-1"), ("pipeline", 1, "on", 0)),
    (("on: cloud-1", "on: nowhere-*"), ("pipeline", 1, "on", 0)),
    (("reads: clean", "reads: dirty"), ("pipeline", 1, "reads", 0)),
    (("reads: clean", "reads: clean/#/x"), ("pipeline", 1, "reads", 0)),
    (("writes: clean", "writes: city"), ("pipeline", 0, "writes")),
    (("name: stats", "name: filter"), ("pipeline", 1, "name")),
])
def test_pipeline_cross_references_are_checked(change: tuple[str, str], path: tuple) -> None:
    error = spec_error(BLOCK.replace(*change))
    assert error.path == path


def test_stream_sources_must_be_devices() -> None:
    text = QUICKSTART.replace("workload: city-sensors", """workload:
  name: w
  streams:
    - {name: city, sources: [sensor-1, gw-1], rate: 1/s}""")
    error = spec_error(text)
    assert error.path == ("workload", "streams", 0, "sources", 1)
    assert "gw-1" in str(error)


def test_an_infinite_rate_is_refused() -> None:
    spec_error(QUICKSTART.replace("workload: city-sensors", """workload:
  name: w
  streams:
    - {name: city, sources: sensor-*, rate: .inf}"""))


def test_a_shared_subscription_prefix_reads_like_the_plain_filter() -> None:
    from experiments.model_settings import sim_settings
    from sim.model import simulate

    tables = []
    for read in ("clean", "$share/stats/clean/#"):
        point = load("quickstart", [f"pipeline.1.reads={read}", "run.duration=5s"]).points[0]
        result = simulate(point.topology, point.spec.workload, point.spec.pipeline,
                          sim_settings(point.spec))
        tables.append(result.tables["messages"])
    assert len(tables[0]["id"]) > 500
    assert list(tables[0]["id"]) == list(tables[1]["id"])


def test_a_shared_subscription_without_a_filter_is_a_spec_error() -> None:
    with pytest.raises(SpecError) as caught:
        load("quickstart", ["pipeline.1.reads=$share/stats"])
    assert "pipeline[1].reads[0]" in str(caught.value)


def test_a_pipeline_may_read_one_gateways_queue_of_a_stream() -> None:
    """`frames/gw-1/#` reads gateway gw-1's topic of stream frames (IoTCloud's spout per
    queue); a filter no topic of any stream can match is still refused, naming it."""
    sets = ["pipeline=[{name: spout-1, task: passthrough, on: supervisor-1, reads: frames/gw-1/#},"
            " {name: spout-2, task: passthrough, on: supervisor-2, reads: frames/gw-2/#}]"]
    experiment = load("iotcloud-scaling", sets)
    assert [op.reads for op in experiment.spec.pipeline] == [["frames/gw-1/#"],
                                                             ["frames/gw-2/#"]]
    with pytest.raises(SpecError) as caught:
        load("iotcloud-scaling", ["pipeline.0.reads=[frames/gw-1/a/b/#]"])
    assert caught.value.path == ("pipeline", 0, "reads", 0)
    assert "a workload stream or an operator's writes" in str(caught.value)
