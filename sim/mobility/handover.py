"""Which gateway each user attaches to: the nearest in range, with hysteresis and min dwell."""

from __future__ import annotations

import numpy as np

from workloads.mobility import HandoverSpec


class Handover:
    """Decides attachments for all users at once from a users x gateways distance matrix.

    A user attached to a gateway in range moves only to one closer by more than `hysteresis`
    metres, and only once it has stayed `min_dwell` seconds; a user whose gateway is out of range,
    or who has none, takes the nearest gateway in range at once, or -1 when none is. After each
    `step`, `changed` holds the users whose gateway changed and `distance` each user's distance
    to its new gateway (inf for -1), ready for `RadioModel.link`.
    """

    def __init__(self, spec: HandoverSpec, gateways: np.ndarray, reach: float):
        """`gateways`: (m, 2) positions in metres; `reach`: the radio range in metres."""
        gateways = np.asarray(gateways, dtype=float)
        if gateways.ndim != 2 or gateways.shape[1] != 2 or len(gateways) == 0:
            raise ValueError(f"gateways must be an (m, 2) array with m >= 1, "
                             f"got shape {gateways.shape}")
        self.spec = spec
        self.reach = reach
        # Centring keeps the expanded squared distance precise when the whole map lies far from
        # the origin (at coordinates of 10^6 m it would cancel away whole metres).
        self._centre = gateways.mean(axis=0)
        self._gateways = gateways - self._centre
        # (x, y, 1) . (-2 gx, -2 gy, |g|^2) = |u - g|^2 - |u|^2, which orders a row like the
        # distances do: one pass over the (n, m) matrix instead of one per coordinate.
        self._weights = np.ascontiguousarray(
            np.vstack([-2.0 * self._gateways.T, (self._gateways**2).sum(axis=1)]))
        self._since: np.ndarray | None = None
        self.changed = np.empty(0, dtype=np.intp)
        self.distance = np.empty(0)

    def step(self, t: float, user_positions: np.ndarray, current: np.ndarray) -> np.ndarray:
        """Each user's gateway index (or -1) at time t, given the ones it had (-1: none).

        `current` is what the previous step returned, or -1 for a user the caller detached
        (say, its gateway crashed); the first call fixes the number of users.
        """
        users = np.asarray(user_positions, dtype=float) - self._centre
        current = np.asarray(current, dtype=np.intp)
        if self._since is None:
            self._since = np.full(len(users), -np.inf)
        if len(users) != len(self._since) or current.shape != (len(users),):
            raise ValueError(f"expected {len(self._since)} user positions and current gateways, "
                             f"got {len(users)} and {current.shape}")
        # einsum's own loop rather than BLAS: for an inner dimension of 3, BLAS threads cost more
        # than they save, and far more on a loaded host.
        lifted = np.column_stack([users, np.ones(len(users))])
        nearest = np.argmin(np.einsum("ij,jk->ik", lifted, self._weights), axis=1)
        nearest_m = np.hypot(*(users - self._gateways[nearest]).T)
        attached = current >= 0
        # Index -1 reads the last gateway; `attached` masks it out.
        current_m = np.where(attached, np.hypot(*(users - self._gateways[current]).T), np.inf)
        held = current_m <= self.reach
        leaves = (held & (t - self._since >= self.spec.min_dwell)
                  & (nearest_m < current_m - self.spec.hysteresis))
        fallback = np.where(nearest_m <= self.reach, nearest, -1)
        chosen = np.where(held, np.where(leaves, nearest, current), fallback)
        self.changed = np.flatnonzero(chosen != current)
        self._since[self.changed] = t
        self.distance = np.where(chosen < 0, np.inf, np.where(chosen == nearest, nearest_m,
                                                                current_m))
        return chosen
