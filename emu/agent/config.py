"""What the host tells an agent to run: its node, brokers, drivers and operators, as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from emu.agent.timebase import TimeBase

# The environment variable that carries an AgentConfig into a container, without its
# secrets: those are in SECRETS_FILE.
CONFIG_VARIABLE = "FOGLAB_AGENT"
# A closed cluster's secrets for the agent (SECRET_FIELDS, JSON), in a file the host writes
# into the container before it starts, root's and 0400 (emu.engines.docker.engine), not in the
# environment: `docker inspect` shows a container's environment to anyone who may use the
# engine, and its child processes inherit it. SECRETS_VARIABLE may name another path (a
# swarm's Docker secret).
SECRETS_FILE = "/run/foglab/secrets.json"
SECRETS_VARIABLE = "FOGLAB_SECRETS"
SECRET_FIELDS = ("mqtt_password", "zookeeper_auth")
# Where a node's records live inside its container (a host directory is mounted there).
RECORDS_DIR = "/records"
# The topology's node kinds that run an agent on emu (emu.cluster.plan gives each a container
# with one; the deployment, recovery and broadcasts act on them).
AGENT_KINDS = ("gateway", "cloud_vm")


@dataclass
class DriverConfig:
    """One stream emitted by the devices this gateway serves (seed 001: a driver instance).

    `rate` is messages per second per device; `access` is the device-to-gateway link the
    agent emulates: each message takes `size` bytes at `access_bandwidth` on its device's radio
    (behind that device's earlier ones), then latency plus jitter, and is dropped with `loss`.
    """

    stream: str
    devices: list[str]
    rate: float
    arrivals: str = "poisson"          # periodic | poisson
    size: int = 200                    # bytes of payload
    format: str = "senml"              # senml | json | csv
    qos: int = 0
    channel: str = "shared"            # shared: <stream>/<gateway>; exclusive: <stream>/<gw>/<dev>
    start: float = 0.0                 # seconds after the run's epoch
    access_latency: float = 0.0
    access_jitter: float = 0.0
    access_loss: float = 0.0
    access_bandwidth: float | None = None  # bits/s of the device's radio; None: no serialising
    # A local operator reading this stream takes it in-process and the broker never sees it;
    # `forward` publishes it to the broker as well, for readers on other nodes.
    forward: bool = False
    # The stream's rate shape as its fields (workloads.shapes), None for a constant rate: the
    # rate at run time t is `rate` times the shape's factor at t.
    shape: dict[str, Any] | None = None
    # Simulated load (the hybrid backend): the host's load generator emits these devices'
    # messages on the node's load topic (emu.agent.protocol.load_topic); the agent emits none
    # and takes those it receives as this driver's (local readers, `forward`).
    load: bool = False


@dataclass
class OperatorConfig:
    """An operator instance: a task reading topic filters; outputs go to `<writes>/<node>`,
    no `writes` makes it a sink that records what reaches it."""

    name: str
    task: str = "passthrough"
    params: dict = field(default_factory=dict)
    reads: list[str] = field(default_factory=list)
    writes: str | None = None
    # A window over the task's outputs (emu.agent.operators.WindowConfig): seconds of a
    # tumbling time count, or an object of workloads.windows.Window's fields (kind, size,
    # slide, basis, aggregate) and `field`, what a sum or average takes of a reading.
    window: float | dict | None = None
    engine: str = "python"             # python | spark (spark: cloud nodes only)
    # Outputs per input, 0 to 1, decided per input as the simulator does (a running credit).
    selectivity: float = 1.0
    # The node's records directory: the operator notes there (filtered.csv) every input it
    # passed nothing on for; None: it notes nothing.
    records: str | None = None
    # The client id of the instance's own persistent MQTT session, through which it reads its
    # input (emu.agent.migration: what makes it movable); None: it reads through the node's.
    session: str | None = None
    # Seconds between the instance's checkpoints in ZooKeeper (emu.agent.checkpoint), from which
    # another node restores it after a crash (workloads.recovery); None: no checkpoints.
    checkpoint: float | None = None
    # The operator's latency bound (workloads.replication): the instance notes each input's
    # latency, its emission to the end of its processing, for the host to read
    # (`operator.delays`); None: it notes none.
    slo: float | None = None
    # The broker (its node's name) holding the instance's input session: the broker its input
    # is published to, where the instance started. An instance that moves, is re-placed or
    # replicated to a node behind another broker reads there still, over that node's link
    # to it (AgentConfig.other_brokers), or the input the broker holds would be lost.
    # None: the node's own broker (the cluster's plan names the broker of the node it starts
    # on); "": the broker of whichever node runs it (a hybrid run's follow instance, whose
    # input is a moving device's, published through whatever gateway it is attached to).
    broker: str | None = None
    # The job the operator belongs to (workloads.jobs: a job's operators are named JOB-NAME),
    # kept by the agent so that `foglab emu apply` reads the running jobs back from the agents
    # (emu.live.apply); None: installed as an operator of no named job (its own name is its job's).
    job: str | None = None


# On a swarm, a node's links are relayed by the link agent of the swarm node it runs on
# (emu.links.link_agent), which listens on that node's own network stack: the config names it by
# NODE_HOST, and the agent reaches it at its default route's gateway, its node from inside
# its container (each node's gateway address may differ, so the host cannot write it).
NODE_HOST = "foglab-node"
ROUTES = "/proc/net/route"


def default_gateway(routes: str = ROUTES) -> str:
    """The gateway of this network namespace's default route (IPv4), from the kernel's table."""
    with open(routes) as file:
        for line in file.read().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 2 and fields[1] == "00000000" and fields[2] != "00000000":
                raw = bytes.fromhex(fields[2])[::-1]  # the table is in host (little-endian) order
                return ".".join(str(b) for b in raw)
    raise OSError(f"no default route with a gateway in {routes}: {NODE_HOST} cannot be resolved")


def local_address(address: str, routes: str = ROUTES) -> str:
    """`address` ("host:port", or several joined by commas) with NODE_HOST resolved."""
    if NODE_HOST not in address:
        return address
    gateway = default_gateway(routes)
    return ",".join(gateway + entry.strip()[len(NODE_HOST):]
                    if entry.strip().startswith(NODE_HOST + ":") else entry
                    for entry in address.split(","))


def localized(config: AgentConfig, routes: str = ROUTES) -> AgentConfig:
    """The config with every address naming NODE_HOST resolved where the agent runs."""
    if NODE_HOST not in config.to_json():
        return config
    return replace(config, mqtt=local_address(config.mqtt, routes),
                   zookeeper=local_address(config.zookeeper, routes),
                   spares={k: local_address(v, routes) for k, v in config.spares.items()},
                   other_brokers={k: local_address(v, routes)
                                  for k, v in config.other_brokers.items()})


@dataclass
class AgentConfig:
    node: str
    mqtt: str                          # host:port of the broker this node talks to
    zookeeper: str = ""                # host:port[,host:port...]; empty: no registration
    kind: str = "gateway"
    drivers: list[DriverConfig] = field(default_factory=list)
    operators: list[OperatorConfig] = field(default_factory=list)
    records: str = RECORDS_DIR
    seed: int = 0
    epoch: float = 0.0                 # the agent's clock (timebase().now()) at the run's t = 0
    index: int = 0                     # this node's number in the run: message ids start here
    session_timeout: float = 10.0      # ZooKeeper session: how long a dead agent stays registered
    # The fence (scenario.recovery): when the node's ZooKeeper session expired, the host took
    # the node for dead and re-places its instances that read through a session of their own;
    # the agent, alive after all (a loaded host stalled it), stops them, leaving their input
    # in their sessions for the instances that take them over (emu.agent.agent.Agent.fence).
    fence: bool = False
    # Drivers wait for a `set run.epoch` request: every node of a run starts at one epoch.
    hold: bool = False
    # Starts of this node's agent before this one in the run (0: the first; `revived`).
    incarnation: int = 0
    # Spare brokers this node's drivers may move to (workloads.broker_scaling): node -> its
    # address ("host:port"); a `drivers.broker` request names one.
    spares: dict[str, str] = field(default_factory=dict)
    # The other brokers of the run (brokers are not bridged): broker -> address. The node's
    # operators reading through its session read there too, as a sim broker hands its
    # messages to every reader (emu.agent.brokers.OtherBroker); the node answers requests
    # and publishes on its own.
    # Also the brokers holding the input sessions of instances that may move to this node
    # (OperatorConfig.broker), which a node reading nothing through its own session only
    # connects to when it takes such an instance over.
    other_brokers: dict[str, str] = field(default_factory=dict)
    # The name of the broker node `mqtt` reaches ("": not known, a config made by hand).
    broker: str = ""
    # The run's time dilation (emu.agent.timebase): K and the host time both clocks agree at.
    # The agent's clock, and so its epoch and records, are emulated time.
    dilation: float = 1.0
    time_anchor: float = 0.0
    # A closed cluster (emu.cluster.access): the node's MQTT login, and ZooKeeper's digest
    # identity (`user:password`) its sessions add and its znodes' ACL names. Empty: open.
    mqtt_user: str = ""
    mqtt_password: str = ""
    zookeeper_auth: str = ""
    # Whether the node's persistent MQTT sessions speak MQTT 5 (emu.agent.mqtt.use_mqtt5):
    # false in a cluster with a RabbitMQ broker (emu.cluster.plan), MQTT 3.1.1 then.
    mqtt5: bool = True
    # A cluster with TLS (emu.cluster.tls): the run's authority's certificate (PEM, public),
    # which the node's MQTT and ZooKeeper clients trust alone (emu.agent.tls). Empty: plain,
    # and the agent keeps OpenSSL out of its process (emu.agent.__main__.without_openssl).
    tls_ca: str = ""
    # A Spark standalone cluster (a topology's `spark:`; emu.agent.spark_cluster): this VM's
    # daemon (`spark_role`'s mapping, empty: none), the master's URL its `engine: spark` jobs
    # drive (empty: local mode), and where their work goes, a folder every VM of the cluster
    # mounts at the same path (executors read the source's journal by path).
    spark: dict = field(default_factory=dict)
    spark_master: str = ""
    spark_work: str = ""

    def timebase(self) -> TimeBase:
        return TimeBase(self.dilation, self.time_anchor)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> AgentConfig:
        data = json.loads(text)
        data["drivers"] = [DriverConfig(**d) for d in data.get("drivers", [])]
        data["operators"] = [OperatorConfig(**o) for o in data.get("operators", [])]
        return cls(**data)


# Written by the host into a crashed node's records directory before its container starts
# again (emu.engines.docker.engine.Cluster.revive): what the agent started again needs to know.
REVIVAL_FILE = "revival.json"


def revived(config: AgentConfig) -> AgentConfig:
    """The config of an agent started again after its node crashed, from the host's revival
    file if there is one: the run's epoch (its drivers go on at once on the run's schedule,
    its windows on the run's grid), its incarnation (its messages' ids number apart from the
    earlier ones', emu.agent.protocol.incarnation_sequence), and the operators that left the
    node meanwhile (re-placed by recovery or migrated), which it does not start again."""
    import os

    path = os.path.join(config.records, REVIVAL_FILE)
    try:
        with open(path) as file:
            revival = json.load(file)
        away = set(revival.get("away", ()))
        return replace(config, epoch=float(revival["epoch"]), hold=False,
                       incarnation=int(revival["incarnation"]),
                       operators=[o for o in config.operators if o.name not in away])
    except FileNotFoundError:
        return config
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise ValueError(f"{path} is no revival (epoch, incarnation, away): {error!r}"
                         ) from None


def without_secrets(config: AgentConfig) -> tuple[AgentConfig, dict[str, str]]:
    """The config with its secrets blanked, for the environment, and the secrets set, for
    SECRETS_FILE (empty for an open cluster's)."""
    found = {name: getattr(config, name) for name in SECRET_FIELDS if getattr(config, name)}
    return replace(config, **dict.fromkeys(found, "")), found


def secrets_text(config: AgentConfig) -> str | None:
    """SECRETS_FILE's text for a config, None when it has no secrets."""
    found = without_secrets(config)[1]
    return json.dumps(found, sort_keys=True) if found else None


def with_secrets(config: AgentConfig, path: str = SECRETS_FILE) -> AgentConfig:
    """The config with the secrets of `path` filled in; as it is when there is no such file
    (an open cluster). A file that is no secrets' object is an error naming the path and the
    field, never its content."""
    try:
        with open(path) as file:
            text = file.read()
    except FileNotFoundError:
        return config
    try:
        found = json.loads(text)
    except ValueError:
        raise ValueError(f"{path} is not JSON: an object of {', '.join(SECRET_FIELDS)}"
                         ) from None
    if not isinstance(found, dict):
        raise ValueError(f"{path} is not a JSON object of {', '.join(SECRET_FIELDS)}")
    for name, value in found.items():
        if name not in SECRET_FIELDS or not isinstance(value, str):
            raise ValueError(f"{path}: field {name!r} is not one of {', '.join(SECRET_FIELDS)} "
                             f"with a string value")
    return replace(config, **found)


def load_config(environ: Mapping[str, str]) -> AgentConfig:
    """The agent's config: CONFIG_VARIABLE's JSON with the secrets of its secrets file
    (SECRETS_VARIABLE's path, or SECRETS_FILE). KeyError if CONFIG_VARIABLE is not set."""
    config = AgentConfig.from_json(environ[CONFIG_VARIABLE])
    return with_secrets(config, environ.get(SECRETS_VARIABLE) or SECRETS_FILE)
