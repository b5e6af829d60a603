"""Management over MQTT: commands change what flows, bad ones say why, many nodes at once,
and the agent's process stops cleanly on a signal."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from emu.agent.config import AgentConfig, DriverConfig, OperatorConfig
from emu.agent.protocol import request_topic
from emu.control.commands import Controller

from .conftest import address, read_csv, wait_for

CITY = DriverConfig("city", ["d-0", "d-1", "d-2"], rate=20.0, arrivals="periodic", qos=1)
VALID = {"ranges": {"temperature": [-100, 100]}}
NONE_VALID = {"ranges": {"temperature": [1000, 2000]}}


def flow(listener, seconds: float = 0.5) -> Counter:
    """Messages per topic prefix the broker carries over the next `seconds`."""
    time.sleep(0.15)  # what was under way before the change
    listener.clear()
    time.sleep(seconds)
    return Counter(h.topic.split("/")[0] for h in listener.snapshot())


def test_commands_change_what_flows(config, agents, listen, controller) -> None:
    listener = listen("#")
    agents(config("gw-1", drivers=[CITY]))
    nodes = ["gw-1"]
    assert flow(listener) == pytest.approx({"city": 30}, abs=5)  # nothing reads it here

    operator = OperatorConfig("valid", task="range_filter", reads=["city/#"], writes="valid",
                              params=VALID)
    assert controller.install(nodes, operator).ok
    assert flow(listener) == pytest.approx({"valid": 30}, abs=5)  # read locally

    assert controller.update(nodes, "valid", NONE_VALID).ok
    assert flow(listener) == {}  # the filter now passes nothing

    assert controller.stop(nodes, "valid").ok
    assert flow(listener) == pytest.approx({"city": 30}, abs=5)  # no local reader now

    assert controller.update(nodes, "valid", VALID).ok
    assert controller.start(nodes, "valid").ok
    assert flow(listener) == pytest.approx({"valid": 30}, abs=5)

    assert controller.uninstall(nodes, "valid").ok
    assert flow(listener) == pytest.approx({"city": 30}, abs=5)


def test_set_publish_rate_changes_the_measured_rate(config, agents, listen, controller) -> None:
    listener = listen("#")
    taxi = DriverConfig("taxi", ["t-0"], rate=10.0, arrivals="periodic")
    agents(config("gw-1", drivers=[CITY, taxi]))
    assert flow(listener, 1.0) == pytest.approx({"city": 60, "taxi": 10}, abs=6)

    result = controller.set_rate(["gw-1"], 50.0, stream="city")
    assert result.ok, result.summary()
    assert flow(listener, 1.0) == pytest.approx({"city": 150, "taxi": 10}, abs=10)

    assert controller.set_rate(["gw-1"], 5.0).ok  # every stream
    assert flow(listener, 1.0) == pytest.approx({"city": 15, "taxi": 5}, abs=4)

    assert controller.set_rate(["gw-1"], 0.0).ok
    assert flow(listener, 0.5) == {}


BAD = [
    ("reboot", {}, "unknown command 'reboot'; commands: install, update"),
    ("update", {"operator": "nope", "params": {}}, "update: unknown operator 'nope'; installed: p"),
    ("update", {"operator": "p"}, "update: args need 'params'"),
    ("update", {"operator": "p", "params": {"bogus": 1}},
     "update: operator 'p': task 'passthrough' has no parameters; got bogus"),
    ("start", {}, "start: args need 'operator'"),
    ("stop", {"operator": "x"}, "stop: unknown operator 'x'"),
    ("uninstall", {"operator": 3}, "uninstall: args need 'operator'"),
    ("install", {"name": "q", "task": "no_such_task", "reads": ["city/#"]},
     "install: operator 'q': unknown task 'no_such_task'; known tasks: "),
    ("install", {"name": "q", "task": "range_filter", "reads": ["city/#"],
                 "params": {"limits": {}}}, "install: operator 'q': task 'range_filter' has no "
                                            "parameter 'limits'"),
    ("install", {"task": "passthrough"}, "install: an operator needs a 'name'"),
    ("install", {"name": "q", "colour": "red"}, "install: unknown operator field 'colour'"),
    ("install", {"name": "q", "reads": "city/#", "window": "5s"},
     "install: operator field 'window' must be a number"),
    ("install", {"name": "p", "reads": ["city/#"]}, "install: operator 'p' is installed already"),
    ("set", {"key": "publish.size", "value": 3}, "set: unknown key 'publish.size'; keys: "
                                                 "publish.rate"),
    ("set", {"key": "publish.rate", "value": "fast"}, "set: publish.rate needs a number"),
    ("set", {"key": "publish.rate", "value": -2}, "set: publish.rate must be a finite number"),
    ("set", {"key": "publish.rate", "value": 2, "stream": "taxi"},
     "set: unknown stream 'taxi'; this node's streams: city"),
]


def test_bad_commands_fail_with_a_clear_error_and_the_agent_goes_on(
        config, agents, controller, broker) -> None:
    agent = agents(config("gw-1", drivers=[CITY], operators=[
        OperatorConfig("p", reads=["city/#"], writes="clean")]))
    for command, args, error in BAD:
        result = controller.send(["gw-1"], command, args, timeout=5)
        reply = result.replies["gw-1"]
        assert not reply.ok, (command, args)
        assert reply.error.startswith(error), (reply.error, error)
    # Garbage on the request topic: nobody to answer, and nothing breaks.
    controller._client.publish(request_topic("gw-1"), b"\xff garbage", qos=1).wait_for_publish()
    pong = controller.ping(["gw-1"])
    assert pong.ok and pong.replies["gw-1"].result["operators"]["p"]["running"]
    assert agent.scheduler.failures == 0
    agent.stop()
    rows = read_csv(agent.records.directory / "commands.csv")
    assert [r["ok"] for r in rows] == ["0"] * (len(BAD) + 1) + ["1"]
    assert [r["command"] for r in rows[:len(BAD)]] == [c if c != "reboot" else ""
                                                       for c, _, _ in BAD]
    assert all(float(r["t_done"]) >= float(r["t_received"]) for r in rows)


def test_nodes_that_do_not_answer_are_listed(config, agents, controller) -> None:
    agents(config("gw-1"))
    result = controller.ping(["gw-1", "gw-gone"], timeout=0.5)
    assert result.missing == ["gw-gone"] and not result.ok
    assert list(result.replies) == ["gw-1"]
    assert "1 did not answer (gw-gone)" in result.summary()


AGENTS = 20


def test_the_controller_installs_on_twenty_agents_at_once(
        broker, config, processes, listen) -> None:
    nodes = [f"gw-{i:02d}" for i in range(AGENTS)]
    started = [processes(config(node, index=i, drivers=[
        DriverConfig("city", [f"{node}-d"], rate=4.0, arrivals="periodic")]))
        for i, node in enumerate(nodes)]
    listener = listen("clean/#")
    with Controller(address(broker)) as control:
        # An agent hears requests once it is connected: ping until every one answers.
        answered: set[str] = set()
        deadline = time.monotonic() + 30
        while answered != set(nodes) and time.monotonic() < deadline:
            answered |= set(control.ping(sorted(set(nodes) - answered), timeout=1).replies)
        assert answered == set(nodes)
        rss = [_rss_kib(process.pid) for process in started]

        result = control.install(nodes, OperatorConfig("filter", reads=["city/#"],
                                                       writes="clean"))
        assert result.ok, result.summary()
        assert sorted(result.replies) == nodes and result.missing == []
        for reply in result.replies.values():
            assert reply.t_sent <= reply.t_done <= reply.t_replied
        # Sent together, answered together: far less than 20 round trips one after another.
        assert result.duration < 3.0, result.summary()
        print(f"\ninstall on {AGENTS} agents: {result.duration * 1000:.0f} ms; idle agent "
              f"RSS {min(rss) / 1024:.1f}-{max(rss) / 1024:.1f} MiB")

        wait_for(lambda: {h.topic for h in listener.snapshot()} ==
                 {f"clean/{node}" for node in nodes}, timeout=5)
        again = control.send(nodes, "ping", broadcast=True)
        assert sorted(again.replies) == nodes and again.ok
    assert max(rss) < 40 * 1024  # host venv python; the gateway image measures its own


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_flushes_the_records_and_exits_0(stop, config, processes, listen,
                                                  tmp_path) -> None:
    listener = listen("city/#")
    agent_config: AgentConfig = config("gw-1", drivers=[
        DriverConfig("city", ["d-0", "d-1"], rate=50.0, arrivals="periodic", qos=1)])
    process = processes(agent_config)
    wait_for(lambda: listener.snapshot(), timeout=10)
    time.sleep(1.2)
    signalled = time.monotonic()
    process.send_signal(stop)
    assert process.wait(timeout=2) == 0
    took = time.monotonic() - signalled
    assert took < 2.0
    time.sleep(0.2)
    rows = read_csv(tmp_path / "gw-1" / "sent.csv")
    heard = {h.envelope.id for h in listener.snapshot()}
    # Every message that reached the broker is in the records, flushed at the end.
    assert heard <= {int(r["id"]) for r in rows}
    assert len(rows) - len(heard) <= 2 and len(rows) > 100
    assert all(r["t_sent"] and r["source"] in ("d-0", "d-1") for r in rows)
    assert f"stopped by {stop.name}" in process.stderr.read().decode()


def test_a_config_the_agent_cannot_run_exits_2(config, processes) -> None:
    process = processes(config("gw-1", drivers=[DriverConfig("city", ["d"], 1.0,
                                                              arrivals="bursty")]))
    assert process.wait(timeout=10) == 2
    assert "arrivals must be periodic or poisson" in process.stderr.read().decode()


def test_a_held_node_starts_its_drivers_at_the_epoch_it_is_sent(config, agents, listen,
                                                                controller) -> None:
    listener = listen("#")
    window = OperatorConfig("count", reads=["city/#"], writes="counts", window=0.5)
    agent = agents(config("gw-1", drivers=[CITY], operators=[window], hold=True))
    assert flow(listener, 0.5) == {}  # held: no device speaks
    epoch = time.time() + 0.3
    result = controller.send(["gw-1"], "set", {"key": "run.epoch", "value": epoch})
    assert result.ok, result.summary()
    assert flow(listener, 1.0) == pytest.approx({"counts": 2}, abs=1)
    assert agent.drivers.epoch == epoch and agent.operators["count"].window.epoch == epoch
    assert min(float(r["t_sent"]) for r in wait_for(
        lambda: read_csv(agent.records.directory / "sent.csv"))) >= epoch
    again = controller.send(["gw-1"], "set", {"key": "run.epoch", "value": epoch})
    assert again.failed == {"gw-1": "set: the run has begun already"}


def test_operators_list_answers_each_operators_config_as_it_runs(config, agents,
                                                                   controller) -> None:
    """What `foglab emu apply` reads back: the config the agent runs now (params after an
    update, the job kept), and whether the instance runs; nothing cached on the host."""
    agents(config("gw-1", operators=[OperatorConfig("p", reads=["city/#"])]))
    nodes = ["gw-1"]
    filtered = OperatorConfig("valid", task="range_filter", reads=["city/#"], writes="valid",
                              params=VALID, job="clean")
    assert controller.install(nodes, filtered).ok
    assert controller.update(nodes, "valid", NONE_VALID).ok
    assert controller.stop(nodes, "p").ok
    listed = controller.send(nodes, "operators.list")
    assert listed.ok, listed.summary()
    answer = listed.replies["gw-1"].result
    assert sorted(answer) == ["p", "valid"]
    assert answer["valid"]["running"] is True and answer["p"]["running"] is False
    valid = answer["valid"]["config"]
    assert valid["params"] == NONE_VALID and valid["job"] == "clean"
    assert (valid["task"], valid["writes"], valid["reads"]) == ("range_filter", "valid",
                                                                ["city/#"])
    assert answer["p"]["config"]["job"] is None
    assert controller.uninstall(nodes, "valid").ok
    assert sorted(controller.send(nodes, "operators.list").replies["gw-1"].result) == ["p"]
