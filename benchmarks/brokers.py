"""Mosquitto against RabbitMQ on emu (a broker's `kind`), in one run: a small experiment on
each, then each broker alone, and the figures the model's rabbitmq-like broker takes.

    python benchmarks/brokers.py [--duration 20] [--rate 5] [--alone 10] [--skip-runs]
    python benchmarks/brokers.py --iotcloud

`--iotcloud`: IoTCloud's scalability run on two RabbitMQs instead (the catalog's
`iotcloud-scaling` as tests/emu_rabbitmq/test_iotcloud_emu.py runs it: 4 drivers on a shared
channel from the start, 96 more on an exclusive one from 5 s, 5 readings/s each, 10 s), and
figure 10's shape, latency flat from 4 to 100 drivers: `few_p50=`, `few_p95=`, `many_p50=`,
`many_p95=` (ms; the first half's 4 drivers, the second half's 100 after a second to settle)
and `ratio_p50=`, `ratio_p95=` (100 drivers over 4, in the same run; flat is near 1, the
test held them under 2 and 3 until CI's loaded host measured 3.6).

1. The experiment: six sensors on two gateways (QEMU), `--rate` QoS 1 readings/s each, a
   passthrough on the gateways and a sink on a cloud VM, through broker-1 (vm.small: one
   core), once with `kind: mosquitto`, once with `kind: rabbitmq`. Per kind: `lat_p50=`,
   `lat_p95=` (s, a reading's emission to the sink: the same links, gateways and relays for
   both, so the difference is the broker's) and `cpu_per_reading=` (the broker's CPU from
   the nodes table, s per reading delivered: each reading crosses it twice, the raw one the
   gateway publishes and the filtered one the sink reads).
2. Each broker alone, its container as a cluster runs it (the plan's image, command, files,
   one core): a publisher and a subscriber on the host send `--alone` seconds of 180-byte
   QoS 0 messages paced at 500/s, 5,000 at QoS 0 as fast as sent, then 2,000 at QoS 1 as
   fast as acknowledged, as emu.host.calibrate measures Mosquitto.
   `alone_p50=`, `alone_p95=` (s, publish to receipt on the host's loopback bridge, paced),
   `service_time=` (the broker's CPU per message paced, less its idle CPU: what
   emu.host.calibrate measures for Mosquitto as the model's service time),
   `burst_service_time=`, `burst_throughput=` (messages/s), `qos1_service_time=`,
   `idle_cpu=` (cores), `ready_s=` (container start to the first MQTT CONNACK) and
   `memory_mib=`.

Then `ratio_*=` rabbitmq over mosquitto for each figure, and the model's figure: the paced
service time as a topology writes it (`broker: {kind: rabbitmq, service_time: ...}`; a
calibrated model takes the calibration's Mosquitto figure for every broker, so a profile
would need a figure per kind: docs/brokers.md). Every line carries the host's load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import statistics
import tempfile
import threading
import time
from pathlib import Path

SIZE = 180
PACED_RATE = 500.0
QOS1_COUNT = 2000
BURST_COUNT = 5000
READY_TIMEOUT_S = 120.0
KINDS = ("mosquitto", "rabbitmq")
IMAGE_TAGS: dict[str, str] = {}  # kind -> the image measured alone

TEXT = """
name: brokers-bench-{kind}
topology:
  name: brokers-bench
  sites: [{{name: field}}, {{name: cloud}}]
  nodes:
    - {{name: s, kind: device, replicas: 6}}
    - {{name: gw, kind: gateway, profile: rpi4, replicas: 2, site: field}}
    - {{name: broker-1, kind: broker, profile: vm.small, site: cloud, broker: {{kind: {kind}}}}}
    - {{name: cloud-1, kind: cloud_vm, profile: vm.small, site: cloud}}
  links:
    - {{from: s-*, to: gw-*, mode: spread, latency: 5ms}}
    - {{from: gw-*, to: broker-1, latency: 20ms}}
    - {{from: broker-1, to: cloud-1, latency: 1ms}}
workload:
  name: w
  streams: [{{name: city, sources: s-*, rate: {rate}/s, arrivals: periodic, qos: 1}}]
pipeline:
  - {{name: filter, task: passthrough, on: gateways, reads: city, writes: clean}}
  - {{name: sink, task: passthrough, on: cloud-1, reads: clean}}
