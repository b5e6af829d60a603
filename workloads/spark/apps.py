"""The RIoTBench ETL, STATS and PRED dataflows as Spark Structured Streaming transformations.

Each app maps a streaming DataFrame with a `payload` column (SenML text or bytes) and, when the
source has them, `topic` and `received` (the receive time, as the MQTT source names it) to a
streaming DataFrame. Rows keep `event_time` (the reading's SenML time) and `ingest_time` (the
source's `received`, else the start of the micro-batch), so a sink can measure end-to-end
latency.

Tasks map to Spark as follows: parsing, filters, annotation, SenML output, window averages and
distinct counts are built-in SQL; model scoring is a pandas UDF; the tasks that keep per-sensor
history run per sensor with the sensor's task snapshot (JSON, the tasks' `get_state`) as its
state: interpolation and error estimate as the pure-Python tasks of `workloads.riot.tasks` in
`transformWithState` keyed by sensor, the Kalman filter and sliding regression as their numpy
equivalent (`workloads.spark.smoothing`, the same numbers) in `transformWithStateInPandas`
keyed by a bucket of sensors. That state, one snapshot per sensor, can seed a new query through
`initial_state` (see `workloads.spark.state`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Mapping
from functools import reduce
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    NumericType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from workloads.riot.datasets import CITY, DatasetSpec, city_sensor_metadata
from workloads.riot.models import load_model
from workloads.riot.senml import Reading, Value
from workloads.riot.tasks.statistics import Interpolation
from workloads.spark.smoothing import FieldForecast, KalmanSettings, smooth_and_forecast

SENSOR, TIME, EVENT_TIME, INGEST_TIME = "sensor", "time", "event_time", "ingest_time"
TOPIC = "topic"
# The input's receive time: the MQTT source's column (`workloads.spark.mqtt_source.SCHEMA`).
RECEIVED = "received"
# The one state variable of every app's transformWithState: a sensor's task snapshot.
STATE_VAR = "snapshot"
STATE_SCHEMA = StructType([StructField(STATE_VAR, StringType())])
# STATS keeps its sensors' snapshots by bucket (`sensor_bucket`): one state variable per
# bucket, a JSON object of sensor -> snapshot. `workloads.spark.state.read_state` reads it
# back as one row per sensor.
BUCKET = "bucket"
BUCKET_STATE_VAR = "snapshots"
BUCKET_STATE_SCHEMA = StructType([StructField(BUCKET_STATE_VAR, StringType())])
STATE_BUCKETS = 8
# STATS output: one statistic of one field of one sensor per row.
STATS_COLUMNS = [SENSOR, "field", "statistic", TIME, "value", EVENT_TIME, INGEST_TIME]
STATS_SCHEMA = StructType([StructField(name, kind) for name, kind in zip(STATS_COLUMNS, (
    StringType(), StringType(), StringType(), DoubleType(), DoubleType(), TimestampType(),
    TimestampType()), strict=True)])

_RECORD = StructType([StructField(name, kind) for name, kind in (
    ("bn", StringType()), ("bt", DoubleType()), ("bu", StringType()), ("bv", DoubleType()),
    ("n", StringType()), ("u", StringType()), ("v", DoubleType()), ("t", DoubleType()))])
_PACK = ArrayType(_RECORD)


# Parse, filter, annotate, encode: built-in SQL ------------------------------------------------


def parse_senml(stream: DataFrame, spec: DatasetSpec = CITY) -> DataFrame:
    """SenML packs to one row per (sensor, time) with a column per numeric field of `spec`
    (RIoTBench SML, a flat map).

    Packs are resolved as `workloads.riot.senml.decode_senml` does (RFC 8428 base fields, "/"
    names without a base name, the last record of a field winning); text and boolean values
    read as missing. Payloads that are not SenML are dropped.

    Output: sensor, time (epoch s), event_time, ingest_time, [topic], then the value columns.
    """
    kept = [TOPIC] if TOPIC in stream.columns else []
    received = F.col(RECEIVED) if RECEIVED in stream.columns else F.current_timestamp()
    # One select per step: a column that a later step's lambdas read is computed once per row,
    # where one nested expression would recompute it inside every lambda call.
    packs = stream.select(*kept, received.cast("timestamp").alias(INGEST_TIME), F.aggregate(
        F.from_json(F.col("payload").cast("string"), _PACK), F.array().cast(_PACK),
        _with_bases).alias("pack"))
    resolved = packs.select(*kept, INGEST_TIME,
                            F.filter(F.transform("pack", _resolve), lambda r: r["keep"])
                            .alias("records"))
    records = F.col("records")

    def reading(key: Column) -> Column:
        def take(values: Column, r: Column) -> Column:
            mine = (r[SENSOR] == key[SENSOR]) & (r[TIME] == key[TIME])
            return F.struct(*(F.when(mine & (r["field"] == c), r["value"]).otherwise(values[c])
                              .alias(c) for c in spec.value_columns))

        nothing = F.struct(*(F.lit(None).cast("double").alias(c) for c in spec.value_columns))
        return F.struct(key[SENSOR].alias(SENSOR), key[TIME].alias(TIME),
                        F.aggregate(records, nothing, take).alias("values"))

    keys = F.array_distinct(F.transform(records, lambda r: F.struct(r[SENSOR], r[TIME])))
    readings = resolved.select(*kept, INGEST_TIME, F.explode(F.transform(keys, reading)).alias("r"))
    return readings.select(F.col("r." + SENSOR), F.col("r." + TIME),
                           F.timestamp_seconds(F.col("r." + TIME)).alias(EVENT_TIME),
                           INGEST_TIME, *kept, "r.values.*")


def _with_bases(done: Column, record: Column) -> Column:
    """`done` plus `record` with the base fields in force at it: its own, else the last ones
    set before it (RFC 8428, section 4.6)."""
    before = F.try_element_at(done, F.lit(-1))
    return F.concat(done, F.array(F.struct(*(
        (F.coalesce(record[f.name], before[f.name]) if f.name.startswith("b") else record[f.name])
        .alias(f.name) for f in _RECORD.fields))))


def _resolve(record: Column) -> Column:
    """A record with its base fields in force as (sensor, field, value, time, keep)."""
    base_name = F.coalesce(record["bn"], F.lit(""))
    name = F.coalesce(record["n"], F.lit(""))
    unit = F.nullif(F.coalesce(record["u"], record["bu"]), F.lit(""))
    # Without a base name, "sensor/field" splits at its last "/".
    prefix = F.regexp_extract(name, r"^(.*)/[^/]*$", 1)
    split = prefix != F.lit("")
    sensor = (F.when(base_name.endswith("/") | base_name.endswith(":"),
                     F.left(base_name, F.length(base_name) - 1))
              .when(base_name != "", base_name).when(split, prefix).otherwise(name))
    field = (F.when(base_name != "", F.coalesce(F.nullif(name, F.lit("")), unit, F.lit("v")))
             .when(split, F.regexp_extract(name, r"/([^/]*)$", 1))
             .otherwise(F.coalesce(unit, F.lit("v"))))
    value = F.coalesce(record["bv"], F.lit(0.0)) + record["v"]
    time = F.coalesce(record["bt"], F.lit(0.0)) + F.coalesce(record["t"], F.lit(0.0))
    # A nameless record without a value only sets base fields; without any name it is
    # unresolvable (decode_senml rejects the pack; here just the record goes).
    keep = (name != "") | ((base_name != "") & record["v"].isNotNull())
    return F.struct(sensor.alias(SENSOR), field.alias("field"), value.alias("value"),
                    time.alias(TIME), keep.alias("keep"))


def in_range(spec: DatasetSpec = CITY) -> Column:
    """True when every value with a valid range lies in it; a missing value passes (RIoTBench
    RGF; filling it in is the interpolation's job)."""
    return reduce(lambda a, b: a & b, (F.col(c).isNull() | F.col(c).between(low, high)
                                       for c, (low, high) in spec.ranges.items()))


def known_sensor(members: Collection[str]) -> Column:
    """The Bloom filter's job (RIoTBench BLF) without false positives: Spark turns a long IN list
    into a hash set shipped with every task."""
    return F.col(SENSOR).isin(sorted(members))


def annotate(readings: DataFrame, metadata: Mapping[str, Mapping[str, Value]]) -> DataFrame:
    """Add each sensor's static fields (RIoTBench ANN) by a broadcast stream-static join."""
    table = pd.DataFrame.from_dict(dict(metadata), orient="index")
    table = table.rename_axis(SENSOR).reset_index()
    lookup = readings.sparkSession.createDataFrame(table)
    return readings.join(F.broadcast(lookup), on=SENSOR, how="left")


def to_senml(readings: DataFrame, fields: list[str], units: Mapping[str, str]) -> Column:
    """A reading as a SenML pack, as `workloads.riot.senml.encode_senml` writes it: base name and
    time in the first record, one record per present value (RIoTBench C2S's output)."""
    numeric = {f.name for f in readings.schema.fields if isinstance(f.dataType, NumericType)}
    records = F.array(*(F.struct(
        F.lit(name).alias("n"), F.lit(units.get(name)).cast("string").alias("u"),
        (F.col(name).cast("double") if name in numeric else F.lit(None).cast("double")).alias("v"),
        (F.lit(None) if name in numeric else F.col(name)).cast("string").alias("vs"))
        for name in fields))
    present = F.filter(records, lambda r: r["v"].isNotNull() | r["vs"].isNotNull())
    base = F.concat(F.col(SENSOR), F.lit("/"))

    def with_base(record: Column, i: Column) -> Column:
        first = i == 0
        return F.struct(F.when(first, base).alias("bn"), F.when(first, F.col(TIME)).alias("bt"),
                        record["n"], record["u"], record["v"], record["vs"])

    return F.to_json(F.transform(present, with_base))


# Per-sensor Python state: the pure-Python tasks, restored from and saved to a snapshot -------


class _SnapshotProcessor(StatefulProcessor):
    """Per key: restore the tasks from the key's snapshot, run the key's new rows through them in
    time order, save the snapshot. Subclasses implement `run`."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState(STATE_VAR, STATE_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        batch = sorted(rows, key=itemgetter(TIME))  # stable: a tie keeps its arrival order
        saved = json.loads(self.state.get()[0]) if self.state.exists() else None
        output, snapshot = self.run(key[0], batch, saved)
        self.state.update((json.dumps(snapshot, separators=(",", ":")),))
        return iter(output)

    def handleInitialState(self, key: Any, initialState: Row, timerValues: Any) -> None:
        self.state.update((initialState[STATE_VAR],))

    def run(self, sensor: str, rows: list[Row],
            saved: dict[str, Any] | None) -> tuple[list[Row], dict[str, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _readings(rows: list[Row], sensor: str, fields: tuple[str, ...]) -> list[Reading]:
    return [Reading(row[TIME], sensor, {f: row[f] for f in fields}) for row in rows]


class _Interpolate(_SnapshotProcessor):
    """RIoTBench INP: a missing value becomes the sensor's last value of that field."""

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.fields = fields

    def run(self, sensor: str, rows: list[Row],
            saved: dict[str, Any] | None) -> tuple[list[Row], dict[str, Any]]:
        task = Interpolation(fields=self.fields)
        if saved is not None:
            task.set_state(saved)
        filled = [Row(**(row.asDict() | task.process(reading)[0].values))
                  for row, reading in zip(rows, _readings(rows, sensor, self.fields), strict=True)]
        return filled, task.get_state()


class _KalmanRegression(StatefulProcessor):
    """RIoTBench KAL then SLR, per sensor and field: emit each smoothed value, and once a
    field's window is full, its `horizon` predicted values.

    Runs in `transformWithStateInPandas` on `workloads.spark.smoothing`, keyed by a bucket of
    sensors (`sensor_bucket`): a bucket's batch comes as DataFrames and leaves as one, and each
    sensor's numbers are computed per field over arrays. The bucket's state is one JSON object
    of sensor -> the sensor's task snapshot, read once and written once per batch.

    Why buckets: Spark runs a Python stateful operator's user code once per key and batch, and
    each key costs a DataFrame in and out and round trips to the JVM's state server, whatever
    the key holds. On two cores, batches of 2,000 messages from 1,000 sensors spent about 9.9 s
    each in this operator keyed by sensor, 1.1 s keyed by 8 buckets (with 40 sensors and 250
    messages: 550 ms by sensor, 340 ms by bucket). The snapshots stay per sensor: `read_state`
    returns one row per sensor, and a new query's `initial_state` may hold any subset of them.
    """

    def __init__(self, fields: tuple[str, ...], kalman: Mapping[str, float], window: int,
                 horizon: int) -> None:
        self.fields, self.window, self.horizon = fields, window, horizon
        self.settings = KalmanSettings(**kalman)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState(BUCKET_STATE_VAR, BUCKET_STATE_SCHEMA)

    def _snapshots(self) -> dict[str, Any]:
        # get() alone, not exists() first: each is a round trip to the JVM's state server.
        stored = self.state.get()
        return json.loads(stored[0]) if stored is not None else {}

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        chunks = list(rows)
        batch = chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)
        # The bucket's rows as arrays, by sensor then time. Stable, as the Python tasks' sort:
        # a tie keeps its arrival order. No pandas per sensor: a DataFrame, a groupby group or
        # an iloc per sensor cost more than the sensor's numbers.
        codes, sensors = pd.factorize(batch[SENSOR])
        times = batch[TIME].to_numpy(dtype=float)
        order = np.lexsort((times, codes))
        codes, times = codes[order], times[order]
        values = batch[list(self.fields)].to_numpy(dtype=float, na_value=np.nan)[order]
        starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
        snapshots = self._snapshots()
        forecasts = []
        for first, last in zip(starts.tolist(), [*starts[1:].tolist(), len(codes)], strict=True):
            sensor = sensors[codes[first]]
            fields, snapshots[sensor] = smooth_and_forecast(
                sensor, times[first:last], values[first:last], self.fields,
                snapshots.get(sensor), self.settings, self.window, self.horizon)
            forecasts.append((first, fields))
        self.state.update((json.dumps(snapshots, separators=(",", ":")),))
        if forecasts:
            yield _stats_frame(self.fields, forecasts, np.asarray(sensors, dtype=object)[codes],
                               times, batch[EVENT_TIME].to_numpy()[order],
                               batch[INGEST_TIME].to_numpy()[order], self.horizon)

    def handleInitialState(self, key: Any, initialState: pd.DataFrame,
                           timerValues: Any) -> None:
        snapshots = self._snapshots()
        for sensor, snapshot in zip(initialState[SENSOR], initialState[STATE_VAR], strict=True):
            snapshots[sensor] = json.loads(snapshot)
        self.state.update((json.dumps(snapshots, separators=(",", ":")),))

    def close(self) -> None:
        pass


