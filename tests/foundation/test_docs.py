"""The documentation holds: the README is a short front door, the site builds, and every
`foglab` command the README and docs/ show for the model runs as shown.

Commands are collected from the fenced code blocks (`sh`, `bash`, `shell`, `console`) of
README.md and docs/**/*.md: a line that starts with `foglab ` (in a `console` block, `$ foglab `;
the lines after it up to the next `$` are its shown output). A new command in the docs is
tested without editing this file. Commands in the prose (inline code) name a command or give
its syntax (placeholders in capitals, options in brackets) and are not run: what a reader is
meant to type stands in a code block.

Which are skipped: a block is skipped whole when one of its commands needs the emulation
(Docker, root, the images): `foglab emu ...`, `foglab calibrate`, `foglab compare` of
backends (only `sim` runs without containers) or of runs made before (`compare EXPERIMENT
--against k=v` runs, on the experiment's backend), and `foglab run` or
`foglab validate` of an experiment whose backend (`--set run.backend=...`, else the file's
`run.backend`) is `emu` or `hybrid`. The block's other commands are skipped with it, since a
block is a sequence (a run with the profile `foglab calibrate` wrote needs that profile).

Every other block runs in order, each command in-process through typer's test runner, in a
fresh working folder per block, and each must exit 0; a command whose shown output begins
with `error:` must instead exit 3 and print that error.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("**/*.md"))
README_MAX_LINES = 150
# What a new user types on a fresh machine (the Makefile's targets).
FIRST_COMMANDS = ("make run", "make test")
SHELLS = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^(```+|~~~+)\s*([\w-]*)")
NEEDS_EMULATION = {"hybrid", "emu"}


@dataclass
class Command:
    argv: list[str]
    shown: list[str] = field(default_factory=list)  # the output the docs show under it

    @property
    def text(self) -> str:
        return shlex.join(["foglab", *self.argv])


@dataclass
class Block:
    where: str  # file:line of the fence
    commands: list[Command]


def blocks(path: Path) -> list[Block]:
    """The shell code blocks of a markdown file that hold `foglab` commands."""
    found, lines = [], path.read_text(encoding="utf-8").splitlines()
    inside, language, start, body = None, "", 0, []
    for number, line in enumerate(lines, 1):
        fence = FENCE.match(line.strip())
        if inside is None and fence:
            inside, language, start, body = fence.group(1), fence.group(2).lower(), number, []
        elif inside is not None and line.strip().startswith(inside):
            if language in SHELLS and (commands := _commands(body, language == "console")):
                found.append(Block(f"{path.relative_to(ROOT)}:{start}", commands))
            inside = None
        elif inside is not None:
            body.append(line)
    return found


def _commands(body: list[str], console: bool) -> list[Command]:
    commands: list[Command] = []
    for line in body:
        text = line.strip()
        if console:
            if text.startswith("$ "):
                text = text[2:]
            elif commands and text:
                commands[-1].shown.append(text)
                continue
        if text.startswith("foglab "):
            commands.append(Command(shlex.split(text, comments=True)[1:]))
    return commands


def _option(argv: list[str], name: str) -> list[str]:
    values = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == name]
    return values + [arg.split("=", 1)[1] for arg in argv if arg.startswith(name + "=")]


def _backend(argv: list[str]) -> str:
    """The backend a `foglab run` or `validate` would use: --set run.backend, else the file's."""
    for value in _option(argv, "--set"):
        key, _, chosen = value.partition("=")
        if key.strip() == "run.backend":
            return chosen.strip()
    from experiments.catalog import find

    path = find("experiment", argv[1]) if len(argv) > 1 else None
    if path is None:
        return "sim"
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return str((document.get("run") or {}).get("backend", "sim"))


