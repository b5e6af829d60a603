"""`foglab compare`: the comparison of runs on several backends (experiments.compare) on
synthetic tables, its outputs, and the command's refusals before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from emu.host.doctor import Check
from experiments import compare as comparing
from experiments.cli import app
from experiments.compare import RunData, compare, parse_backends, relative_error

PNG = b"\x89PNG\r\n\x1a\n"


def messages(latencies_ms: list[float], lost: int = 0, hops: list[int] | None = None,
             start: float = 0.0) -> pd.DataFrame:
    n = len(latencies_ms)
    latency = np.array(latencies_ms) / 1000
    t_sent = start + np.arange(n, dtype=float) * 0.1
    frame = pd.DataFrame({"t_sent": t_sent, "t_received": t_sent + latency, "latency": latency,
                          "hops": hops or [3] * n, "lost": [False] * n})
    if not lost:
        return frame
    dropped = pd.DataFrame({"t_sent": [0.0] * lost, "t_received": [np.nan] * lost,
                            "latency": [np.nan] * lost, "hops": [0] * lost,
                            "lost": [True] * lost})
    return pd.concat([frame, dropped], ignore_index=True)


def run(backend: str, frame: pd.DataFrame, cpu: dict[str, float], duration: float = 10.0,
        migrations: list[dict] | None = None, fidelity: dict | None = None) -> RunData:
    delivered = frame[~frame["lost"]]["latency"].to_numpy()
    p50, p95, p99 = np.percentile(delivered, [50, 95, 99])
    summary = {"delivered": int(delivered.size), "lost": int(frame["lost"].sum()),
               "throughput_per_s": delivered.size / duration,
               "latency_s": {"mean": float(delivered.mean()), "p50": p50, "p95": p95, "p99": p99,
                             "max": float(delivered.max())},
               "nodes": {node: {"cpu_mean": value} for node, value in cpu.items()},
               "migrations": migrations or []}
    return RunData(backend, Path(f"/nowhere/{backend}"), summary, frame, fidelity)


def test_relative_errors_against_the_reference() -> None:
    assert relative_error(110.0, 100.0) == pytest.approx(0.10)
    assert relative_error(90.0, 100.0) == pytest.approx(-0.10)
    assert relative_error(0.0, 0.0) == 0.0
    assert relative_error(3.0, 0.0) is None and relative_error(None, 1.0) is None


def test_each_figure_with_its_error_and_the_issues_targets() -> None:
    sim = run("sim", messages([30.0] * 90 + [40.0] * 10, lost=2), {"gw-1": 0.05, "cloud": 0.2})
    emu = run("emu", messages([32.0] * 90 + [80.0] * 10, lost=2), {"gw-1": 0.10, "cloud": 0.2},
              duration=10.0)
    result = compare({"sim": sim, "emu": emu}, "tiny")
    p50 = result.figure("latency_p50")
    assert p50.values == {"sim": pytest.approx(0.030), "emu": pytest.approx(0.032)}
    assert p50.errors["sim"] == pytest.approx(30 / 32 - 1) and p50.met["sim"] is True
    p95 = result.figure("latency_p95")
    assert p95.target == 0.20 and p95.met["sim"] is False
    assert result.figure("lost").met["sim"] is True  # lost: equal
    assert result.figure("throughput").errors["sim"] == 0.0
    assert result.figure("cpu:gw-1").errors["sim"] == pytest.approx(-0.5)
    assert result.figure("cpu:gw-1").target is None and "emu" not in p50.errors
    assert [f.key for f in result.figures][:3] == ["delivered", "lost", "throughput"]
    assert result.unsaturated is None and not any(f.doubts for f in result.figures)


def test_throughput_compares_readings_a_second_of_summaries_old_and_new() -> None:
    # Three sinks read each reading: the new summary says 10 readings/s beside 30 copies/s;
    # one written before deliveries_per_s has the 30 copies/s under throughput_per_s.
    new = run("emu", messages([5.0] * 100), {})
    new.summary.update(delivered=100, deliveries=300, throughput_per_s=10.0,
                       deliveries_per_s=30.0)
    old = run("sim", messages([5.0] * 100), {})
    old.summary.update(delivered=100, deliveries=300, throughput_per_s=30.0)
    throughput = compare({"sim": old, "emu": new}, "tiny").figure("throughput")
    assert throughput.unit == "readings/s"
    assert throughput.values == {"sim": 10.0, "emu": 10.0}
    assert throughput.errors["sim"] == 0.0


def test_energy_in_all_and_per_node_with_a_cpu_with_its_relative_error() -> None:
    sim = run("sim", messages([5.0] * 10), {"gw-1": 0.05, "cloud": 0.2})
    emu = run("emu", messages([5.0] * 10), {"gw-1": 0.06, "cloud": 0.2})
    assert not any(f.key.startswith("energy") for f in compare({"sim": sim,
                                                                 "emu": emu}).figures)
    sim.facts["energy"] = {"total_j": 90.0, "by_node": {"gw-1": 27.0, "cloud": 8.0, "sensor": 0.7}}
    emu.facts["energy"] = {"total_j": 100.0, "by_node": {"gw-1": 30.0, "cloud": 8.0, "sensor": 0.7}}
    result = compare({"sim": sim, "emu": emu})
    energy = [f.key for f in result.figures if f.key.startswith("energy")]
    assert energy == ["energy", "energy:gw-1", "energy:cloud"]  # a device has no CPU row
    assert result.figure("energy").errors["sim"] == pytest.approx(-0.10)
    assert result.figure("energy:gw-1").values == {"sim": 27.0, "emu": 30.0}
    assert result.figure("energy:gw-1").errors["sim"] == pytest.approx(-0.10)
    assert result.figure("energy:cloud").errors["sim"] == 0.0


def test_latency_per_path_length_when_messages_cross_different_numbers_of_links() -> None:
    hops = [2] * 50 + [3] * 50
    sim = run("sim", messages([10.0] * 50 + [30.0] * 50, hops=hops), {})
    emu = run("emu", messages([12.0] * 50 + [36.0] * 50, hops=hops), {})
    result = compare({"sim": sim, "emu": emu})
    assert result.figure("latency_p50@2").values["emu"] == pytest.approx(0.012)
    assert result.figure("latency_p99@3").errors["sim"] == pytest.approx(30 / 36 - 1)
    single = compare({"sim": run("sim", messages([1.0] * 5), {}),
                      "emu": run("emu", messages([1.0] * 5), {})})
    assert not any("@" in f.key for f in single.figures)


def test_migration_downtime_is_compared_where_there_are_migrations() -> None:
    moved = {"operator": "count", "source": "gw-1", "target": "gw-2"}
    sim = run("sim", messages([5.0] * 10), {}, migrations=[{**moved, "downtime": 0.8}])
    emu = run("emu", messages([5.0] * 10), {}, migrations=[{**moved, "downtime": 1.0}])
    figure = compare({"sim": sim, "emu": emu}).figure("downtime:0")
    assert figure.label == "downtime count gw-1>gw-2"
    assert figure.errors["sim"] == pytest.approx(-0.2)
    only_sim = compare({"sim": sim, "emu": run("emu", messages([5.0] * 10), {})})
    assert only_sim.figure("downtime:0").values["emu"] is None
    assert only_sim.figure("downtime:0").errors["sim"] is None


def test_the_emulations_figures_are_doubted_with_the_reason_when_its_host_was_saturated() -> None:
    reason = "host saturated: CPU pressure 62% for 40% of the run"
    throttled = "gw-1 at its CPU limit: throttled in 50% of its CPU periods for 30% of the run"
    fidelity = {"samples": 10, "marked": True, "reasons": [reason, throttled],
                "saturated_spans": [[5.0, 10.0]],
                "throttled_nodes": {"gw-1": {"reason": throttled}}}
    # Messages sent from t=0 to 9.9 s: the late half within the saturated span.
    emu = run("emu", messages([30.0] * 50 + [300.0] * 50), {"gw-1": 0.9, "gw-2": 0.1},
              fidelity=fidelity)
    sim = run("sim", messages([30.0] * 100), {"gw-1": 0.5, "gw-2": 0.1})
    result = compare({"sim": sim, "emu": emu}, "hot")
    assert result.figure("latency_p95").doubts == [reason, throttled]
    assert result.figure("cpu:gw-1").doubts == [reason, throttled]
    assert result.figure("cpu:gw-2").doubts == [reason]
    clean = result.unsaturated
    assert clean["share_sent_saturated"] == pytest.approx(0.5)
    assert clean["latency_s"]["p95"] == pytest.approx(0.030)
    lines = comparing.explanations(result)
    assert lines[0] == ("* emu figures taken while the testbed was overloaded: "
                        f"{reason}; {throttled}")
    assert "outside the saturated spans (50 messages; 50% were sent within them)" in lines[1]
    assert "p95 30.0 ms" in lines[1]


def test_the_table_json_and_plots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim = run("sim", messages([30.0] * 100), {"gw-1": 0.05})
    emu = run("emu", messages([33.0] * 100), {"gw-1": 0.07},
              fidelity={"samples": 5, "marked": False, "reasons": []})
    result = compare({"sim": sim, "emu": emu}, "tiny")
    monkeypatch.setattr(comparing, "read_run", {"/nowhere/sim": sim, "/nowhere/emu": emu}.get)
    paths = comparing.write(result, tmp_path / "cmp")
    saved = json.loads(paths["comparison"].read_text())
    assert saved["reference"] == "emu" and saved["backends"] == ["sim", "emu"]
    p50 = next(f for f in saved["figures"] if f["key"] == "latency_p50")
    assert p50["errors"]["sim"] == pytest.approx(30 / 33 - 1) and p50["target"] == 0.1
    for kind in ("latency", "cpu"):
        assert paths[kind].read_bytes()[:8] == PNG
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(comparing.table(result))
    text = console.export_text()
    assert "latency p50" in text and "-9.1%" in text and "±10%" in text and "equal" in text
    assert comparing.explanations(result) == [
        "emu: the host kept up (no saturation, relay lag or throttling beyond the fidelity "
        "thresholds)"]


@pytest.mark.parametrize(("text", "message"), [
    ("sim", "needs two or more backends, got 'sim'"),
    ("sim,emu,sim", "'sim' is named twice"),
    ("sim,qemu", "unknown backend 'qemu' in 'sim,qemu'; backends are sim, emu, hybrid"),
    ("sim,", "unknown backend ''"),
])
def test_bad_backends_are_refused_with_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_backends(text)
    assert parse_backends(" emu , sim") == ["emu", "sim"]


cli = CliRunner()


def foglab(*args: str):
    return cli.invoke(app, list(args), catch_exceptions=False, env={"COLUMNS": "250"})


def test_compare_refuses_bad_backends_and_runs_nothing(tmp_path: Path) -> None:
    result = foglab("compare", "quickstart", "--backends", "sim,nope", "--out", str(tmp_path))
    assert result.exit_code == 3
    assert "error: --backends: unknown backend 'nope'" in result.output
    assert not any(tmp_path.iterdir())


def test_compare_without_docker_says_emu_needs_it_and_what_the_doctor_fixes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import emu.host.doctor

    monkeypatch.setattr(comparing.os, "geteuid", lambda: 0)
    monkeypatch.setattr(emu.host.doctor, "check_docker", lambda fix, apt, report: Check(
        "docker engine", "missing", "docker.io is not installed"))
    result = foglab("compare", "quickstart", "--set", "run.duration=5s", "--out",
                    str(tmp_path))
    assert result.exit_code == 1
    output = " ".join(result.output.split())
    assert "error: emu needs Docker: docker engine: docker.io is not installed." in output
    assert "`foglab emu doctor --fix` (as root) installs what is missing (docker.io," in output
    assert "starts the Docker Engine (dockerd) and enables arm64 emulation" in output
    assert not any(tmp_path.iterdir())  # not even the sim run


def test_compare_refuses_a_sweep_and_a_backend_set_by_hand(tmp_path: Path) -> None:
    file = tmp_path / "swept.yaml"
    file.write_text("name: swept\ntopology: smart-city\nworkload: city-sensors\n"
                    "pipeline: [{name: sink, on: cloud-1, reads: city}]\n"
                    "run: {duration: 5s}\nsweep: {run.seed: [1, 2]}\n")
    out = tmp_path / "out"
    swept = foglab("compare", str(file), "--out", str(out))
    assert swept.exit_code == 3
    assert (f"error: {file}: compare runs one configuration, and the file sweeps run.seed "
            "(2 points): choose a value with --set KEY=VALUE") in swept.output
    sets = foglab("compare", "quickstart", "--set", "run.backend=sim", "--out", str(out))
    assert sets.exit_code == 3 and "name them there" in sets.output
    assert not out.exists()


def test_too_few_messages_outside_the_saturated_spans_give_no_figures_of_their_own() -> None:
    fidelity = {"samples": 10, "marked": True, "saturated_spans": [[0.5, 10.0]],
                "reasons": ["host saturated: CPU pressure 97% for 100% of the run"]}
    emu = run("emu", messages([50.0] * 100), {}, fidelity=fidelity)
    result = compare({"sim": run("sim", messages([35.0] * 100), {}), "emu": emu})
    assert result.unsaturated["delivered"] == 5  # sent at 0.0 to 0.4 s
    assert comparing.explanations(result)[1] == (
        "  emu: only 5 messages were sent outside the saturated spans, too few for figures of "
        "their own")


def test_results_show_says_when_an_emulated_run_was_taken_on_an_overloaded_host(
        tmp_path: Path) -> None:
    reason = "host saturated: CPU pressure 83% for 95% of the run"
    fidelity = {"pressure_source": "psi", "samples": 20, "marked": True, "reasons": [reason],
                "host_pressure": {"mean": 0.81, "max": 0.98},
                "relay_lag_s": {"mean": 0.007, "max": 0.031}, "saturated_share": 0.95}
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"experiment": "x", "backend": "emu", "status": "ok", "facts": {"fidelity": fidelity}}))
    result = foglab("results", "show", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert ("fidelity: host CPU pressure mean 81%, max 98% (psi); relay timers late by up to "
            "31.0 ms; saturated for 95% of the run") in result.output
    assert f"figures taken while the testbed was overloaded: {reason}" in result.output
