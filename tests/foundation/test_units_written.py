"""Every quantity written by hand needs its unit: a bare number where a duration, rate, size,
bandwidth or clock is expected is refused (file or option, field, value, the units to write it
in), 0 alone passes, and specs built in code keep their base units."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.loader import load, parse_text
from topologies import units
from topologies.documents import read
from topologies.errors import SpecError
from topologies.fields import WRITTEN
from topologies.spec import LinkSpec, TopologySpec
from workloads.calibration import Calibration
from workloads.spec import WorkloadSpec

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(("value", "what", "said"), [
    (10, "a duration", "10 has no unit; write 10ms or 10s"),
    ("10", "a duration", "10 has no unit; write 10ms or 10s"),
    (2.5, "a duration", "2.5 has no unit; write 2.5ms or 2.5s"),
    (5, "a rate", "5 has no unit; write 5/s or 5/min"),
    (200, "a size", "200 has no unit; write 200B or 200KB"),
    (100, "a bandwidth", "100 has no unit; write 100Mbit or 100MB/s"),
    (1500, "a clock frequency", "1500 has no unit; write 1500MHz or 1500GHz"),
])
def test_a_bare_number_is_refused_with_the_units_to_write_it_in(value, what, said):
    with pytest.raises(ValueError, match=f"^{said}$".replace(".", r"\.").replace("/", "/")):
        units.require_unit(value, what)


@pytest.mark.parametrize("value", [0, 0.0, "0", "10ms", "5/s", "1/10s", "fast", None, True])
def test_zero_and_what_has_a_unit_pass_as_given(value):
    # 0 is zero in every unit; what is not a bare number is left for the parser to judge.
    assert units.require_unit(value, "a duration") is value


@pytest.mark.parametrize(("written", "parsed", "limit", "said"), [
    ("40d", 40 * 86400.0, 30 * 86400.0, "30d"),
    ("1000h", 1000 * 3600.0, 30 * 86400.0, "720h"),
    ("600/min", 10.0, 5.0, "300/min"),
    ("2KB", 2000, 1000, "1KB"),
])
def test_a_limit_is_written_in_the_unit_of_the_value(written, parsed, limit, said):
    assert units.written_like(written, parsed, limit) == said


@pytest.mark.parametrize("written", [40, "40", "0s", None])
def test_a_limit_has_no_unit_to_take_from_a_bare_or_zero_value(written):
    assert units.written_like(written, 40.0, 30.0) is None


@pytest.mark.parametrize(("experiment", "key"), [
    ("quickstart", "topology.links.1.latency"),
    ("quickstart", "topology.links.1.jitter"),
    ("quickstart", "topology.links.1.bandwidth"),
    ("quickstart", "topology.nodes.broker-1.broker.service_time"),
    ("quickstart", "workload.streams.0.rate"),
    ("quickstart", "workload.streams.0.size"),
    ("quickstart", "workload.streams.0.start"),
    ("quickstart", "pipeline.0.cost"),
    ("quickstart", "pipeline.0.out_size"),
    ("quickstart", "run.duration"),
    ("quickstart", "run.sample"),
    ("quickstart", "run.drain"),
    ("quickstart", "run.driver_cost"),
    ("migrate-pause-transfer", "scenario.migrations.0.at"),
    ("migrate-pause-transfer", "scenario.migration.launch"),
    ("migrate-pause-transfer", "scenario.migration.state_per_event"),
    ("migrate-pause-transfer", "scenario.migration.restore_bandwidth"),
    ("migrate-pause-transfer", "pipeline.count.window.size"),
    ("faults-crash", "scenario.faults.0.at"),
])
def test_every_quantity_field_refuses_a_bare_number_naming_the_option(experiment, key):
    with pytest.raises(SpecError) as caught:
        load(experiment, overrides=[f"{key}=7"])
    assert caught.value.file == f"--set {key}=7"
    assert "7 has no unit; write 7" in str(caught.value), str(caught.value)


def test_a_profile_clock_and_memory_need_units():
    profile = "topology.profiles.mine={arch: arm64, cores: 4, clock: 1500, memory: 4GiB, speed: 1}"
    with pytest.raises(SpecError, match="clock: 1500 has no unit; write 1500MHz or 1500GHz"):
        load("quickstart", overrides=[profile])
    load("quickstart", overrides=[profile.replace("clock: 1500", "clock: 1500MHz")])


def test_a_bare_number_in_a_file_names_its_line():
    text = (ROOT / "experiments" / "quickstart.yaml").read_text()
    with pytest.raises(SpecError) as caught:
        parse_text(text.replace("duration: 10m", "duration: 600"), "quick.yaml")
    line = duration_line(text)
    assert str(caught.value) == (f"quick.yaml:{line}: run.duration: 600 has no unit; "
                                 "write 600ms or 600s")


def test_a_bare_number_in_a_sweep_is_refused():
    with pytest.raises(SpecError, match="10 has no unit") as caught:
        load("quickstart", sweeps=["run.duration=[10s, 10]"])
    assert caught.value.file == "--sweep run.duration=[10s, 10]"


def test_a_bare_zero_is_zero_in_every_unit():
    spec = load("quickstart", overrides=["topology.links.1.jitter=0", "pipeline.0.cost=0",
                                         "workload.streams.0.start=0"]).spec
    assert spec.pipeline[0].cost == 0 and spec.workload.streams[0].start == 0


def test_specs_built_in_code_keep_base_units():
    link = LinkSpec.model_validate({"from": "a", "to": "b", "latency": 0.02})
    assert link.latency == pytest.approx(0.02)
    with pytest.raises(ValueError, match="0.02 has no unit"):
        LinkSpec.model_validate({"from": "a", "to": "b", "latency": 0.02}, context=WRITTEN)


@pytest.mark.parametrize("path", sorted(
    [*ROOT.glob("topologies/*.yaml"), *ROOT.glob("workloads/*.yaml"),
     *ROOT.glob("workloads/calibrations/*.yaml")]), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_description_writes_its_quantities_with_units(path):
    schema = {"topologies": TopologySpec, "workloads": WorkloadSpec,
              "calibrations": Calibration}[path.parent.name]
    schema.model_validate(read(path).data, context=WRITTEN)


@pytest.mark.parametrize("path", sorted(ROOT.glob("experiments/*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_experiment_writes_its_quantities_with_units(path):
    load(path)


def duration_line(text: str) -> int:
    """The line of quickstart's run.duration, counted from 1."""
    return 1 + next(n for n, line in enumerate(text.splitlines()) if "duration: 10m" in line)
