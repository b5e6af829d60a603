"""sim and emu write the same tables: one tiny experiment on both, compared table by table.

Selectivity decides alike on both backends (a running credit per operator instance, no random
stream), so with periodic devices and loss-free links to the filter each gateway's filter sees
the same count of messages on both and passes the same count on. What may differ on emu: a
device's last emission before the run's end can slip past it (the agent's scheduler is late
under QEMU), and such a message is not counted; so sent counts may differ by at most one per
device, and delivered by at most that much, halved up per gateway: the bound is the number of
city devices.
"""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

from experiments.results import load_run
from experiments.runner import run_experiment
from experiments.schema import TABLES
from tests.conftest import build_experiment, two_gateway_topology

pytestmark = [pytest.mark.emu, pytest.mark.slow]

CITY_DEVICES, NOISY_DEVICES, RATE, DURATION = 4, 2, 5.0, 15.0
EXPERIMENT = {
    "name": "parity",
    "topology": two_gateway_topology("parity", {
        "s": (CITY_DEVICES, {"latency": "5ms"}),
        "d": (NOISY_DEVICES, {"latency": "5ms", "loss": "20%"})}, uplink="20ms"),
    "workload": {"name": "w", "streams": [
        {"name": "city", "sources": "s-*", "rate": f"{RATE}/s", "arrivals": "periodic", "qos": 1},
        {"name": "noisy", "sources": "d-*", "rate": f"{RATE}/s", "arrivals": "periodic"}]},
    "pipeline": [{"name": "filter", "on": "gateways", "reads": "city", "writes": "clean",
                  "selectivity": 0.5},
                 {"name": "sink", "on": "cloud-1", "reads": "clean"},
                 {"name": "log", "on": "cloud-1", "reads": "noisy"}],
    "run": {"backend": "sim", "duration": f"{DURATION}s", "seed": 3, "drain": "2s"},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    if os.geteuid() != 0:
        pytest.skip("the emulation needs root")
    pytest.importorskip("docker")
    root = tmp_path_factory.mktemp("parity")
    folders = {}
    for backend in ("sim", "emu"):
        experiment = build_experiment(EXPERIMENT, [f"run.backend={backend}"])
        (outcome,) = run_experiment(experiment, root / backend, sweep_id=backend)
        assert outcome.error is None, f"{backend}: {outcome.error}"
        folders[backend] = outcome.folder
    return folders


def test_every_table_file_is_there_with_the_same_columns_and_types(runs) -> None:
    for name, schema in TABLES.items():
        schemas = {backend: pq.read_schema(folder / f"{name}.parquet").remove_metadata()
                   for backend, folder in runs.items()}
        for backend, found in schemas.items():
            assert found.names == schema.names, (backend, name)
            for field in schema:
                assert found.field(field.name).type == schemas["sim"].field(field.name).type, (
                    backend, name, field.name)


def test_the_nodes_tables_name_the_topologys_nodes(runs) -> None:
    nodes = {backend: set(load_run(folder).table("nodes")["node"])
             for backend, folder in runs.items()}
    assert nodes["sim"] == nodes["emu"] == {"gw-1", "gw-2", "broker-1", "cloud-1"}
    assert load_run(runs["emu"]).table("nodes")["up"].all()


def test_hops_and_lost_rows_mean_the_same(runs) -> None:
    messages = {backend: load_run(folder).table("messages") for backend, folder in runs.items()}
    for backend, table in messages.items():
        lost, delivered = table["lost"], table["state"] == "delivered"
        assert table.loc[~delivered, "sink"].isna().all()
        assert table.loc[delivered, "sink"].notna().all()
        # Only the noisy devices' links lose messages, and there they cross nothing.
        assert set(table.loc[lost, "stream"]) == {"noisy"} and lost.sum() > 0, backend
        assert set(table.loc[lost, "hops"]) == {0}, backend
    for stream in ("city", "noisy"):
        hops = {backend: set(t.loc[(t["state"] == "delivered") & (t["stream"] == stream),
                                   "hops"])
                for backend, t in messages.items()}
        # device -> gateway -> broker -> cloud
        assert hops["sim"] == hops["emu"] == {3}, stream


def test_selectivity_passes_the_same_count_on_both(runs) -> None:
    delivered = {}
    for backend, folder in runs.items():
        table = load_run(folder).table("messages")
        delivered[backend] = int(((table["state"] == "delivered")
                                  & (table["stream"] == "city")).sum())
    sent = CITY_DEVICES * RATE * DURATION
    assert delivered["sim"] == sent / 2
    assert abs(delivered["emu"] - delivered["sim"]) <= CITY_DEVICES, delivered