def sensor_bucket(buckets: int = STATE_BUCKETS) -> Column:
    """The state bucket of a row's sensor: a hash of its name modulo `buckets`."""
    return F.pmod(F.xxhash64(SENSOR), F.lit(buckets)).cast("int")


_PER_READING = np.array(["kalman", "predicted"], dtype=object)


def _stats_frame(names: tuple[str, ...], forecasts: list[tuple[int, list[FieldForecast]]],
                 sensors: np.ndarray, times: np.ndarray, event_times: np.ndarray,
                 ingest_times: np.ndarray, horizon: int) -> pd.DataFrame:
    """STATS rows of a batch: per sensor and field, a "kalman" row per value, then `horizon`
    "predicted" rows per full regression window, each with its reading's event and ingest
    time. `forecasts` holds each sensor's first row in the batch's arrays (`sensors`, `times`,
    ...) and its fields' output."""
    field, statistic, counts, time, value, source = [], [], [], [], [], []
    for first, fields in forecasts:
        for j, out in enumerate(fields):
            rows = first + out.rows
            predicted_from = np.repeat(rows[out.predicting], horizon)
            field += (j, j)
            statistic += (0, 1)
            counts += (len(rows), len(predicted_from))
            time += (times[rows], out.times.ravel())
            value += (out.smoothed, out.values.ravel())
            source += (rows, predicted_from)
    rows = np.concatenate(source)
    return pd.DataFrame({SENSOR: sensors[rows],
                         "field": np.repeat(np.array(names, dtype=object)[field], counts),
                         "statistic": np.repeat(_PER_READING[statistic], counts),
                         TIME: np.concatenate(time), "value": np.concatenate(value),
                         EVENT_TIME: event_times[rows], INGEST_TIME: ingest_times[rows]})


