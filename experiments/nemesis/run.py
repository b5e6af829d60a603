"""One nemesis schedule run: the scenario's experiment on emu, the nemesis's host-level
actions on a thread beside it, and the history checked against the promise.

The experiment is built from the scenario's YAML (experiments.loader.parse_text) with the
schedule's seed as `run.seed`, its duration and `scenario.faults`, and a topology name of
its own (`nem-<seed>-<hex>`), by which the nemesis finds the run's containers. It runs as
`foglab run` runs it (experiments.runner.run_experiment) into `out`. The nodes' records
are copied to `out/records` when the run reaches "reading the records" (the agents have
stopped and flushed; the cluster, records included, goes right after): the checker reads
them (experiments.nemesis.checker). The nemesis is stopped however the run ends (an error,
Ctrl-C): its processes ended by pid, its paused containers unpaused, its files removed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from emu.engines.docker.inventory import records_of_run
from experiments.loader import parse_text
from experiments.nemesis.actions import Nemesis
from experiments.nemesis.checker import Verdict, check
from experiments.nemesis.scenarios import experiment_text, scenario
from experiments.nemesis.schedule import Schedule
from experiments.runner import Reporter, run_experiment

READING_RECORDS = "reading the records"  # emu.run.emulate's stage before it reads them


@dataclass
class Result:
    schedule: Schedule
    verdict: Verdict
    folder: Path | None
    seconds: float
    load_start: float
    load_end: float
    nemesis: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class RecordsKeeper(Reporter):
    """A runner's reporter that copies the run's records folder (found by the containers'
    labels: this process's owner token and the run's topology) to `keep` when the run
    reaches READING_RECORDS, and passes everything on to `inner`."""

    def __init__(self, client, topology: str, keep: Path, inner: Reporter | None = None):
        self.client = client
        self.topology = topology
        self.keep = keep
        self.inner = inner or Reporter()
        self.kept = False
        self.error: str | None = None
        self.folder: Path | None = None

    def stage(self, text: str) -> None:
        if text == READING_RECORDS and not self.kept:
            try:
                self._copy()
            except Exception as error:  # noqa: BLE001 - the checker says records are missing
                self.error = f"keeping the records: {error}"
        self.inner.stage(text)

    def _copy(self) -> None:
        source = records_of_run(self.client, self.topology)
        if source is None:
            raise LookupError("no container of the run")
        from emu.agent.records import trim_cut_lines

        for node in sorted(p for p in source.iterdir() if p.is_dir()):
            target = self.keep / node.name
            target.mkdir(parents=True, exist_ok=True)
            for name in ("sent.csv", "received.csv", "filtered.csv"):
                if (node / name).exists():
                    shutil.copyfile(node / name, target / name)
            trim_cut_lines(target)
        self.kept = True

    def start(self, total_runs: int, total_seconds: float = 0.0) -> None:
        self.inner.start(total_runs, total_seconds)

    def run_started(self, label: str, folder: Path, duration: float) -> None:
        self.folder = folder
        self.inner.run_started(label, folder, duration)

    def progress(self, seconds: float) -> None:
        self.inner.progress(seconds)

    def run_finished(self, label, folder, summary, error) -> None:
        self.inner.run_finished(label, folder, summary, error)

    def note(self, text: str) -> None:
        self.inner.note(text)


def run_schedule(schedule: Schedule, out: Path, client=None,
                 reporter: Reporter | None = None) -> Result:
    """Run `schedule` into `out` (a folder of its own) and check it."""
    if client is None:
        import docker

        client = docker.from_env()
    chosen = scenario(schedule.scenario)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "schedule.json").write_text(schedule.to_json())
    topology = f"nem-{schedule.seed}-{secrets.token_hex(3)}"
    experiment = parse_text(
        experiment_text(chosen, topology, schedule.duration, schedule.seed,
                        schedule.scenario_faults()),
        file=f"<nemesis seed {schedule.seed}>")
    keeper = RecordsKeeper(client, topology, out / "records", reporter)
    nemesis = Nemesis(client, topology, schedule.host_actions(), chosen.first_reading)
    load_start, started = os.getloadavg()[0], time.monotonic()
    with nemesis:
        (outcome,) = run_experiment(experiment, out, reporter=keeper,
                                    sweep_id=f"seed{schedule.seed}")
    seconds = time.monotonic() - started
    errors = list(nemesis.errors) + ([keeper.error] if keeper.error else [])
    crashed = any(f.kind == "crash" for f in schedule.faults)
    verdict = check(outcome.folder, chosen.promise,
                    out / "records" if keeper.kept else None, crashed=crashed)
    if errors:
        verdict.notes.append("nemesis: " + "; ".join(errors))
    return Result(schedule, verdict, outcome.folder, seconds, load_start,
                  os.getloadavg()[0], nemesis.done, errors)