run: {{backend: emu, duration: {duration}s, seed: 1, drain: 2s, sample: 1s}}
"""


def load() -> str:
    return "load={:.2f},{:.2f},{:.2f}".format(*os.getloadavg())


def experiment(kind: str, duration: float, rate: float) -> dict[str, float] | None:
    """The small experiment with broker-1 of `kind`: its latencies and the broker's CPU."""
    import pyarrow.parquet as pq

    from experiments.loader import parse_text
    from experiments.runner import run_experiment

    text = TEXT.format(kind=kind, duration=duration, rate=rate)
    with tempfile.TemporaryDirectory(prefix="foglab-bench-") as out:
        (outcome,) = run_experiment(parse_text(text), Path(out))
        if outcome.error is not None:
            print(f"kind={kind} error={outcome.error!r}", flush=True)
            return None
        facts = json.loads((outcome.folder / "manifest.json").read_text())["facts"]
        messages = pq.read_table(outcome.folder / "messages.parquet").to_pandas()
        nodes = pq.read_table(outcome.folder / "nodes.parquet").to_pandas()
    arrived = messages[messages["state"] == "delivered"]
    broker = nodes[nodes["node"] == "broker-1"].sort_values("t")
    # `cpu` is a share of the container's limit, one core for vm.small; each sample covers
    # the period before it.
    periods = broker["t"].diff().fillna(broker["t"].iloc[0])
    cpu_s = float((broker["cpu"] * periods).sum())
    figures = {"lat_p50": float(arrived["latency"].median()),
               "lat_p95": float(arrived["latency"].quantile(0.95)),
               "cpu_per_reading": cpu_s / max(1, len(arrived))}
    print(f"part=run kind={kind} readings={len(arrived)} sent={facts['messages']['sent']} "
          + " ".join(f"{key}={value:.6g}" for key, value in figures.items()) + f" {load()}",
          flush=True)
    return figures


class _Pair:
    """A publisher and a subscriber on the host, timing each message from publish to receipt."""

    def __init__(self, host: str, topic: str) -> None:
        from emu.agent.mqtt import new_client

        self.topic = topic
        self.sent: dict[bytes, float] = {}
        self.delays: list[float] = []
        self._lock = threading.Lock()
        subscribed = threading.Event()
        self.subscriber = new_client(f"bench-sub-{secrets.token_hex(3)}")
        self.subscriber.on_message = self._on_message
        self.subscriber.on_subscribe = lambda *args: subscribed.set()
        self.publisher = new_client(f"bench-pub-{secrets.token_hex(3)}")
        self.publisher.max_inflight_messages_set(1000)
        for client in (self.subscriber, self.publisher):
            client.connect(host, 1883, keepalive=30)
            client.loop_start()
        self.subscriber.subscribe(topic, qos=1)
        if not subscribed.wait(10):
            raise RuntimeError(f"no subscription to {topic} on {host}")

    def _on_message(self, client, userdata, message) -> None:
        now = time.perf_counter()
        with self._lock:
            sent = self.sent.pop(message.payload[:12], None)
            if sent is not None:
                self.delays.append(now - sent)

    def send(self, count: int, qos: int, interval: float) -> int:
        """Publish count messages (paced at interval, or as fast as paho takes them); the
        number received."""
        self.delays.clear()
        due = time.perf_counter()
        infos = []
        for i in range(count):
            if interval:
                due += interval
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
            key = f"{i:012d}".encode()
            with self._lock:
                self.sent[key] = time.perf_counter()
            infos.append(self.publisher.publish(self.topic, key + b"x" * (SIZE - 12), qos=qos))
        for info in infos if qos else ():
            info.wait_for_publish(30)
        deadline = time.monotonic() + 30
        while len(self.delays) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(self.delays)

    def close(self) -> None:
        for client in (self.publisher, self.subscriber):
            with contextlib.suppress(Exception):
                client.disconnect()
            client.loop_stop()