class _ErrorEstimate(_SnapshotProcessor):
    """RIoTBench PRED's error estimate: the sensor's running mean of |predicted - actual|."""

    def __init__(self, target: str, predicted: str) -> None:
        self.target, self.predicted = target, predicted

    def run(self, sensor: str, rows: list[Row],
            saved: dict[str, Any] | None) -> tuple[list[Row], dict[str, Any]]:
        count, total = (saved["count"], saved["total"]) if saved else (0, 0.0)
        output = []
        for row in rows:
            predicted, actual = row[self.predicted], row[self.target]
            error = None if predicted is None or actual is None else abs(predicted - actual)
            if error is not None:
                count, total = count + 1, total + error
            output.append(Row(**row.asDict(), abs_error=error,
                              mean_abs_error=total / count if count else None))
        return output, {"count": count, "total": total}


def _stateful(readings: DataFrame, processor: StatefulProcessor, schema: StructType,
              initial_state: DataFrame | None, buckets: int = STATE_BUCKETS) -> DataFrame:
    # A _SnapshotProcessor (one output row or so per input row) runs per sensor in
    # transformWithState (Row): ...InPandas builds a pandas DataFrame per key and batch, which
    # made a batch of 1,000 sensors 3-4 times slower. The other processors work on arrays,
    # per bucket of sensors, in ...InPandas. `initial_state` has one row per sensor either way.
    if isinstance(processor, _SnapshotProcessor):
        initial = initial_state.groupBy(SENSOR) if initial_state is not None else None
        return readings.groupBy(SENSOR).transformWithState(
            processor, schema, "Append", "None", initialState=initial)
    bucket = sensor_bucket(buckets)
    initial = (initial_state.withColumn(BUCKET, bucket).groupBy(BUCKET)
               if initial_state is not None else None)
    return readings.withColumn(BUCKET, bucket).groupBy(BUCKET).transformWithStateInPandas(
        processor, schema, "Append", "None", initialState=initial)


