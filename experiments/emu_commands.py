"""`foglab emu`'s commands with experiments: how they load an experiment file (as an emu run,
whatever backend it names), handed to emu.cli.main as the commands are mounted."""

from __future__ import annotations

from pathlib import Path

from emu.cli.apply_command import use_plans
from emu.cli.clusters import use_experiments
from emu.cli.main import app
from emu.cli.plan_command import use_demand
from experiments.apply_cli import show_plan
from experiments.catalog import experiment_path
from experiments.loader import Experiment, load
from experiments.planning import prediction


def load_for_emu(experiment: str, sets: list[str]) -> tuple[Path, Experiment]:
    """The experiment (a file or catalog name) with its --set options, checked as an emu run."""
    path = experiment_path(experiment).resolve()
    return path, load(path, overrides=[*sets, "run.backend=emu"])


use_experiments(load_for_emu)
use_plans(show_plan)  # `foglab emu apply`: foglab apply's table with the model's times
use_demand(prediction)  # `foglab emu plan`: the calibrated model's demand (emu cannot run it)

__all__ = ["app", "load_for_emu"]
