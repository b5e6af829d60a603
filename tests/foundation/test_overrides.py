"""--set and --sweep as the errors write fields: `pipeline[0].cost`, entries by name
(`pipeline.filter.cost`), errors naming the option that caused them, a misspelt field said
first, and bounds in the unit the value was written in."""

from __future__ import annotations

import pytest

from experiments.loader import load, parse_text
from tests.foundation.helpers import BLOCK
from topologies.errors import SpecError


def refused(experiment: str, sets: list[str] = (), sweeps: list[str] = ()) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load(experiment, overrides=list(sets), sweeps=list(sweeps))
    return caught.value


@pytest.mark.parametrize("key", ["pipeline.0.cost", "pipeline[0].cost", "pipeline.filter.cost",
                                 "pipeline[filter].cost"])
def test_an_operator_is_set_by_index_in_either_spelling_or_by_name(key):
    spec = load("quickstart", overrides=[f"{key}=200us"]).spec
    assert spec.pipeline[0].cost == pytest.approx(200e-6)
    assert spec.pipeline[1].cost == pytest.approx(300e-6)  # the other operator as written


def test_a_node_group_of_the_referenced_topology_is_set_by_name():
    experiment = load("quickstart", overrides=["topology.nodes.sensor.replicas=10"])
    assert len(experiment.points[0].topology.of_kind("device")) == 10


def test_a_sweep_takes_names_and_brackets_too():
    experiment = load("quickstart", sweeps=["pipeline[filter].cost=[1ms, 2ms]"])
    assert [p.spec.pipeline[0].cost for p in experiment.points] == pytest.approx([1e-3, 2e-3])
    written = parse_text(BLOCK + "sweep:\n  pipeline.stats.cost: [1ms, 3ms]\n")
    assert [p.spec.pipeline[1].cost for p in written.points] == pytest.approx([1e-3, 3e-3])


def test_a_set_of_a_key_the_file_sweeps_by_name_replaces_that_sweep():
    text = BLOCK + "sweep:\n  pipeline.stats.cost: [1ms, 3ms]\n"
    experiment = parse_text(text, overrides=["pipeline[1].cost=2ms"])
    assert [p.spec.pipeline[1].cost for p in experiment.points] == pytest.approx([2e-3])


def test_a_name_no_entry_has_is_refused_naming_the_option_and_the_names():
    error = refused("quickstart", ["pipeline.filtr.cost=1ms"])
    assert error.file == "--set pipeline.filtr.cost=1ms"
    assert "pipeline.filtr" in str(error) and "(filter, stats)" in str(error)


def test_an_error_the_option_causes_elsewhere_names_the_option_not_a_line():
    # The migration at 20 s is past a 10 s run: the file alone is valid, the option is not.
    error = refused("migrate-pause-transfer", ["run.seed=3", "run.duration=10s"])
    assert error.file == "--set run.duration=10s" and error.line is None
    assert str(error).startswith("--set run.duration=10s: scenario.migrations[0].at:")
    error = refused("quickstart", ["pipeline.0.writes=other"])
    assert str(error).startswith("--set pipeline.0.writes=other: pipeline[1].reads[0]:")


def test_a_sweep_that_causes_an_error_elsewhere_is_named():
    error = refused("migrate-pause-transfer", sweeps=["run.duration=[10s, 40s]"])
    assert error.file == "--sweep run.duration=[10s, 40s]"


def test_the_files_own_mistake_keeps_its_line_with_options_given():
    with pytest.raises(SpecError) as caught:
        parse_text(BLOCK.replace("reads: clean", "reads: nosuch"), "block.yaml",
                   overrides=["run.seed=3"])
    assert caught.value.file == "block.yaml" and caught.value.line == 11


def test_a_misspelt_field_is_said_first():
    error = refused("quickstart", ["pipeline.0.cost=5", "run.sead=3"])
    assert str(error).startswith("--set run.sead=3: run.sead: no such field here")
    # A misspelt required field: the misspelling first, the missing field after it.
    with pytest.raises(SpecError) as caught:
        parse_text(BLOCK.replace("duration: 60s", "duraton: 60s"), "block.yaml")
    assert caught.value.path == ("run", "duraton"), str(caught.value)


@pytest.mark.parametrize(("option", "said"), [
    ("run.duration=40d", "run.duration: at most 30d"),
    ("run.duration=1000h", "run.duration: at most 720h"),
    ("run.drain=50000min", "run.drain: at most 43200min"),
    ("run.repetitions=2000", "run.repetitions: at most 1,000"),
])
def test_a_bound_is_said_in_the_unit_written(option, said):
    error = str(refused("quickstart", [option]))
    assert said in error and "2592000" not in error, error


def test_a_bound_broken_in_a_sweep_is_said_in_its_unit():
    error = refused("quickstart", sweeps=["run.duration=[10s, 40d]"])
    assert error.file == "--sweep run.duration=[10s, 40d]" and "at most 30d" in str(error)


def test_a_name_resolves_against_what_an_earlier_option_wrote():
    spec = load("quickstart", overrides=["pipeline=[{name: only, on: gateways, reads: city}]",
                                         "pipeline.only.cost=3ms"]).spec
    assert [(op.name, op.cost) for op in spec.pipeline] == [("only", pytest.approx(3e-3))]
