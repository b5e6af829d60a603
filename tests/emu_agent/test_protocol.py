"""The agent's wire protocol and what it may import: no MQTT broker needed."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from emu.agent import mqtt as agent_mqtt
from emu.agent.config import REVIVAL_FILE, AgentConfig, DriverConfig, OperatorConfig, revived
from emu.agent.protocol import (
    ALL_REQUESTS,
    LOAD_SEQUENCE,
    SEQUENCE_BITS,
    Envelope,
    Request,
    RequestError,
    incarnation_sequence,
    matches,
    message_id,
    request_topic,
    response,
    stream_topic,
    valid_filter,
)
from workloads.spec import StreamSpec

from .conftest import PROJECT_ROOT


@pytest.mark.parametrize("channel", ["shared", "exclusive"])
def test_stream_topics_follow_the_stream_spec(channel: str) -> None:
    spec = StreamSpec(name="city", sources=["sensor-*"], rate=1.0, channel=channel)
    assert stream_topic("city", "gw-3", "sensor-7", channel) == spec.topic("sensor-7", "gw-3")


@pytest.mark.parametrize("topic_filter,topic,expected", [
    ("city/#", "city/gw-1", True), ("city/#", "city", True), ("city/+", "city/gw-1/d-1", False),
    ("city/+/+", "city/gw-1/d-1", True), ("+/gw-1", "clean/gw-1", True), ("#", "$SYS/x", False),
    ("city", "city/gw-1", False), ("$share/g/city/#", "city/gw-2", True),
    ("$share/g/city/+", "city/gw-2/d-1", False), ("clean/gw-1", "clean/gw-1", True),
])
def test_topic_filters_match_by_the_mqtt_rules(topic_filter: str, topic: str,
                                               expected: bool) -> None:
    assert matches(topic_filter, topic) is expected


def test_bad_topic_filters_are_refused() -> None:
    assert valid_filter("city/#") and valid_filter("$share/g/city/+")
    for bad in ("city/#/x", "ci+ty", "", "$share/g"):
        assert not valid_filter(bad), bad


def test_message_ids_put_the_node_above_its_sequence() -> None:
    first, later = message_id(3, 0), message_id(3, 12345)
    assert first >> SEQUENCE_BITS == 3 and later & ((1 << SEQUENCE_BITS) - 1) == 12345
    assert message_id(4, 0) > message_id(3, (1 << SEQUENCE_BITS) - 1)
    with pytest.raises(ValueError, match="bits"):
        message_id(1, 1 << SEQUENCE_BITS)


def test_an_envelope_is_compact_json_and_round_trips() -> None:
    envelope = Envelope(message_id(2, 7), "city", "sensor-1", 1700000000.123456, 0, '[{"n":1}]')
    payload = envelope.encode()
    assert json.loads(payload) == {"id": (2 << 40) | 7, "stream": "city", "src": "sensor-1",
                                   "t": 1700000000.123456, "hops": 0, "body": '[{"n":1}]'}
    assert b" " not in payload
    odd = Envelope(1, 'str"eam', "münchen", 0.1, 3, '{"a": "b\\n"}')
    assert odd.encode() == json.dumps({"id": 1, "stream": 'str"eam', "src": "münchen",
                                       "t": 0.1, "hops": 3, "body": '{"a": "b\\n"}'},
                                      separators=(",", ":")).encode()
    assert Envelope.decode(odd.encode()) == odd
    assert Envelope.decode(payload) == envelope
    assert envelope.passed_on("out") == Envelope(envelope.id, "city", "sensor-1", envelope.t,
                                                 1, "out")
    with pytest.raises(ValueError, match="envelope"):
        Envelope.decode(b'{"id": 1}')


def test_requests_say_what_is_wrong_with_them() -> None:
    good = Request("r1", "ping", "foglab/mgmt/controller/x/res", {})
    assert Request.decode(good.encode()) == good
    cases = [
        (b"not json", "not JSON", None, None),
        (b'{"id": "a", "command": "ping"}', "reply", "a", None),
        (b'{"id": "a", "command": "reboot", "reply": "r"}', "unknown command 'reboot'", "a", "r"),
        (b'{"id": "a", "command": "set", "reply": "r", "args": [1]}', "args", "a", "r"),
        (b'{"command": "ping", "reply": "r"}', "'id'", None, "r"),
    ]
    for payload, message, request_id, reply in cases:
        with pytest.raises(RequestError, match=message) as caught:
            Request.decode(payload)
        assert (caught.value.request_id, caught.value.reply) == (request_id, reply)
    assert "install" in str(pytest.raises(RequestError, Request.decode,
                                          b'{"id":"a","command":"x","reply":"r"}').value)


def test_a_response_has_the_documented_shape() -> None:
    data = json.loads(response("r1", "gw-1", False, "update: unknown operator 'x'", 12.5))
    assert data == {"id": "r1", "node": "gw-1", "ok": False,
                    "error": "update: unknown operator 'x'", "t": 12.5}
    assert request_topic("gw-1") == "foglab/mgmt/gw-1/req"
    assert ALL_REQUESTS == "foglab/mgmt/all/req"


def test_the_config_round_trips_with_its_new_fields() -> None:
    config = AgentConfig(node="gw-1", mqtt="broker:1883", session_timeout=4.0,
                         drivers=[DriverConfig("city", ["d-1"], 2.0, forward=True)],
                         operators=[OperatorConfig("f", reads=["city/#"], window=5.0)])
    assert AgentConfig.from_json(config.to_json()) == config


def test_an_agent_started_again_takes_the_hosts_revival(tmp_path: Path) -> None:
    config = AgentConfig(node="gw-1", mqtt="broker:1883", records=str(tmp_path), hold=True,
                         operators=[OperatorConfig("f", reads=["city/#"]),
                                    OperatorConfig("g", reads=["city/#"])])
    assert revived(config) == config  # no revival file: a first start
    (tmp_path / REVIVAL_FILE).write_text(json.dumps({"epoch": 1234.5, "incarnation": 2,
                                                     "away": ["g"]}))
    again = revived(config)
    assert (again.epoch, again.incarnation, again.hold) == (1234.5, 2, False)
    assert [o.name for o in again.operators] == ["f"]
    (tmp_path / REVIVAL_FILE).write_text('{"epoch": 1}')
    with pytest.raises(ValueError, match="revival.json is no revival.*incarnation"):
        revived(config)


def test_each_incarnation_numbers_its_messages_apart_below_the_load_generators() -> None:
    assert incarnation_sequence(0) == 0
    first, second = incarnation_sequence(1), incarnation_sequence(2)
    assert second - first == 1 << 32 and message_id(3, second) > message_id(3, first)
    assert incarnation_sequence(127) < LOAD_SEQUENCE
    with pytest.raises(ValueError, match="at most 128 starts"):
        incarnation_sequence(128)


def test_the_client_is_made_for_paho_1_6_as_for_2(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple] = []

    class OldClient:  # paho 1.6: no CallbackAPIVersion, callbacks without properties
        def __init__(self, *args: object, **kwargs: object) -> None:
            made.append((args, kwargs))

    client_module = types.ModuleType("paho.mqtt.client")
    client_module.Client = OldClient  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "paho.mqtt.client", client_module)
    import paho.mqtt

    monkeypatch.setattr(paho.mqtt, "client", client_module, raising=False)
    agent_mqtt.new_client("gw-1")
    assert made == [((), {"client_id": "gw-1", "clean_session": True})]
    assert agent_mqtt.connected(0) and not agent_mqtt.connected(5)


def test_the_client_uses_version_2_callbacks_on_paho_2() -> None:
    import paho.mqtt.client as mqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.reasoncodes import ReasonCode

    client = agent_mqtt.new_client("gw-1")
    assert client._callback_api_version == mqtt.CallbackAPIVersion.VERSION2
    assert agent_mqtt.connected(ReasonCode(PacketTypes.CONNACK, "Success"))
    assert not agent_mqtt.connected(ReasonCode(PacketTypes.CONNACK, "Not authorized"))


FORBIDDEN = ("numpy", "pydantic", "rich", "pandas", "docker", "experiments", "sim",
             "topologies", "workloads.spec", "yaml")
# What an idle gateway must not load: under QEMU every module costs CPU and memory per gateway.
# (paho itself loads platform, and logging traceback.)
# workloads.topics (no imports of its own) gives the agent its topic rules from the start.
NOT_WHEN_IDLE = ("numpy", "kazoo", "workloads.riot", "workloads.windows", "workloads.migration",
                 "workloads.shapes", "emu.agent.spark", "subprocess", "csv", "_ssl", "_hashlib")
IMPORTS = """
import sys
from emu.agent.__main__ import main, without_openssl
without_openssl()  # as main() does
from emu.agent.agent import Agent
from emu.agent.config import AgentConfig, DriverConfig, OperatorConfig
from emu.agent.operators import Operator
agent = Agent(AgentConfig(node="n", mqtt="127.0.0.1:1", records=sys.argv[1],
                          zookeeper="127.0.0.1:1", session_timeout=1.0,
                          drivers=[DriverConfig("city", ["d"], 1.0)],
                          operators=[OperatorConfig("p", reads=["city/#"])]))
