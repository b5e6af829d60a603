"""The source's journal: offsets, sealing, what a killed process leaves, trimming, the lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.spark.mqtt_source import _HEADER, Journal, JournalWriter


def payloads(journal: Journal, start: int, end: int) -> list[bytes]:
    return [
        value
        for segment in journal.partitions(start, end)
        for batch in Journal.read(segment)
        for value in batch.column("payload").to_pylist()
    ]


def write(journal: Journal, ids: range) -> JournalWriter:
    writer = JournalWriter(journal)
    for n in ids:
        writer.append("city/a", str(n).encode(), 1)
    return writer


def test_offsets_count_messages_across_segments(journal: Path) -> None:
    j = Journal(journal)
    writer = write(j, range(0, 5))
    assert writer.seal() == 5
    assert writer.seal() == 5  # nothing new: same offset, no empty segment
    for n in range(5, 12):
        writer.append("city/b", str(n).encode(), 0)
    assert writer.seal() == 12
    writer.close()

    assert [(start, end) for start, end, _ in j.segments()] == [(0, 5), (5, 12)]
    assert payloads(j, 3, 8) == [str(n).encode() for n in range(3, 8)]
    batch = next(Journal.read(j.partitions(0, 12)[1]))
    assert batch.column("offset").to_pylist() == list(range(5, 12))
    assert set(batch.column("topic").to_pylist()) == {"city/b"}


def test_a_killed_process_loses_no_journaled_message(journal: Path) -> None:
    j = Journal(journal)
    writer = write(j, range(0, 4))
    writer.seal()
    for n in range(4, 7):
        writer.append("city/a", str(n).encode(), 1)
    # Killed mid-write: a record cut short at the end of the active log (never acknowledged).
    with open(journal / "active.log", "ab") as log:
        log.write(_HEADER.pack(6, 100, 1, 0) + b"city/a" + b"x" * 10)
    writer.close()  # the lock goes with the process; nothing is sealed here

    reopened = JournalWriter(j)
    assert reopened.seal() == 7
    reopened.close()
    assert payloads(j, 0, 7) == [str(n).encode() for n in range(7)]


def test_a_log_killed_while_sealing_is_sealed_once(journal: Path) -> None:
    j = Journal(journal)
    write(j, range(0, 3)).close()
    # Killed after renaming the log aside, before writing its segment.
    (journal / "active.log").rename(journal / "sealing-000000000000.log")
    writer = JournalWriter(j)
    assert writer.seal() == 3
    writer.close()

    # Killed after writing the segment, before removing the log: no second copy.
    (journal / "sealing-000000000000.log").write_bytes(b"stale")
    writer = JournalWriter(j)
    assert writer.seal() == 3
    writer.close()
    assert not list(journal.glob("sealing-*"))
    assert payloads(j, 0, 3) == [b"0", b"1", b"2"]


def test_trim_keeps_the_newest_segment(journal: Path) -> None:
    j = Journal(journal)
    writer = write(j, range(0, 2))
    writer.seal()
    writer.append("t", b"2", 1)
    writer.seal()
    j.trim(3)
    assert [(start, end) for start, end, _ in j.segments()] == [(2, 3)]
    writer.append("t", b"3", 1)
    assert writer.seal() == 4  # the count goes on from the kept segment
    writer.close()
    assert payloads(j, 0, 4) == [b"2", b"3"]


def test_one_writer_per_journal(journal: Path) -> None:
    first = JournalWriter(Journal(journal))
    with pytest.raises(TimeoutError, match="held by another reader"):
        JournalWriter(Journal(journal), lock_wait=0.3)
    first.close()
    JournalWriter(Journal(journal), lock_wait=0.3).close()


def test_a_resent_message_the_previous_process_journaled_is_kept_once(journal: Path) -> None:
    j = Journal(journal)
    first = write(j, range(0, 5))
    first.seal()
    first.close()  # as if killed before its last acknowledgements left
    second = JournalWriter(j)
    second.append("city/a", b"4", 1, resent=True)  # resent by the broker: already journaled
    second.append("city/a", b"9", 1, resent=True)  # resent, but never journaled
    second.append("city/a", b"4", 1)  # a new message that happens to look the same
    assert second.seal() == 7
    assert payloads(j, 0, 7) == [b"0", b"1", b"2", b"3", b"4", b"9", b"4"]
    second.close()
