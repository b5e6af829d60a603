"""Agents' records as the messages table: delivered, dropped, duplicated, unaccounted."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from emu.tables import messages_table, read_records

EPOCH = 1000.0
SENT = """id,stream,source,t_sent,dropped
1,city,s-1,1000.5,0
2,city,s-1,1001.5,1
3,city,s-2,1002.0,0
4,city,s-2,1003.0,0
5,city,s-2,1011.0,0
"""
RECEIVED = """id,stream,source,sink,t_sent,t_received,hops
3,city,s-2,cloud-1,1002.0,1002.25,1
1,city,s-1,cloud-1,1000.5,1000.53,1
1,city,s-1,cloud-1,1000.5,1000.9,1
5,city,s-2,cloud-1,1011.0,1011.1,1
"""


@pytest.fixture
def records(tmp_path: Path) -> Path:
    (tmp_path / "gw-1").mkdir()
    (tmp_path / "gw-1" / "sent.csv").write_text(SENT)
    (tmp_path / "cloud-1").mkdir()
    (tmp_path / "cloud-1" / "received.csv").write_text(RECEIVED)
    (tmp_path / "broker-1").mkdir()  # a service writes no records
    return tmp_path


def test_messages_are_delivered_first_arrivals_plus_dropped_ones(records: Path) -> None:
    columns, facts = messages_table(*read_records(records), epoch=EPOCH, duration=10.0)
    rows = sorted(zip(columns["id"], columns["sink"], columns["t_sent"], columns["t_received"],
                      columns["latency"], columns["lost"], strict=True))
    assert [r[0] for r in rows] == [1, 2, 3]  # 5 was sent after the run's duration
    one, two, three = rows
    assert one[1:5] == ("cloud-1", 0.5, pytest.approx(0.53), pytest.approx(0.03))
    assert two[1] == "" and math.isnan(two[3]) and math.isnan(two[4]) and two[5]
    assert three[4] == pytest.approx(0.25) and not three[5]
    assert facts == {"sent": 4, "received": 2, "dropped": 1, "duplicated": 1, "unaccounted": 1}


def test_an_empty_run_gives_empty_columns(tmp_path: Path) -> None:
    (tmp_path / "gw-1").mkdir()
    columns, facts = messages_table(*read_records(tmp_path), epoch=EPOCH, duration=10.0)
    assert all(len(values) == 0 for values in columns.values())
    assert facts["sent"] == 0


def test_no_node_folders_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no node records"):
        read_records(tmp_path)
