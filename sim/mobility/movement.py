"""Where users are at time t under random waypoint, Manhattan grid or trace replay, vectorised."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from sim.mobility.traces import Track, load_trace
from workloads.mobility import ManhattanSpec, MovementSpec, RandomWaypointSpec, TraceSpec


class Area(NamedTuple):
    """A rectangle in metres: [x0, x1] x [y0, y1]."""

    x0: float
    y0: float
    x1: float
    y1: float

    @classmethod
    def of(cls, size: tuple[float, float] | None, gateways: np.ndarray, margin: float) -> Area:
        """[0, w] x [0, h] for a given size, else the gateways' bounding box grown by `margin`."""
        if size is not None:
            return cls(0.0, 0.0, float(size[0]), float(size[1]))
        if len(gateways) == 0:
            raise ValueError("an area derived from the gateways needs at least one gateway")
        low = np.min(gateways, axis=0) - margin
        high = np.max(gateways, axis=0) + margin
        if (high <= low).any():
            raise ValueError(f"the gateways grown by a margin of {margin:g} m span no area: "
                             f"give an area or a margin > 0")
        return cls(float(low[0]), float(low[1]), float(high[0]), float(high[1]))

    def uniform(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n points drawn uniformly in the area, as an (n, 2) array."""
        return rng.uniform((self.x0, self.y0), (self.x1, self.y1), size=(n, 2))


class Movement:
    """Users moving on straight legs, each drawn when the previous one is over.

    A leg leaves `origin` at `depart` and moves at `velocity` for `travel` seconds towards
    `target`; before `depart` the user waits at `origin`, which is how pauses are made. Asking for
    a time past a leg's end (`next`) has the subclass draw the following leg, for the due users
    only, so a step costs a few array passes whatever the number of users.
    """

    def __init__(self, users: int):
        self._origin = np.zeros((users, 2))
        self._target = np.zeros((users, 2))
        self._velocity = np.zeros((users, 2))
        self._depart = np.zeros(users)
        self._travel = np.zeros(users)
        self._next = np.full(users, np.inf)
        self._now = -np.inf

    @property
    def users(self) -> int:
        return len(self._depart)

    def positions(self, t: float) -> np.ndarray:
        """Every user's position at time t (s) as an (n, 2) array in metres; t never decreases."""
        if t < self._now:
            raise ValueError(f"positions go forward in time: asked for {t:g} s after "
                             f"{self._now:g} s")
        self._now = t
        due = np.flatnonzero(self._next <= t)
        # A long step may end several legs of one user: draw until every leg covers t.
        while due.size:
            self._renew(due)
            due = due[self._next[due] <= t]
        elapsed = np.clip(t - self._depart, 0.0, self._travel)
        return self._origin + self._velocity * elapsed[:, None]

    def _set_legs(self, users: np.ndarray, origin: np.ndarray, target: np.ndarray,
                  depart: np.ndarray | float, travel: np.ndarray) -> None:
        self._origin[users] = origin
        self._target[users] = target
        self._depart[users] = depart
        self._travel[users] = travel
        # A leg of no length (a trace's last point) has no velocity rather than 0 / 0.
        self._velocity[users] = np.divide(target - origin, travel[:, None],
                                          out=np.zeros_like(origin), where=travel[:, None] > 0)
        self._next[users] = depart + travel

    def _renew(self, due: np.ndarray) -> None:
        """Draw the next leg of each due user, starting where and when its last one ended."""
        raise NotImplementedError


class RandomWaypoint(Movement):
    """Each user walks straight to a uniform random point at a uniform random speed, pauses for
    a uniform random time, and repeats.

    Speeds are drawn from [min, max] with min > 0 (the spec insists): with min = 0 the average
    speed decays towards zero over a run, since the slowest legs last longest (Yoon, Liu and
    Noble 2003). Even so the time-average speed is (max - min) / ln(max / min), below the middle
    of the range, and users gather towards the centre of the area; allow a warm-up before
    measuring if a steady state matters.
    """

    def __init__(self, spec: RandomWaypointSpec, area: Area, users: int,
                 rng: np.random.Generator, *, start: np.ndarray | None = None,
                 targets: np.ndarray | None = None):
        """`start`: where users are at t = 0 (default: uniform in the area); `targets`: their
        first waypoints (default: drawn like every other)."""
        super().__init__(users)
        self._spec, self._area, self._rng = spec, area, rng
        origin = area.uniform(users, rng) if start is None else _points(start, users, "start")
        target = area.uniform(users, rng) if targets is None else _points(targets, users, "targets")
        speed = rng.uniform(*spec.speed, users)
        self._set_legs(np.arange(users), origin, target, 0.0,
                       np.hypot(*(target - origin).T) / speed)

    def _renew(self, due: np.ndarray) -> None:
        pause = self._rng.uniform(*self._spec.pause, len(due))
        speed = self._rng.uniform(*self._spec.speed, len(due))
        target = self._area.uniform(len(due), self._rng)
        origin = self._target[due]
        self._set_legs(due, origin, target, self._next[due] + pause,
                       np.hypot(*(target - origin).T) / speed)


def _points(points: np.ndarray, users: int, name: str) -> np.ndarray:
    array = np.array(points, dtype=float)
    if array.shape != (users, 2):
        raise ValueError(f"{name} must be an array of shape ({users}, 2), got {array.shape}")
    return array


# East, north, west, south: adding 1 turns left, adding 3 turns right, adding 2 turns back.
_HEADINGS = np.array([[1, 0], [0, 1], [-1, 0], [0, -1]])


class ManhattanGrid(Movement):
    """Users walk the streets of a square grid laid from the area's lower-left corner.

    At each intersection a user turns left or right (equally likely) with probability `turn` and
    otherwise goes straight on; where that street leaves the area it takes another one at random,
    never back the way it came. Each block is walked at a fresh uniform random speed.
    """

    def __init__(self, spec: ManhattanSpec, area: Area, users: int, rng: np.random.Generator):
        super().__init__(users)
        self._spec, self._rng = spec, rng
        self._corner = np.array([area.x0, area.y0])
        width, height = area.x1 - area.x0, area.y1 - area.y0
        # Intersections per axis; the small tolerance keeps an area of whole blocks whole.
        self._size = np.floor(np.array([width, height]) / spec.block + 1e-9).astype(int) + 1
        if (self._size < 2).any():
            raise ValueError(f"an area of {width:g} x {height:g} m holds no whole block of "
                             f"{spec.block:g} m")
        # Start somewhere along a random street, walking towards one of its ends.
        node = rng.integers(0, self._size, size=(users, 2))
        self._heading = self._any_of(self._open(node))
        self._node = node + _HEADINGS[self._heading]
        along = rng.random(users)
        origin = self._at(node) + (along * spec.block)[:, None] * _HEADINGS[self._heading]
        speed = rng.uniform(*spec.speed, users)
        self._set_legs(np.arange(users), origin, self._at(self._node), 0.0,
                       (1.0 - along) * spec.block / speed)

    def _at(self, node: np.ndarray) -> np.ndarray:
        return self._corner + node * self._spec.block

    def _open(self, node: np.ndarray) -> np.ndarray:
        """(k, 4): which headings lead from each node to another intersection of the area."""
        ahead = node[:, None, :] + _HEADINGS[None, :, :]
        return ((ahead >= 0) & (ahead < self._size)).all(axis=2)

    def _any_of(self, allowed: np.ndarray) -> np.ndarray:
        """A heading drawn uniformly among the allowed ones of each row."""
        # Adding the mask lifts every allowed heading's draw above every barred one's.
        return np.argmax(self._rng.random(allowed.shape) + allowed, axis=1)

    def _renew(self, due: np.ndarray) -> None:
        rng, n = self._rng, len(due)
        node, heading = self._node[due], self._heading[due]
        turning = rng.random(n) < self._spec.turn
        side = np.where(rng.random(n) < 0.5, 1, 3)
        wanted = np.where(turning, (heading + side) % 4, heading)
        allowed = self._open(node)
        fits = allowed[np.arange(n), wanted]
        # With at least 2 x 2 intersections every node has an open street besides the way back.
        allowed[np.arange(n), (heading + 2) % 4] = False
        heading = np.where(fits, wanted, self._any_of(allowed))
        ahead = node + _HEADINGS[heading]
        speed = rng.uniform(*self._spec.speed, n)
        self._node[due], self._heading[due] = ahead, heading
        self._set_legs(due, self._at(node), self._at(ahead), self._next[due],
                       self._spec.block / speed)


class TraceReplay(Movement):
    """Users follow recorded tracks, moving linearly between points; they wait at the first point
    before it and stay at the last point after it."""

    def __init__(self, tracks: Sequence[Track]):
        super().__init__(len(tracks))
        if not tracks:
            raise ValueError("a trace replay needs at least one track")
        self._time = np.concatenate([track.time for track in tracks])
        self._xy = np.concatenate([track.xy for track in tracks])
        lengths = np.array([len(track.time) for track in tracks])
        self._last = np.cumsum(lengths) - 1
        self._point = self._last + 1 - lengths
        self._from_point(np.arange(len(tracks)))

    def _renew(self, due: np.ndarray) -> None:
        self._point[due] += 1
        self._from_point(due)

    def _from_point(self, users: np.ndarray) -> None:
        point = self._point[users]
        following = np.minimum(point + 1, self._last[users])
        self._set_legs(users, self._xy[point], self._xy[following], self._time[point],
                       self._time[following] - self._time[point])
        self._next[users[point == self._last[users]]] = np.inf


def build_movement(model: MovementSpec, users: int, gateways: np.ndarray,
                   rng: np.random.Generator) -> Movement:
    """The movement a spec describes for `users` users; `gateways` (m, 2) places a derived area.

    A trace must hold exactly `users` tracks; its path is read as given (resolve it first).
    """
    if isinstance(model, TraceSpec):
        tracks = load_trace(model.path)
        if len(tracks) != users:
            raise ValueError(f"{model.path}: {len(tracks)} tracks for {users} moving devices")
        return TraceReplay(list(tracks.values()))
    area = Area.of(model.area, np.asarray(gateways, dtype=float).reshape(-1, 2), model.margin)
    if isinstance(model, ManhattanSpec):
        return ManhattanGrid(model, area, users, rng)
    return RandomWaypoint(model, area, users, rng)
