"""Coupling: each moving user's radio link, as the model gives it, on its emulated access link.

After every mobility step the model knows each user's radio latency, bandwidth and loss at its
distance from its gateway (sim.mobile.Mobility, sim.mobility.RadioModel). The users whose values
moved by more than the tolerance since they were last applied get them on their device's access
link in the emulation (emu.agent.drivers: the gateway's agent holds each message for the
latency, queues it behind the previous ones at the bandwidth, drops it with the loss), in one
`device.link` request to every gateway, each setting the devices it has. Out of range, the loss
is 1: the device's messages are lost until a gateway is near again, as in the model.
"""

from __future__ import annotations

import numpy as np

LATENCY_TOLERANCE_S = 0.0002   # 0.2 ms: below the link layer's own accuracy
RELATIVE_TOLERANCE = 0.02       # 2 % of bandwidth or loss


class RadioLinks:
    def __init__(self, mobility, actions, control, gateways: list[str],
                 timeout: float = 10.0) -> None:
        self.mobility = mobility
        self.actions = actions
        self.control = control
        self.gateways = gateways
        self.timeout = timeout
        users = len(mobility.devices)
        self.applied = np.full((users, 3), np.nan)  # latency, bandwidth, loss last applied
        self.updates = 0

    def step(self, t: float) -> None:
        mobility = self.mobility
        now = np.column_stack([np.asarray(mobility.link_latency),
                               np.asarray(mobility.link_bandwidth),
                               np.asarray(mobility.link_loss)])
        applied = self.applied
        changed = (np.isnan(applied[:, 0])
                   | (np.abs(now[:, 0] - applied[:, 0]) > LATENCY_TOLERANCE_S)
                   | (np.abs(now[:, 1] - applied[:, 1]) > RELATIVE_TOLERANCE * np.maximum(
                       np.abs(applied[:, 1]), 1.0))
                   | (np.abs(now[:, 2] - applied[:, 2]) > RELATIVE_TOLERANCE))
        users = np.flatnonzero(changed)
        if not len(users):
            return
        applied[users] = now[users]
        links = {mobility.devices[u]: [float(now[u, 0]), 0.0, float(now[u, 2]),
                                       float(now[u, 1])] for u in users.tolist()}
        self.updates += len(links)
        self.actions.put("link", "radio", t, lambda action: self._apply(links))

    def forget(self, user: int) -> None:
        """Send the user's values again at the next step (its device changed gateway: an
        update sent while it was between two may have reached neither)."""
        self.applied[user] = np.nan

    def _apply(self, links: dict) -> dict:
        result = self.control.send(self.gateways, "device.link", {"links": links},
                                   timeout=self.timeout, broadcast=True)
        if result.failed:
            raise RuntimeError(f"device.link: {result.summary()}")
        applied = sum((reply.result or {}).get("applied", 0)
                      for reply in result.replies.values())
        return {"devices": len(links), "applied": applied}
