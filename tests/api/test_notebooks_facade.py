"""The notebooks as a user reads them: written against `foglab` alone, a papermill parameters
cell first, and the lessons' friction gone (whole commands that validate, the docs listing
every lesson, the handover count on sim's summary, `make notebook` without the tests' extra)."""

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import foglab

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
LESSONS = [p for p in NOTEBOOKS if p.stem.startswith("lesson-")]
# The mission's top-level packages: a notebook reaches them through foglab only.
INTERNAL = {"experiments", "sim", "emu", "topologies", "workloads"}


def code_cells(path: Path) -> list[nbformat.NotebookNode]:
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def python(source: str) -> ast.Module:
    """A cell's Python, its IPython magics (`%matplotlib inline`) and shell lines left out."""
    return ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line
                               for line in source.splitlines()))


def imported(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_the_notebooks_are_found() -> None:
    assert len(NOTEBOOKS) == 12 and len(LESSONS) == 6


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_notebook_imports_foglab_not_the_packages_under_it(path: Path) -> None:
    used = set().union(*(imported(python(c.source)) for c in code_cells(path)))
    assert not used & INTERNAL, f"{path.name} imports {sorted(used & INTERNAL)} directly"
    assert "foglab" in used, f"{path.name} does not import foglab"


def test_the_import_check_sees_a_direct_import() -> None:
    cell = "%matplotlib inline\nimport numpy\nfrom experiments.loader import load\nimport sim.model"
    assert imported(python(cell)) & INTERNAL == {"experiments", "sim"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_notebook_s_first_code_cell_holds_its_parameters(path: Path) -> None:
    """Tagged for papermill, assignments only (and `import os` for the environment variables
    that are their defaults), and the notebook's other cells read no environment variable."""
    first, *others = code_cells(path)
    assert first.metadata.get("tags") == ["parameters"], path.name
    tree = python(first.source)
    assert all(isinstance(node, ast.Assign | ast.Import) for node in tree.body), path.name
    assert all(alias.name == "os" for node in tree.body if isinstance(node, ast.Import)
               for alias in node.names)
    names = {target.id for node in tree.body if isinstance(node, ast.Assign)
             for target in node.targets}
    if path.stem != "quickstart":
        assert "quick" in names and 'os.environ.get("FOGLAB_QUICK", "1")' in first.source
    if path.stem != "lesson-jobs":  # writes to a temporary folder only
        assert "results_folder" in names and 'os.environ.get("FOGLAB_RESULTS")' in first.source
    for cell in others:
        assert not re.search(r"FOGLAB_(QUICK|RESULTS)\b\"", cell.source), path.name


def test_the_lessons_page_lists_every_lesson_with_its_command() -> None:
    page = (ROOT / "docs" / "lessons.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(lesson-[\w-]+)` \|.*?\| `(foglab [^`]+)` \|$",
                           page, flags=re.M))
    assert set(rows) == {p.stem for p in LESSONS}
    for lesson, command in rows.items():
        if command.startswith("foglab run "):
            validate(command, lesson)
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^  - [^:]*[Ll]essons[^:]*: lessons\.md$", nav, flags=re.M)
    assert "(lessons.md)" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")


def validate(command: str, where: str) -> foglab.Experiment:
    """A `foglab run NAME --set ... --sweep ...` line, loaded as the command line would."""
    words = shlex.split(command)
    assert words[:2] == ["foglab", "run"], (where, command)
    sets, sweeps, rest = [], [], words[3:]
    while rest:
        option, value, *rest = rest
        assert option in ("--set", "--sweep", "--out"), (where, command, option)
        {"--set": sets, "--sweep": sweeps}.get(option, []).append(value)
    return foglab.load(words[2], set=sets, sweep=sweeps)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_a_lesson_s_shell_lines_are_whole_commands_that_load(path: Path) -> None:
    """Every line of a lesson's `sh` blocks is a command a student can paste; its `foglab run`
    lines load (file, overrides and sweeps valid). The energy lesson gave `--set` fragments."""
    cells = nbformat.read(path, as_version=4).cells
    blocks = [b for c in cells if c.cell_type == "markdown"
              for b in re.findall(r"```sh\n(.*?)```", c.source, flags=re.S)]
    lines = [line for block in blocks for line in block.splitlines() if line.strip()]
    assert lines, f"{path.name} gives no command to try"
    for line in lines:
        assert line.startswith("foglab "), (path.name, line)
        if line.startswith("foglab run "):
            validate(line, path.name)


def test_make_notebook_installs_jupyterlab_not_the_tests_extra() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^\$\(NOTEBOOK_STAMP\):.*\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert recipe and "pip install --quiet -e '.[emu,notebooks]'" in recipe.group(1)
    assert ".[dev" not in recipe.group(1)


def summary_of(tmp_path: Path, *args: str) -> str:
    """What `foglab run` prints, both streams."""
    done = subprocess.run([sys.executable, "-m", "foglab", "run", *args, "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_a_run_with_people_moving_prints_its_handovers_on_sim(tmp_path) -> None:
    """The mobility lesson asks how many handovers a run had: sim's summary says it."""
    shown = summary_of(tmp_path, "hybrid-mobility", "--set", "run.backend=sim",
                       "--set", "run.duration=20s")
    (manifest,) = [foglab.results(tmp_path).runs("hybrid-mobility")[0].manifest]
    handovers = manifest["facts"]["handovers"]
    assert handovers > 0
    assert re.search(rf"^  handovers: {handovers:,} \(devices that changed gateway",
                     shown, flags=re.M), shown


def test_a_run_without_mobility_prints_no_handovers(tmp_path) -> None:
    assert "handovers:" not in summary_of(tmp_path, "quickstart", "--set", "run.duration=5s")
