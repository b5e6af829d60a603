"""`foglab calibrate`: measure on this host's emulation what the model takes as inputs.

Four measures, one after the other (on a 2-core host, two at once would slow each other):

1. The gateway: a one-off container of the arm64 gateway image (under QEMU, with the CPU limit
   the emulation gives an rpi4 gateway) runs `python3 -m emu.agent.measure`: the reference
   loop (its speed), each RIoTBench task's CPU per message (`foglab bench riot`'s measure),
   each task as the agent's operator runs it, and a real agent's CPU per reading its drivers
   emit and publish to the broker of step 3. The host runs the same script natively, for the
   profile's `native` section: what QEMU costs, task by task.
2. The broker: a container of the services image runs Mosquitto, as in a cluster. A publisher
   and a subscriber on the host send it 180-byte messages, paced (the emulation's regime, and
   the model's service time), in a burst at QoS 0 and in a burst at QoS 1; the broker's CPU
   comes from its cgroup (emu.host.metrics), less its idle CPU, per message carried.
3. The link layer: MQTT round trips (publish, and receive it back) from the host to that
   broker directly and through the emulation's shaper with a small latency; the difference,
   less the latency, per direction, is what the shaper adds to each leg. The relay: a
   LinkRelay in this process, as a cluster's; netem: a qdisc on the broker's veth (one
   direction shaped).
4. Spark: the job a cloud VM runs for an `engine: spark` operator (workloads.spark.job, STATS
   in local[2] as a 2-core cloud VM's container runs it, natively) reads from that broker
   while the host publishes the drivers' readings to it in alternating spans at a low and a
   high rate; the job's CPU (its process tree: the JVM and the Python workers) over each
   span, against the micro-batches it finished and the messages it read, gives the fixed
   CPU per batch and the CPU per message (two rates, two unknowns). The JVM is as young as
   an emulated run's (a minute or two): its JIT still compiles the planner's code, a cost
   that falls as it ages (benchmarks/spark_stats.py), so the figure is a short run's.

Nothing is left behind: the containers are named and labelled before they exist and removed
in a `finally`, also on Ctrl-C; the relay is a thread of this process, stopped there too.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emu.engines.docker.image_store import DOCKER_TIMEOUT_S, ensure_image
from emu.host.calibrate_plan import FULL, QUICK, SIZE, CalibrationFailed, Plan, Progress
from emu.host.calibrate_spark import measure_spark
from emu.images import GATEWAY, PROJECT_ROOT, SERVICES
from workloads.calibration import (
    GATEWAY_PROFILE,
    Broker,
    Calibration,
    Gateway,
    HostFacts,
    Links,
)
from workloads.calibration import Node as NodeCosts
from workloads.riot.costs import REFERENCE_LOOP_SECONDS, host_facts

if TYPE_CHECKING:
    import docker

LABEL = "foglab.calibrate"
MQTT_PORT = 1883
# The hardware the gateway container stands for: its CPU limit and memory, as emu.cluster.plan
# gives an rpi4 gateway (cores, not times its speed: QEMU is slow enough on its own).
GATEWAY_STANDS_FOR = "rpi4"
READY_TIMEOUT_S = 30.0
# One-way latency of the shaped path: non-zero, so the relay's timers (which wait whole
# milliseconds, rounded up) cost what they cost on a cluster's links.
SHAPED_LATENCY_S = 5e-3


def calibrate(quick: bool = False, progress: Progress | None = None,
              client: docker.DockerClient | None = None,
              shaper: str | None = None) -> Calibration:
    """Measure everything (see the module's docstring) and return the profile; raises
    CalibrationFailed, or the engine's error, after removing what it made."""
    import docker as docker_sdk

    from emu.links.probe import choose_shaper

    plan = QUICK if quick else FULL
    tell = progress or (lambda what, done, total: None)
    client = client or docker_sdk.from_env(timeout=DOCKER_TIMEOUT_S)
    token = secrets.token_hex(4)
    shaper = shaper or choose_shaper().shaper
    load = os.getloadavg()[0]
    try:
        tell("images", 0, 2)
        gateway_image = ensure_image(GATEWAY, client=client).tag
        tell("images", 1, 2)
        services_image = ensure_image(SERVICES, client=client).tag
        tell("images", 2, 2)
        broker = _start_broker(client, services_image, token)
        address = f"{broker.ip}:{MQTT_PORT}"
        native = _node(_measure_native(plan, address, tell), plan)
        measured = _measure_gateway(client, gateway_image, plan, address, token, tell)
        gateway = Gateway(**_node(measured, plan).model_dump(), profile=GATEWAY_PROFILE,
                          image=gateway_image)
        brokered = _measure_broker(broker, plan, services_image, tell)
        links = _measure_links(broker, plan, shaper, tell)
        spark = measure_spark(address, plan, tell)
        return Calibration(measured=datetime.now(UTC).replace(microsecond=0), quick=quick,
                           host=_host(client, max(load, os.getloadavg()[0])),
                           gateway=gateway, native=native,
                           broker=brokered, links=links, spark=spark)
    finally:
        # A second Ctrl-C waits until the containers are gone (then interrupts).
        from emu.engines.base import interrupts_deferred

        with interrupts_deferred():
            _remove(client, token)


# -- the containers --------------------------------------------------------------------------------

@dataclass
class _Container:
    id: str
    name: str
    ip: str
    pid: int


def _labels(token: str) -> dict[str, str]:
    return {"foglab": "1", LABEL: token}


def _remove(client: docker.DockerClient, token: str) -> None:
    """Remove every container of this calibration, whatever state it is in."""
    from docker.errors import APIError, NotFound

    for container in client.containers.list(all=True, filters={"label": f"{LABEL}={token}"}):
        with contextlib.suppress(NotFound, APIError):
            container.remove(force=True)


def _start_broker(client: docker.DockerClient, image: str, token: str) -> _Container:
    """Mosquitto as a cluster runs it, on the engine's default bridge, answering."""
    from emu.cluster.services import mqtt_answers

    name = f"foglab-calibrate-{token}-broker"
    container = client.containers.run(image, name=name, labels=_labels(token), detach=True,
                                      nano_cpus=int(1e9))
    container.reload()
    ip = container.attrs["NetworkSettings"]["IPAddress"]
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not (ip and mqtt_answers(ip, MQTT_PORT)):
        if time.monotonic() > deadline:
            raise CalibrationFailed(f"Mosquitto in {name} did not answer on {ip or '?'}:"
                                    f"{MQTT_PORT} within {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.1)
    return _Container(container.id, name, ip, container.attrs["State"]["Pid"])


def _measure_gateway(client: docker.DockerClient, image: str, plan: Plan, broker: str,
                     token: str, tell: Progress) -> dict[str, Any]:
    """`emu.agent.measure` in a one-off gateway container, with an rpi4 gateway's limits."""
    from topologies.profiles import BUILTIN_PROFILES

    profile = BUILTIN_PROFILES[GATEWAY_STANDS_FOR]
    cpus = min(profile.cores, os.cpu_count() or 1)
    name = f"foglab-calibrate-{token}-gateway"
    container = client.containers.run(
        image, ["python3", "-m", "emu.agent.measure", "--broker", broker,
                *plan.measure_arguments()],
        name=name, labels=_labels(token), detach=True, nano_cpus=int(cpus * 1e9),
        mem_limit=int(profile.memory))
    lines = _lines(container.logs(stream=True, follow=True))
    result = _follow(lines, "gateway (arm64, QEMU)", tell)
    if result is None:
        container.reload()
        tail = container.logs(tail=5).decode(errors="replace").strip()
        raise CalibrationFailed(f"the gateway container {name} ended without a result "
                                f"({container.attrs['State'].get('ExitCode')}): {tail}")
    return result


def _measure_native(plan: Plan, broker: str, tell: Progress) -> dict[str, Any]:
    """`emu.agent.measure` on the host, as in the gateway."""
    environment = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT))
    with subprocess.Popen([sys.executable, "-m", "emu.agent.measure", "--broker", broker,
                           *plan.measure_arguments()], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=environment,
                          cwd=PROJECT_ROOT) as process:
        try:
            result = _follow(iter(process.stdout.readline, ""), "host (native)", tell)
        finally:
            if process.poll() is None:
                process.kill()
            stderr = process.stderr.read().strip()
    if result is None:
        raise CalibrationFailed(f"measuring on the host gave no result: {stderr[-500:]}")
    return result


