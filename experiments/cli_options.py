"""The options foglab's commands share (--set, --sweep, --zip, --allow-files, the results
folder's variable), defined apart from what they feed so that the command line is built
without importing the loader, the runner or pandas: a TAB (shell completion) runs it whole."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

import experiments
from topologies.files import VARIABLE

RESULTS_VARIABLE = experiments.RESULTS_VARIABLE  # the results folder's variable

Sets = Annotated[list[str] | None,
                 typer.Option("--set", help="KEY=VALUE override, e.g. run.seed=3")]
Sweeps = Annotated[list[str] | None, typer.Option(
    # typer reads help texts as rich markup: brackets are escaped to be shown.
    "--sweep", help=escape("KEY=[v1,v2]: one run per value, e.g. run.seed=[1,2,3]"))]


Zips = Annotated[list[str] | None, typer.Option(
    "--zip", help=escape("KEY=[v1,v2]: swept together with the other --zip keys, value by "
                         "value (paired), e.g. rate=[1/s,2/s] with window=[10s,5s]"))]


AllowFiles = Annotated[list[Path] | None, typer.Option(
    "--allow-files", metavar="DIR", help=f"a folder outside the experiment's own whose files it "
    f"may name (includes, topology files, traces); repeatable, also {VARIABLE} (folders "
    "separated by :); by default an experiment reads files from its own folder only")]


def results_folder(help_text: str) -> object:
    """The option naming a results folder (`--out`, `--root`), also read from
    FOGLAB_RESULTS."""
    return typer.Option(help=help_text, envvar=RESULTS_VARIABLE)


__all__ = ["RESULTS_VARIABLE", "AllowFiles", "Sets", "Sweeps", "Zips", "results_folder"]
