"""Trace files: CSV and GPX loading, replay by linear interpolation, and errors that say where."""

import math
from pathlib import Path

import numpy as np
import pytest

from sim.mobility import TraceReplay, TraceSpec, build_movement, load_trace
from sim.mobility.traces import EARTH_RADIUS_M

DATA = Path(__file__).parent / "data"


def test_csv_tracks_keep_the_order_users_first_appear_in() -> None:
    tracks = load_trace(DATA / "walk.csv")
    assert list(tracks) == ["alice", "bob"]
    assert tracks["alice"].time.tolist() == [0, 10, 20, 30, 40, 50, 60]
    assert tracks["bob"].xy[2].tolist() == [80, 80]


@pytest.mark.parametrize(("t", "alice", "bob"), [
    (0.0, (0, 0), (100, 100)),     # bob's first point is at 5 s: he waits there
    (15.0, (15, 0), (100, 80)),
    (32.0, (30, 2), (80, 94)),
    (60.0, (30, 30), (100, 100)),
    (1000.0, (30, 30), (100, 100)),  # after the last point everyone stays put
])
def test_csv_replay_interpolates_between_points(t: float, alice: tuple, bob: tuple) -> None:
    replay = TraceReplay(list(load_trace(DATA / "walk.csv").values()))
    assert replay.positions(t) == pytest.approx(np.array([alice, bob]))


def test_replay_with_long_steps_passes_several_points_at_once() -> None:
    replay = TraceReplay(list(load_trace(DATA / "walk.csv").values()))
    assert replay.positions(1.0)[0].tolist() == pytest.approx([1, 0])
    assert replay.positions(45.0)[0].tolist() == pytest.approx([30, 15])


def test_a_csv_without_a_user_column_is_one_user_named_after_the_file(tmp_path: Path) -> None:
    path = tmp_path / "solo.csv"
    path.write_text("time,x,y\n0,0,0\n4,3,4\n")
    tracks = load_trace(path)
    assert list(tracks) == ["solo"]
    assert TraceReplay(list(tracks.values())).positions(2.0).tolist() == [[1.5, 2.0]]


def _metres(lat: float, lon: float) -> tuple[float, float]:
    east = EARTH_RADIUS_M * math.cos(math.radians(48.0))
    return east * math.radians(lon - 11.0), EARTH_RADIUS_M * math.radians(lat - 48.0)


def test_gpx_is_projected_around_its_first_point_with_times_from_the_earliest() -> None:
    tracks = load_trace(DATA / "ride.gpx")
    assert list(tracks) == ["ride", "track-2"]
    ride, unnamed = tracks["ride"], tracks["track-2"]
    assert ride.time.tolist() == [0, 10, 20, 30, 40, 50, 60]  # segments are joined
    assert ride.xy[0].tolist() == [0.0, 0.0]
    assert ride.xy[3].tolist() == pytest.approx(_metres(48.0003, 11.0))
    assert ride.xy[-1].tolist() == pytest.approx(_metres(48.0003, 11.0003))
    assert unnamed.time.tolist() == [30, 90]
    assert unnamed.xy[0].tolist() == pytest.approx(_metres(47.999, 10.999))
    # 0.0001 degrees of latitude: about 11.1 m.
    assert ride.xy[1][1] == pytest.approx(11.12, abs=0.01)


def test_gpx_replay_interpolates_in_metres() -> None:
    replay = TraceReplay(list(load_trace(DATA / "ride.gpx").values()))
    ride, unnamed = replay.positions(35.0)
    north = _metres(48.0003, 11.0)[1]
    assert ride.tolist() == pytest.approx([_metres(48.0003, 11.0001)[0] / 2, north])
    start, end = np.array(_metres(47.999, 10.999)), np.array(_metres(47.999, 10.9995))
    assert unnamed == pytest.approx(start + (end - start) * 5 / 60)  # from 30 s to 90 s


def test_build_movement_replays_a_trace_file_with_one_track_per_user() -> None:
    spec = TraceSpec(kind="trace", path=DATA / "walk.csv")
    movement = build_movement(spec, 2, np.empty((0, 2)), np.random.default_rng(0))
    assert movement.positions(15.0) == pytest.approx(np.array([[15, 0], [100, 80]]))
    with pytest.raises(ValueError, match=r"walk\.csv: 2 tracks for 3 moving devices"):
        build_movement(spec, 3, np.empty((0, 2)), np.random.default_rng(0))


@pytest.mark.parametrize(("text", "message"), [
    ("time,user,x\n0,a,1\n", r"bad\.csv:1: .*missing y"),
    ("time,user,x,y\n0,a,1,2\n1,a,x1,2\n", r"bad\.csv:3: x is not a number \(field 3\)$"),
    ("time,user,x,y\n0,a,1,2\n1,a,1\n", r"bad\.csv:3: fewer fields"),
    ("time,user,x,y\n0,a,1,2,9\n", r"bad\.csv:2: more fields"),
    ("time,user,x,y\n0,a,1,nan\n", r"bad\.csv:2: y is not a finite number"),
    ("time,user,x,y\n5,a,1,2\n6,b,0,0\n5,a,1,3\n",
     r"bad\.csv:4: the user's point goes back in time"),
    ("time,user,x,y\n", r"bad\.csv: no rows"),
])
def test_a_malformed_csv_is_named_with_its_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_trace(path)


def _gpx(points: str) -> str:
    return ('<gpx xmlns="http://www.topografix.com/GPX/1/0"><trk><trkseg>'
            f"{points}</trkseg></trk></gpx>")


GOOD = '<trkpt lat="1" lon="2"><time>2024-01-01T00:00:00</time></trkpt>'


@pytest.mark.parametrize(("text", "message"), [
    ("<gpx><trk>\n<trkseg>\n</trk></gpx>", r"bad\.gpx:3: not well-formed"),
    ("<gpx></gpx>", r"bad\.gpx: no <trk>"),
    (_gpx(""), r"bad\.gpx: trk\[0\] has no <trkpt>"),
    (_gpx(GOOD + '<trkpt lat="1" lon="2"></trkpt>'), r"trk\[0\]/trkpt\[1\]: .*needs a <time>"),
    (_gpx('<trkpt lat="1" lon="2"><time>noon</time></trkpt>'), r"trkpt\[0\]: <time> is not"),
    (_gpx('<trkpt lat="north" lon="2"><time>2024-01-01T00:00:00Z</time></trkpt>'),
     r"trkpt\[0\]: lat is not a number$"),
    (_gpx('<trkpt lon="2"><time>2024-01-01T00:00:00Z</time></trkpt>'),
     r"trkpt\[0\]: lat is not a number$"),
    (_gpx('<trkpt lat="95" lon="2"><time>2024-01-01T00:00:00Z</time></trkpt>'),
     r"trkpt\[0\]: lat 95, lon 2 is not on Earth"),
    (_gpx(GOOD + GOOD), r"trkpt\[1\]: the user's point goes back in time"),
])
def test_a_malformed_gpx_is_named_with_its_element(tmp_path: Path, text: str,
                                                   message: str) -> None:
    path = tmp_path / "bad.gpx"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_trace(path)
