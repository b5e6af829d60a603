"""Read grants made while a closed cluster runs: an operator's instance started on a node
its plan did not place it on (a migration's target, a recovery's or a replica's node, a
hybrid run's mobility-decided move, `foglab emu migrate`, `foglab emu apply`) is granted its
reads on that node just before it starts there, and loses them when it leaves.

Planning (emu.cluster.access.read_grants) grants each node what is placed on it at the
start; an operator that may move is no longer read by every node. The host's controller
(emu.control.commands.Controller) asks this module before each request that starts an instance
(STARTS: the request's arguments hold the instance's config) and after each that ends one
(LEAVES). One place holds the run's grants (`Grants`): the node -> operator -> filters
granted at run time, kept in the cluster's scratch folder (GRANTS_FILE, 0600, under a lock)
so that a later `foglab emu migrate` adds to what the run granted.

A grant rewrites the ACL in every broker of the run and has the broker read it again:
Mosquitto 2 frees and reloads its `acl_file` on SIGHUP (mosquitto.conf(5): "Existing
subscriptions will be affected after the reload"; the password file is reloaded too, and
clients already connected are not affected). The host then waits until each broker has
loaded this version: every ACL it writes carries a probe topic of its own
(`foglab/grants/<serial>/%u`), and a client logged in as the granted node publishes there
until its own message comes back, which happens only under the new ACL (a publish or a
delivery outside the ACL is dropped). No fixed settle: Mosquitto reloads on its next loop
turn, and a probe is what says it did.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from emu.cluster.access import Access, operator_filters
from emu.cluster.access import load as load_access
from emu.cluster.plan import MQTT_PORT

GRANTS_FILE = "grants.json"
LOCK_FILE = "grants.lock"
PROBE_ROOT = "foglab/grants"
PROBE_TIMEOUT_S = 10.0
PROBE_EVERY_S = 0.01


class GrantError(RuntimeError):
    """A grant the host could not make: the instance is not started without it."""


# The requests that start an operator's instance on the node they go to: where the
# instance's config is in the request's arguments (None: this request starts none).
STARTS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "install": lambda args: args,
    "migrate.prepare": lambda args: args.get("config") if args.get("role") == "target" else None,
    "migrate.recover": lambda args: args.get("config"),
    "migrate.spark.standby": lambda args: args.get("config"),
}
# The requests after whose success the node runs the operator (args["operator"]) no more: a
# migration's source released (a target released with `parallel` keeps it; one released with
# `abort` drops what it prepared), an uninstalled one.
LEAVES: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "migrate.release": lambda args: not args.get("parallel"),
    "uninstall": lambda args: True,
}


def covers(granted: str, wanted: str) -> bool:
    """Whether a subscription to `wanted` is delivered in full under a grant of `granted`
    (both MQTT filters): level by level, `#` takes the rest, `+` one level but not a `#`."""
    have, want = granted.split("/"), wanted.split("/")
    for index, level in enumerate(have):
        if level == "#":
            return True
        if index >= len(want):
            return False
        if level == "+":
            if want[index] == "#":
                return False
        elif level != want[index]:
            return False
    return len(have) == len(want)


class Brokers:
    """How the ACL reaches a run's brokers: `write(text)` puts it in every broker and has
    each read it again; `wait(login, topic)` returns once every broker delivers `topic` to
    `login` (the new ACL is in force). Variations by where the brokers run (a Docker
    Engine's containers: emu.engines.docker.acl_reload.ContainerBrokers)."""

    def write(self, text: str) -> None:
        raise NotImplementedError

    def wait(self, login: tuple[str, str], topic: str, timeout: float = PROBE_TIMEOUT_S
             ) -> None:
        at_once([lambda a=address: probe(a, login, topic, timeout, self.tls)
                 for address in self.addresses()])

    def addresses(self) -> list[str]:
        raise NotImplementedError

    tls: Any = None


class FoundBrokers(Protocol):
    """A cluster up on the host as its engine lists it for the grants
    (emu.engines.docker.acl_reload.listed_brokers): its scratch folder (where its secrets
    and grants are kept), each broker's image, and the ACL's way into the brokers."""

    cluster: str
    scratch: str | None
    images: Mapping[str, str]  # broker -> the name of the image it runs

    def brokers(self, tls: Any = None) -> Brokers: ...


class Refused(Brokers):
    """Brokers the host cannot give a new ACL: every grant fails, saying why."""

    def __init__(self, why: str) -> None:
        self.why = why

    def write(self, text: str) -> None:
        raise GrantError(self.why)

    def addresses(self) -> list[str]:
        return []


class ProcessBrokers(Brokers):
    """A Mosquitto process on this host (its pid, its ACL file, its address): for a broker
    the host runs itself (tests, `workloads.spark.local_broker`)."""

    def __init__(self, pid: int, acl: Path, address: str) -> None:
        self.pid, self.acl, self.address = pid, Path(acl), address

    def write(self, text: str) -> None:
        self.acl.write_text(text)
        os.kill(self.pid, 1)  # SIGHUP

    def addresses(self) -> list[str]:
        return [self.address]


def probe(address: str, login: tuple[str, str], topic: str, timeout: float,
          tls: Any = None) -> None:
    """Log in to the broker at `address` as `login`, subscribe to `topic` and publish there
    until the broker delivers one back: it then runs an ACL granting `topic` to that login."""
    import paho.mqtt.client as mqtt

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                         client_id=f"foglab-grant-{secrets.token_hex(4)}",
                         protocol=mqtt.MQTTv311)
    client.username_pw_set(*login)
    if tls is not None:
        client.tls_set_context(tls)
    back, subscribed = threading.Event(), threading.Event()
    client.on_message = lambda *args: back.set()
    client.on_subscribe = lambda *args: subscribed.set()
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    try:
        client.connect(host, int(port or MQTT_PORT), keepalive=30)
        client.loop_start()
        client.subscribe(topic, qos=0)
        if not subscribed.wait(timeout):
            raise GrantError(f"broker {address}: no SUBACK for the grant's probe in {timeout} s")
        while not back.wait(PROBE_EVERY_S):
            if time.monotonic() > deadline:
                raise GrantError(f"broker {address} did not take the new ACL within "
                                 f"{timeout} s (its probe {topic} never came back)")
            client.publish(topic, b"", qos=0)
    except OSError as error:
        raise GrantError(f"broker {address}: the grant's probe could not connect "
                         f"({error})") from None
    finally:
        with contextlib.suppress(Exception):
            client.disconnect()  # first: it wakes the loop, which loop_stop then joins at once
        client.loop_stop()