agent.registration.start()
agent.drivers.by_stream["city"].body(agent.drivers.by_stream["city"].devices[0], 0.0)
import paho.mqtt.client
print(" ".join(sorted(n for n, m in sys.modules.items() if m is not None)))
if sys.argv[2:]:  # then an operator running a RIoTBench task, and a CSV stream
    from emu.agent.drivers import Driver
    Operator(OperatorConfig("f", task=sys.argv[2], reads=["city/#"]), "n", 0.0)
    driver = Driver(DriverConfig("taxi", ["t"], 1.0, format="csv"), "n", "seed")
    driver.body(driver.devices[0], 0.0)
    print(" ".join(sorted(n for n, m in sys.modules.items() if m is not None)))
"""


def loaded_modules(records: Path, *task: str) -> list[set[str]]:
    """sys.modules of an agent process once it runs idle, and after the task's operator."""
    printed = subprocess.run([sys.executable, "-c", IMPORTS, str(records), *task],
                             cwd=PROJECT_ROOT, capture_output=True, text=True,
                             check=True).stdout.splitlines()
    return [set(line.split()) for line in printed]


def under(modules: set[str], names: tuple[str, ...]) -> set[str]:
    return {m for m in modules if any(m == n or m.startswith(n + ".") for n in names)}


def test_the_agent_imports_only_what_the_gateway_image_has(tmp_path) -> None:
    """Stdlib, paho, workloads.riot and workloads.operator_engines (the engines' registry,
    which the gateway image ships: emu.images.GATEWAY) (no kazoo: emu.agent.zookeeper
    registers); numpy only once a task needs it."""
    idle, working = loaded_modules(tmp_path, "range_filter")
    assert under(idle, FORBIDDEN + ("kazoo",)) == set()
    assert under(working, tuple(f for f in FORBIDDEN if f != "numpy") + ("kazoo",)) == set()
    for modules in (idle, working):
        project = {name.split(".")[0] for name in modules if name.startswith(("emu", "workloads"))}
        assert project <= {"emu", "workloads"}
        assert not [name for name in modules if name.startswith("workloads.")
                    and not name.startswith(("workloads.riot", "workloads.topics",
                                             "workloads.operator_engines"))]


