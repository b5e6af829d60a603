"""Fixtures for the gateway agent: a loopback broker, agents in-process or as processes,
a broker-side listener and the host's controller."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emu.agent.agent import Agent
from emu.agent.config import CONFIG_VARIABLE, AgentConfig
from emu.agent.protocol import Envelope
from emu.control.commands import Controller
from workloads.spark.local_broker import LocalMosquitto, find_mosquitto

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker() -> Iterator[LocalMosquitto]:
    if find_mosquitto() is None:
        pytest.skip("mosquitto is not installed")
    with LocalMosquitto() as running:
        yield running


def address(broker: LocalMosquitto) -> str:
    return f"{broker.host}:{broker.port}"


@dataclass
class Heard:
    topic: str
    envelope: Envelope | None
    payload: bytes
    t: float


class Listener:
    """A subscriber on the broker's side: what the broker carried, and when it arrived."""

    def __init__(self, host: str, port: int, filters: list[str]) -> None:
        import paho.mqtt.client as mqtt

        self.heard: list[Heard] = []
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        self.client.on_message = self._message
        self.client.on_subscribe = lambda *args: self._subscribed.set()
        self.client.connect(host, port)
        self.client.loop_start()
        self.client.subscribe([(f, 1) for f in filters])
        assert self._subscribed.wait(5), "the broker did not confirm the subscription"

    def _message(self, client: Any, userdata: Any, message: Any) -> None:
        try:
            envelope = Envelope.decode(message.payload)
        except ValueError:
            envelope = None
        with self._lock:
            self.heard.append(Heard(message.topic, envelope, message.payload, time.time()))

    def snapshot(self, prefix: str = "") -> list[Heard]:
        with self._lock:
            return [h for h in self.heard if h.topic.startswith(prefix)]

    def clear(self) -> None:
        with self._lock:
            self.heard.clear()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def listen(broker: LocalMosquitto) -> Iterator[Callable[..., Listener]]:
    made: list[Listener] = []

    def make(*filters: str) -> Listener:
        listener = Listener(broker.host, broker.port, list(filters or ("#",)))
        made.append(listener)
        return listener

    yield make
    for listener in made:
        listener.close()


@pytest.fixture
def config(broker: LocalMosquitto, tmp_path: Path) -> Callable[..., AgentConfig]:
    """An AgentConfig for a node on the test broker, its records in tmp_path/<node>."""

    def make(node: str = "gw-1", **fields: Any) -> AgentConfig:
        fields.setdefault("records", str(tmp_path / node))
        return AgentConfig(node=node, mqtt=address(broker), **fields)

    return make


@pytest.fixture
def agents() -> Iterator[Callable[[AgentConfig], Agent]]:
    """Starts in-process agents and waits until each is connected; stops them afterwards."""
    started: list[Agent] = []

    def start(config: AgentConfig) -> Agent:
        agent = Agent(config)
        started.append(agent)
        agent.start()
        assert agent.ready.wait(10), f"{config.node} did not connect to the broker"
        return agent

    yield start
    for agent in started:
        agent.stop()


@pytest.fixture
def processes() -> Iterator[Callable[[AgentConfig], subprocess.Popen]]:
    """Starts agents as `python -m emu.agent` processes; kills what is left afterwards."""
    started: list[subprocess.Popen] = []

    def start(config: AgentConfig, **env: str) -> subprocess.Popen:
        environment = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), **env)
        environment[CONFIG_VARIABLE] = config.to_json()
        process = subprocess.Popen([sys.executable, "-m", "emu.agent"], env=environment,
                                   cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()


@pytest.fixture
def controller(broker: LocalMosquitto) -> Iterator[Controller]:
    with Controller(address(broker)) as control:
        yield control


def wait_for(condition: Callable[[], Any], timeout: float = 5.0, step: float = 0.05) -> Any:
    """condition()'s first true value within timeout, else an AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {condition}")
        time.sleep(step)


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as source:
        return list(csv.DictReader(source))
