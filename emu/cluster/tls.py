"""TLS on a closed cluster's brokers and ZooKeeper (`run.tls: true`, with `access: closed`):
a certificate authority per run, a certificate per server, the servers' configs and the host's
clients speaking TLS only (emu.cluster.closing.tls_plan makes a plan's servers and agents use
them). Plain data and text, without Docker.

What it keeps out: a client on the run's networks (or on the nodes' addresses, on several
hosts) that reads or alters the run's traffic, passwords included, as closed alone lets it.

- The authority lives for the plan: its key signs the servers' certificates and is dropped;
  agents and the host trust only it (ECDSA P-256, valid a year: a run is shorter).
- Each broker and ZooKeeper server gets a certificate naming its container, its node and its
  role (ROLE_NAMES). Clients reach servers through the links' relays, at addresses no
  certificate can name, so agents check the role's name: a gateway's MQTT client takes only a
  broker of this run, its ZooKeeper client only a ZooKeeper server of this run. The host's
  clients, at the addresses Docker gave the containers, check the chain only.
- Same ports: TLS replaces plain on 1883 and 2181 (no 8883 beside a plain 1883): every
  address of the plan, the links' relays and the host's probes name those ports, and a second
  port would leave the plain one open. A plain client gets no answer there.
- Mosquitto: its listener with cafile, certfile and keyfile. ZooKeeper 3.8: secureClientPort
  on the Netty connection factory, its keystore and truststore PEM files, no client
  certificates (the digest identity is the login). An ensemble's quorum stays plain, on the
  run's own networks. RabbitMQ: refused (its MQTT plugin's TLS listener, `rabbitmq_tls_conf`,
  is written but a run with it did not start: not finished).
- The agent imports the real ssl only then (emu.agent.__main__.without_openssl is skipped):
  what that costs a gateway's start is in docs/access.md.

Not covered: a Spark operator's own MQTT clients (workloads.spark) speak plain MQTT: refused.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TLS_DIR = "/etc/foglab/tls"
CA_FILE = f"{TLS_DIR}/ca.pem"
CERT_FILE = f"{TLS_DIR}/server.pem"
KEY_FILE = f"{TLS_DIR}/server.key"
# ZooKeeper's PEM keystore: the key and its certificate in one file.
KEYSTORE_FILE = f"{TLS_DIR}/keystore.pem"
# The name each role's certificates carry, which the agents' clients check (emu.agent.tls).
ROLE_NAMES = {"broker": "broker.foglab", "zookeeper": "zookeeper.foglab"}
VALID_DAYS = 365
ZOOKEEPER_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"
# Netty's jars, which Debian's zookeeper.jar does not list in its manifest (its NIO factory,
# the plain one, needs none): added to the server's class path with TLS.
NETTY_JARS = tuple(f"/usr/share/java/netty-{name}.jar" for name in (
    "common", "buffer", "transport", "resolver", "codec", "handler",
    "transport-native-unix-common", "transport-native-epoll"))


@dataclass(frozen=True)
class TLSPlan:
    """A TLS cluster's trust: the authority's certificate (PEM), which every client loads."""

    ca: str


def _name(text: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def _pem_key(key) -> str:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def issue(servers: Mapping[str, Sequence[str]], authority: str = "foglab run"
          ) -> tuple[str, dict[str, tuple[str, str]]]:
    """A new authority's certificate (PEM), and for each server its (certificate, key) in PEM
    naming `servers[server]` (DNS names); the authority's key is not kept."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import Encoding
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(authority)
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(until)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                       False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    issued = {}
    for server, names in servers.items():
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(_name(names[0])).issuer_name(ca_name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now).not_valid_after(until)
                .add_extension(x509.SubjectAlternativeName(
                    [x509.DNSName(name) for name in dict.fromkeys(names)]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                               critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        issued[server] = (cert.public_bytes(Encoding.PEM).decode(), _pem_key(key))
    return ca.public_bytes(Encoding.PEM).decode(), issued


def mosquitto_tls_conf(conf: str) -> str:
    """A mosquitto.conf whose listener speaks TLS only, with the run's certificates."""
    lines = conf.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("listener ")), None)
    if at is None:
        raise ValueError("run.tls: the broker's mosquitto.conf has no listener line to put "
                         "TLS on")
    tls = ["# TLS only (emu.cluster.tls)", f"cafile {CA_FILE}", f"certfile {CERT_FILE}",
           f"keyfile {KEY_FILE}", "tls_version tlsv1.2"]
    return "\n".join([*lines[:at + 1], *tls, *lines[at + 1:]]) + "\n"