def _lines(chunks: Iterator[bytes]) -> Iterator[str]:
    """Whole lines of a container's log stream, which comes in chunks of any size."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.decode(errors="replace")
    if pending:
        yield pending.decode(errors="replace")


def _follow(lines: Iterator[str], where: str, tell: Progress) -> dict[str, Any] | None:
    """Read emu.agent.measure's JSON lines: progress to `tell`, then the result (None if it
    never came); its failure line raises CalibrationFailed."""
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            continue  # not one of its lines (a warning of Python's, say)
        if "result" in data:
            tell(f"{where}: done", 1, 1)
            return data["result"]
        if "failure" in data:
            raise CalibrationFailed(f"measuring on the {where}: {data['failure']}")
        if "step" in data:
            detail = f" {data['task']}" if data.get("task") else ""
            tell(f"{where}: {data['step']}{detail}", data.get("done", 0), data.get("total", 1))
    return None


def _node(result: dict[str, Any], plan: Plan) -> NodeCosts:
    """A section of the profile from emu.agent.measure's result."""
    if "driver" not in result:
        raise CalibrationFailed("the measure gave no driver cost")
    from emu.agent.measure import DEVICES, RATE

    return NodeCosts(speed=REFERENCE_LOOP_SECONDS / result["loop"], loop=result["loop"],
                     python=result["python"], tasks=result["tasks"],
                     operators=result["operators"], driver=result["driver"],
                     driver_rate=DEVICES * RATE)


