"""A dilated emulation (run.dilation: K) on real containers: its tables, in emulated time, agree
with the undilated run's; its run takes K times longer on the host's clock; the manifest keeps
K and how it was chosen."""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from experiments.loader import parse_text
from experiments.runner import run_experiment
from tests.foundation.helpers import arrivals_per_window

# Beside other files' containers in CI the undilated run's latencies were the loaded host's
# (p50 55 ms against the dilated run's 46 ms): how far the two agree is benchmarks/dilation.py's
# figure (p50_ratio, p95_ratio to K = 1 in the same run); here what holds under any load.
pytestmark = [pytest.mark.emu, pytest.mark.slow]

K = 3.0
SMALL = """
name: dilated
topology:
  name: dilated
  nodes:
    - {name: sensor, kind: device, replicas: 4}
    - {name: gw, kind: gateway, replicas: 2}
    - {name: broker, kind: broker}
    - {name: cloud, kind: cloud_vm, profile: vm.small}
  links:
    - {from: sensor-*, to: gw-1, latency: 2ms}
    - {from: gw-*, to: broker, latency: 20ms}
    - {from: broker, to: cloud, latency: 30ms}
workload:
  name: w
  streams: [{name: s, sources: sensor-*, rate: 5/s, arrivals: periodic, size: 100B, qos: 1}]
pipeline:
  - {name: count, task: passthrough, on: gw-2, reads: s, window: {size: 2s}}
  - {name: sink, task: passthrough, on: cloud, reads: s}
run: {backend: emu, duration: 12s, seed: 3, drain: 2s, dilation: DILATION}
"""


def _run(tmp_path, dilation: float):
    experiment = parse_text(SMALL.replace("DILATION", f"{dilation:g}"))
    start = time.monotonic()
    (outcome,) = run_experiment(experiment, tmp_path / f"k{dilation:g}")
    wall = time.monotonic() - start
    assert outcome.error is None, outcome.error
    folder = outcome.folder
    tables = {name: pq.read_table(folder / f"{name}.parquet").to_pandas()
              for name in ("messages", "windows", "nodes", "links")}
    return tables, json.loads((folder / "manifest.json").read_text()), wall


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dilation")
    return _run(tmp, 1.0), _run(tmp, K)


def test_the_manifest_keeps_k_and_the_run_lasts_k_times_longer(runs) -> None:
    (_, plain, plain_wall), (_, dilated, dilated_wall) = runs
    assert plain["facts"]["dilation"] == 1.0 and dilated["facts"]["dilation"] == K
    assert dilated["facts"]["dilation_choice"] == {"dilation": K, "asked": K}
    # 14 emulated seconds (12 + 2 of drain) last 42 on the host at least (a loaded host only
    # adds, to both runs: not their difference, which the undilated run's slow start-up shrinks)
    assert dilated_wall >= K * 14 * 0.9 and dilated_wall > plain_wall


def test_the_tables_are_in_emulated_time(runs) -> None:
    (plain, *_), (dilated, *_) = runs
    for tables in (plain, dilated):
        assert tables["nodes"]["t"].max() <= 12.5
        assert tables["links"]["t"].max() <= 12.5
        sent = tables["messages"]["t_sent"]
        assert sent.min() >= 0 and sent.max() < 12.0
    # the same readings, all delivered to both sinks, at both dilations: 4 sensors x 5/s x 12 s
    for tables in (plain, dilated):
        messages = tables["messages"]
        assert (messages["state"] == "delivered").all(), messages["state"].value_counts()
        by_sink = messages.groupby("sink", observed=True).size().to_dict()
        # Both sinks got the same readings; a gateway more than CATCH_UP late skips ahead
        # (emu.agent.drivers), a late one may miss its last: on CI's loaded host 239.
        assert by_sink["cloud"] == by_sink["gw-2"] and 236 <= by_sink["cloud"] <= 240, by_sink


def test_latencies_agree_in_emulated_time(runs) -> None:
    """The path's latency in emulated time at K = 3 and 1: each link lasts K times longer on
    the host, the clock runs K times slower, so no message beats the path at either K."""
    (plain, *_), (dilated, *_) = runs

    def latency(tables, sink):
        messages = tables["messages"]
        return messages[messages["sink"] == sink]["latency"].to_numpy()

    for sink, path in (("gw-2", 0.042), ("cloud", 0.052)):
        p50 = np.median(latency(plain, sink)), np.median(latency(dilated, sink))
        # 2 ms of access, 20 ms up to the broker, 20 ms back down to gw-2 or 30 ms to cloud:
        # never less at either K (undilated links on a dilated clock would give path / K).
        # Above, the dilated run only: the host's extra milliseconds count 1/K in its
        # emulated time (CI's loaded undilated run had 13 ms more than the path, so 30 holds at
        # K = 3 up to 90 host ms). The agreement with K = 1 is benchmarks/dilation.py's.
        assert min(p50) >= path - 0.001, (sink, p50)
        assert p50[1] < path + 0.03, (sink, p50)


def test_windows_count_the_same_readings(runs) -> None:
    (plain, *_), (dilated, *_) = runs
    full = [tables["windows"][(tables["windows"]["t"] > 3) & (tables["windows"]["t"] < 11)]
            for tables in (plain, dilated)]
    # Each full window counted what reached gw-2 in its span, as gw-2's records say, at both
    # dilations (not 40 +- 2: a loaded host moves readings across a window's edge).
    for windows, tables in zip(full, (plain, dilated), strict=True):
        got = arrivals_per_window(windows, tables["messages"], 2.0)
        assert len(got) >= 3 and all(count == arrived for _, count, arrived in got), got
