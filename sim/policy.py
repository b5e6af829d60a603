"""Where follow operators' per-user instances run, and when they move (the migration policy).

latency_threshold: a user's instance moves when the user's latency to it (radio, then the
network from the user's gateway to the instance's node) exceeds the threshold plus the
hysteresis; nearest_gateway: whenever the user's gateway is not the instance's node. The
instance goes to the user's gateway if it has room (`capacity` instances), else to the nearest
gateway with room, else to the first fallback node (the cloud).

The policy decides; whoever composes it acts: `start(user, target, strategy, done)` begins the
move of user's instance (sim: the model's migration coordinator; hybrid: the emulated
migration on real containers) and calls `done()` when it has ended (`done(False)`: it
failed, and the instance stayed where it was).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from workloads.scenario import PolicySpec


class FollowPolicy:
    def __init__(self, spec: PolicySpec, mobility, latency: Callable[[str, str], float],
                 fallback: list[str], strategy: str,
                 start: Callable[[int, str, str, Callable[[], None]], None]):
        """`latency(a, b)`: the network's path latency between two nodes (topologies.routing);
        `start(user, target, strategy, done)`: begins a move (see the module docstring)."""
        self.spec = spec
        self.mobility = mobility
        self.strategy = strategy
        self.start = start
        gateways = mobility.gateway_names
        self.hosts = gateways + [f for f in fallback if f not in gateways]
        self.index = {name: i for i, name in enumerate(self.hosts)}
        # Latency from each gateway to each possible host, computed once.
        self.latency = np.array([[latency(g, h) if g != h else 0.0 for h in self.hosts]
                                 for g in gateways])
        # Each gateway's candidate hosts, nearest first (ties by name order).
        self.order = np.argsort(self.latency[:, :len(gateways)], axis=1, kind="stable")
        self.load = np.zeros(len(self.hosts), dtype=int)
        users = len(mobility.devices)
        self.host = np.full(users, -1, dtype=np.intp)
        self.moving = np.zeros(users, dtype=bool)
        self.migrations = 0

    def place(self, user: int) -> str:
        """Where a user's instance should run now, reserving the room."""
        gateway = int(self.mobility.current[user])
        candidates = (self.order[gateway].tolist() if gateway >= 0
                      else range(len(self.mobility.gateway_names)))
        for h in candidates:
            if self.load[h] < self.spec.capacity:
                break
        else:
            h = len(self.mobility.gateway_names)  # the first fallback node
        self.load[h] += 1
        return self.hosts[h]

    def initial(self, user: int) -> str:
        node = self.place(user)
        self.host[user] = self.index[node]
        return node

    def check(self, t: float) -> None:
        gateway = self.mobility.current
        attached = gateway >= 0
        host = self.host
        if self.spec.kind == "nearest_gateway":
            due = attached & (host != gateway)
        else:
            latency = self.mobility.radio_latency + np.where(
                attached, self.latency[np.where(attached, gateway, 0), host], 0.0)
            due = attached & (latency > self.spec.threshold + self.spec.hysteresis)
        for user in np.flatnonzero(due & ~self.moving).tolist():
            self._move(user)

    def _move(self, user: int) -> None:
        target = self.place(user)
        source = self.host[user]
        if self.index[target] == source:
            self.load[source] -= 1  # stays where it is: give back the double reservation
            return
        self.moving[user] = True
        self.migrations += 1

        def done(ok: bool = True) -> None:
            """The move ended: the instance is on target, or (a move that failed and rolled
            back) still on its source, and the room reserved on target is free again."""
            if ok:
                self.load[source] -= 1
                self.host[user] = self.index[target]
            else:
                self.load[self.index[target]] -= 1
            self.moving[user] = False

        self.start(user, target, self.strategy, done)
