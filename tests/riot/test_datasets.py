"""CITY and TAXI generators: determinism, valid ranges, outlier and missing rates, daily shape."""

from __future__ import annotations

import statistics

import pytest

from workloads.riot.datasets import (
    CITY,
    CITY_START,
    TAXI,
    city_readings,
    city_sensor_metadata,
    taxi_readings,
    write_sample_csv,
)
from workloads.riot.senml import Reading, read_csv


def _in_range(reading: Reading, ranges: dict[str, tuple[float, float]]) -> bool:
    return all(low <= reading.values[name] <= high for name, (low, high) in ranges.items()
               if isinstance(reading.values.get(name), float))


@pytest.mark.parametrize("generate", [city_readings, taxi_readings])
def test_same_seed_same_stream_other_seed_other_stream(generate) -> None:
    assert generate(rows=500, seed=3) == generate(rows=500, seed=3)
    assert generate(rows=500, seed=3) != generate(rows=500, seed=4)


def test_city_sensors_report_every_interval_in_time_order() -> None:
    readings = city_readings(rows=140, sensors=14, interval=60.0)
    assert [r.timestamp for r in readings] == sorted(r.timestamp for r in readings)
    boston = [r.timestamp for r in readings if r.sensor == "boston-01"]
    # Sensor 1 of 14 reports 60 / 14 s after sensor 0, kept to the millisecond.
    assert boston == pytest.approx([CITY_START + 4.286 + 60.0 * k for k in range(10)], abs=1e-6)
    assert len({r.sensor for r in readings}) == 14
    assert list(readings[0].values) == list(CITY.value_columns)


def test_clean_city_stream_stays_in_range_and_complete() -> None:
    readings = city_readings(rows=5000, outlier_rate=0.0, missing_rate=0.0)
    assert all(_in_range(r, CITY.ranges) for r in readings)
    assert all(v is not None for r in readings for v in r.values.values())


def test_outliers_are_one_value_beyond_range_at_the_configured_rate() -> None:
    clean = city_readings(rows=5000, outlier_rate=0.0, missing_rate=0.0)
    dirty = city_readings(rows=5000, outlier_rate=0.02, missing_rate=0.0)
    changed = [(c, d) for c, d in zip(clean, dirty, strict=True) if c != d]
    assert 70 <= len(changed) <= 130  # binomial(5000, 0.02): mean 100, sd 9.9
    for c, d in changed:
        differing = [name for name in CITY.value_columns if c.values[name] != d.values[name]]
        assert len(differing) == 1
        assert not _in_range(d, CITY.ranges)


def test_missing_values_are_one_none_per_row_at_the_configured_rate() -> None:
    readings = city_readings(rows=5000, outlier_rate=0.0, missing_rate=0.02)
    missing = [sum(v is None for v in r.values.values()) for r in readings]
    assert set(missing) == {0, 1}
    assert 70 <= sum(missing) <= 130


def test_city_follows_the_local_day() -> None:
    # One day of Bangalore (UTC+5:30) readings, one sensor every minute.
    readings = [r for r in city_readings(rows=7 * 1440, sensors=7, outlier_rate=0.0,
                                         missing_rate=0.0) if r.sensor == "bangalore-00"]
    hour = {id(r): ((r.timestamp - CITY_START) / 3600 + 5.5) % 24 for r in readings}
    afternoon = [r for r in readings if 14 <= hour[id(r)] < 16]
    night = [r for r in readings if 2 <= hour[id(r)] < 4]
    assert (statistics.mean(r.values["temperature"] for r in afternoon)
            - statistics.mean(r.values["temperature"] for r in night)) > 6.0
    assert min(r.values["light"] for r in afternoon) > 500
    assert max(r.values["light"] for r in night) < 30


def test_taxi_amounts_and_times_add_up() -> None:
    readings = taxi_readings(rows=3000, outlier_rate=0.0)
    assert [r.timestamp for r in readings] == sorted(r.timestamp for r in readings)
    for r in readings:
        v = r.values
        assert r.timestamp - v["pickup_time"] == v["trip_time_in_secs"]
        assert v["total_amount"] == round(v["fare_amount"] + v["surcharge"] + v["tip_amount"]
                                          + v["tolls_amount"], 2)
        if v["payment_type"] == "CSH":
            assert v["tip_amount"] == 0.0
        else:
            assert 0.1 * v["fare_amount"] - 0.01 <= v["tip_amount"] <= 0.3 * v["fare_amount"] + 0.01
        assert _in_range(r, TAXI.ranges)
        assert len(r.sensor) == 32


def test_taxi_pickups_peak_in_the_evening_rush() -> None:
    readings = taxi_readings(rows=5000, outlier_rate=0.0)
    local_hours = [((r.values["pickup_time"] - 1358121600.0) / 3600 - 5) % 24 for r in readings]
    evening = sum(18 <= h < 20 for h in local_hours)
    small_hours = sum(3 <= h < 5 for h in local_hours)
    assert evening > 3 * small_hours


def test_taxi_outliers_break_a_range() -> None:
    clean = taxi_readings(rows=5000, outlier_rate=0.0)
    dirty = taxi_readings(rows=5000, outlier_rate=0.02)
    out = [d for d in dirty if not _in_range(d, TAXI.ranges)]
    assert 70 <= len(out) <= 130
    assert sum(c != d for c, d in zip(clean, dirty, strict=True)) == len(out)


@pytest.mark.parametrize(("dataset", "spec", "generate"), [("city", CITY, city_readings),
                                                           ("taxi", TAXI, taxi_readings)])
def test_sample_csv_reads_back_as_generated(tmp_path, dataset, spec, generate) -> None:
    path = write_sample_csv(tmp_path / f"{dataset}.csv", dataset, rows=400, seed=5)
    assert path.read_text().splitlines()[0] == ",".join(spec.columns)
    assert list(read_csv(path, spec.time_column, spec.sensor_column)) == generate(rows=400, seed=5)


def test_unknown_dataset_is_named(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown dataset 'weather'"):
        write_sample_csv(tmp_path / "w.csv", "weather")


def test_sensor_metadata_places_sensors_in_their_city() -> None:
    metadata = city_sensor_metadata(14)
    assert metadata["bangalore-00"] == {"city": "bangalore", "latitude": 12.97,
                                        "longitude": 77.59}
    assert metadata["bangalore-07"]["latitude"] == 12.98
