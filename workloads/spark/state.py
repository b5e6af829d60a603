"""Moving a stateful query: its per-sensor state read from a stopped query's checkpoint, or the
checkpoint copied whole."""

from __future__ import annotations

import shutil
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, StringType

from workloads.spark.apps import BUCKET_STATE_VAR, SENSOR, STATE_VAR

# The operator names the apps' per-sensor state records in the checkpoint's state metadata:
# transformWithState (ETL, PRED: a snapshot per sensor key) and transformWithStateInPandas
# (STATS: the snapshots of a bucket of sensors per key).
TRANSFORM_WITH_STATE = "transformWithStateInPySparkExec"
TRANSFORM_WITH_STATE_IN_PANDAS = "transformWithStateInPandasExec"
PYTHON_STATE_OPERATORS = (TRANSFORM_WITH_STATE, TRANSFORM_WITH_STATE_IN_PANDAS)


def stateful_operators(spark: SparkSession, checkpoint: str | Path) -> dict[int, str]:
    """The checkpoint's stateful operators: operator id -> operator name."""
    metadata = spark.read.format("state-metadata").load(str(checkpoint))
    return {row.operatorId: row.operatorName
            for row in metadata.select("operatorId", "operatorName").collect()}


def read_state(spark: SparkSession, checkpoint: str | Path, operator_id: int | None = None
               ) -> DataFrame:
    """The sensors' task snapshots in a stopped query's transformWithState(InPandas) operator
    (the only one, unless `operator_id` says which), as of its last committed batch: one row
    per sensor, columns `sensor` and `snapshot` (JSON).

    The result, or any subset of its sensors, can seed a new query as `initial_state`, in this
    Spark process or another one that sees the checkpoint, with any checkpoint location and
    shuffle partitioning. Only this state moves: built-in aggregations (STATS' windows) start
    empty in the new query. It is read lazily: keep the checkpoint until the new query has run
    its first batch, or materialise the state (e.g. write it as Parquet) first.
    """
    operators = stateful_operators(spark, checkpoint)
    if operator_id is None:
        matches = [i for i, name in operators.items() if name in PYTHON_STATE_OPERATORS]
        if len(matches) != 1:
            raise ValueError(f"{checkpoint}: {len(matches)} transformWithState operators "
                             f"among {operators}; pass operator_id")
        operator_id = matches[0]
    bucketed = operators.get(operator_id) == TRANSFORM_WITH_STATE_IN_PANDAS
    state = (spark.read.format("statestore").option("operatorId", operator_id)
             .option("stateVarName", BUCKET_STATE_VAR if bucketed else STATE_VAR)
             .load(str(checkpoint)))
    if not bucketed:
        return state.select("key.*", "value.*")
    # A bucket's snapshots: a JSON object of sensor -> snapshot (an object, read as its text).
    snapshots = F.from_json(F.col("value." + BUCKET_STATE_VAR), MapType(StringType(), StringType()))
    return state.select(F.explode(snapshots).alias(SENSOR, STATE_VAR))


def copy_checkpoint(source: str | Path, target: str | Path) -> Path:
    """Copy a stopped query's checkpoint: the same query started on the copy, in any Spark
    process, resumes with all its state (built-in aggregations' too) and source offsets."""
    return Path(shutil.copytree(source, target))