# The applications -----------------------------------------------------------------------------


def etl(stream: DataFrame, spec: DatasetSpec = CITY,
        metadata: Mapping[str, Mapping[str, Value]] | None = None,
        initial_state: DataFrame | None = None) -> DataFrame:
    """RIoTBench ETL: SenML parse -> range filter -> Bloom filter -> interpolation -> join ->
    annotate -> CSV-to-SenML, one output row per valid reading.

    - parse: `from_json` and array functions, one row per reading (the join of a reading's
      fields is implicit: they stay one row)
    - range filter, Bloom filter: a `filter` on `spec.ranges` and on membership in `metadata`'s
      sensors (default: the 14 CITY sensors)
    - interpolation: per-sensor Python state (`transformWithState`)
    - annotate: a broadcast join with `metadata`; CSV-to-SenML: `to_json`

    Output: sensor, time, event_time, ingest_time, [topic], payload (SenML text).
    """
    metadata = city_sensor_metadata() if metadata is None else metadata
    readings = parse_senml(stream, spec)
    clean = readings.filter(in_range(spec) & known_sensor(metadata))
    filled = _stateful(clean, _Interpolate(spec.value_columns), clean.schema, initial_state)
    annotated = annotate(filled, metadata)
    fields = [*spec.value_columns, *(c for c in annotated.columns if c not in readings.columns)]
    kept = [c for c in (SENSOR, TIME, EVENT_TIME, INGEST_TIME, TOPIC) if c in readings.columns]
    return annotated.select(*kept, to_senml(annotated, fields, spec.units).alias("payload"))


