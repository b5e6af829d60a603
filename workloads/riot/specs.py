"""The layouts of the RIoTBench streams: CSV columns, valid ranges and units of CITY and TAXI.

Plain data without numpy, so the tasks that check readings against them (range filter, SenML
parse) run on a gateway that has not loaded numpy; `workloads.riot.datasets` generates the
streams and re-exports these.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DatasetSpec:
    """The columns of a stream's CSV form and the physically valid range of its numbers."""

    name: str
    time_column: str
    sensor_column: str
    value_columns: tuple[str, ...]
    ranges: dict[str, tuple[float, float]]
    units: dict[str, str]

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.time_column, self.sensor_column, *self.value_columns)


CITY = DatasetSpec(
    name="city",
    time_column="timestamp",
    sensor_column="source",
    value_columns=("temperature", "humidity", "light", "dust", "airquality_raw"),
    ranges={"temperature": (-30.0, 50.0), "humidity": (0.0, 100.0), "light": (0.0, 6000.0),
            "dust": (0.0, 1000.0), "airquality_raw": (0.0, 150.0)},
    units={"temperature": "Cel", "humidity": "%RH", "light": "lx"},
)

TAXI = DatasetSpec(
    name="taxi",
    time_column="dropoff_time",  # a trip record exists once the trip ends
    sensor_column="medallion",
    value_columns=("pickup_time", "trip_time_in_secs", "trip_distance", "payment_type",
                   "fare_amount", "surcharge", "tip_amount", "tolls_amount", "total_amount"),
    ranges={"trip_time_in_secs": (30.0, 10800.0), "trip_distance": (0.01, 100.0),
            "fare_amount": (2.5, 500.0), "surcharge": (0.0, 5.0), "tip_amount": (0.0, 200.0),
            "tolls_amount": (0.0, 50.0), "total_amount": (2.5, 800.0)},
    units={"trip_time_in_secs": "s", "trip_distance": "mi"},
)

DATASETS = {spec.name: spec for spec in (CITY, TAXI)}


def spec_for_columns(columns: list[str] | tuple[str, ...]) -> DatasetSpec:
    """The dataset whose CSV header is `columns`."""
    for spec in DATASETS.values():
        if tuple(columns) == spec.columns:
            return spec
    raise ValueError(f"header {list(columns)} is neither the city nor the taxi layout")
