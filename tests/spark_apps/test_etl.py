"""ETL drops exactly the invalid readings and writes what the pure-Python task chain writes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from workloads.riot.datasets import CITY, city_sensor_metadata
from workloads.riot.senml import decode_senml, encode_senml
from workloads.riot.tasks import make_task
from workloads.spark.apps import etl

from .conftest import READINGS, run_to_end

pytestmark = pytest.mark.slow


def test_etl_matches_the_python_chain_and_drops_only_invalid_readings(stream_of,
                                                                      tmp_path: Path) -> None:
    metadata = city_sensor_metadata()
    stranger = replace(READINGS[20], sensor="atlantis-99", timestamp=READINGS[20].timestamp + 1)
    readings = sorted([*READINGS, stranger], key=lambda r: r.timestamp)
    output, _ = run_to_end(etl(stream_of(readings)), tmp_path / "checkpoint")

    in_range, interpolation = make_task("range_filter"), make_task(
        "interpolation", fields=CITY.value_columns)
    annotate = make_task("annotate", lookup=metadata)
    valid = [r for r in readings if in_range.process(r) and r.sensor in metadata]
    expected = {(r.sensor, r.timestamp): decode_senml(encode_senml(r, CITY.units))[0].values
                for r in (annotate.process(interpolation.process(v)[0])[0] for v in valid)}
    got = {(r.sensor, r.timestamp): r.values for r in map(_only, output["payload"])}
    assert got == expected

    dropped = {(r.sensor, r.timestamp) for r in readings} - set(got)
    assert (stranger.sensor, stranger.timestamp) in dropped
    assert len(dropped) == len(readings) - len(valid) > 10
    assert (output["event_time"].map(lambda t: t.timestamp()) == output["time"]).all()


def _only(payload: str):
    [reading] = decode_senml(payload)
    return reading