def stats(stream: DataFrame, spec: DatasetSpec = CITY, members: Collection[str] | None = None,
          window: str = "10 minutes", slide: str = "1 minute", watermark: str = "1 minute",
          kalman: Mapping[str, float] | None = None, regression_window: int = 10,
          horizon: int = 10, initial_state: DataFrame | None = None,
          state_buckets: int = STATE_BUCKETS) -> DataFrame:
    """RIoTBench STATS: SenML parse -> range (and optionally Bloom) filter -> flat map to one
    stream per field -> three concurrent analytics per sensor and field:

    - sliding average and approximate distinct count: a built-in aggregation over sliding event
      time windows (`window`, every `slide`; RIoTBench's 10-event window is 10 minutes of CITY),
      closed by a `watermark` delay, with `avg` and `approx_count_distinct`
    - Kalman filter then sliding linear regression over `regression_window` smoothed values,
      predicting `horizon` values ahead: per-sensor Python state (`transformWithStateInPandas`,
      numpy over each sensor's batch), kept in `state_buckets` keys of sensors

    Output, one row per statistic: sensor, field, statistic ("average", "distinct_count" at the
    window's end time; "kalman", "predicted" at the reading's or the predicted time), time
    (epoch s), value, event_time and ingest_time (the latest of the window's inputs, or the
    reading's).
    """
    readings = parse_senml(stream, spec)
    kept = in_range(spec) if members is None else in_range(spec) & known_sensor(members)
    # Each branch reads and parses the source: Spark plans a streaming source once per branch
    # of a union and does not share it (numInputRows counts each message twice), and a common
    # repartition by sensor is replaced by the stateful operators' own exchanges rather than
    # reused. Only what the transformWithState needs goes into its shuffle.
    clean = readings.filter(kept)

    per_field = F.explode(F.array(*(F.struct(F.lit(c).alias("field"), F.col(c).alias("value"))
                                    for c in spec.value_columns)))
    observations = (clean.select(SENSOR, EVENT_TIME, INGEST_TIME, per_field.alias("o"))
                    .select(SENSOR, EVENT_TIME, INGEST_TIME, "o.*")
                    .filter(F.col("value").isNotNull()))
    windows = (observations.withWatermark(EVENT_TIME, watermark)
               .groupBy(F.window(EVENT_TIME, window, slide).alias("w"), SENSOR, "field")
               .agg(F.avg("value").alias("average"),
                    F.approx_count_distinct("value").cast("double").alias("distinct_count"),
                    F.max(EVENT_TIME).alias(EVENT_TIME), F.max(INGEST_TIME).alias(INGEST_TIME)))
    statistics = F.explode(F.array(*(F.struct(F.lit(s).alias("statistic"), F.col(s).alias("value"))
                                     for s in ("average", "distinct_count"))))
    averages = (windows.select("*", statistics.alias("s"))
                .select(SENSOR, "field", "s.statistic", F.col("w.end").cast("double").alias(TIME),
                        "s.value", EVENT_TIME, INGEST_TIME))

    processor = _KalmanRegression(spec.value_columns, kalman or {}, regression_window, horizon)
    inputs = clean.select(SENSOR, TIME, EVENT_TIME, INGEST_TIME, *spec.value_columns)
    smoothed = _stateful(inputs, processor, STATS_SCHEMA, initial_state, state_buckets)
    return averages.unionByName(smoothed)


