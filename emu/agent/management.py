"""Requests from the host over MQTT: check, carry out on the scheduler thread, answer each."""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from emu.agent.brokers import move, read
from emu.agent.migration import COMMANDS as MIGRATION_COMMANDS
from emu.agent.operators import Operator, operator_config
from emu.agent.protocol import (
    SETTINGS,
    Request,
    RequestError,
    operator_name,
    reply_for,
    response,
)

if TYPE_CHECKING:
    from emu.agent.parts import AgentSurface


class Management:
    """Every request gets one answer on its `reply` topic (QoS 1) and a row in commands.csv.

    Requests are read in turn on a thread of their own, where an install also builds its
    operator (the first RIoTBench task imports numpy: seconds under QEMU), so neither the
    MQTT client's thread nor the scheduler waits for that; the change itself is made on the
    scheduler thread, in the order the requests came.
    """

    def __init__(self, agent: AgentSurface) -> None:
        self.agent = agent
        self.answered = 0
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._reader: threading.Thread | None = None

    def received(self, payload: bytes) -> None:
        """On the MQTT client's thread: a request's payload, as it came."""
        self._requests.put((self.agent.clock(), payload))
        if self._reader is None:  # started on the first request: a node may never get one
            self._reader = threading.Thread(target=self._read, name="foglab-management",
                                            daemon=True)
            self._reader.start()

    def _read(self) -> None:
        while True:
            t_received, payload = self._requests.get()
            self._prepare(payload, t_received)

    def _prepare(self, payload: bytes, t_received: float) -> None:
        agent = self.agent
        try:
            request = Request.decode(payload)
        except RequestError as error:
            agent.scheduler.call(self._answer, error.request_id, None, error.reply, t_received,
                                 str(error), None)
            return
        prepared = None
        if request.command == "install":
            try:
                prepared = Operator(operator_config(request.args), agent.node, agent.epoch)
            except Exception as error:  # a task's constructor may raise anything
                message = error if isinstance(error, ValueError) else \
                    f"{type(error).__name__}: {error}"
                agent.scheduler.call(self._answer, request.id, request.command, request.reply,
                                     t_received, f"install: {message}", None)
                return
        agent.scheduler.call(self._carry_out, request, prepared, t_received)

    def _carry_out(self, request: Request, prepared: Operator | None,
                   t_received: float) -> None:
        if request.command in MIGRATION_COMMANDS:
            self._migration_step(request, t_received)
            return
        if request.command in ("drivers.broker", "readers.broker"):  # answered once the
            # spare has the session, and the subscriptions (emu.agent.brokers)
            handle = move if request.command == "drivers.broker" else read
            self._migration_step(request, t_received, partial(handle, self.agent))
            return
        try:
            result = getattr(self, f"_{request.command.replace('.', '_')}")(request.args,
                                                                          prepared)
            error = None
        except (ValueError, TypeError, KeyError) as failure:
            result, error = None, f"{request.command}: {failure}"
        except Exception as failure:  # a bug answers as a failed request, never stops the node
            result, error = None, f"{request.command}: {type(failure).__name__}: {failure}"
        self._answer(request.id, request.command, request.reply, t_received, error, result)

    def _migration_step(self, request: Request, t_received: float,
                        handle: Callable[..., None] | None = None) -> None:
        """A step of a migration (emu.agent.migration), or `handle`'s request, answered when
        it is over: at once, or later from the scheduler thread (a drain, a state transfer,
        a connection)."""
        answered = []

        def answer(result: Any = None, error: str | None = None) -> None:
            if answered:
                return
            answered.append(True)
            self._answer(request.id, request.command, request.reply, t_received,
                         None if error is None else f"{request.command}: {error}", result)

        try:
            if handle is not None:
                handle(request.args, answer)
            else:
                self.agent.migrations.handle(request.command, request.args, answer)
        except (ValueError, TypeError, KeyError) as failure:
            answer(error=str(failure))
        except Exception as failure:  # a bug answers as a failed request, never stops the node
            answer(error=f"{type(failure).__name__}: {failure}")

    def _answer(self, request_id: str | None, command: str | None, reply: str | None,
                t_received: float, error: str | None, result: Any) -> None:
        agent = self.agent
        t_done = agent.clock()
        if reply:  # with this node's name where the request left it out (one to all)
            agent.client.publish(reply_for(reply, agent.node),
                                 response(request_id, agent.node, error is None, error, t_done,
                                          result), qos=1)
        agent.records.command(request_id, command, t_received, t_done, error is None)
        self.answered += 1

    # The commands, on the scheduler thread -----------------------------------------------------

    def _install(self, args: dict[str, Any], operator: Operator | None) -> None:
        assert operator is not None
        self.agent.install(operator)

    def _update(self, args: dict[str, Any], _: Any) -> None:
        name = operator_name(args)
        if "params" not in args:
            raise ValueError("args need 'params', the parameters to change")
        self.agent.update(name, args["params"])

    def _uninstall(self, args: dict[str, Any], _: Any) -> None:
        self.agent.uninstall(operator_name(args))

    def _start(self, args: dict[str, Any], _: Any) -> None:
        self.agent.set_running(operator_name(args), True)

    def _stop(self, args: dict[str, Any], _: Any) -> None:
        self.agent.set_running(operator_name(args), False)

    def _set(self, args: dict[str, Any], _: Any) -> None:
        key, value, stream = args.get("key"), args.get("value"), args.get("stream")
        if key not in SETTINGS:
            raise ValueError(f"unknown key {key!r}; keys: {', '.join(SETTINGS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise ValueError(f"{key} needs a number 'value', not {value!r}")
        if stream is not None and not isinstance(stream, str):
            raise ValueError(f"'stream' must be a stream name, not {stream!r}")
        if key == "run.epoch":
            self.agent.begin(float(value))
        else:
            self.agent.drivers.set_rate(float(value), stream)

    def _device_link(self, args: dict[str, Any], _: Any) -> dict[str, Any]:
        """One device's link (`device`, `latency`, `jitter`, `loss`, `bandwidth`), or many:
        `links` {device: [latency, jitter, loss, bandwidth]}, of which this node sets those of
        its devices (one request can go to every gateway)."""
        drivers = self.agent.drivers
        links = args.get("links")
        if links is None:
            drivers.link(_device_name(args), args.get("latency", 0.0), args.get("jitter", 0.0),
                         args.get("loss", 0.0), args.get("bandwidth", 0.0))
            return {"applied": 1}
        if not isinstance(links, dict):
            raise ValueError(f"'links' maps devices to [latency, jitter, loss, bandwidth], "
                             f"not {type(links).__name__}")
        mine = drivers.device_names() & links.keys()
        for device in mine:
            values = links[device]
            if not isinstance(values, list) or len(values) != 4:
                raise ValueError(f"links[{device!r}]: [latency, jitter, loss, bandwidth], not "
                                 f"{values!r}")
            drivers.link(device, *values)
        return {"applied": len(mine)}

    def _device_leave(self, args: dict[str, Any], _: Any) -> dict[str, Any]:
        return self.agent.drivers.leave(_device_name(args))

    def _device_join(self, args: dict[str, Any], _: Any) -> dict[str, Any]:
        if not isinstance(args.get("device"), str) or not isinstance(args.get("streams"), list):
            raise ValueError("args need 'device' and 'streams', as device.leave answered them")
        topics = self.agent.drivers.join(args)
        for topic in topics:
            self.agent.published_on(topic)
        return {"topics": topics}

    def _ping(self, args: dict[str, Any], _: Any) -> dict[str, Any]:
        return self.agent.status()

    def _operators_list(self, args: dict[str, Any], _: Any) -> dict[str, Any]:
        """Each installed operator's config as it runs now (its params after updates) and
        whether it runs: what `foglab emu apply` reads back (emu.live.apply), not a host's copy.
        The config's fields as they are (the reply is encoded at once): `asdict`'s deep copy
        was half of a hundred jobs' read-back on a gateway under QEMU."""
        return {name: {"config": dict(vars(op.config)), "running": op.running}
                for name, op in self.agent.operators.items()}

    def _broadcast_plan(self, args: dict[str, Any], _: Any) -> dict[str, Any]:
        return self.agent.broadcasts.plan(args)

    def _operator_delays(self, args: dict[str, Any], _: Any) -> dict[str, Any]:
        """The latencies (s) of the inputs the instance processed since the last ask (emitted
        to processed), then none."""
        operator = self.agent.operator(operator_name(args))
        if operator.delays is None:
            raise ValueError(f"operator {operator.name!r} has no slo: it notes no delays")
        delays, operator.delays = operator.delays, []
        return {"delays": [round(d, 5) for d in delays], "processed": operator.processed}


def _device_name(args: dict[str, Any]) -> str:
    name = args.get("device")
    if not isinstance(name, str) or not name:
        raise ValueError("args need 'device', the device's name")
    return name
