"""Shared fixtures: generated sample files and the models trained on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.riot.datasets import write_sample_csv
from workloads.riot.models import train_models


@pytest.fixture(scope="session")
def city_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample_csv(tmp_path_factory.mktemp("riot") / "city.csv", "city", 3000, seed=0)


@pytest.fixture(scope="session")
def taxi_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample_csv(tmp_path_factory.mktemp("riot") / "taxi.csv", "taxi", 3000, seed=0)


@pytest.fixture(scope="session")
def city_models(city_csv: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return train_models(city_csv, tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def taxi_models(taxi_csv: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return train_models(taxi_csv, tmp_path_factory.mktemp("models"))
