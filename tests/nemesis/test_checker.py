"""The nemesis's checker on small hand-made histories: a run folder (manifest, tables) and
the nodes' records, with a reading lost, one doubled, two reordered, or none."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from experiments.nemesis.checker import check
from experiments.nemesis.scenarios import Promise

EPOCH = 1000.0
HEADER_SENT = "id,stream,source,t_sent,dropped\n"
HEADER_RECEIVED = "id,stream,source,sink,t_sent,t_received,hops\n"


def history(tmp_path: Path, received_ids: list[int], migration: dict | None = None,
            windows: list[tuple[int, int]] | None = None, duplicated: int = 0) -> tuple:
    """Two devices, five readings each (ids 1-5 from d-1, 11-15 from d-2, a reading every
    second from 1 s); `received_ids` in the order the sink took them (0.05 s apart)."""
    folder, records = tmp_path / "run", tmp_path / "records"
    folder.mkdir()
    (records / "gw-1").mkdir(parents=True)
    (records / "gw-2").mkdir(parents=True)
    sent = {i: (("d-1" if i < 10 else "d-2"), EPOCH + i % 10) for i in [*range(1, 6),
                                                                        *range(11, 16)]}
    (records / "gw-1" / "sent.csv").write_text(HEADER_SENT + "".join(
        f"{i},s,{device},{t},0\n" for i, (device, t) in sent.items()))
    (records / "gw-2" / "received.csv").write_text(HEADER_RECEIVED + "".join(
        f"{i},s,{sent[i][0]},gw-2,{sent[i][1]},{EPOCH + 6 + n * 0.05},1\n"
        for n, i in enumerate(received_ids)))
    manifest = {"status": "ok", "error": None, "config": {"run": {"duration": 20.0}},
                "facts": {"epoch": EPOCH, "messages": {"duplicated": duplicated}}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    if migration is not None:
        pd.DataFrame([migration]).to_parquet(folder / "migrations.parquet")
    if windows is not None:
        pd.DataFrame({"t": [float(i) for i in range(len(windows))],
                      "operator": "count", "node": "gw-1",
                      "window": list(range(len(windows))),
                      "last_sn": [w[0] for w in windows], "count": [w[1] for w in windows],
                      "processing_time": 0.1, "migration": -1, "adjusted": False}
                     ).to_parquet(folder / "windows.parquet")
    return folder, records


ALL = [1, 11, 2, 12, 3, 13, 4, 14, 5, 15]
MOVE = {"id": 0, "strategy": "pause_drain", "source": "gw-1", "target": "gw-2", "start": 0.5,
        "end": 9.0, "status": "done", "lost": 0, "duplicates": 0, "reordered": 0}


def test_a_clean_history_is_ok(tmp_path) -> None:
    folder, records = history(tmp_path, ALL, MOVE, windows=[(4, 4), (9, 5), (10, 1)])
    promise = Promise(streams=("s",), ordered=True, windows=("count",),
                      migrations=("done",))
    verdict = check(folder, promise, records)
    assert verdict.ok, verdict.detail
    assert (verdict.lost, verdict.duplicated, verdict.reordered) == (0, 0, 0)
    assert verdict.counts == {"sent": 10, "expected": 10, "received": 10, "arrivals": 10}


def test_a_lost_reading_is_named(tmp_path) -> None:
    folder, records = history(tmp_path, [i for i in ALL if i != 13])
    verdict = check(folder, Promise(streams=("s",)), records)
    assert not verdict.ok
    assert (verdict.lost, verdict.duplicated, verdict.reordered) == (1, 0, 0)
    assert "lost 1 of s (ids 13; devices d-2; sent 3.00-3.00 s)" in verdict.detail


def test_a_duplicate_is_counted_from_the_records_not_the_table(tmp_path) -> None:
    folder, records = history(tmp_path, [*ALL, 4, 4])
    verdict = check(folder, Promise(streams=("s",)), records)
    assert not verdict.ok
    assert (verdict.lost, verdict.duplicated, verdict.reordered) == (0, 2, 0)
    assert "duplicated 2 of s (ids 4;" in verdict.detail
    # At least once is allowed where the promise does not forbid duplicates.
    assert check(folder, Promise(streams=("s",), duplicated=False), records).ok


def test_a_reorder_during_a_move_breaks_an_ordered_promise(tmp_path) -> None:
    # d-1's 3 before its 2, and its 5 before its 4: two readings came after a later one.
    order = [1, 11, 3, 12, 2, 13, 5, 14, 4, 15]
    folder, records = history(tmp_path, order, MOVE)
    ordered = Promise(streams=("s",), ordered=True, migrations=("done",))
    verdict = check(folder, ordered, records)
    assert not verdict.ok
    assert (verdict.lost, verdict.duplicated, verdict.reordered) == (0, 0, 2)
    assert "2 of them during a move: reordered 2 of s (ids 2,4;" in verdict.detail
    assert check(folder, Promise(streams=("s",), migrations=("done",)), records).ok


def test_a_migration_and_windows_that_break_the_promise(tmp_path) -> None:
    failed = {**MOVE, "status": "failed", "duplicates": 3}
    folder, records = history(tmp_path, ALL, failed, windows=[(4, 4), (9, 4), (12, 4)])
    promise = Promise(streams=("s",), windows=("count",), migrations=("done",))
    verdict = check(folder, promise, records)
    assert not verdict.ok
    assert "migration 0 (pause_drain gw-1->gw-2) failed, promised done" in verdict.detail
    assert "migration 0 (pause_drain gw-1->gw-2): duplicates 3" in verdict.detail
    assert "windows of count (3 outputs): lost 1 events, duplicated 1" in verdict.detail


def test_without_records_the_table_and_the_facts_stand_in(tmp_path) -> None:
    folder, _ = history(tmp_path, ALL, duplicated=2)
    pd.DataFrame({"id": [1, 2, 3], "stream": "s", "source": "d-1", "sink": ["gw-2", None, "gw-2"],
                  "t_sent": [1.0, 2.0, 3.0], "t_received": [6.0, float("nan"), 6.1],
                  "latency": 0.1, "hops": [1, 1, 1], "lost": [False, True, False],
                  "state": ["delivered", "lost", "delivered"]}
                 ).to_parquet(folder / "messages.parquet")
    verdict = check(folder, Promise(streams=("s",)), None)
    assert (verdict.lost, verdict.duplicated, verdict.reordered) == (1, 2, 0)
    assert "records not kept" in verdict.detail
