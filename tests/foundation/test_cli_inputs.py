"""Every `foglab` command, walked with bad paths and values: each is refused with one line
naming the option and the value, exit 3 (bad input), no traceback, and nothing made.

The commands are enumerated from the typer app, so a command added later is walked too (or
this test says it needs a valid invocation below)."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from experiments.cli import app

# A valid invocation of each command (its required arguments), to which one bad option at a
# time is added; None for a command whose only inputs are known to Docker alone (a cluster,
# a node), which no bad path or value reaches before it asks.
VALID: dict[tuple[str, ...], list[str] | None] = {
    ("calibrate",): [],
    ("run",): ["quickstart", "--set", "run.duration=1s"],
    ("compare",): ["quickstart", "--set", "run.duration=1s", "--against", "run.seed=8"],
    ("validate",): ["quickstart"],
    ("schema",): [],
    ("list",): [],
    ("topo", "show"): ["smart-city"],
    ("topo", "draw"): ["smart-city"],
    ("topo", "export"): ["smart-city"],
    ("results", "list"): [],
    ("results", "show"): ["RUN"],  # its one input is the run: see BAD
    ("bench", "riot"): ["range_filter"],
    ("emu", "doctor"): [],
    ("emu", "build"): [],
    ("emu", "up"): ["smart-city"],
    ("emu", "down"): None,
    ("emu", "status"): None,
    ("emu", "exec"): None,
    ("emu", "logs"): None,
    ("emu", "migrate"): ["count", "--to", "gw-1"],
    ("emu", "plan"): ["quickstart"],
    ("apply",): ["quickstart", "--against", "quickstart"],
    ("emu", "apply"): ["quickstart"],
}
# Every refusal of a bad input exits 3 (topologies.exit_codes), `apply` too: its 4 is "changes
# found", apart from every error (docs/cli.md).
def error_exit(args: list[str]) -> int:
    return 3

# Bad values no type tells: (arguments, what the line must name).
BAD: list[tuple[list[str], list[str]]] = [
    (["schema", "--out", "/nonexistent/dir/x.json"], ["--out", "/nonexistent/dir/x.json"]),
    (["schema", "--out", "."], ["--out", "is a folder"]),
    (["schema", "--kind", "nonsense"], ["--kind", "nonsense"]),
    (["topo", "draw", "smart-city", "--out", "/nonexistent/x.png"],
     ["--out", "/nonexistent/x.png"]),
    (["topo", "draw", "smart-city", "--out", "x.txt"], ["--out", "x.txt", "png"]),
    (["topo", "show", "atlantis"], ["atlantis", "smart-city", "quickstart"]),
    (["topo", "show", "smart-city", "--set", "run.seed=1"], ["--set", "smart-city"]),
    (["run", "quickstart", "--out", "a-file"], ["--out", "a-file", "is a file"]),
    (["run", "nosuch"], ["nosuch", "quickstart"]),
    (["validate", "quickstart", "--set", "run.seed=minus one"], ["--set run.seed=minus one"]),
    (["compare", "quickstart", "--backends", "sim"], ["--backends", "sim"]),
    (["bench", "riot", "range_filter", "--dataset", "foo"], ["--dataset", "foo", "city"]),
    (["bench", "riot", "range_filter", "--seconds", "0"], ["--seconds", "0"]),
    (["bench", "riot", "nosuchtask"], ["nosuchtask", "range_filter"]),
    (["list", "nonsense"], ["nonsense", "experiments"]),
    (["results", "list", "--root", "MISSING"], ["--root", "MISSING", "does not exist"]),
    (["results", "list", "--root", "a-file"], ["--root", "a-file"]),
    (["results", "show", "nosuch"], ["nosuch", "results list"]),
    (["results", "show", "a-file"], ["a-file"]),
    (["emu", "build", "nonsense"], ["nonsense", "gateway"]),
    (["emu", "up"], ["TOPOLOGY", "--experiment"]),
    (["emu", "up", "atlantis"], ["atlantis"]),
    (["emu", "up", "smart-city", "--label", "no-value"], ["--label", "no-value"]),
    (["emu", "up", "smart-city", "--zookeeper", "2"], ["--zookeeper", "2"]),
    (["emu", "up", "smart-city", "--cluster", ""], ["--cluster", "''"]),
    (["emu", "up", "smart-city", "--cluster", "a b"], ["--cluster", "'a b'"]),
    (["emu", "status", "--cluster", ""], ["--cluster", "''"]),
    (["emu", "down", "--cluster", "a/b"], ["--cluster", "'a/b'"]),
    (["emu", "logs", "gw-1", "--cluster", "-x"], ["--cluster", "'-x'"]),
    (["emu", "exec", "gw-1", "--cluster", "a b", "--", "true"], ["--cluster", "'a b'"]),
    (["emu", "migrate", "count", "--to", "gw-1", "--cluster", "a b"], ["--cluster", "'a b'"]),
    (["emu", "migrate", "count", "--to", "gw-1", "--strategy", "nonsense"],
     ["--strategy", "nonsense"]),
    (["emu", "plan", "quickstart", "--memory", "lots"], ["--memory", "lots"]),
    (["emu", "plan", "quickstart", "--memory", "0GiB"], ["--memory", "0GiB"]),
    (["emu", "plan", "quickstart", "--hosts", "0"], ["--hosts", "0"]),
]


def commands(group=None, path: tuple[str, ...] = ()):
    """(name path, click command) of every command of the app, subgroups included."""
    group = group or typer.main.get_command(app)
    for name in group.list_commands(None):  # the lazy commands too (experiments.lazy_commands)
        command = group.get_command(None, name)
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def _annotation(param) -> set[type]:
    """The Python types a parameter takes (`Path | None` gives {Path})."""
    annotation = param.type_descriptor.annotation  # typer's record of the function's type
    return set(typing.get_args(annotation)) or {annotation}


def cases():
    """A bad value for every visible path option (a path under a file: a folder nobody can
    make there, and a file nobody can read there) and every number (-1: every count and
    time of these commands is above zero)."""
    for path, command in commands():
        if VALID.get(path) is None:
            continue
        for param in command.params:
            if getattr(param, "hidden", False) or not param.opts[0].startswith("--"):
                continue
            option, types = param.opts[0], _annotation(param)
            if Path in types:
                yield pytest.param([*path, *VALID[path], option, "a-file/sub"],
                                   [option, "a-file/sub"], id=" ".join((*path, option)))
            elif types & {int, float} and not getattr(param, "is_flag", False):
                yield pytest.param([*path, *VALID[path], option, "-1"], [option, "-1"],
                                   id=" ".join((*path, option)))


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of its own with one file in it; and no Docker Engine to reach, so that a
    check that is missing fails here instead of starting containers."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("not a folder\n")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    return tmp_path


def refused(args: list[str], named: list[str], folder: Path) -> None:
    before = sorted(folder.rglob("*"))
    result = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    output = result.output
    assert "Traceback" not in output and result.exception is None or isinstance(
        result.exception, SystemExit), f"{args}: {result.exception!r}\n{output}"
    assert result.exit_code == error_exit(args), f"{args}: exit {result.exit_code}\n{output}"
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), f"{args}:\n{output}"
    for word in named:
        assert word in lines[0], f"{args}: {word!r} not in {lines[0]!r}"
    assert sorted(folder.rglob("*")) == before, f"{args} made {sorted(folder.rglob('*'))}"


def test_every_command_has_a_valid_invocation_to_walk() -> None:
    missing = [" ".join(path) for path, _ in commands() if path not in VALID]
    assert not missing, f"add these commands to VALID: {missing}"


def test_the_walk_reaches_path_and_number_options() -> None:
    walked = {case.id for case in cases()}
    assert {"run --out", "schema --out", "topo draw --out", "topo export --out",
            "bench riot --out",
            "bench riot --seconds", "results list --root", "emu up --records",
            "emu up --zookeeper", "emu migrate --timeout", "compare --out"} <= walked, walked


@pytest.mark.parametrize(("args", "named"), list(cases()))
def test_a_bad_path_or_number_is_one_line_and_exit_2(args: list[str], named: list[str],
                                                     workdir: Path) -> None:
    refused(args, named, workdir)


@pytest.mark.parametrize(("args", "named"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_value_is_one_line_and_exit_2(args: list[str], named: list[str],
                                            workdir: Path) -> None:
    refused(args, named, workdir)


def test_calibrate_refuses_an_out_in_a_missing_folder_before_measuring(workdir: Path) -> None:
    refused(["calibrate", "--out", "/nonexistent/x.yaml"], ["--out", "/nonexistent/x.yaml"],
            workdir)


def test_what_the_system_refuses_later_is_one_line_too(tmp_path: Path) -> None:
    """/proc passes the checks (a folder root may write in) and refuses the file itself: the
    installed command says so in a line, exit 1; FOGLAB_TRACEBACK=1 shows the traceback."""
    import os
    import subprocess
    import sys

    if not os.access("/proc", os.W_OK):
        pytest.skip("/proc is refused by the checks already for this user (exit 3)")
    foglab = [str(Path(sys.executable).parent / "foglab"), "schema", "--out",
              "/proc/foglab-no-such.json"]
    env = {k: v for k, v in os.environ.items() if k != "FOGLAB_TRACEBACK"}
    done = subprocess.run(foglab, capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert output.strip().splitlines() == [
        "error: No such file or directory: /proc/foglab-no-such.json"], output
    shown = subprocess.run(foglab, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                           env={**env, "FOGLAB_TRACEBACK": "1"}, check=False)
    assert "Traceback" in shown.stdout + shown.stderr