# -- the broker ------------------------------------------------------------------------------------

class _Clients:
    """A publisher and a subscriber on the host, counting what reaches the subscriber."""

    def __init__(self, host: str, port: int, topic: str) -> None:
        from emu.agent.mqtt import new_client

        self.topic = topic
        self.received = 0
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self.subscriber = new_client(f"calibrate-sub-{topic.rsplit('/', 1)[-1]}")
        self.subscriber.on_message = self._on_message
        self.subscriber.on_subscribe = lambda *args: self._subscribed.set()
        self.publisher = new_client(f"calibrate-pub-{topic.rsplit('/', 1)[-1]}")
        self.publisher.max_inflight_messages_set(1000)
        self.publisher.max_queued_messages_set(0)
        for client in (self.subscriber, self.publisher):
            client.connect(host, port, keepalive=30)
            client.loop_start()
        self.subscriber.subscribe(topic, qos=1)
        if not self._subscribed.wait(READY_TIMEOUT_S):
            raise CalibrationFailed(f"the broker did not confirm a subscription to {topic}")

    def _on_message(self, *args: Any) -> None:
        with self._lock:
            self.received += 1

    def wait_for(self, count: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.received < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.received

    def close(self) -> None:
        for client in (self.publisher, self.subscriber):
            with contextlib.suppress(Exception):
                client.disconnect()
            client.loop_stop()


def _measure_broker(broker: _Container, plan: Plan, image: str, tell: Progress) -> Broker:
    from emu.host.metrics import ContainerCgroup

    cgroup = ContainerCgroup(broker.id)
    payload = b"x" * SIZE
    clients = _Clients(broker.ip, MQTT_PORT, f"calibrate/{secrets.token_hex(3)}")
    steps = 4
    try:
        tell("broker: idle", 0, steps)
        start, cpu = time.perf_counter(), cgroup.usage().cpu_s
        time.sleep(min(1.0, plan.paced_seconds))
        idle = (cgroup.usage().cpu_s - cpu) / (time.perf_counter() - start)

        def run(count: int, qos: int, interval: float) -> tuple[float, float]:
            """CPU seconds per message carried, and messages per second, less idle CPU."""
            before, start, cpu = clients.received, time.perf_counter(), cgroup.usage().cpu_s
            due = start
            infos = []
            for _ in range(count):
                if interval:
                    due += interval
                    pause = due - time.perf_counter()
                    if pause > 0:
                        time.sleep(pause)
                infos.append(clients.publisher.publish(clients.topic, payload, qos=qos))
            if qos:
                for info in infos:
                    info.wait_for_publish(READY_TIMEOUT_S)
            carried = clients.wait_for(before + count, READY_TIMEOUT_S) - before
            elapsed = time.perf_counter() - start
            used = cgroup.usage().cpu_s - cpu - idle * elapsed
            if carried < count * 0.9:
                raise CalibrationFailed(f"the broker carried {carried} of {count} messages "
                                        f"at QoS {qos}")
            return max(used, 1e-9) / carried, carried / elapsed

        tell("broker: paced", 1, steps)
        paced, _ = run(int(plan.rate * plan.paced_seconds), 0, 1.0 / plan.rate)
        tell("broker: burst", 2, steps)
        burst, throughput = run(plan.burst, 0, 0.0)
        tell("broker: QoS 1", 3, steps)
        qos1, _ = run(plan.qos1, 1, 0.0)
        tell("broker", steps, steps)
    finally:
        clients.close()
    return Broker(image=image, size=SIZE, service_time=paced, rate=plan.rate,
                  burst_service_time=burst, burst_throughput=throughput,
                  qos1_service_time=qos1)


# -- the link layer --------------------------------------------------------------------------------

class _RoundTrips:
    """A client that publishes to a topic it subscribes, one message at a time."""

    def __init__(self, host: str, port: int, topic: str) -> None:
        from emu.agent.mqtt import new_client

        self.topic = topic
        self._back = threading.Event()
        self._subscribed = threading.Event()
        self.client = new_client(f"calibrate-rtt-{secrets.token_hex(3)}")
        self.client.on_message = lambda *args: self._back.set()
        self.client.on_subscribe = lambda *args: self._subscribed.set()
        self.client.connect(host, port, keepalive=30)
        self.client.loop_start()
        self.client.subscribe(topic, qos=0)
        if not self._subscribed.wait(READY_TIMEOUT_S):
            raise CalibrationFailed(f"no subscription to {topic} through {host}:{port}")

    def once(self) -> float:
        self._back.clear()
        start = time.perf_counter()
        self.client.publish(self.topic, b"x" * SIZE, qos=0)
        if not self._back.wait(5.0):
            raise CalibrationFailed(f"a message to {self.topic} did not come back within 5 s")
        return time.perf_counter() - start

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.disconnect()
        self.client.loop_stop()


def _measure_links(broker: _Container, plan: Plan, shaper: str, tell: Progress) -> Links:
    """Round trips direct and shaped, alternately (so that the host's load falls on both)."""
    from emu.links.spec import LinkShape

    shape = LinkShape(latency_s=SHAPED_LATENCY_S)
    topic = f"calibrate/rtt/{secrets.token_hex(3)}"
    with contextlib.ExitStack() as stack:
        if shaper == "relay":
            from emu.links.relay import LinkRelay, LinkRelayThread

            relay = stack.enter_context(LinkRelayThread(LinkRelay(broker.ip, MQTT_PORT, shape,
                                                                  seed=0)))
            shaped_address, directions = ("127.0.0.1", relay.port), 2
        else:
            from emu.cluster.links import host_side_veth
            from emu.links.netem import NetemShaper

            # Shapes what enters the broker's container: one direction of each round trip.
            shaper_ = stack.enter_context(NetemShaper(host_side_veth(broker.pid)))
            shaper_.apply(shape)
            stack.callback(shaper_.clear)
            shaped_address, directions = (broker.ip, MQTT_PORT), 1
        shaped_client = _RoundTrips(*shaped_address, f"{topic}/shaped")
        stack.callback(shaped_client.close)
        if shaper == "relay":
            direct_client = _RoundTrips(broker.ip, MQTT_PORT, f"{topic}/direct")
            stack.callback(direct_client.close)
        else:
            direct_client = None
        direct, shaped = [], []
        for sample in range(plan.samples):
            shaped.append(shaped_client.once())
            if direct_client is not None:
                direct.append(direct_client.once())
            if sample % 10 == 0:
                tell("links", sample, plan.samples)
        tell("links", plan.samples, plan.samples)
    if not direct:  # netem: the unshaped path, once the qdisc is gone
        plain = _RoundTrips(broker.ip, MQTT_PORT, f"{topic}/direct")
        try:
            direct = [plain.once() for _ in range(plan.samples)]
        finally:
            plain.close()
    direct_rtt, shaped_rtt = statistics.median(direct), statistics.median(shaped)
    overhead = (shaped_rtt - direct_rtt - directions * SHAPED_LATENCY_S) / directions
    return Links(shaper=shaper, latency=SHAPED_LATENCY_S, direct=direct_rtt, shaped=shaped_rtt,
                 samples=plan.samples, hop_overhead=max(overhead, 0.0))


# -- the host --------------------------------------------------------------------------------------

def _host(client: docker.DockerClient, load: float) -> HostFacts:
    facts = host_facts()
    return HostFacts(cpu=facts["cpu"] or platform.processor() or "unknown",
                     cores=facts["cpus"] or 1, machine=facts["machine"],
                     kernel=facts["release"], python=facts["python"],
                     docker=str(client.version().get("Version", "unknown")), qemu=qemu_version(),
                     load=round(load, 2))


def qemu_version() -> str:
    """The version of the QEMU that binfmt runs arm64 binaries with."""
    from emu.host.doctor import BINFMT, QEMU_FORMAT

    interpreter = None
    with contextlib.suppress(OSError):
        for line in (BINFMT / QEMU_FORMAT).read_text().splitlines():
            if line.startswith("interpreter "):
                interpreter = line.split(" ", 1)[1].strip()
    interpreter = interpreter or shutil.which("qemu-aarch64-static")
    if not interpreter or not Path(interpreter).exists():
        return "unknown"
    try:
        # binfmt's name for it (aarch64-binfmt-P) refuses to run but through binfmt.
        output = subprocess.run([str(Path(interpreter).resolve()), "--version"],
                                capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    first = output.splitlines()[0] if output else ""
    return first.removeprefix("qemu-aarch64 version ").strip() or "unknown"
