"""The pieces around the cluster, without Spark: master URLs, the driver's settings, the
source's input slices."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from workloads.spark.mqtt_source import Journal, JournalWriter
from workloads.spark.session import cluster_conf, master_hosts


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[2,3]"])
def test_a_local_master_needs_no_cluster_settings(master: str) -> None:
    assert master_hosts(master) == []
    assert cluster_conf(master) == {}


def test_a_cluster_master_gets_the_driver_address_and_fixed_ports() -> None:
    assert master_hosts("spark://a:7077,b:7078") == [("a", 7077), ("b", 7078)]
    conf = cluster_conf("spark://127.0.0.1:7077", driver_port=7337, block_manager_port=7338,
                        bind_address="10.0.0.5", shuffle_partitions=2)
    assert conf["spark.driver.host"] == "127.0.0.1"  # this host's address towards the master
    assert conf["spark.driver.bindAddress"] == "10.0.0.5"
    assert (conf["spark.driver.port"], conf["spark.blockManager.port"]) == ("7337", "7338")
    assert conf["spark.executor.memory"] == "512m"
    assert conf["spark.sql.shuffle.partitions"] == "2"


@pytest.mark.parametrize("master", ["spark:/a:7077", "spark://a", "yarn", "spark://a:99999",
                                    "local[x]"])
def test_a_bad_master_is_refused_with_its_url(master: str) -> None:
    with pytest.raises(ValueError, match="master"):
        master_hosts(master)


def test_an_executor_smaller_than_spark_starts_is_refused() -> None:
    with pytest.raises(ValueError, match="256m"):
        cluster_conf("spark://127.0.0.1:7077", executor_memory="256m")


def _journal(path: Path, messages: int) -> Journal:
    writer = JournalWriter(Journal(path))
    for n in range(messages):
        writer.append("t", str(n).encode(), 1)
        if n == messages // 3:
            writer.seal()  # two segments
    writer.seal()
    writer.close()
    return Journal(path)


def test_a_batch_is_cut_into_slices_that_read_each_message_once(tmp_path: Path) -> None:
    journal = _journal(tmp_path / "journal", 1000)
    parts = journal.partitions(50, 950, slices=4)
    assert 4 <= len(parts) <= 5  # a slice never crosses a segment's end
    rows = [int(p) for part in parts for batch in Journal.read(part)
            for p in pa.Table.from_batches([batch])["payload"].to_pylist()]
    assert rows == list(range(50, 950))
    assert len(journal.partitions(0, 100, slices=4)) == 1  # no slice under _MIN_SLICE