def _archive(files: tuple[tuple[str, str], ...]) -> bytes:
    """The plan's files (path, text) as a tar archive, as the cluster's engine puts them."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, text in files:
            data = text.encode()
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def alone(kind: str, seconds: float) -> dict[str, float]:
    """The broker of `kind` in its own container, as a cluster's plan makes it."""
    import docker

    from emu.cluster.plan import plan_cluster
    from emu.cluster.services import mqtt_answers
    from emu.engines.docker.image_store import ensure_image
    from emu.host.metrics import ContainerCgroup
    from topologies.model import expand
    from topologies.spec import TopologySpec

    topology = expand(TopologySpec.model_validate({"name": "one", "nodes": [
        {"name": "gw", "kind": "gateway", "profile": "vm.small"},
        {"name": "b", "kind": "broker", "profile": "vm.small", "broker": {"kind": kind}}],
        "links": [{"from": "gw", "to": "b"}]}))
    plan = plan_cluster(topology, "bench", host_cpus=os.cpu_count() or 1).containers["b"]
    client = docker.from_env()
    image = ensure_image(plan.image, client=client).tag
    name = f"foglab-bench-brokers-{secrets.token_hex(4)}"
    container = client.containers.create(image, list(plan.command), name=name, detach=True,
                                         labels={"foglab": "1", "foglab.bench": "brokers"},
                                         nano_cpus=int(1e9), mem_limit=plan.mem_limit)
    try:
        container.put_archive("/", _archive(plan.files))
        started = time.perf_counter()
        container.start()
        container.reload()
        ip = container.attrs["NetworkSettings"]["IPAddress"]
        while not mqtt_answers(ip, 1883):
            if time.perf_counter() - started > READY_TIMEOUT_S:
                raise RuntimeError(f"{kind} did not answer within {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.05)
        ready = time.perf_counter() - started
        time.sleep(3.0)  # past the start's own work
        cgroup = ContainerCgroup(container.id)
        before, cpu = time.perf_counter(), cgroup.usage().cpu_s
        time.sleep(3.0)
        idle = (cgroup.usage().cpu_s - cpu) / (time.perf_counter() - before)
        pair = _Pair(ip, f"bench/{secrets.token_hex(3)}")
        try:
            figures: dict[str, float] = {"ready_s": ready, "idle_cpu": idle}
            IMAGE_TAGS[kind] = image
            for label, count, qos, interval in (
                    ("", int(PACED_RATE * seconds), 0, 1 / PACED_RATE),
                    ("burst_", BURST_COUNT, 0, 0.0),
                    ("qos1_", QOS1_COUNT, 1, 0.0)):
                before, cpu = time.perf_counter(), cgroup.usage().cpu_s
                carried = pair.send(count, qos, interval)
                elapsed = time.perf_counter() - before
                used = cgroup.usage().cpu_s - cpu - idle * elapsed
                if carried < count * 0.95:
                    raise RuntimeError(f"{kind} carried {carried} of {count} at QoS {qos}")
                figures[f"{label}service_time"] = max(used, 1e-9) / carried
                if label == "burst_":
                    figures["burst_throughput"] = carried / elapsed
                if not label:
                    figures["alone_p50"] = statistics.median(pair.delays)
                    figures["alone_p95"] = statistics.quantiles(pair.delays, n=20)[-1]
            figures["memory_mib"] = cgroup.usage().memory / 1024**2
        finally:
            pair.close()
    finally:
        container.remove(force=True)
    print(f"part=alone kind={kind} " + " ".join(f"{key}={value:.6g}"
                                                for key, value in figures.items())
          + f" {load()}", flush=True)
    return figures


IOTCLOUD = Path(__file__).resolve().parents[1] / "experiments" / "iotcloud-scaling.yaml"
IOT_FEW, IOT_MANY, IOT_RATE, IOT_DURATION, IOT_JOIN = 4, 100, 5.0, 10.0, 5.0


def iotcloud_text() -> str:
    """The catalog's iotcloud-scaling on emu with RabbitMQ brokers, 100 drivers, and the
    exclusive-channel stream of the 96 that join at IOT_JOIN."""
    import yaml

    from topologies.documents import load_text

    data = load_text(IOTCLOUD.read_text(encoding="utf-8"))
    data.pop("sweep")
    topology = IOTCLOUD.parents[1] / "topologies" / f"{data['topology']}.yaml"
    data["topology"] = load_text(topology.read_text(encoding="utf-8"))
    nodes = {node["name"]: node for node in data["topology"]["nodes"]}
    nodes["broker"]["broker"] = {"kind": "rabbitmq"}
    nodes["driver"]["replicas"] = IOT_MANY
    first = ["driver-1", "driver-2", "driver-51", "driver-52"]  # two of each gateway's block
    (frames,) = data["workload"]["streams"]
    frames["sources"] = first
    data["workload"]["streams"].append({
        **frames, "name": "crowd", "channel": "exclusive", "start": f"{IOT_JOIN:g}s",
        "sources": [f"driver-{i}" for i in range(1, IOT_MANY + 1) if f"driver-{i}" not in first]})
    (spout,) = data["pipeline"]
    spout["reads"] = ["frames", "crowd"]
    data["run"] = {"backend": "emu", "duration": f"{IOT_DURATION:g}s", "drain": "2s", "seed": 1}
    return yaml.safe_dump(data, sort_keys=False)


def iotcloud() -> None:
    """IoTCloud's run on two RabbitMQs: each half's latency and their ratio."""
    import pyarrow.parquet as pq

    from experiments.loader import parse_text
    from experiments.runner import run_experiment

    with tempfile.TemporaryDirectory(prefix="foglab-bench-") as out:
        (outcome,) = run_experiment(parse_text(iotcloud_text(), file=str(IOTCLOUD)), Path(out))
        if outcome.error is not None:
            raise SystemExit(f"iotcloud error={outcome.error!r}")
        messages = pq.read_table(outcome.folder / "messages.parquet").to_pandas()
    messages = messages[~messages["lost"]]
    latency = messages["latency"] * 1e3
    few = latency[(messages["stream"] == "frames") & (messages["t_sent"] < IOT_JOIN)]
    many = latency[messages["t_sent"] >= IOT_JOIN + 1]
    figures = {"few_p50": few.median(), "few_p95": few.quantile(0.95),
               "many_p50": many.median(), "many_p95": many.quantile(0.95)}
    print("part=iotcloud " + " ".join(f"{k}={v:.4g}" for k, v in figures.items())
          + f" few_n={len(few)} many_n={len(many)} {load()}", flush=True)
    print(f"ratio_p50={figures['many_p50'] / figures['few_p50']:.3g} "
          f"ratio_p95={figures['many_p95'] / figures['few_p95']:.3g} "
          "(100 drivers over 4, the same run)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iotcloud", action="store_true",
                        help="IoTCloud's 4-to-100-driver run on RabbitMQ instead")
    parser.add_argument("--duration", type=float, default=20.0, help="each run's (s)")
    parser.add_argument("--rate", type=float, default=5.0, help="readings/s per sensor")
    parser.add_argument("--alone", type=float, default=10.0, help="paced seconds alone")
    parser.add_argument("--skip-runs", action="store_true", help="the brokers alone only")
    args = parser.parse_args()
    print(f"cores={os.cpu_count()} {load()}", flush=True)
    if args.iotcloud:
        iotcloud()
        return
    found: dict[str, dict[str, float]] = {kind: {} for kind in KINDS}
    for kind in KINDS:
        if not args.skip_runs:
            found[kind].update(experiment(kind, args.duration, args.rate) or {})
        found[kind].update(alone(kind, args.alone))
    mosquitto, rabbitmq = found["mosquitto"], found["rabbitmq"]
    for key in sorted(set(mosquitto) & set(rabbitmq)):
        if mosquitto[key] > 0:
            print(f"ratio_{key}={rabbitmq[key] / mosquitto[key]:.3g}")
    if "lat_p50" in mosquitto and "lat_p50" in rabbitmq:
        print(f"ratio={rabbitmq['lat_p50'] / mosquitto['lat_p50']:.3g} "
              "(rabbitmq over mosquitto: the runs' median latency)")
    from workloads.calibration import duration_text

    service = rabbitmq["service_time"]
    print(f"rabbitmq_like_service_time={duration_text(service)} "
          f"mosquitto_service_time={duration_text(mosquitto['service_time'])} {load()}")
    print(f"model: broker: {{kind: rabbitmq, service_time: {duration_text(service)}}}")
    # In a calibration profile's broker format (workloads.calibration.Broker).
    print("profile:\n" + "\n".join(f"  {line}" for line in (
        f"image: {IMAGE_TAGS['rabbitmq']}", f"size: {SIZE}B",
        f"service_time: {duration_text(service)}", f"rate: {PACED_RATE:g}/s",
        f"burst_service_time: {duration_text(rabbitmq['burst_service_time'])}",
        f"burst_throughput: {rabbitmq['burst_throughput']:.6g}/s",
        f"qos1_service_time: {duration_text(rabbitmq['qos1_service_time'])}")))


if __name__ == "__main__":
    main()
