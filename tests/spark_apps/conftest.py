"""SenML files read back by Spark's file source for the app tests (on the tests' one Spark)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from workloads.riot.datasets import city_readings, write_sample_csv
from workloads.riot.models import train_models
from workloads.riot.senml import Reading, encode_senml
from workloads.spark.apps import SENSOR, STATE_VAR, stats
from workloads.spark.state import read_state

# 14 CITY sensors reporting every minute for 40 minutes, with more outliers and gaps than the
# default 1 % so that every filter and the interpolation have work.
READINGS = city_readings(rows=14 * 40, seed=3, outlier_rate=0.05, missing_rate=0.05)
FILES = 2  # one micro-batch per file


def write_senml(directory: Path, readings: Sequence[Reading], files: int = FILES,
                first: int = 0) -> Path:
    """The readings as SenML lines, in order, split over `files` files (numbered from `first`)
    that a stream reads one per batch."""
    directory.mkdir(parents=True, exist_ok=True)
    size = -(-len(readings) // files)
    for i in range(files):
        lines = (encode_senml(r) + "\n" for r in readings[i * size:(i + 1) * size])
        (directory / f"part-{first + i:03d}.senml").write_text("".join(lines))
    return directory


def senml_stream(spark: SparkSession, directory: Path) -> DataFrame:
    """A streaming DataFrame of `payload` lines from the files in `directory`."""
    lines = spark.readStream.option("maxFilesPerTrigger", 1).text(str(directory))
    return lines.withColumnRenamed("value", "payload")


def run_to_end(frame: DataFrame, checkpoint: Path) -> tuple[pd.DataFrame, StreamingQuery]:
    """Run a streaming query over all available input, then return its output and the query."""
    batches: list[pd.DataFrame] = []
    # foreachBatch, not the memory sink: a query must be able to restart from a checkpoint.
    query = (frame.writeStream.foreachBatch(lambda batch, _: batches.append(batch.toPandas()))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    return pd.concat(batches, ignore_index=True), query


@pytest.fixture(scope="session")
def city_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    sample = write_sample_csv(tmp_path_factory.mktemp("riot") / "city.csv", "city", 3000)
    return train_models(sample, tmp_path_factory.mktemp("models"))


@pytest.fixture
def stream_of(spark: SparkSession,
              tmp_path: Path) -> Callable[[Sequence[Reading]], DataFrame]:
    """Readings -> a streaming DataFrame replaying them as SenML files."""
    return lambda readings: senml_stream(spark, write_senml(tmp_path / "input", readings))


def snapshots(spark: SparkSession, checkpoint: Path) -> dict[str, dict]:
    """Each sensor's task snapshot in a stopped query's checkpoint."""
    state = read_state(spark, checkpoint).toPandas()
    return dict(zip(state[SENSOR], state[STATE_VAR].map(json.loads), strict=True))


@dataclass(frozen=True)
class Run:
    """A finished query: what it wrote, its checkpoint, its last batch's watermark (if any)."""

    output: pd.DataFrame
    checkpoint: Path
    watermark: pd.Timestamp | None = None


@pytest.fixture(scope="session")
def stats_run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """STATS over all of READINGS in one query: the reference an interrupted run must match."""
    root = tmp_path_factory.mktemp("stats")
    stream = senml_stream(spark, write_senml(root / "input", READINGS))
    output, query = run_to_end(stats(stream), root / "checkpoint")
    watermark = pd.Timestamp(query.lastProgress["eventTime"]["watermark"]).tz_convert(None)
    return Run(output, root / "checkpoint", watermark)
