"""Calibration profiles: their schema and errors, and the model costing by one (no containers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from experiments.loader import parse_text
from experiments.runner import run_experiment
from foundation.helpers import run
from topologies.errors import SpecError
from workloads import calibration
from workloads.calibration import Calibration, load, write

# Round figures, so that the expected latencies below are plain sums.
PROFILE = """\
measured: 2026-11-25T12:00:00Z
quick: true
host: {cpu: Test CPU, cores: 2, machine: x86_64, kernel: '6.1', python: 3.11.7,
       docker: '24.0', qemu: '7.2', load: 0.5}
gateway:
  profile: rpi4-qemu
  image: foglab/gateway:0123456789abcdef
  cores: 1
  speed: 0.1
  loop: 265ms
  python: 3.11.2
  tasks: {range_filter: 10us, kalman_filter: 50us}
  operators: {passthrough: 10us, range_filter: 400us}
  driver: 1ms
  driver_rate: 50/s
native:
  speed: 0.8
  loop: 33.125ms
  python: 3.11.7
  tasks: {range_filter: 2us, kalman_filter: 8us}
  operators: {passthrough: 1us, range_filter: 40us}
  driver: 300us
  driver_rate: 50/s
broker:
  image: foglab/services:0123456789abcdef
  size: 180B
  service_time: 50us
  rate: 500/s
  burst_service_time: 20us
  burst_throughput: 8000/s
  qos1_service_time: 40us
links: {shaper: relay, latency: 5ms, direct: 400us, shaped: 11.4ms, samples: 40,
        hop_overhead: 500us}
"""

# One message from a sensor through a Pi gateway (driver, then a range filter), a broker and
# a cloud VM's sink; links of 1, 2 and 3 ms, nothing else in the way.
ONE_MESSAGE = """
name: calibrated
topology:
  name: t
  nodes:
    - {name: dev, kind: device}
    - {name: gw, kind: gateway, profile: rpi4}
    - {name: broker, kind: broker, profile: vm.medium, broker: {service_time: 30us}}
    - {name: vm, kind: cloud_vm, profile: vm.small}
  links:
    - {from: dev, to: gw, latency: 1ms}
    - {from: gw, to: broker, latency: 2ms}
    - {from: broker, to: vm, latency: 3ms}
workload:
  name: w
  streams: [{name: s, sources: dev, rate: 1/20s, arrivals: periodic}]
pipeline:
  - {name: filter, task: range_filter, on: gw, reads: s, writes: clean, cost: 150us}
  - {name: sink, on: vm, reads: clean}
run: {duration: 20s, seed: 1, driver_cost: 90us}
"""
LINKS = 6e-3


@pytest.fixture
def profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's folder of profiles, holding `lab` (PROFILE)."""
    folder = tmp_path / "calibrations"
    folder.mkdir()
    (folder / "lab.yaml").write_text(PROFILE)
    monkeypatch.setenv(calibration.FOLDER_VARIABLE, str(folder))
    return folder


def changed(folder: Path, name: str, edit) -> Path:
    """A copy of PROFILE as `name`, its parsed data changed by `edit(data)`."""
    data = yaml.safe_load(PROFILE)
    edit(data)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def flat(data: dict, prefix: str = "") -> dict:
    """Nested mappings as one, keyed by dotted paths."""
    found = {}
    for key, value in data.items():
        if isinstance(value, dict):
            found |= flat(value, f"{prefix}{key}.")
        else:
            found[f"{prefix}{key}"] = value
    return found


def refused(folder: Path, name: str, edit) -> SpecError:
    changed(folder, name, edit)
    with pytest.raises(SpecError) as caught:
        load(name)
    return caught.value


# -- the schema and its errors ---------------------------------------------------------------

def test_a_profile_reads_by_name_with_its_units(profiles: Path) -> None:
    loaded = load("lab")
    assert loaded.file == str(profiles / "lab.yaml") and len(loaded.sha256) == 64
    profile = loaded.calibration
    assert profile.gateway.operators["range_filter"] == pytest.approx(400e-6)
    assert profile.gateway.driver_rate == 50.0
    assert profile.broker.size == 180
    assert profile.links.hop_overhead == pytest.approx(500e-6)


def test_a_missing_field_is_refused_with_file_line_and_field(profiles: Path) -> None:
    error = refused(profiles, "nodriver", lambda d: d["gateway"].pop("driver"))
    assert error.file == str(profiles / "nodriver.yaml")
    assert error.path == ("gateway", "driver")
    assert "required" in str(error)
    # The line where the mapping that misses it starts.
    lines = (profiles / "nodriver.yaml").read_text().splitlines()
    assert lines[error.line - 2] == "gateway:"


def test_a_malformed_field_is_refused_with_file_line_field_and_value(profiles: Path) -> None:
    error = refused(profiles, "parsecs",
                    lambda d: d["broker"].update(service_time="12 parsecs"))
    text = str(error)
    assert text.startswith(f"{profiles / 'parsecs.yaml'}:{error.line}: broker.service_time: ")
    assert "'12 parsecs'" in text and "unknown unit" in text
    with open(profiles / "parsecs.yaml") as written:
        assert "12 parsecs" in written.read().splitlines()[error.line - 1]


