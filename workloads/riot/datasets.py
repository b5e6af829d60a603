"""Seeded generators of RIoTBench-like CITY (environment sensors) and TAXI (trip) streams."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from workloads.riot.senml import Reading, write_csv

# The streams' layouts live in specs (no numpy, for the gateway agent's tasks); re-exported.
from workloads.riot.specs import (  # noqa: F401
    CITY,
    DATASETS,
    TAXI,
    DatasetSpec,
    spec_for_columns,
)

CITY_START = 1421280000.0  # 2015-01-15 00:00 UTC, the season of the Sense-your-City data
TAXI_START = 1358121600.0  # 2013-01-14 00:00 UTC, a Monday of the 2013 NYC trip data

# The seven Sense-your-City cities: UTC offset (h), mean temperature (C), dust level (ug/m3),
# latitude, longitude.
CITIES = {
    "bangalore": (5.5, 24.0, 80.0, 12.97, 77.59),
    "boston": (-5.0, -1.0, 25.0, 42.36, -71.06),
    "geneva": (1.0, 3.0, 20.0, 46.20, 6.14),
    "rio": (-3.0, 27.0, 45.0, -22.91, -43.17),
    "san-francisco": (-8.0, 11.0, 15.0, 37.77, -122.42),
    "shanghai": (8.0, 5.0, 90.0, 31.23, 121.47),
    "singapore": (8.0, 27.0, 30.0, 1.35, 103.82),
}

# NYC taxi pickups per local hour relative to the busiest hour: morning and evening peaks.
TAXI_HOURLY = (0.55, 0.40, 0.30, 0.20, 0.15, 0.20, 0.45, 0.75, 0.95, 1.00, 0.85, 0.80,
               0.85, 0.85, 0.90, 0.85, 0.80, 0.95, 1.05, 1.10, 1.00, 0.95, 0.90, 0.75)
NYC_UTC_OFFSET = -5.0


def city_sensor_ids(sensors: int) -> list[str]:
    names = list(CITIES)
    return [f"{names[i % len(names)]}-{i:02d}" for i in range(sensors)]


def city_sensor_metadata(sensors: int = 14) -> dict[str, dict[str, str | float]]:
    """A static lookup (sensor id -> city, latitude, longitude) for the annotate task."""
    metadata: dict[str, dict[str, str | float]] = {}
    for i, sensor in enumerate(city_sensor_ids(sensors)):
        city = list(CITIES)[i % len(CITIES)]
        _, _, _, lat, lon = CITIES[city]
        spread = 0.01 * (i // len(CITIES))  # sensors of one city sit a few streets apart
        metadata[sensor] = {"city": city, "latitude": round(lat + spread, 4),
                            "longitude": round(lon + spread, 4)}
    return metadata


def city_readings(rows: int = 3000, seed: int = 0, sensors: int = 14, interval: float = 60.0,
                  start: float = CITY_START, outlier_rate: float = 0.01,
                  missing_rate: float = 0.01) -> list[Reading]:
    """Every sensor reports every `interval` s, staggered; values follow each city's local day.

    An outlier puts one value outside CITY.ranges, a missing value is None. All random draws
    happen whatever the rates, so two calls differing only in a rate differ only in those rows.
    """
    rng = np.random.default_rng(seed)
    index = np.arange(rows)
    sensor = index % sensors
    t = np.round(start + (index // sensors) * interval + sensor * (interval / sensors), 3)
    city = sensor % len(CITIES)
    offset, mean_temp, dust_level = (np.array(column)[city]
                                     for column in list(zip(*CITIES.values(), strict=True))[:3])
    hour = (t / 3600.0 + offset) % 24.0
    warmth = np.sin(2 * np.pi * (hour - 9.0) / 24.0)  # warmest at 15:00 local
    sun = np.clip(np.sin(np.pi * (hour - 6.0) / 12.0), 0.0, None)  # daylight 06:00-18:00
    traffic = 1.0 + 0.8 * _peak(hour, 9.0) + 0.8 * _peak(hour, 19.0)

    bias = rng.normal(0.0, 1.0, sensors)[sensor]
    temperature = mean_temp + bias + 4.0 * warmth + rng.normal(0.0, 0.4, rows)
    humidity = np.clip(65.0 - 2.5 * (temperature - mean_temp) + rng.normal(0.0, 3.0, rows),
                       5.0, 99.0)
    light = np.clip(3000.0 * sun * rng.uniform(0.6, 1.0, rows) + 10.0
                    + rng.normal(0.0, 3.0, rows), 0.0, None)  # 10 lx of street light at night
    dust = dust_level * traffic * rng.lognormal(0.0, 0.25, rows)
    airquality = 8.0 + 0.2 * dust + 0.12 * humidity + rng.normal(0.0, 1.5, rows)

    table = np.column_stack([np.round(temperature, 2), np.round(humidity, 1),
                             np.round(light, 1), np.round(dust, 2), np.round(airquality, 1)])
    _inject_outliers(rng, table, CITY, CITY.value_columns, outlier_rate)
    missing = rng.random(rows) < missing_rate
    table[missing, rng.integers(0, table.shape[1], rows)[missing]] = np.nan
    ids = city_sensor_ids(sensors)
    return [Reading(ts, ids[s], {name: None if math.isnan(v) else v
                                 for name, v in zip(CITY.value_columns, row, strict=True)})
            for ts, s, row in zip(t.tolist(), sensor.tolist(), table.tolist(),
                                  strict=True)]


def taxi_readings(rows: int = 3000, seed: int = 0, taxis: int = 200, days: int = 1,
                  start: float = TAXI_START, outlier_rate: float = 0.01) -> list[Reading]:
    """Trip records ordered by drop-off, with rush-hour peaks and slower traffic in them.

    Fares follow the 2013 NYC meter roughly; card trips tip 10-30 %, cash tips are not
    recorded. An outlier puts the trip time, distance or fare outside TAXI.ranges.
    """
    rng = np.random.default_rng(seed)
    medallions = [rng.bytes(16).hex().upper() for _ in range(taxis)]
    taxi = rng.integers(0, taxis, rows)
    weights = np.array(TAXI_HOURLY) / sum(TAXI_HOURLY)
    hour = rng.choice(24, size=rows, p=weights) + rng.random(rows)
    day = rng.integers(0, days, rows)
    pickup = np.floor(start + day * 86400.0 + (hour - NYC_UTC_OFFSET) * 3600.0)
    hour = hour % 24.0

    distance = np.round(np.clip(rng.lognormal(math.log(1.8), 0.75, rows), 0.1, 40.0), 2)
    rush = _peak(hour, 9.0) + _peak(hour, 19.0)
    speed = np.clip(14.0 - 5.0 * rush + rng.normal(0.0, 2.0, rows), 4.0, 30.0)  # mph
    trip_time = np.round(distance / speed * 3600.0 + rng.uniform(30.0, 180.0, rows))
    fare = np.round((2.5 + 2.0 * distance + 0.25 * trip_time / 60.0) * 2.0) / 2.0
    night = (hour >= 20.0) | (hour < 6.0)
    surcharge = 0.5 + 0.5 * night  # the MTA tax, plus the night surcharge
    tolls = np.where((distance > 8.0) & (rng.random(rows) < 0.4), 5.33, 0.0)
    card = rng.random(rows) < 0.55
    tip = np.where(card, np.round(fare * rng.uniform(0.1, 0.3, rows), 2), 0.0)
    total = np.round(fare + surcharge + tip + tolls, 2)
    dropoff = pickup + trip_time

    numbers = ("trip_time_in_secs", "trip_distance", "fare_amount")
    table = np.column_stack([trip_time, distance, fare])
    _inject_outliers(rng, table, TAXI, numbers, outlier_rate)
    order = np.argsort(dropoff, kind="stable")
    readings = []
    for i in order.tolist():
        values: dict[str, float | str | None] = dict(zip(numbers, table[i].tolist(), strict=True))
        values |= {"pickup_time": float(pickup[i]), "payment_type": "CRD" if card[i] else "CSH",
                   "surcharge": float(surcharge[i]), "tip_amount": float(tip[i]),
                   "tolls_amount": float(tolls[i]), "total_amount": float(total[i])}
        readings.append(Reading(float(dropoff[i]), medallions[taxi[i]],
                                {name: values[name] for name in TAXI.value_columns}))
    return readings


GENERATORS = {"city": city_readings, "taxi": taxi_readings}


def write_sample_csv(path: str | Path, dataset: str = "city", rows: int = 3000,
                     seed: int = 0) -> Path:
    """Write a generated sample of `dataset` ("city" or "taxi") as CSV in its spec's columns."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    spec = DATASETS[dataset]
    readings = GENERATORS[dataset](rows=rows, seed=seed)
    return write_csv(path, readings, spec.time_column, spec.sensor_column, spec.value_columns)


def _peak(hour: np.ndarray, at: float, width: float = 1.5) -> np.ndarray:
    return np.exp(-(((hour - at) / width) ** 2))


def _inject_outliers(rng: np.random.Generator, table: np.ndarray, spec: DatasetSpec,
                     columns: tuple[str, ...], rate: float) -> None:
    """Push one value of a `rate` fraction of rows 5-50 % of its range beyond a bound."""
    rows = table.shape[0]
    hit = rng.random(rows) < rate
    column = rng.integers(0, len(columns), rows)
    above = rng.random(rows) < 0.5
    lows, highs = (np.array([spec.ranges[name][k] for name in columns]) for k in (0, 1))
    span = (highs - lows)[column]
    beyond = np.round(rng.uniform(0.05, 0.5, rows) * span, 2)
    value = np.where(above, highs[column] + beyond, lows[column] - beyond)
    table[hit, column[hit]] = value[hit]
