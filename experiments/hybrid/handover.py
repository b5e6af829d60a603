"""Coupling: a handover in the model moves the device's driver between real gateways.

When the model attaches a user to another gateway (sim.mobile.Mobility.on_attach), the
device's driver leaves the old gateway's agent (`device.leave`, which answers the device's
state: its random streams, next emission and link) and joins the new one's (`device.join`).
The device then sends, from the new gateway, exactly the readings at exactly the times it would
have sent: none lost, none sent twice across the handover (emu.agent.drivers). Each handover
is a row of the `handovers` table: the model's time, the device, from, to, and how long the
emulation took to carry it out (on the actions' clock: emulated seconds at a dilation, as the
request's `timeout` is, which the controller waits K times as long on the host).
"""

from __future__ import annotations

from emu.control.commands import NotAnswered
from experiments.hybrid.actions import NOT_OK, TIMEOUT, ActionFailed


class Handovers:
    def __init__(self, mobility, actions, control, where: dict[str, str],
                 timeout: float = 10.0, moved=lambda user: None) -> None:
        """`where`: each moving device's gateway in the emulation at the start; `moved(user)`
        hears each handover carried out (the links coupling sends its radio again)."""
        self.mobility = mobility
        self.moved = moved
        self.actions = actions
        self.control = control
        self.where = dict(where)
        self.timeout = timeout
        self.moves = []  # (action, from, to), in order

    def attach(self, user: int, gateway: str) -> None:
        """Mobility.on_attach: on the model's thread; the move is queued."""
        device = self.mobility.devices[user]
        old = self.where.get(device)
        if old is None or old == gateway:
            self.where[device] = gateway
            return
        self.where[device] = gateway
        t = self.mobility.env.now
        self.moves.append((self.actions.put(
            "handover", device, t, lambda action: self._move(user, device, old, gateway)),
            old, gateway))

    def _move(self, user: int, device: str, old: str, new: str) -> dict:
        left = self._step(old, "device.leave", {"device": device})
        joined = self._step(new, "device.join", left)
        self.moved(user)
        return {"from": old, "to": new, "topics": joined.get("topics", [])}

    def _step(self, node: str, command: str, args: dict) -> dict:
        result = self.control.send([node], command, args, timeout=self.timeout)
        try:
            return result.answer(node, f"{command} {args.get('device')}") or {}
        except NotAnswered as failure:
            raise ActionFailed(str(failure), TIMEOUT if failure.silent else NOT_OK,
                               node) from None

    def table(self) -> dict[str, list]:
        """The `handovers` table: model time, device, from, to, ok, error, and the seconds
        (the run's, emulated at a dilation) from the decision to the device's join."""
        rows: dict[str, list] = {"t": [], "device": [], "source": [], "target": [],
                                 "ok": [], "error": [], "duration": []}
        for action, old, new in self.moves:
            rows["t"].append(action.t_model)
            rows["device"].append(action.subject)
            rows["source"].append(old)
            rows["target"].append(new)
            rows["ok"].append(action.ok)
            rows["error"].append(action.error)
            rows["duration"].append(action.t_done - action.t_decided)
        return rows