@pytest.mark.parametrize(("edit", "path", "words"), [
    (lambda d: d["gateway"]["tasks"].update(my_task="5us"), ("gateway", "tasks", "my_task"),
     "a task of the python engine"),
    (lambda d: d["gateway"].update(speed=-1), ("gateway", "speed"), "greater than 0"),
    (lambda d: d["links"].update(shaper="carrier pigeon"), ("links", "shaper"), "relay"),
    (lambda d: d["native"]["operators"].update(range_filter="0s"),
     ("native", "operators", "range_filter"), "greater than 0"),
    (lambda d: d["broker"].update(colour="blue"), ("broker", "colour"), "no such field"),
    (lambda d: d.pop("host"), ("host",), "required"),
    (lambda d: d.update(measured="yesterday"), ("measured",), "datetime"),
])
def test_each_bad_field_is_named(profiles: Path, edit, path: tuple, words: str) -> None:
    error = refused(profiles, "bad", edit)
    assert error.path == path
    assert words in str(error)
    assert error.file == str(profiles / "bad.yaml")


def test_a_profile_that_is_no_mapping_or_no_yaml_is_refused(profiles: Path) -> None:
    (profiles / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(SpecError, match=r"list\.yaml:1: .*a calibration profile: a mapping"):
        load("list")
    (profiles / "broken.yaml").write_text("gateway: {speed: [\n")
    with pytest.raises(SpecError, match=r"broken\.yaml:\d+: .*valid YAML"):
        load("broken")


def test_writing_and_reading_back_gives_the_same_profile(profiles: Path) -> None:
    profile = load("lab").calibration
    path = write(profile, profiles / "again.yaml")
    again, before = (flat(p.model_dump(mode="json"))
                     for p in (load(str(path)).calibration, profile))
    assert again.keys() == before.keys()
    for key, value in before.items():
        if isinstance(value, float):
            assert again[key] == pytest.approx(value, rel=5e-4), key  # four digits
        else:
            assert again[key] == value, key
    text = path.read_text()
    assert write(load(str(path)).calibration, path).read_text() == text  # a fixed point
    assert "service_time: 50us" in path.read_text()
    assert not [p for p in profiles.iterdir() if p.name.startswith(".")]  # no scratch file


def test_names_find_the_users_profiles_over_shipped_ones(profiles: Path) -> None:
    assert calibration.find("lab") == profiles / "lab.yaml"
    assert calibration.find("nosuch") is None
    for name, path in calibration.names().items():
        assert path.stem == name
        Calibration.model_validate(yaml.safe_load(path.read_text()))  # shipped ones are valid
    assert calibration.target("x") == profiles / "x.yaml"
    with pytest.raises(ValueError, match="neither a profile name"):
        calibration.target("Not A Name")


# -- the experiment's field -------------------------------------------------------------------

def test_an_experiment_names_a_profile_it_cannot_find(profiles: Path) -> None:
    with pytest.raises(SpecError) as caught:
        parse_text(ONE_MESSAGE, "exp.yaml", ["run.calibration=nosuch"])
    text = str(caught.value)
    assert "run.calibration" in text and "'nosuch'" in text
    assert "lab" in text and str(profiles) in text  # what there is, and where they go


def test_an_experiment_with_a_bad_profile_names_the_profiles_field(profiles: Path) -> None:
    changed(profiles, "bad", lambda d: d["links"].update(hop_overhead="fast"))
    with pytest.raises(SpecError) as caught:
        parse_text(ONE_MESSAGE, "exp.yaml", ["run.calibration=bad"])
    text = str(caught.value)
    assert text.startswith("--set run.calibration=bad: run.calibration: ")
    assert f"{profiles / 'bad.yaml'}:" in text and "links.hop_overhead" in text
    assert "'fast'" in text


# -- the model costing by a profile --------------------------------------------------------

def latency(overrides: list[str] = ()) -> float:
    table = run(ONE_MESSAGE, overrides).tables["messages"]
    assert len(table["id"]) == 1 and not table["lost"][0]
    return float(table["latency"][0])


def test_without_a_profile_the_description_costs(profiles: Path) -> None:
    # rpi4 (speed 0.45): driver 90 us and the filter's 150 us; the broker's 30 us at speed 1.
    assert latency() == pytest.approx(LINKS + (90e-6 + 150e-6) / 0.45 + 30e-6, abs=1e-12)


def test_a_profile_costs_arm64_nodes_the_broker_and_each_leg(profiles: Path) -> None:
    # The measured driver and range_filter as the agent runs it (seconds of the gateway's
    # core), Mosquitto's service time, and the link layer's delay on the two legs that
    # containers send (gateway to broker, broker to VM; the device's radio is the agent's).
    expected = LINKS + 1e-3 + 400e-6 + 50e-6 + 2 * 500e-6
    assert latency(["run.calibration=lab"]) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("edit", "delta"), [
    (lambda d: d["broker"].update(service_time="150us"), 100e-6),
    (lambda d: d["gateway"].update(driver="3ms"), 2e-3),
    (lambda d: d["gateway"]["operators"].update(range_filter="1.4ms"), 1e-3),
    (lambda d: d["links"].update(hop_overhead="1.5ms"), 2 * 1e-3),
    # Not used by the model: the host's own figures, and the task alone.
    (lambda d: d["native"].update(driver="1s"), 0.0),
    (lambda d: d["gateway"]["tasks"].update(range_filter="1s"), 0.0),
])
def test_a_figure_of_the_profile_moves_the_latency_by_as_much(profiles: Path, edit,
                                                              delta: float) -> None:
    changed(profiles, "edited", edit)
    moved = latency(["run.calibration=edited"]) - latency(["run.calibration=lab"])
    assert moved == pytest.approx(delta, abs=1e-12)


