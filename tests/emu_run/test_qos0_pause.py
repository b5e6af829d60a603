"""A paused operator's QoS 0 input waits in its session as QoS 1 does (Mosquitto's
queue_qos0_messages): the broker holds it whatever its QoS, as the model's does."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from .test_migration_run import MOVE, _run, client  # noqa: F401 - the fixture

pytestmark = [pytest.mark.emu, pytest.mark.slow]


def test_a_pause_transfer_of_a_qos_0_stream_loses_nothing(tmp_path, client) -> None:  # noqa: F811
    folder = _run(tmp_path, "emu", "pause_transfer", MOVE.replace("qos: 1", "qos: 0"))
    migrations = pq.read_table(folder / "migrations.parquet").to_pydict()
    assert migrations["lost"] == [0] and migrations["held"][0] > 0
    messages = pq.read_table(folder / "messages.parquet").to_pandas()
    assert not messages["lost"].any(), messages[messages["lost"]]