def zookeeper_tls_conf(conf: str) -> str:
    """A zoo.cfg whose client port speaks TLS only (secureClientPort, Netty's factory)."""
    lines = conf.splitlines()
    port = next((line.partition("=")[2] for line in lines if line.startswith("clientPort=")),
                None)
    if port is None:
        raise ValueError("run.tls: the ZooKeeper server's zoo.cfg has no clientPort")
    kept = [line for line in lines if not line.startswith(("clientPort=", "serverCnxnFactory"))]
    return "\n".join([
        *kept, "# TLS only on the client port (emu.cluster.tls)", f"secureClientPort={port}",
        f"serverCnxnFactory={ZOOKEEPER_FACTORY}",
        f"ssl.keyStore.location={KEYSTORE_FILE}", "ssl.keyStore.type=PEM",
        f"ssl.trustStore.location={CA_FILE}", "ssl.trustStore.type=PEM",
        # The clients' login is the digest identity (emu.cluster.access), not a certificate.
        "ssl.clientAuth=none"]) + "\n"


def rabbitmq_tls_conf(conf: str) -> str:
    """A rabbitmq.conf whose MQTT listener speaks TLS only, on the plain one's port."""
    lines = conf.splitlines()
    port = next((line.partition("=")[2].strip() for line in lines
                 if line.startswith("mqtt.listeners.tcp.default")), None)
    if port is None:
        raise ValueError("run.tls: the broker's rabbitmq.conf has no MQTT listener")
    kept = [line for line in lines if not line.startswith("mqtt.listeners.")]
    return "\n".join([
        *kept, "# TLS only (emu.cluster.tls)", "mqtt.listeners.tcp = none",
        f"mqtt.listeners.ssl.default = {port}", f"ssl_options.cacertfile = {CA_FILE}",
        f"ssl_options.certfile = {CERT_FILE}", f"ssl_options.keyfile = {KEY_FILE}",
        "ssl_options.verify = verify_none", "ssl_options.fail_if_no_peer_cert = false",
        "ssl_options.versions.1 = tlsv1.2", "ssl_options.versions.2 = tlsv1.3"]) + "\n"


def conf_path(container) -> str:
    """The config file a server's command names (`-c PATH`, zoo.cfg last), which the plan
    wrote among its files (a container of emu.cluster.plan)."""
    paths = [path for path, _ in container.files]
    named = container.command[-1]
    if named not in paths:
        raise ValueError(f"run.tls: {container.node}'s config {named} is not written by the "
                         "plan, so TLS cannot be put in it")
    return named


# The host's clients ---------------------------------------------------------------------------

_ca_files: dict[str, str] = {}


def _ca_file(ca: str) -> str:
    """A file holding the authority's certificate (public), for kazoo, which takes a path;
    one per authority, removed when this process exits."""
    if ca not in _ca_files:
        import atexit
        import os
        import tempfile

        handle, path = tempfile.mkstemp(prefix="foglab-ca-", suffix=".pem")
        with os.fdopen(handle, "w") as file:
            file.write(ca)
        atexit.register(lambda: os.path.exists(path) and os.remove(path))
        _ca_files[ca] = path
    return _ca_files[ca]


def tls_options(plan) -> dict:
    """KazooClient's further arguments for the host's sessions on a plan's ZooKeeper: TLS
    with the run's authority when the plan has it, else none. The host reaches the servers at
    the addresses Docker gave them: the chain is checked, not the name."""
    tls = getattr(plan, "tls", None)
    if tls is None:
        return {}
    return {"use_ssl": True, "ca": _ca_file(tls.ca), "verify_certs": True,
            "check_hostname": False}


def host_context(plan):
    """An ssl context for the host's MQTT clients on a plan's brokers (None: plain)."""
    tls = getattr(plan, "tls", None)
    if tls is None:
        return None
    import ssl

    context = ssl.create_default_context(cadata=tls.ca)
    context.check_hostname = False  # container addresses: the chain is checked
    # paho on the host's selector loop (emu.control.mqtt_loop) writes from the caller's thread while
    # the loop reads: TLS 1.2 has no post-handshake messages a read would answer meanwhile.
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    return context


def tls_login(plan):
    """The host's MQTT login on a plan's brokers (emu.cluster.access.host_login), carrying
    the TLS context its clients connect with when the plan has TLS."""
    from emu.agent.mqtt import Login
    from emu.cluster.access import host_login

    login = host_login(plan)
    context = host_context(plan)
    if login is None or context is None:
        return login
    return Login(login, context)