def test_an_operator_without_a_measured_task_keeps_its_cost_at_the_measured_speed(
        profiles: Path) -> None:
    text = ONE_MESSAGE.replace("task: range_filter", "task: bloom_filter")
    table = run(text, ["run.calibration=lab"]).tables["messages"]
    # bloom_filter was not measured: its written 150 us, on a core of speed 0.1.
    expected = LINKS + 1e-3 + 150e-6 / 0.1 + 50e-6 + 2 * 500e-6
    assert float(table["latency"][0]) == pytest.approx(expected, abs=1e-12)


def test_a_calibrated_gateway_has_one_core_and_the_measured_speed(profiles: Path) -> None:
    from foundation.helpers import model

    calibrated = model(ONE_MESSAGE.replace("run: {", "run: {calibration: lab, "))
    gateway, broker = calibrated.cpus["gw"], calibrated.cpus["broker"]
    assert (gateway.cores, gateway.speed) == (1, 0.1)
    assert broker.cores == 1  # Mosquitto is one thread
    assert calibrated.cpus["vm"].speed == 1.0  # amd64 nodes as described


def test_only_gateways_run_under_qemu(profiles: Path) -> None:
    from foundation.helpers import model

    # The emulation runs an arm64 cloud VM on the amd64 cloud image: not calibrated.
    text = ONE_MESSAGE.replace("profile: vm.small", "profile: rpi4")
    calibrated = model(text.replace("run: {", "run: {calibration: lab, "))
    assert (calibrated.cpus["vm"].cores, calibrated.cpus["vm"].speed) == (4, 0.45)


def test_the_manifest_of_a_calibrated_run_holds_the_profile(profiles: Path,
                                                           tmp_path: Path) -> None:
    experiment = parse_text(ONE_MESSAGE, "exp.yaml", ["run.calibration=lab"])
    [outcome] = run_experiment(experiment, tmp_path / "results")
    manifest = json.loads((outcome.folder / "manifest.json").read_text())
    named = manifest["calibration"]
    assert (named["name"], named["file"]) == ("lab", str(profiles / "lab.yaml"))
    assert named["sha256"] == load("lab").sha256
    assert named["broker"]["service_time"] == pytest.approx(50e-6)
    assert manifest["config"]["run"]["calibration"] == "lab"
    [plain] = run_experiment(parse_text(ONE_MESSAGE, "exp.yaml"), tmp_path / "results")
    assert json.loads((plain.folder / "manifest.json").read_text())["calibration"] is None


# -- the command line (the measuring faked: tests/emu_host/test_calibrate.py measures) ---------

def test_the_command_writes_the_profile_and_shows_its_figures(
        profiles: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import emu.cli.clusters
    import emu.host.calibrate
    from experiments.cli import app

    busy = load("lab").calibration.model_copy(update={"host": load("lab").calibration.host
                                                      .model_copy(update={"load": 9.0})})
    calls = []

    def fake(quick, progress, client):
        calls.append((quick, client))
        progress("gateway (arm64, QEMU): tasks", 1, 2)
        return busy

    monkeypatch.setattr(emu.cli.clusters, "docker_client", lambda: "engine")
    monkeypatch.setattr(emu.host.calibrate, "calibrate", fake)
    result = CliRunner().invoke(app, ["calibrate", "--quick", "--out", "mine"],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert calls == [(True, "engine")]
    assert load("mine").calibration == load(str(write(busy, profiles / "copy.yaml"))).calibration
    for text in ("range_filter", "400.0", "driver, per reading: gateway", "1,000.0",
                 "link layer (relay), per leg, one way", "500.0", "load average was 9",
                 f"wrote {profiles / 'mine.yaml'}", "--set run.calibration=mine"):
        assert text in result.output, text


def test_the_command_refuses_a_bad_name_before_measuring(profiles: Path) -> None:
    from typer.testing import CliRunner

    from experiments.cli import app

    result = CliRunner().invoke(app, ["calibrate", "--out", "My Lab"], env={"COLUMNS": "250"})
    assert result.exit_code == 3
    assert "--out: 'My Lab' is neither a profile name" in result.output