def pred(stream: DataFrame, models: Mapping[str, str | Path], spec: DatasetSpec = CITY,
         initial_state: DataFrame | None = None) -> DataFrame:
    """RIoTBench PRED: SenML parse -> decision-tree classification and multi-variate linear
    regression (in parallel) -> error estimate.

    - the models are `workloads.riot.models.train_models`'s JSON files (`models` maps
      "decision_tree" and "linear_regression" to them), applied by vectorised pandas UDFs that
      give the same answers as `predict_tree` and `predict_linear` (None when a feature a
      model needs is missing)
    - error estimate: each sensor's running mean of |predicted - actual| in per-sensor Python
      state (`transformWithState`)

    Output: the reading's columns, then the class (the tree's label, e.g. air_quality),
    `<target>_predicted`, abs_error and mean_abs_error.
    """
    tree = load_model(models["decision_tree"], "decision_tree")
    linear = load_model(models["linear_regression"], "linear_regression")
    predicted = f"{linear['target']}_predicted"
    readings = parse_senml(stream, spec)
    scored = readings.select(
        "*", _tree_udf(tree["tree"])(F.struct(*tree["features"])).alias(tree["label"]),
        _linear_udf(linear)(F.struct(*linear["features"])).alias(predicted))
    schema = StructType([*scored.schema.fields, StructField("abs_error", DoubleType()),
                         StructField("mean_abs_error", DoubleType())])
    return _stateful(scored, _ErrorEstimate(linear["target"], predicted), schema, initial_state)


def _tree_udf(tree: Mapping[str, Any]) -> Callable[[Column], Column]:
    @pandas_udf(StringType())
    def classify(values: pd.DataFrame) -> pd.Series:
        labels = np.full(len(values), None, dtype=object)

        def walk(node: Mapping[str, Any], rows: np.ndarray) -> None:
            if "label" in node:
                labels[rows] = node["label"]
                return
            x = values[node["feature"]].to_numpy(dtype=float)[rows]
            # A missing feature on a row's path leaves it unclassified: both tests are False.
            walk(node["left"], rows[x <= node["threshold"]])
            walk(node["right"], rows[x > node["threshold"]])

        walk(tree, np.arange(len(values)))
        return pd.Series(labels, index=values.index)

    return classify


def _linear_udf(model: Mapping[str, Any]) -> Callable[[Column], Column]:
    @pandas_udf(DoubleType())
    def regress(values: pd.DataFrame) -> pd.Series:
        total = pd.Series(model["intercept"], index=values.index, dtype=float)
        # Term by term in the model's order, as predict_linear adds: bit-identical results;
        # a missing feature makes NaN, which Arrow hands Spark as null.
        for feature, coefficient in zip(model["features"], model["coefficients"], strict=True):
            total = total + coefficient * values[feature].astype(float)
        return total

    return regress
