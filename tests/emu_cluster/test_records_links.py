"""The host follows no link a container plants in its writable records folder (issue 40, finding
5): the exploits, from inside a running gateway's container, against a file and a folder of the
host's outside every records folder. The host works there as root after a run (trimming cut
lines, reading the tables, Spark's progress) and at a revival (revival.json)."""

from __future__ import annotations

import json
import secrets
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from emu.agent.config import REVIVAL_FILE
from emu.agent.records import UnsafeRecordWarning, read_record, trim_cut_lines
from emu.cluster.plan import plan_cluster
from emu.engines.docker.engine import Cluster
from emu.run.emulate import _trim_cut_lines
from emu.run.spark_jobs import spark_progress
from emu.run.tables import read_records
from tests.emu_cluster.test_cluster import IDLE, LABELS, small_topology

pytestmark = pytest.mark.emu

# No newline at its end: a host that follows `sent.csv` there truncates it to its first line.
SECRET = "root:x:0:0:root:/root:/bin/bash\nsecret-second-line"


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of the host's beside, not under, the records (the target of the links)."""
    return tmp_path_factory.mktemp("outside")


@pytest.fixture(scope="module")
def cluster(client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    records = tmp_path_factory.mktemp("run") / "records"
    plan = plan_cluster(small_topology(1), f"rln-{secrets.token_hex(3)}", labels=LABELS)
    running = Cluster(plan, client, records=records, agent_command=IDLE)
    running.up()
    try:
        yield running
    finally:
        running.down()


def plant(cluster: Cluster, node: str, command: str) -> None:
    result = cluster.exec(node, ["sh", "-c", command])
    assert result.exit_code == 0, result.output.decode()


def unsafe_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, UnsafeRecordWarning)]


def test_a_planted_sent_csv_link_is_neither_truncated_nor_read(cluster: Cluster,
                                                               outside: Path) -> None:
    target = outside / "passwd"
    target.write_text(SECRET)
    # The container's own folder holds the link; its target is the host's path, as the host
    # would resolve it (a container knows the host's paths from its mounts and /proc).
    plant(cluster, "gw-1", f"ln -s {target} /records/sent.csv && "
                           f"printf 'id,stream\\n1,a\\n2,b' > /records/received.csv")
    assert (cluster.records_dir("gw-1") / "sent.csv").is_symlink()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trim_cut_lines(cluster.records_root)
        sent, _ = read_records(cluster.records_root)
    assert target.read_text() == SECRET  # not truncated
    assert len(sent) == 0  # not read into the results
    said = unsafe_warnings(caught)
    assert said and all("node gw-1" in text and "'sent.csv'" in text for text in said), said
    # The node's own regular file was still trimmed of its cut line.
    assert (cluster.records_dir("gw-1") / "received.csv").read_text() == "id,stream\n1,a\n"


def test_a_fifo_named_like_a_record_does_not_hang_the_host(cluster: Cluster) -> None:
    plant(cluster, "gw-1", "mkfifo /records/windows.csv")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trim_cut_lines(cluster.records_dir("gw-1"))
        assert read_record(cluster.records_dir("gw-1"), "windows.csv") is None
    assert any("'windows.csv'" in text and "no regular file" in text
               for text in unsafe_warnings(caught))


def test_revival_json_as_a_link_is_replaced_not_followed(client, cluster: Cluster,
                                                          outside: Path) -> None:
    target = outside / "shadow"
    target.write_text(SECRET)
    plant(cluster, "gw-1", f"ln -sf {target} /records/{REVIVAL_FILE}")
    client.api.kill(cluster._container("gw-1"))
    client.api.wait(cluster._container("gw-1"))
    cluster.revive("gw-1", {"epoch": 1.0, "incarnation": 2})
    assert target.read_text() == SECRET
    written = cluster.records_dir("gw-1") / REVIVAL_FILE
    assert not written.is_symlink()
    assert json.loads(written.read_text()) == {"epoch": 1.0, "incarnation": 2}
    # The agent's container sees the revival the host wrote.
    shown = cluster.exec("gw-1", ["cat", f"/records/{REVIVAL_FILE}"]).output
    assert json.loads(shown) == {"epoch": 1.0, "incarnation": 2}


def test_a_planted_folder_link_is_not_followed(cluster: Cluster, outside: Path) -> None:
    work = outside / "work"
    work.mkdir()
    (work / "progress.jsonl").write_text(json.dumps({"read": 7, "secret": SECRET}) + "\n")
    plant(cluster, "gw-1", f"ln -s {work} /records/stats")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        progress = spark_progress(cluster.records_root)
    assert progress == {"gw-1/stats": []}
    assert any("node gw-1" in text and "'stats'" in text for text in unsafe_warnings(caught))
