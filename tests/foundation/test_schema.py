"""The result schema: every table on every run, and the meaning its checks hold backends to."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.schema import TABLES, SchemaError, conform


def messages(**changes) -> dict:
    """Three rows: two delivered (to cloud-1 over 3 links), one lost on its device link."""
    columns = {
        "id": [1, 2, 3], "stream": ["city"] * 3, "source": ["s-1", "s-2", "s-1"],
        "sink": ["cloud-1", "cloud-1", None], "t_sent": [0.5, 1.0, 1.5],
        "t_received": [0.53, 1.04, math.nan], "latency": [0.03, 0.04, math.nan],
        "hops": [3, 3, 0], "lost": [False, False, True],
    }
    columns.update(changes)
    return columns


def nodes(**changes) -> dict:
    columns = {"t": [1.0, 1.0, 2.0], "node": ["gw-1", "gw-2", "gw-1"], "cpu": [0.25, 0.5, 0.0],
               "memory": [1e7, 2e7, 0.0], "queue": [0, 0, 0], "up": [True, True, False]}
    columns.update(changes)
    return columns


def test_every_table_is_written_empty_where_the_backend_wrote_none() -> None:
    tables = conform({"messages": messages()})
    assert list(tables) == list(TABLES)
    assert tables["messages"].num_rows == 3
    for name in TABLES:
        assert tables[name].schema.equals(TABLES[name]), name
        if name != "messages":
            assert tables[name].num_rows == 0, name


def test_rows_that_keep_the_meaning_pass() -> None:
    tables = conform({"messages": messages(), "nodes": nodes()})
    assert tables["messages"].column("sink").null_count == 1
    assert tables["nodes"].column("up").to_pylist() == [True, True, False]


def test_an_unknown_table_is_refused() -> None:
    with pytest.raises(ValueError, match=r"tables the schema does not know: \['extra'\]"):
        conform({"extra": {}})


NULL = "is null exactly where the message is not delivered"


@pytest.mark.parametrize(("changes", "rule", "row"), [
    # emu once wrote '' for a lost message's sink
    ({"sink": ["cloud-1", "cloud-1", ""]}, f"sink {NULL}", 2),
    ({"sink": [None, "cloud-1", None]}, f"sink {NULL}", 0),
    ({"t_received": [0.53, math.nan, math.nan], "latency": [0.03, math.nan, math.nan]},
     f"t_received {NULL}", 1),
    ({"t_received": [0.53, 1.04, 2.0]}, f"t_received {NULL}",
     2),
    ({"latency": [0.03, 0.04, 0.5]}, f"latency {NULL}", 2),
    ({"latency": [0.03, 0.05, math.nan]},
     "latency is t_received - t_sent for a delivered message", 1),
    ({"t_received": [0.4, 1.04, math.nan], "latency": [-0.1, 0.04, math.nan]},
     "latency is >= 0", 0),
    ({"hops": [3, -1, 0]}, r"hops is >= 0 \(links crossed\)", 1),
    ({"lost": [False, None, True]}, "lost is never null", 1),
    ({"t_sent": [0.5, math.nan, 1.5]}, "t_sent is never null", 1),
])
def test_a_message_table_that_breaks_a_rule_names_it_and_the_first_row(changes, rule,
                                                                       row) -> None:
    with pytest.raises(SchemaError, match=rf"table messages: {rule}; 1 of 3 rows break it, "
                                          rf"the first is row {row}: "):
        conform({"messages": messages(**changes)})


@pytest.mark.parametrize(("changes", "rule"), [
    ({"cpu": [0.25, 0.5, 0.1]}, "cpu is 0 where the node is not up"),
    ({"up": [True, None, False]}, "up is never null"),
    ({"memory": [1e7, -1.0, 0.0]}, "memory is >= 0"),
])
def test_a_nodes_table_that_breaks_a_rule_is_refused(changes, rule) -> None:
    with pytest.raises(SchemaError, match=f"table nodes: {rule}; 1 of 3 rows"):
        conform({"nodes": nodes(**changes)})


def test_rounding_of_float_totals_is_no_break() -> None:
    conform({"nodes": nodes(cpu=[0.25, -1e-17, 0.0]),
             "messages": messages(latency=[0.03 + 1e-9, 0.04, math.nan])})


def test_a_simulated_run_keeps_every_rule() -> None:
    """sim's tables pass the checks: the same rules hold both backends."""
    from experiments.model_settings import sim_settings
    from sim.model import simulate
    from tests.foundation.helpers import point

    run_point = point("""
name: tiny
topology:
  name: t
  nodes:
    - {name: s, kind: device, replicas: 4}
    - {name: gw, kind: gateway, replicas: 2}
    - {name: broker-1, kind: broker}
    - {name: cloud-1, kind: cloud_vm}
  links:
    - {from: s-*, to: gw-*, mode: spread, latency: 5ms, loss: 5%}
    - {from: gw-*, to: broker-1, latency: 20ms, loss: 1%}
    - {from: broker-1, to: cloud-1, latency: 1ms}
workload:
  name: w
  streams: [{name: city, sources: s-*, rate: 5/s}]
pipeline:
  - {name: filter, on: gateways, reads: city, writes: clean, selectivity: 0.5}
  - {name: sink, on: cloud-1, reads: clean}
run: {duration: 20s}
""")
    result = simulate(run_point.topology, run_point.spec.workload, run_point.spec.pipeline,
                      sim_settings(run_point.spec))
    tables = conform(result.tables)
    lost = np.asarray(tables["messages"].column("lost"))
    assert lost.any() and not lost.all()
    assert tables["nodes"].num_rows and all(tables["nodes"].column("up").to_pylist())