def at_once(calls: list[Callable[[], None]]) -> None:
    """Every call, the brokers' at once (each is a round trip to the engine or a broker);
    the first error raised after all have ended."""
    if len(calls) <= 1:
        for call in calls:
            call()
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, len(calls))) as pool:
        futures = [pool.submit(call) for call in calls]
    for future in futures:
        future.result()


class Grants:
    """A closed cluster's read grants at run time: what its plan placed (`access`), what was
    granted since (node -> operator -> filters, kept in `folder`), and the brokers that
    take them. `grant` before an instance starts on a node; `revoke` after it left."""

    def __init__(self, access: Access, brokers: Brokers, folder: Path | str | None = None
                 ) -> None:
        self.access = access
        self.brokers = brokers
        self.folder = Path(folder) if folder is not None else None
        self.granted: dict[str, dict[str, tuple[str, ...]]] = {}
        self._lock = threading.Lock()
        self.reloads = 0  # ACL versions this object wrote

    @classmethod
    def of_cluster(cls, found: FoundBrokers, tls: Any = None,
                   access: Access | None = None) -> Grants | None:
        """The grants of a cluster up on the host, as its engine lists it (`found`: e.g.
        emu.engines.docker.acl_reload.listed_brokers): None for an open cluster (no secrets in
        its scratch folder), or one whose brokers are not Mosquitto (a RabbitMQ broker loads
        its permissions at boot: a closed RabbitMQ run keeps planning's grants for every node
        an operator may move to). `access`: the cluster's secrets when its plan is at hand
        (its scratch folder's otherwise)."""
        access = load_access(found.scratch) or access
        if access is None:
            return None
        from emu.images import SERVICES

        if any(image != SERVICES.name for image in found.images.values()):
            return None
        if not found.images:  # a swarm's: its brokers' files are Docker configs
            return cls(access, Refused(f"cluster {found.cluster}'s brokers are not containers "
                                       "of this engine (a swarm's read their ACL from a "
                                       "Docker config, which cannot change while they run)"),
                       found.scratch)
        return cls(access, found.brokers(tls), found.scratch)

    # What a node holds ---------------------------------------------------------------------

    def held(self, node: str) -> list[str]:
        """Every filter the node may read now: its own topics and control (the patterns),
        what its plan placed on it, what was granted since."""
        from emu.cluster.access import CONTROL_READS, CONTROL_READWRITE, OWN

        patterns = (*OWN, *CONTROL_READWRITE, *CONTROL_READS, *self.access.common_reads)
        return [*(p.replace("%u", node) for p in patterns), *self.access.reads.get(node, ()),
                *(f for filters in self.granted.get(node, {}).values() for f in filters)]

    def missing(self, node: str, filters: Iterable[str]) -> list[str]:
        held = self.held(node)
        return sorted({f for f in filters if not any(covers(h, f) for h in held)})

    # Grant and revoke ----------------------------------------------------------------------

    def grant(self, node: str, operator: str, filters: Iterable[str]) -> bool:
        """Before `operator`'s instance starts on `node`: the filters it reads that the node
        does not hold, granted in every broker, returning once each runs the new ACL; False
        when the node held them all (nothing written)."""
        return bool(self.grant_many(operator, {node: list(filters)}))

    def grant_many(self, operator: str, filters: Mapping[str, Iterable[str]]) -> list[str]:
        """`grant` for several nodes at once (an install on every gateway): one new ACL and
        one reload of each broker for them all, not one a node; the nodes granted."""
        unknown = sorted(node for node in filters if node not in self.access.passwords)
        if unknown:
            raise GrantError(f"no node {', '.join(map(repr, unknown))} in the cluster's logins:"
                             " nothing granted")
        with self._state():
            wanted = {node: missing for node, wants in filters.items()
                      if (missing := self.missing(node, wants))}
            if not wanted:
                return []
            before = {n: dict(ops) for n, ops in self.granted.items()}
            for node, missing in wanted.items():
                ops = self.granted.setdefault(node, {})
                ops[operator] = tuple(sorted({*ops.get(operator, ()), *missing}))
            try:  # one node's probe: every broker reads the one file it was given
                self._reload(next(iter(wanted)), wait=True)
            except BaseException:
                self.granted = before  # as it was: the next version is written without it
                raise
            return sorted(wanted)

    def revoke(self, node: str, operator: str) -> bool:
        """After `operator`'s instance left `node`: what was granted to it there at run time
        taken back (what the plan placed stays). The brokers reload; the host does not wait
        for it (nothing waits on the node reading less)."""
        return bool(self.revoke_many(operator, [node]))

    def revoke_many(self, operator: str, nodes: Iterable[str]) -> list[str]:
        """`revoke` for several nodes at once: one new ACL for them all; the nodes revoked."""
        with self._state():
            found = [node for node in dict.fromkeys(nodes)
                     if operator in self.granted.get(node, {})]
            if not found:
                return []
            for node in found:
                del self.granted[node][operator]
                if not self.granted[node]:
                    del self.granted[node]
            self._reload(found[0], wait=False)
            return found

    def acl(self, serial: str | None = None) -> str:
        """The ACL of the grants now: the plan's, each node's run-time grants added."""
        extra = {node: sorted({f for filters in ops.values() for f in filters})
                 for node, ops in self.granted.items()}
        return self.access.acl_file(extra, probe=f"{PROBE_ROOT}/{serial}/%u" if serial else None)

    def _reload(self, node: str, wait: bool) -> None:
        serial = secrets.token_hex(6)
        self.brokers.write(self.acl(serial))
        self.reloads += 1
        self._save()
        if wait:
            self.brokers.wait(self.access.credentials(node), f"{PROBE_ROOT}/{serial}/{node}")

    # The controller's hooks ----------------------------------------------------------------

    def before(self, node: str, command: str, args: Mapping[str, Any]) -> None:
        """Before `command` goes to `node`: if it starts an operator's instance there, the
        instance's reads granted (a GrantError if that fails: the request must not go)."""
        self.before_all([node], command, args)

    def before_all(self, nodes: Iterable[str], command: str, args: Mapping[str, Any]) -> None:
        """`before` for a request that goes to several nodes (one grant for them all)."""
        config = STARTS[command](args) if command in STARTS else None
        if config:
            filters = operator_filters(config)
            self.grant_many(str(config["name"]), {node: filters for node in nodes})

    def after(self, node: str, command: str, args: Mapping[str, Any]) -> None:
        """After `node` answered `command` ok: if the instance left, its grants go."""
        self.after_all([node], command, args)

    def after_all(self, nodes: Iterable[str], command: str, args: Mapping[str, Any]) -> None:
        """`after` for the nodes that answered a request ok (one revocation for them all)."""
        if command in LEAVES and LEAVES[command](args) and args.get("operator"):
            self.revoke_many(str(args["operator"]), nodes)

    # Kept in the scratch folder, for the host's later commands -----------------------------

    @contextlib.contextmanager
    def _state(self) -> Iterator[None]:
        """The grants as the folder has them, under its lock, for one change."""
        with self._lock:
            if self.folder is None:
                yield
                return
            descriptor = os.open(self.folder / LOCK_FILE,
                                 os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX)
                self._load()
                yield
            finally:
                os.close(descriptor)

    def _load(self) -> None:
        assert self.folder is not None
        try:
            descriptor = os.open(self.folder / GRANTS_FILE, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return
        with os.fdopen(descriptor) as file:
            try:
                data = json.load(file)
                self.granted = {str(node): {str(op): tuple(map(str, filters))
                                            for op, filters in ops.items()}
                                for node, ops in data.items()}
            except (ValueError, AttributeError, TypeError) as error:
                raise GrantError(f"{self.folder / GRANTS_FILE}: not a cluster's grants "
                                 f"({type(error).__name__})") from None

    def _save(self) -> None:
        if self.folder is None:
            return
        temporary = self.folder / f".{GRANTS_FILE}.{secrets.token_hex(4)}"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o600)
        with os.fdopen(descriptor, "w") as file:
            json.dump({n: {o: list(f) for o, f in ops.items()} for n, ops in self.granted.items()},
                      file, sort_keys=True)
        os.replace(temporary, self.folder / GRANTS_FILE)
