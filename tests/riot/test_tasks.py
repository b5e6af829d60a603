"""Each RIoTBench task on hand-checkable inputs, and the registry that builds them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.riot.datasets import CITY, city_readings, city_sensor_metadata
from workloads.riot.senml import Reading, decode_senml, to_row
from workloads.riot.tasks import TASKS, make_task

EXPECTED = {  # name: (selectivity, stateful)
    "senml_parse": (1.0, False), "csv_to_senml": (1.0, False), "annotate": (1.0, False),
    "range_filter": (0.99, False), "bloom_filter": (0.99, False),
    "interpolation": (1.0, True), "join": (1.0, True), "kalman_filter": (1.0, True),
    "distinct_count": (1.0, True), "sliding_linear_regression": (10.0, True),
    "decision_tree_classify": (1.0, False), "linear_regression_predict": (1.0, False),
    "mqtt_publish": (1.0, False),
}


def run(task, messages) -> list:
    return [out for message in messages for out in task.process(message)]


def test_registry_holds_every_task_with_its_declared_gain() -> None:
    assert {name: (cls.selectivity, cls.stateful) for name, cls in TASKS.items()} == EXPECTED


def test_instances_declare_gains_that_depend_on_parameters() -> None:
    four = ["temperature", "humidity", "light", "dust"]
    assert make_task("join", fields=four).selectivity == 0.25
    assert make_task("sliding_linear_regression", field="dust", horizon=3).selectivity == 3.0
    assert make_task("range_filter", selectivity=0.9).selectivity == 0.9


def test_make_task_names_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="unknown task 'average'; known tasks: annotate, "):
        make_task("average")
    with pytest.raises(ValueError, match="task 'kalman_filter' has no parameter 'noise'; "
                                         "its parameters: fields, process_noise"):
        make_task("kalman_filter", noise=1.0)
    with pytest.raises(ValueError, match="task 'join': missing a required argument: 'fields'"):
        make_task("join")


def test_stateless_tasks_snapshot_as_empty_json() -> None:
    task = make_task("range_filter")
    assert task.snapshot() == b"{}"
    task.restore(b"{}")
    with pytest.raises(ValueError, match="stateless"):
        task.restore(b'{"x": 1}')


def test_riot_imports_only_the_standard_library_and_numpy() -> None:
    # A fresh interpreter: what importing the package pulls in, beyond what Python started with.
    code = ("import sys; before = set(sys.modules); "
            "import workloads.riot.replay, workloads.riot.models, workloads.riot.tasks; "
            "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
            "print(' '.join(sorted(new - set(sys.stdlib_module_names))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert set(result.stdout.split()) == {"numpy", "workloads"}


# Parse ----------------------------------------------------------------------------------------


def test_senml_parse_turns_text_into_readings() -> None:
    pack = '[{"bn":"geneva-02/","bt":1421280000,"n":"temperature","u":"Cel","v":3.5}]'
    assert make_task("senml_parse").process(pack.encode()) == [
        Reading(1421280000.0, "geneva-02", {"temperature": 3.5})]
    with pytest.raises(TypeError, match="takes SenML text"):
        make_task("senml_parse").process(Reading(0.0, "a"))


def test_csv_to_senml_converts_a_city_line() -> None:
    task = make_task("csv_to_senml")
    (out,) = task.process("1421280000,boston-01,21.5,60,,40.2,30.1")
    assert out == ('[{"bn":"boston-01/","bt":1421280000.0,"n":"temperature","v":21.5,'
                   '"u":"Cel"},{"n":"humidity","v":60.0,"u":"%RH"},{"n":"dust","v":40.2},'
                   '{"n":"airquality_raw","v":30.1}]')
    with pytest.raises(ValueError, match="2 cells, the layout has 7 columns"):
        task.process("1421280000,boston-01")


def test_annotate_adds_lookup_fields_without_overwriting_observations() -> None:
    task = make_task("annotate", lookup=city_sensor_metadata(14))
    (out,) = task.process(Reading(5.0, "geneva-02", {"temperature": 3.5, "city": "Genf"}))
    assert out.values == {"temperature": 3.5, "city": "Genf", "latitude": 46.2,
                          "longitude": 6.14}
    stranger = Reading(5.0, "atlantis-99", {"temperature": 3.5})
    assert task.process(stranger) == [stranger]
    by_field = make_task("annotate", lookup={"CRD": {"paid_by": "card"}}, key="payment_type")
    assert by_field.process(Reading(1.0, "m", {"payment_type": "CRD"}))[0].values == {
        "payment_type": "CRD", "paid_by": "card"}


# Filter ---------------------------------------------------------------------------------------


def test_range_filter_keeps_in_range_and_missing_values() -> None:
    task = make_task("range_filter", ranges={"temperature": [-30, 50], "humidity": [0, 100]})
    readings = [Reading(0.0, "a", {"temperature": 20.0, "humidity": 50.0}),
                Reading(1.0, "a", {"temperature": 60.0, "humidity": 50.0}),
                Reading(2.0, "a", {"temperature": 20.0, "humidity": -5.0}),
                Reading(3.0, "a", {"temperature": None, "humidity": 100.0}),
                Reading(4.0, "a", {"temperature": -30.0})]
    assert run(task, readings) == [readings[0], readings[3], readings[4]]


def test_range_filter_drops_exactly_the_injected_outliers() -> None:
    clean = city_readings(rows=5000, outlier_rate=0.0, missing_rate=0.0)
    dirty = city_readings(rows=5000, outlier_rate=0.02, missing_rate=0.0)
    kept = run(make_task("range_filter"), dirty)
    injected = [d for c, d in zip(clean, dirty, strict=True) if c != d]
    assert len(kept) == 5000 - len(injected)
    assert kept == [d for c, d in zip(clean, dirty, strict=True) if c == d]


def test_bloom_filter_passes_members_and_few_strangers() -> None:
    members = [f"city-{i}" for i in range(1000)]
    task = make_task("bloom_filter", members=members, fp_rate=0.01)
    assert len(run(task, [Reading(0.0, m) for m in members])) == 1000
    strangers = run(task, [Reading(0.0, f"rogue-{i}") for i in range(10000)])
    assert len(strangers) <= 200  # 1 % expected
    by_field = make_task("bloom_filter", members=["CRD"], field="payment_type")
    assert len(run(by_field, [Reading(0.0, "m", {"payment_type": "CRD"}),
                              Reading(0.0, "m", {"payment_type": "CSH"}),
                              Reading(0.0, "m", {})])) == 1


# Statistics -----------------------------------------------------------------------------------


def test_interpolation_fills_from_the_last_value_of_the_same_sensor() -> None:
    task = make_task("interpolation", fields=["temperature", "humidity"])
    outputs = run(task, [Reading(0.0, "a", {"temperature": None, "humidity": 40.0}),
                         Reading(1.0, "a", {"temperature": 20.0, "humidity": None}),
                         Reading(2.0, "b", {"temperature": None}),
                         Reading(3.0, "a", {"temperature": None})])
    assert [o.values for o in outputs] == [
        {"temperature": None, "humidity": 40.0},
        {"temperature": 20.0, "humidity": 40.0},
        {"temperature": None},  # sensor b has no history
        {"temperature": 20.0, "humidity": 40.0},  # absent counts as missing for named fields
    ]


def test_join_merges_a_sensors_fields_within_the_tolerance() -> None:
    task = make_task("join", fields=["temperature", "humidity"], tolerance=1.0)
    outputs = run(task, [Reading(0.0, "a", {"temperature": 20.0}),
                         Reading(0.2, "b", {"humidity": 70.0}),
                         Reading(0.5, "a", {"humidity": 40.0}),
                         Reading(10.0, "a", {"temperature": 21.0}),
                         Reading(12.0, "a", {"humidity": 41.0}),  # too late: starts anew
                         Reading(12.4, "a", {"temperature": 22.0})])
    assert outputs == [Reading(0.0, "a", {"temperature": 20.0, "humidity": 40.0}),
                       Reading(12.0, "a", {"humidity": 41.0, "temperature": 22.0})]


def test_kalman_filter_with_no_process_noise_is_the_running_mean() -> None:
    task = make_task("kalman_filter", fields=["t"], process_noise=0.0, sensor_noise=1.0,
                     estimated_error=1.0)
    outputs = run(task, [Reading(float(i), "a", {"t": z, "h": 1.0})
                         for i, z in enumerate([10.0, 20.0, 30.0, 40.0])])
    assert [o.values["t"] for o in outputs] == pytest.approx([10.0, 15.0, 20.0, 25.0])
    assert all(o.values["h"] == 1.0 for o in outputs)  # not in `fields`


def test_kalman_filter_default_update_by_hand() -> None:
    task = make_task("kalman_filter")  # q = 0.1, r = 0.1, p0 = 1
    outputs = run(task, [Reading(0.0, "a", {"t": 10.0}), Reading(1.0, "a", {"t": 12.0}),
                         Reading(1.0, "b", {"t": 50.0})])
    # p = 1.1, k = 1.1 / 1.2, x = 10 + k * 2 = 11.8333
    assert [o.values["t"] for o in outputs] == pytest.approx([10.0, 11.833333, 50.0])


def test_distinct_count_grows_with_new_values_only() -> None:
    task = make_task("distinct_count", field="payment_type")
    outputs = run(task, [Reading(float(i), "m", {"payment_type": p})
                         for i, p in enumerate(["CRD", "CSH", "CRD", "NOC"])])
    assert [o.values for o in outputs] == [{"payment_type_distinct": n} for n in (1, 2, 2, 3)]
    sensors = make_task("distinct_count")
    last = run(sensors, [Reading(0.0, f"taxi-{i % 10000}") for i in range(20000)])[-1]
    assert last.values["sensor_distinct"] == pytest.approx(10000, rel=3 * 0.0325)


# Predict --------------------------------------------------------------------------------------


def test_sliding_regression_extends_a_line() -> None:
    task = make_task("sliding_linear_regression", field="dust", window=4, horizon=2)
    readings = [Reading(1000.0 + 10 * i, "a", {"dust": 2.0 * 10 * i + 1.0}) for i in range(5)]
    outputs = [task.process(r) for r in readings]
    assert outputs[:3] == [[], [], []]
    assert outputs[3] == [Reading(1040.0, "a", {"dust_predicted": pytest.approx(81.0)}),
                          Reading(1050.0, "a", {"dust_predicted": pytest.approx(101.0)})]
    assert [o.timestamp for o in outputs[4]] == [1050.0, 1060.0]
    assert task.process(Reading(1050.0, "b", {"dust": None})) == []


def test_decision_tree_classify_walks_a_stored_tree(tmp_path: Path) -> None:
    model = {"kind": "decision_tree", "label": "air_quality", "features": ["dust"],
             "tree": {"feature": "dust", "threshold": 50.0, "left": {"label": "good"},
                      "right": {"label": "poor"}}}
    path = tmp_path / "tree.json"
    path.write_text(json.dumps(model))
    task = make_task("decision_tree_classify", model_path=str(path))
    outputs = run(task, [Reading(0.0, "a", {"dust": 50.0}), Reading(0.0, "a", {"dust": 50.1}),
                         Reading(0.0, "a", {"dust": None})])
    assert [o.values["air_quality"] for o in outputs] == ["good", "poor", None]


def test_linear_regression_predict_applies_the_stored_model(tmp_path: Path) -> None:
    model = {"kind": "linear_regression", "target": "fare_amount", "intercept": 2.5,
             "features": ["trip_distance", "trip_time_in_secs"], "coefficients": [2.0, 0.005]}
    path = tmp_path / "mlr.json"
    path.write_text(json.dumps(model))
    task = make_task("linear_regression_predict", model_path=path)
    (out,) = task.process(Reading(0.0, "m", {"trip_distance": 3.0, "trip_time_in_secs": 600.0}))
    assert out.values["fare_amount_predicted"] == pytest.approx(2.5 + 6.0 + 3.0)
    with pytest.raises(ValueError, match="a 'linear_regression' model, expected 'decision_tree'"):
        make_task("decision_tree_classify", model_path=path)


def test_trained_city_models_classify_and_predict_fresh_data(city_models) -> None:
    classify = make_task("decision_tree_classify", model_path=city_models["decision_tree"])
    predict = make_task("linear_regression_predict",
                        model_path=city_models["linear_regression"])
    fresh = city_readings(rows=2000, seed=9, outlier_rate=0.0, missing_rate=0.0)
    labelled = run(predict, run(classify, fresh))
    truth = ["good" if r.values["airquality_raw"] < 25 else
             "moderate" if r.values["airquality_raw"] < 35 else "poor" for r in fresh]
    accuracy = sum(o.values["air_quality"] == t for o, t in zip(labelled, truth, strict=True))
    assert accuracy / len(fresh) > 0.85
    errors = [abs(o.values["airquality_raw_predicted"] - o.values["airquality_raw"])
              for o in labelled]
    assert sum(errors) / len(errors) < 1.5  # the generator's noise has sd 1.5, mean |e| 1.2


# IO -------------------------------------------------------------------------------------------


def test_mqtt_publish_hands_senml_to_the_callable_and_passes_the_message_on() -> None:
    sent: list[tuple[str, bytes]] = []
    task = make_task("mqtt_publish", publish=lambda topic, payload: sent.append((topic, payload)),
                     topic="city/stats")
    reading = Reading(7.0, "rio-03", {"temperature": 27.0})
    assert task.process(reading) == [reading]
    assert task.process("raw text") == ["raw text"]
    assert sent[0][0] == "city/stats"
    assert decode_senml(sent[0][1]) == [reading]
    assert sent[1] == ("city/stats", b"raw text")


def test_city_pipeline_parse_filter_interpolate_kalman() -> None:
    # The STATS front end on generated CSV lines: outliers dropped, missing values filled.
    readings = city_readings(rows=2000, seed=2)
    injected = sum(c != d for c, d in zip(city_readings(rows=2000, seed=2, outlier_rate=0.0),
                                          readings, strict=True))
    lines = [",".join(to_row(r, CITY.value_columns)) for r in readings]
    tasks = [make_task("csv_to_senml"), make_task("senml_parse"), make_task("range_filter"),
             make_task("interpolation", fields=list(CITY.value_columns)),
             make_task("kalman_filter")]
    stream: list = lines
    for task in tasks:
        stream = run(task, stream)
    assert injected == 14
    assert len(stream) == 2000 - injected
    assert sum(v is None for r in readings for v in r.values.values()) == 23
    # Only a value missing before its sensor sent any stays missing: shanghai-05 starts so.
    incomplete = [r for r in stream if set(r.values) != set(CITY.value_columns)]
    assert [(r.sensor, set(CITY.value_columns) - set(r.values)) for r in incomplete] == [
        ("shanghai-05", {"temperature"})]
    assert all(isinstance(v, float) for r in stream for v in r.values.values())
