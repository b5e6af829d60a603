"""The pipeline's Spark job on a topology's standalone cluster (`topology.spark`), on real
containers: cloud-1 runs the master and the driver, cloud-2 the worker whose executor does the
work; every reading reaches the query and is read by it, as in local mode."""

from __future__ import annotations

import pytest

from emu.run.emulate import emulate
from experiments.backends import EmuBackend
from tests.conftest import build_experiment

pytestmark = pytest.mark.emu


class _Plan:
    def __init__(self, point) -> None:
        self.spec, self.topology, self.seed = point.spec, point.topology, 3


def test_a_spark_job_runs_on_the_topologys_standalone_cluster(tmp_path) -> None:
    point = build_experiment("migrate-spark", [
        "run.backend=emu", "scenario.migrations=[]", "run.duration=15s", "run.drain=5s",
        "topology.spark={master: cloud-1, workers: [cloud-2]}"]).points[0]
    result = emulate(EmuBackend.request(_Plan(point)), records=tmp_path)
    messages = result.facts["messages"]
    assert messages["sent"] == pytest.approx(4 * 2 * 15, rel=0.05)  # a boundary reading or two
    assert (messages["received"], messages["lost"], messages["duplicated"]) == (
        messages["sent"], 0, 0)
    progress = result.facts["spark"]["cloud-1/stats"]
    # The query read every one: QoS 1 is at least once into the source, so a loaded host's late
    # PUBACK may have the broker hand a reading over twice (CI saw 121 of 120), never fewer.
    assert messages["sent"] <= progress[-1]["read"] <= messages["sent"] + 3
    assert sum(batch["numInputRows"] for batch in progress) >= messages["sent"]
    # The executor ran on the worker's VM (standalone: the driver runs no tasks itself).
    executors = list((tmp_path / "cloud-2" / "spark" / "worker" / "work").glob("app-*/*/stderr"))
    assert executors, "no executor ran on cloud-2"
    assert not list((tmp_path / "cloud-1" / "spark").glob("worker*"))