def needs_emulation(command: Command) -> str | None:
    """Why a command cannot run without containers, or None."""
    argv = command.argv
    if argv[0] in ("emu", "calibrate"):
        return f"`foglab {argv[0]}` needs Docker"
    if argv[0] == "compare" and "--against" in argv and "--backends" not in argv:
        # The experiment twice on its own backend.
        backend = _backend(argv)
        return f"its backend is {backend}" if backend in NEEDS_EMULATION else None
    if argv[0] == "compare":
        return ("`foglab compare` runs two or more backends (only sim without containers), or "
                "reads runs made before")
    if argv[0] in ("run", "validate") and (backend := _backend(argv)) in NEEDS_EMULATION:
        return f"its backend is {backend}"
    return None


def _collected() -> list[Block]:
    return [block for path in [README, *PAGES] for block in blocks(path)]


def test_the_readme_is_a_front_door():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, (
        f"README.md has {len(text.splitlines())} lines; at most {README_MAX_LINES}: move "
        "the detail to docs/")
    shell_lines = {line.split("#")[0].strip() for block in re.findall(
        r"```sh\n(.*?)```", text, re.S) for line in block.splitlines()}
    for command in FIRST_COMMANDS:
        assert command in shell_lines, f"README.md shows no `{command}` in a sh block"
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for command in FIRST_COMMANDS:
        target = command.split()[1]
        assert re.search(rf"^{target}:", makefile, re.M), f"the Makefile has no `{target}`"


def test_the_readme_links_every_page_and_every_link_resolves():
    text = README.read_text(encoding="utf-8")
    linked = {ROOT / target for target in re.findall(r"\]\((docs/[^)#]+)", text)}
    missing = [str(p) for p in linked if not p.exists()]
    assert not missing, f"README.md links pages that do not exist: {missing}"
    unlinked = [str(p.relative_to(ROOT)) for p in PAGES if p not in linked]
    assert not unlinked, f"README.md's map of the documentation leaves out {unlinked}"


def test_the_docs_build_strictly(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which(
        "mkdocs")
    if mkdocs is None:
        pytest.skip("mkdocs is not installed (it is in the dev extras: pip install -e '.[dev]')")
    built = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site"),
                            "--config-file", str(ROOT / "mkdocs.yml")],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").exists()


def test_commands_are_collected_and_the_skip_rule_sorts_them():
    # The rule is only as good as its recognition: check it on commands the docs show.
    assert needs_emulation(Command(["run", "quickstart", "--set", "run.backend=emu"]))
    assert needs_emulation(Command(["run", "hybrid-mobility"]))
    assert not needs_emulation(Command(["run", "hybrid-mobility", "--set", "run.backend=sim"]))
    assert needs_emulation(Command(["compare", "quickstart"]))
    assert not needs_emulation(Command(["compare", "quickstart", "--against", "run.seed=8"]))
    assert not needs_emulation(Command(["run", "quickstart"]))
    runnable = [b for b in _collected() if not any(needs_emulation(c) for c in b.commands)]
    assert len(runnable) >= 10, [b.where for b in runnable]


def _block_id(block: Block) -> str:
    return block.where


@pytest.mark.parametrize("block", _collected(), ids=_block_id)
def test_a_documented_command_runs_as_shown(block: Block, tmp_path, monkeypatch):
    reasons = [why for command in block.commands if (why := needs_emulation(command))]
    if reasons:
        pytest.skip(f"needs the emulation: {reasons[0]}")
    from typer.testing import CliRunner

    from experiments.cli import app

    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for command in block.commands:
        result = runner.invoke(app, command.argv)
        printed = result.output + (getattr(result, "stderr", "") or "")
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"{block.where}: `{command.text}` raised") from result.exception
        shown_error = command.shown[0] if command.shown and command.shown[0].startswith(
            "error:") else None
        if shown_error:
            assert result.exit_code == 3, f"{block.where}: `{command.text}`:\n{printed}"
            assert " ".join(shown_error.split()) in " ".join(printed.split()), (
                f"{block.where}: `{command.text}` printed\n{printed}\nthe docs show\n"
                f"{shown_error}")
        else:
            assert result.exit_code == 0, f"{block.where}: `{command.text}`:\n{printed}"
