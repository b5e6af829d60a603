"""Coupling: each moving user's radio link, as the model gives it, on its emulated access link.

After every mobility step the model knows each user's radio latency, bandwidth and loss at its
distance from its gateway (sim.mobile.Mobility, sim.mobility.RadioModel). The users whose values
moved by more than the tolerance since they were last applied get them on their device's access
link in the emulation (emu.agent.drivers: the gateway's agent holds each message for the
latency, queues it behind the previous ones at the bandwidth, drops it with the loss): one
`device.link` request per gateway with the devices the model has on it, the gateways' requests
side by side. (One request with every device to every gateway made each QEMU agent decode all
users' values every step: with 2,000 users on 20 gateways the agents fell behind and actions
waited tens of seconds.) Out of range, the loss is 1: the device's messages are lost until a
gateway is near again, as in the model.
"""

from __future__ import annotations

import numpy as np

from emu.control.commands import NotAnswered
from experiments.hybrid.actions import NOT_OK, TIMEOUT, ActionFailed

LATENCY_TOLERANCE_S = 0.0002   # 0.2 ms: below the link layer's own accuracy
# A 100 B message takes 0.08 ms at 10 Mbit/s: 10 % of the bandwidth moves its delay by less
# than the latency tolerance (at 2 % nearly every moving user was sent anew every step).
BANDWIDTH_TOLERANCE = 0.10
LOSS_TOLERANCE = 0.005          # half a percent of messages


class RadioLinks:
    def __init__(self, mobility, actions, control, where: dict[str, str],
                 timeout: float = 10.0) -> None:
        """`where`: each device's gateway as the model has it (the handover coupling's, kept
        up to date on the model's thread)."""
        self.mobility = mobility
        self.actions = actions
        self.control = control
        self.where = where
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
                   | (np.abs(now[:, 1] - applied[:, 1]) > BANDWIDTH_TOLERANCE * np.maximum(
                       np.abs(applied[:, 1]), 1.0))
                   | (np.abs(now[:, 2] - applied[:, 2]) > LOSS_TOLERANCE))
        users = np.flatnonzero(changed)
        if not len(users):
            return
        applied[users] = now[users]
        by_gateway: dict[str, dict[str, list[float]]] = {}
        for u in users.tolist():
            device = mobility.devices[u]
            by_gateway.setdefault(self.where[device], {})[device] = [
                float(now[u, 0]), 0.0, float(now[u, 2]), float(now[u, 1])]
        self.updates += len(users)
        for gateway, links in by_gateway.items():
            self.actions.put("link", f"radio@{gateway}", t,
                             lambda action, g=gateway, ls=links: self._apply(g, ls))

    def forget(self, user: int) -> None:
        """Send the user's values again at the next step (its device changed gateway: an
        update sent while it was between two may have reached neither)."""
        self.applied[user] = np.nan

    def _apply(self, gateway: str, links: dict) -> dict:
        result = self.control.send([gateway], "device.link", {"links": links},
                                   timeout=self.timeout)
        try:
            answer = result.answer(gateway) or {}
        except NotAnswered as failure:
            raise ActionFailed(f"device.link on {gateway}: {result.summary()}",
                               TIMEOUT if failure.silent else NOT_OK, gateway) from None
        return {"devices": len(links), "applied": answer.get("applied", 0)}
