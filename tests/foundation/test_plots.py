"""The latency figure: written without taking over pyplot's backend, and saying on the figure
why it is empty when no message was delivered."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from experiments.loader import parse_text
from experiments.plots import latency_plot
from experiments.runner import run_experiment

# The loss is on the device's radio, the one link that drops (sim.network.radio; any other
# carries TCP, where a loss is a retransmission).
ONE_LINK = """
name: plotted
topology:
  name: t
  nodes:
    - {name: dev, kind: device}
    - {name: gw, kind: gateway}
    - {name: broker, kind: broker}
    - {name: vm, kind: cloud_vm}
  links:
    - {from: dev, to: gw, latency: 1ms, loss: LOSS}
    - {from: gw, to: broker, latency: 1ms}
    - {from: broker, to: vm, latency: 1ms}
workload:
  name: w
  streams: [{name: s, sources: dev, rate: 5/s, arrivals: periodic, start: START}]
pipeline:
  - {name: sink, task: passthrough, on: vm, reads: s}
run: {duration: 4s, seed: 1, drain: 1s}
plots: [latency]
"""


def run_folder(tmp_path: Path, loss: str = "0%", start: str = "0s") -> Path:
    experiment = parse_text(ONE_LINK.replace("LOSS", loss).replace("START", start))
    (outcome,) = run_experiment(experiment, tmp_path)
    assert outcome.error is None
    return outcome.folder


def test_writing_the_figure_leaves_the_sessions_backend_alone(tmp_path: Path) -> None:
    # In a notebook the backend is the inline one; a run that writes plots must not replace it
    # (with Agg, every later plt.show() showed nothing).
    folder = run_folder(tmp_path)
    script = (
        "import matplotlib; matplotlib.use('svg')\n"
        "import matplotlib.pyplot as plt; plt.figure()\n"
        "from experiments.plots import latency_plot\n"
        f"latency_plot({str(folder)!r})\n"
        "print(matplotlib.get_backend())\n")
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, cwd=Path(__file__).parents[2])
    assert shown.stdout.strip() == "svg"


def test_a_run_with_deliveries_plots_them(tmp_path: Path) -> None:
    plot = latency_plot(run_folder(tmp_path))
    assert plot.path.name == "latency.png" and plot.path.stat().st_size > 10_000
    assert (plot.delivered, plot.note) == (20, None)


@pytest.mark.parametrize(("loss", "start", "note"), [
    ("100%", "0s", "no delivered messages: all 20 sent were lost"),
    ("0%", "10s", "no delivered messages: none was sent, or none reached a sink before the end"),
])
def test_an_empty_figure_says_why(tmp_path: Path, loss: str, start: str, note: str) -> None:
    from experiments.plots import latency_figure
    from experiments.results import load_run

    folder = run_folder(tmp_path, loss, start)
    plot = latency_plot(folder)
    assert (plot.delivered, plot.note) == (0, note)
    figure, _ = latency_figure(load_run(folder).messages, "t")
    assert [text.get_text() for text in figure.texts] == [note]


def test_drawing_a_topology_leaves_the_sessions_backend_alone(tmp_path: Path) -> None:
    script = (
        "import matplotlib; matplotlib.use('svg')\n"
        "from topologies.catalog import load\n"
        "from topologies.draw import draw\n"
        f"draw(load('smart-city'), {str(tmp_path / 'city.png')!r})\n"
        "print(matplotlib.get_backend())\n")
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, cwd=Path(__file__).parents[2])
    assert shown.stdout.strip() == "svg"
    assert (tmp_path / "city.png").read_bytes()[:4] == b"\x89PNG"
