"""Recorded user paths from CSV (time,user,x,y in seconds and metres) or GPX (lat/lon/time).

A trace is a file an experiment names (read only from inside its folder: topologies.files):
an error says the file, the line (or track point) and the field, never the text there.
"""

from __future__ import annotations

import csv
import math
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np

EARTH_RADIUS_M = 6_371_008.8  # the mean radius; the projection only needs metres-level accuracy


class Track(NamedTuple):
    """One user's path: strictly increasing times (s) and the positions (m) reached at them."""

    time: np.ndarray
    xy: np.ndarray


def load_trace(path: str | Path) -> dict[str, Track]:
    """The tracks of a .csv or .gpx file by user, in order of first appearance in the file."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _load_csv(path)
    if suffix == ".gpx":
        return _load_gpx(path)
    raise ValueError(f"{path}: a trace is a .csv or .gpx file")


def _number(text: str | None, where: str, what: str, field: int | None = None) -> float:
    """`text` as a finite number; an error names `where`, `what` and the CSV field's place."""
    place = f" (field {field})" if field is not None else ""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {what} is not a number{place}") from None
    if not math.isfinite(value):
        raise ValueError(f"{where}: {what} is not a finite number{place}")
    return value


def _append(points: dict[str, list], user: str, time: float, x: float, y: float,
            where: str) -> None:
    path = points.setdefault(user, [])
    if path and time <= path[-1][0]:
        raise ValueError(f"{where}: the user's point goes back in time: each user's points "
                         "come in strictly increasing time")
    path.append((time, x, y))


def _tracks(points: dict[str, list]) -> dict[str, Track]:
    tracks = {}
    for user, path in points.items():
        array = np.array(path, dtype=float)
        tracks[user] = Track(array[:, 0].copy(), array[:, 1:].copy())
    return tracks


def _load_csv(path: Path) -> dict[str, Track]:
    try:
        return _read_csv(path)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except csv.Error as exc:  # a NUL byte, a field over the csv module's limit
        raise ValueError(f"{path}: not a CSV file the reader takes ({exc})") from None


def _read_csv(path: Path) -> dict[str, Track]:
    with path.open(newline="", encoding="utf-8") as file:
        reader = csv.DictReader(file)
        columns = reader.fieldnames or []
        missing = [name for name in ("time", "x", "y") if name not in columns]
        if missing:
            raise ValueError(f"{path}:1: the header needs columns time,x,y (user optional); "
                             f"missing {','.join(missing)}")
        points: dict[str, list] = {}
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if None in row:
                raise ValueError(f"{where}: more fields than the header has columns")
            if None in row.values():
                raise ValueError(f"{where}: fewer fields than the header has columns")
            user = row.get("user", path.stem)
            _append(points, user, *(_number(row[name], where, name, columns.index(name) + 1)
                                    for name in ("time", "x", "y")), where)
    if not points:
        raise ValueError(f"{path}: no rows after the header")
    return _tracks(points)


def _local(tag: str) -> str:
    """`{http://www.topografix.com/GPX/1/1}trkpt` -> `trkpt`: GPX 1.0, 1.1 differ in namespace."""
    return tag.rpartition("}")[2]


def _children(element: ET.Element, name: str) -> list[ET.Element]:
    return [child for child in element if _local(child.tag) == name]


def _timestamp(point: ET.Element, where: str) -> float:
    times = _children(point, "time")
    if not times or not (times[0].text or "").strip():
        raise ValueError(f"{where}: a track point needs a <time>")
    text = times[0].text.strip()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{where}: <time> is not an ISO 8601 time") from None
    # GPX times are UTC; a time written without a zone is read as UTC too, not as local time.
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _load_gpx(path: Path) -> dict[str, Track]:
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as error:
        raise ValueError(f"{path}:{error.position[0]}: not well-formed XML: {error}") from None
    raw: dict[str, list] = {}
    for i, track in enumerate(_children(root, "trk")):
        names = _children(track, "name")
        user = (names[0].text or "").strip() if names else ""
        user = user or f"track-{i + 1}"
        if user in raw:
            raise ValueError(f"{path}: trk[{i}]: a second track of an earlier track's <name>")
        raw[user] = []
        points = [p for segment in _children(track, "trkseg") for p in _children(segment, "trkpt")]
        for j, point in enumerate(points):
            where = f"{path}: trk[{i}]/trkpt[{j}]"
            lat = _number(point.get("lat"), where, "lat")
            lon = _number(point.get("lon"), where, "lon")
            if not (-90 <= lat <= 90 and -180 <= lon <= 180):
                raise ValueError(f"{where}: lat {lat:g}, lon {lon:g} is not on Earth")
            _append(raw, user, _timestamp(point, where), lat, lon, where)
        if not raw[user]:
            raise ValueError(f"{path}: trk[{i}] has no <trkpt>")
    if not raw:
        raise ValueError(f"{path}: no <trk> in the file")
    return _projected(raw)


def _projected(raw: dict[str, list]) -> dict[str, Track]:
    """Times from the earliest point, and lat/lon to metres east/north of the file's first point.

    An equirectangular projection: distances are good to a fraction of a percent over a few
    kilometres, which is the scale of a fog deployment.
    """
    start = min(path[0][0] for path in raw.values())
    lat0, lon0 = next(iter(raw.values()))[0][1:]
    east = EARTH_RADIUS_M * math.cos(math.radians(lat0))
    points = {user: [(t - start, east * math.radians(lon - lon0), EARTH_RADIUS_M
                      * math.radians(lat - lat0)) for t, lat, lon in path]
              for user, path in raw.items()}
    return _tracks(points)