def test_an_idle_agent_leaves_the_riot_tasks_until_an_operator_needs_them(tmp_path) -> None:
    idle, working = loaded_modules(tmp_path, "range_filter")
    assert "emu.agent.zookeeper" in idle and "paho.mqtt.client" in idle
    assert under(idle, NOT_WHEN_IDLE) == set()
    assert {"workloads.riot.tasks", "workloads.riot.senml"} <= working
    # numpy only for the tasks that predict from a trained model: the first install of a
    # filter on a few hundred gateways would otherwise import it in each under QEMU at once.
    assert under(working, ("numpy", "_ssl", "_hashlib")) == set()


def test_without_openssl_the_agent_refuses_tls_by_name() -> None:
    script = """
from emu.agent.__main__ import without_openssl
without_openssl()
import hashlib
from emu.agent.mqtt import new_client
assert hashlib.sha256(b"foglab").hexdigest().startswith("b2")
for make_tls in (lambda c: c.tls_set_context(), lambda c: c.tls_set()):
    try:
        make_tls(new_client("x"))
    except (AttributeError, ValueError) as error:  # paho 2.x asks hasattr first: ValueError
        print(type(error).__name__, error)
"""
    printed = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(printed) == 2 and all("TLS" in line for line in printed)
    assert "runs without TLS" in printed[0]
