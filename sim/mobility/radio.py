"""Access-link latency, bandwidth and loss from a user's distance to its gateway."""

from __future__ import annotations

import numpy as np

from workloads.mobility import RadioSpec

REFERENCE_M = 1.0  # log_distance: the distance below which the radio is as good as at 0 m


class RadioModel:
    """Maps distances to link quality as `RadioSpec` documents, for many users at once."""

    def __init__(self, spec: RadioSpec):
        self.spec = spec

    def _fraction(self, distance: np.ndarray) -> np.ndarray:
        """How far each link has degraded: 0 at 0 m, 1 at range, above 1 beyond it."""
        distance = np.asarray(distance, dtype=float)
        if self.spec.model == "linear":
            return distance / self.spec.range
        return np.log1p(distance / REFERENCE_M) / np.log1p(self.spec.range / REFERENCE_M)

    def link(self, distance: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(latency in s, bandwidth in bit/s, loss ratio) for each distance in metres.

        Out of range (beyond `range`, or a distance of inf or NaN standing for no gateway) there
        is no link: latency inf, bandwidth 0 and loss 1, values that a caller can test with
        `np.isinf(latency)` and that stop traffic rather than letting NaN spread through sums.
        """
        spec = self.spec
        f = self._fraction(distance)
        # NaN compares false, so `~(f <= 1)` counts a NaN distance as out of range too.
        out = ~(f <= 1.0)
        f = np.where(out, 1.0, f)  # keeps inf * 0 (equal ends, no gateway) from making NaN
        latency = np.where(out, np.inf, spec.latency[0] + f * (spec.latency[1] - spec.latency[0]))
        bandwidth = np.where(out, 0.0,
                             spec.bandwidth[0] + f * (spec.bandwidth[1] - spec.bandwidth[0]))
        loss = np.where(out, 1.0, f * spec.loss)
        return latency, bandwidth, loss
