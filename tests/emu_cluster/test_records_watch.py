"""A watch on the records' size (issue 40, finding 7: `/records` without a quota): the run's
nodes write their records into host folders, and a run whose records pass their limit stops,
cleanly, naming the figures; a swarm task's records come out of its container streamed."""

from __future__ import annotations

import io
import os
import tarfile
import warnings
from pathlib import Path

import pytest

from emu.errors import EmuError
from emu.run.records_watch import (
    LIMIT_VARIABLE,
    RecordsOverLimit,
    RecordsWarning,
    RecordsWatch,
    default_limit,
    parse_size,
    records_size,
)

KIB = 1024


def fill(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_size_is_the_files_blocks_and_a_link_out_is_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "records"
    fill(root / "gw-1" / "sent.csv", 100 * KIB)
    fill(root / "gw-1" / "stats" / "progress.jsonl", 50 * KIB)
    fill(tmp_path / "outside" / "big", 1024 * KIB)
    os.symlink(tmp_path / "outside", root / "gw-1" / "elsewhere")
    os.symlink(tmp_path / "outside" / "big", root / "gw-1" / "received.csv")
    assert 150 * KIB <= records_size(root) < 200 * KIB


def test_a_warning_near_the_limit_then_the_run_is_stopped_past_it(tmp_path: Path) -> None:
    root = tmp_path / "records"
    fill(root / "gw-1" / "sent.csv", 10 * KIB)
    clock = Clock()
    watch = RecordsWatch(root, limit=100 * KIB, interval=5.0, clock=clock)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        watch.poll()  # 10 KiB of 100: quiet
    fill(root / "gw-1" / "sent.csv", 90 * KIB)
    watch.poll()  # within the interval: not measured again
    clock.now = 5.0
    with pytest.warns(RecordsWarning, match="of their limit of 0.1 MiB"):
        watch.poll()
    fill(root / "gw-2" / "sent.csv", 64 * KIB)
    clock.now = 10.0
    with pytest.raises(RecordsOverLimit, match=f"over their limit.*{LIMIT_VARIABLE}"):
        watch.poll()
    assert isinstance(RecordsOverLimit("x"), EmuError)  # a run's error: its cleanup runs


def test_the_default_limit_is_the_variable_or_half_the_free_disk(tmp_path: Path,
                                                                 monkeypatch) -> None:
    monkeypatch.setenv(LIMIT_VARIABLE, "2G")
    assert default_limit(tmp_path) == (2 * 1024**3, LIMIT_VARIABLE)
    monkeypatch.delenv(LIMIT_VARIABLE)
    limit, source = default_limit(tmp_path)
    assert 0 < limit <= os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    assert "free on its disk" in source
    assert parse_size("500M") == 500 * 1024**2 and parse_size("1048576") == 1024**2
    with pytest.raises(ValueError, match=f"{LIMIT_VARIABLE}: a size above 0.*'lots'"):
        parse_size("lots")


# -- on real containers ----------------------------------------------------------------------

FLOOD = """
name: records-flood
topology:
  name: records-flood
  sites: [{name: field}, {name: cloud}]
  nodes:
    - {name: s, kind: device, replicas: 40}
    - {name: gw, kind: gateway, profile: rpi4, replicas: 1, site: field}
    - {name: broker-1, kind: broker, site: cloud}
    - {name: cloud-1, kind: cloud_vm, profile: vm.small, site: cloud}
  links:
    - {from: s-*, to: gw-1, latency: 1ms}
    - {from: gw-1, to: broker-1, latency: 1ms}
    - {from: broker-1, to: cloud-1, latency: 1ms}
workload:
  name: w
  streams: [{name: city, sources: s-*, rate: 20/s, arrivals: periodic, qos: 0}]
pipeline:
  - {name: sink, task: passthrough, on: cloud-1, reads: city}
run: {backend: emu, duration: 300s, seed: 3, drain: 1s}
"""
FLOOD_LIMIT = 256 * KIB  # 800 readings/s: a few seconds of sent.csv and received.csv


@pytest.mark.emu
@pytest.mark.slow
def test_a_run_whose_records_pass_their_limit_is_stopped_and_removed(tmp_path: Path) -> None:
    from tests.engine import docker_engine

    client = docker_engine()
    from emu.run.emulate import Request, Timing, emulate
    from tests.foundation.helpers import point

    run_point = point(FLOOD)
    records = tmp_path / "records"
    request = Request(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                      Timing(300.0, 1.0, 1.0), seed=3, records_limit=FLOOD_LIMIT)
    with pytest.raises(RecordsOverLimit) as stopped:
        emulate(request, records=records)
    message = str(stopped.value)
    assert str(records) in message and "over their limit of 0.2 MiB" in message
    assert records_size(records) > FLOOD_LIMIT
    # Stopped cleanly: the cluster is gone (its containers carry the records folder's label).
    label = f"foglab.records={records}"
    assert client.containers.list(all=True, filters={"label": label}) == []
    assert client.networks.list(filters={"label": label}) == []


@pytest.mark.emu
def test_a_task_s_records_are_streamed_out_not_read_whole(tmp_path: Path) -> None:
    """emu.engines.swarm.records.copy_records against a real container: the engine's tar stream goes
    to disk by chunks, and past a limit the copy stops."""
    from emu.engines.docker.image_store import ensure_image
    from emu.engines.swarm.records import CHUNK, RecordsTooLarge, copy_records
    from emu.images import SERVICES
    from tests.engine import docker_engine

    client = docker_engine()
    tag = ensure_image(SERVICES, client=client).tag
    container = client.api.create_container(tag, ["sleep", "60"],
                                            labels={"foglab.test": "records_stream"})["Id"]
    try:
        payload = os.urandom(3 * CHUNK + 17)
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for name, data in (("records/sent.csv", payload), ("records/op/progress.jsonl",
                                                               b'{"read": 1}\n')):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        client.api.put_archive(container, "/", archive.getvalue())
        copied = copy_records(client.api, container, tmp_path / "gw-1")
        assert copied > len(payload)
        assert (tmp_path / "gw-1" / "sent.csv").read_bytes() == payload
        assert (tmp_path / "gw-1" / "op" / "progress.jsonl").read_text() == '{"read": 1}\n'
        with pytest.raises(RecordsTooLarge, match="pass 1.0 MiB"):
            copy_records(client.api, container, tmp_path / "gw-2", limit=CHUNK)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["gw-1", "gw-2"]  # no spool left
    finally:
        client.api.remove_container(container, force=True)
