"""An experiment reads files from its own folder only, and no error shows a file's content
(topologies.files, topologies.errors.Withheld): written as the exploit, `include: /etc/shadow`
with a fake shadow line outside the experiment's folder, for every field that names a file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from experiments.cli import app
from experiments.loader import load, parse_text
from topologies.errors import SpecError

CATALOG = Path(__file__).parents[2] / "experiments"
SECRET = "SECRETsaltX9"
SHADOW = f"root:$6${SECRET}$hashhashhashhash{SECRET}:19000:0:99999:7:::\n"
BASE = {"name": "confined", "topology": "smart-city", "workload": "city-sensors",
        "run": {"backend": "sim", "duration": "10s"}}
PIPELINE = [{"name": "filter", "on": "gateways", "reads": "city"}]
JOBS = {"params": {}, "jobs": [{"name": "filter", "on": "gateways", "reads": "city"}]}


def _experiment(data: dict) -> dict:
    """BASE with `data` merged one level down (a `run` of its own keeps BASE's run fields)."""
    merged = {**BASE, **data}
    merged["run"] = {**BASE["run"], **data.get("run", {})}
    if "jobs" not in merged:
        merged.setdefault("pipeline", PIPELINE)
    return merged


# Each field an experiment names a file in: (the experiment with `{}` where the path goes, the
# secret file's name: a trace must end in .csv).
FIELDS = {
    "jobs[0].include": ({"jobs": [{"include": "{}"}]}, "shadow"),
    "topology": ({"topology": "{}"}, "shadow"),
    "workload": ({"workload": "{}"}, "shadow"),
    "scenario.energy.prices": ({"scenario": {"energy": {"prices": "{}"}}}, "shadow"),
    # emu's (a sim run does not read it): the loader checks it for emu without Docker
    "scenario.energy.calibration": ({"scenario": {"energy": {"calibration": "{}"}},
                                     "run": {"backend": "emu"}}, "shadow.yaml"),
    "run.calibration": ({"run": {"calibration": "{}"}}, "shadow.yaml"),
    "scenario.mobility.model.path": ({"scenario": {"mobility": {"model": {
        "kind": "trace", "path": "{}"}}}}, "shadow.csv"),
}


def _fill(value: object, path: str) -> object:
    if isinstance(value, dict):
        return {key: _fill(item, path) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill(item, path) for item in value]
    return path if value == "{}" else value


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """exp/ (the experiment's folder) and outside/ beside it holding the secrets; HOME is
    outside/ (for `~/`), and no folder is allowed from the environment."""
    folder, outside = tmp_path / "exp", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    for name in ("shadow", "shadow.yaml", "shadow.csv"):
        (outside / name).write_text(SHADOW)
    monkeypatch.setenv("HOME", str(outside))
    monkeypatch.delenv("FOGLAB_ALLOW_FILES", raising=False)
    return folder, outside


def _write(folder: Path, field: str, path: str) -> Path:
    template, _ = FIELDS[field]
    file = folder / "experiment.yaml"
    file.write_text(yaml.safe_dump(_experiment(_fill(template, path)), sort_keys=False))
    return file


def _refused(file: Path, **options) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load(str(file), **options)
    return caught.value


FORMS = ["absolute", "home", "dotdot", "symlink"]


def _written(form: str, folder: Path, outside: Path, name: str) -> str:
    if form == "absolute":
        return str(outside / name)
    if form == "home":
        return f"~/{name}"
    if form == "dotdot":
        return f"../outside/{name}"
    (folder / f"link-{name}").symlink_to(outside / name)  # inside the folder, pointing out
    return f"link-{name}"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("field", list(FIELDS))
def test_a_file_outside_the_experiments_folder_is_refused_without_its_content(
        layout, field: str, form: str) -> None:
    folder, outside = layout
    written = _written(form, folder, outside, FIELDS[field][1])
    error = _refused(_write(folder, field, written))
    text = str(error)
    assert SECRET not in text and "$6$" not in text
    assert error.file == str(folder / "experiment.yaml") and error.line is not None
    assert ".".join(str(p) for p in error.path).replace(".0.", "[0].") == field
    assert repr(written) in text
    assert f"outside it; to allow it, pass --allow-files {outside.resolve()}" in text
    assert f"the experiment's folder {folder.resolve()}" in text


def test_a_file_in_a_swept_field_is_confined_too(layout) -> None:
    folder, outside = layout
    file = folder / "experiment.yaml"
    (folder / "prices.yaml").write_text("energy_per_kwh: 0.3\n")
    file.write_text(yaml.safe_dump(_experiment({
        "scenario": {"energy": {}},
        "sweep": {"scenario.energy.prices": ["prices.yaml", str(outside / "shadow")]}})))
    error = _refused(file)
    assert SECRET not in str(error) and "outside it" in str(error)
    assert error.path == ("scenario", "energy", "prices")


def test_an_include_of_an_include_stays_inside_the_experiments_folder(layout) -> None:
    folder, outside = layout
    (folder / "inc").mkdir()
    (folder / "inc" / "outer.yaml").write_text(yaml.safe_dump(
        {"jobs": [{"include": "../../outside/shadow"}]}))
    file = _write(folder, "jobs[0].include", "inc/outer.yaml")
    error = _refused(file)
    assert error.file == str(folder / "inc" / "outer.yaml")  # where the include is written
    assert error.path == ("jobs", 0, "include") and SECRET not in str(error)
    # Inside the folder, an include's `..` is fine: it is relative to the including file.
    (folder / "edge.yaml").write_text(yaml.safe_dump(JOBS))
    (folder / "inc" / "outer.yaml").write_text(yaml.safe_dump(
        {"jobs": [{"include": "../edge.yaml"}]}))
    assert [op.name for op in load(str(file)).spec.pipeline] == ["filter"]


@pytest.mark.parametrize("field", list(FIELDS))
def test_an_allowed_folder_is_read_and_its_content_still_not_shown(
        layout, field: str, monkeypatch) -> None:
    """--allow-files (here its keyword, and FOGLAB_ALLOW_FILES) lets the file be read: the
    fake shadow is no valid include, topology, price list or trace, and the refusal says so
    by its file, line and column, or the kind of value, never its text."""
    folder, outside = layout
    file = _write(folder, field, str(outside / FIELDS[field][1]))
    for options in ({"allow_files": [outside]}, {}):
        if not options:
            monkeypatch.setenv("FOGLAB_ALLOW_FILES", os.pathsep.join(["/nonexistent", str(
                outside)]))
        error = _refused(file, **options)
        assert SECRET not in str(error) and "$6$" not in str(error)
        assert "outside it" not in str(error)  # read: refused for what it is


def test_an_allowed_include_is_read(layout, monkeypatch) -> None:
    folder, outside = layout
    (outside / "edge.yaml").write_text(yaml.safe_dump(JOBS))
    file = _write(folder, "jobs[0].include", str(outside / "edge.yaml"))
    assert "outside it" in str(_refused(file))
    assert [op.name for op in load(str(file), allow_files=[outside]).spec.pipeline] == ["filter"]
    monkeypatch.setenv("FOGLAB_ALLOW_FILES", str(outside))
    assert [op.name for op in load(str(file)).spec.pipeline] == ["filter"]


def test_the_command_lines_allow_files_reads_the_outside_file(layout) -> None:
    folder, outside = layout
    (outside / "edge.yaml").write_text(yaml.safe_dump(JOBS))
    file = _write(folder, "jobs[0].include", str(outside / "edge.yaml"))
    runner = CliRunner()
    refused = runner.invoke(app, ["validate", str(file)])
    assert refused.exit_code == 3 and "--allow-files" in refused.output
    allowed = runner.invoke(app, ["validate", str(file), "--allow-files", str(outside)])
    assert allowed.exit_code == 0, allowed.output
    assert "valid" in allowed.output
    missing = runner.invoke(app, ["validate", str(file), "--allow-files",
                                  str(outside / "nosuch")])
    assert missing.exit_code == 3 and "--allow-files" in missing.output


def test_a_malformed_include_is_named_by_line_and_column_not_its_text(layout) -> None:
    folder, _ = layout
    (folder / "bad.yaml").write_text(f"jobs:\n  - name: a\n    on: [{SECRET}, *{SECRET}\n")
    error = _refused(_write(folder, "jobs[0].include", "bad.yaml"))
    assert error.file == str(folder / "bad.yaml")
    assert error.line == 3 and error.column is not None
    assert f"{folder / 'bad.yaml'}:3:{error.column}: (top level): valid YAML" in str(error)
    assert SECRET not in str(error)


def test_a_bad_value_in_a_named_file_is_named_by_place_not_shown(layout) -> None:
    """A topology file of the folder with a latency in furlongs: its line and column, the
    unit's complaint, not the value written there."""
    folder, _ = layout
    topology = (Path(__file__).parents[2] / "topologies" / "smart-city.yaml").read_text()
    assert "latency: 20ms" in topology
    (folder / "town.yaml").write_text(topology.replace("latency: 20ms",
                                                       f"latency: 20 {SECRET}", 1))
    error = _refused(_write(folder, "topology", "town.yaml"))
    assert error.file == str(folder / "town.yaml") and error.column is not None
    assert SECRET not in str(error) and "a string" in str(error)


@pytest.mark.parametrize(("content", "words"), [
    (b"jobs: []\n\x00\x01secret", "a binary file (a NUL byte at offset 9)"),
    (b"jobs: [\xff\xfe]\n", "bytes that are not UTF-8 at offset 7"),
])
def test_a_binary_include_is_refused_as_such(layout, content: bytes, words: str) -> None:
    folder, _ = layout
    (folder / "blob.yaml").write_bytes(content)
    error = _refused(_write(folder, "jobs[0].include", "blob.yaml"))
    assert words in str(error) and "secret" not in str(error)


def test_a_pipe_in_the_folder_is_refused_not_read(layout) -> None:
    folder, _ = layout
    os.mkfifo(folder / "fifo")  # reading it would wait forever
    error = _refused(_write(folder, "jobs[0].include", "fifo"))
    assert "a regular file" in str(error)


def test_a_catalog_name_and_the_command_lines_paths_stay_allowed(layout, monkeypatch) -> None:
    """`topology: smart-city` is foglab's own; a path typed with --set is the user's, relative
    to where the command runs."""
    folder, outside = layout
    (outside / "prices.yaml").write_text("energy_per_kwh: 0.3\n")
    file = folder / "experiment.yaml"
    file.write_text(yaml.safe_dump(_experiment({"scenario": {"energy": {}}})))
    monkeypatch.chdir(outside)
    point = load(str(file), overrides=["scenario.energy.prices=prices.yaml"]).points[0]
    assert point.spec.scenario.energy.prices == "prices.yaml"
    assert point.spec.topology.name == "smart-city"


def test_every_shipped_experiment_loads_confined() -> None:
    shutil.which("true")  # nothing outside experiments/ is named by the shipped files
    for file in sorted(CATALOG.glob("*.yaml")):
        assert load(str(file)).points, file


def test_text_from_python_may_be_confined_on_request(layout) -> None:
    folder, outside = layout
    text = yaml.safe_dump(_experiment({"jobs": [{"include": str(outside / "shadow")}]}))
    with pytest.raises(SpecError) as caught:
        parse_text(text, str(folder / "experiment.yaml"), confined=True)
    assert "outside it" in str(caught.value) and SECRET not in str(caught.value)
    with pytest.raises(SpecError) as caught:  # the caller's own text: read, not shown
        parse_text(text, str(folder / "experiment.yaml"))
    assert "a file of jobs" in str(caught.value) and SECRET not in str(caught.value)
