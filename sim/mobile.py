"""Users on the move in the model: positions, handovers and radio links, updated at a fixed step.

Each moving device sends over a radio channel of its own whose latency, bandwidth and loss
follow its distance to the gateway it is attached to; a handover points its streams at the new
gateway's driver. Positions and attachments are vectorised over all users (sim.mobility).

`Mobility` knows nothing of messages: it moves users, attaches them and sets their radio
values each step, and tells whoever composes it through two hooks, `on_attach(user, gateway)`
(the message model points the user's streams at the gateway's driver; the hybrid backend moves
the user's driver between real gateways) and `on_step(t)` (a migration policy's check).
"""

from __future__ import annotations

import numpy as np

from sim.mobility import Handover, MobilitySpec, RadioModel, build_movement
from sim.recorder import SeriesLog
from sim.stations import Channel


class RadioChannel(Channel):
    """A user's radio uplink: latency, bandwidth and loss are its user's at this step, read
    when it transmits, so a step updates three arrays instead of every user's channel."""

    __slots__ = ("mobility", "user")

    def __init__(self, mobility, user: int, device: str, seed: str):
        super().__init__(-1, device, "", 0.0, 0.0, None, 1.0, seed)
        self.mobility = mobility
        self.user = user

    def transmit(self, now: float, size: int, lead: float = 0.0,
                 connection: object = None) -> float:
        """Channel.transmit (a radio has no jitter, no lead, and drops what it loses) with the
        user's values at this step, read straight from the step's arrays: this runs once per
        message a user sends."""
        mobility, user = self.mobility, self.user
        bandwidth = mobility.link_bandwidth[user]
        if bandwidth > 0:
            serialise = size * 8 / bandwidth
            if self.free > now:
                start = self.free
            else:
                start = self.run_start = now
            self.free = done = start + serialise
            self.busy += serialise
        else:  # out of range: no bandwidth, and the loss (1) drops the message
            done = now
        arrival = done + mobility.link_latency[user]
        self.bytes += size
        self.messages += 1
        self.delay_sum += arrival - now
        loss = mobility.link_loss[user]
        if loss and (self.rng or self._draws()).random() < loss:
            return -1.0
        return arrival


class Mobility:
    """The users' movement, attachments and radio links, stepped every `spec.update` seconds
    in `env` until `until` (the run's duration: no step at or after it, so nobody moves, hands
    over or has a policy decide then; the drain only lets what is in flight arrive);
    `gateways`: the topology's gateway nodes (their positions)."""

    def __init__(self, env, gateways: list, spec: MobilitySpec, devices: list[str], seed: int,
                 until: float = float("inf")):
        self.env = env
        self.until = until
        self.spec = spec
        self.devices = devices
        self.gateway_names = [g.name for g in gateways]
        positions = np.array([g.position for g in gateways], dtype=float)
        self.movement = build_movement(spec.model, len(devices), positions,
                                       np.random.default_rng([seed, 1]))
        self.radio = RadioModel(spec.radio)
        self.handover = Handover(spec.handover, positions, spec.radio.range)
        self.current = np.full(len(devices), -1, dtype=np.intp)
        self.channels = [RadioChannel(self, user, device, f"{seed}:{device}>radio")
                         for user, device in enumerate(devices)]
        # Each user's radio at this step, as memoryviews of the step's arrays: a step has far
        # more users than transmissions, and indexing a view gives a Python float at once,
        # where converting every user's values (tolist) or reading numpy scalars is slower.
        self.link_latency = memoryview(np.zeros(len(devices)))
        self.link_bandwidth = memoryview(np.zeros(len(devices)))
        self.link_loss = memoryview(np.ones(len(devices)))
        self.positions = SeriesLog("t", "device", "x", "y", "gateway")
        self.handovers = 0
        self.radio_latency = np.zeros(len(devices))
        self._next_record = 0.0
        self.on_attach = None  # on_attach(user, gateway name), at each attachment
        self.on_step = None  # the policy's check, called after each step

    def path_of(self, user: int) -> tuple:
        return (self.channels[user],)

    def start(self) -> None:
        """Attach everyone at time 0, then update every `update` seconds."""
        self.step()
        self.env.process(self._run())

    def _run(self):
        while self.env.now + self.spec.update < self.until:
            yield self.env.timeout(self.spec.update)
            self.step()

    def step(self) -> None:
        t = self.env.now
        where = self.movement.positions(t)
        attached = self.handover.step(t, where, self.current)
        changed = self.handover.changed
        for user, gateway in zip(changed.tolist(), attached[changed].tolist(), strict=True):
            self._attach(user, gateway)
        self.handovers += int(np.count_nonzero(self.current[changed] >= 0))
        self.current = attached
        latency, bandwidth, loss = self.radio.link(self.handover.distance)
        self.radio_latency = latency
        # Out of range: latency inf, bandwidth 0, loss 1; the loss alone decides.
        self.link_latency = memoryview(np.where(np.isfinite(latency), latency, 0.0))
        self.link_bandwidth = memoryview(np.ascontiguousarray(bandwidth, dtype=float))
        self.link_loss = memoryview(np.ascontiguousarray(loss, dtype=float))
        if self.spec.record is not None and t >= self._next_record:
            self._record(t, where, attached)
            self._next_record = t + self.spec.record
        if self.on_step is not None:
            self.on_step(t)

    def _attach(self, user: int, gateway: int) -> None:
        if gateway < 0:
            return  # out of coverage: the radio channel loses everything until a gateway is near
        name = self.gateway_names[gateway]
        self.channels[user].dst = name
        if self.on_attach is not None:
            self.on_attach(user, name)

    def _record(self, t: float, where: np.ndarray, attached: np.ndarray) -> None:
        names = self.gateway_names
        for device, (x, y), gateway in zip(self.devices, where.tolist(), attached.tolist(),
                                           strict=True):
            self.positions.append(t=t, device=device, x=x, y=y,
                                  gateway=names[gateway] if gateway >= 0 else None)
