"""A nemesis schedule: a scenario and 1-3 faults drawn from its envelope, from one seed.

Everything random comes from `random.Random(seed)`, drawn in one fixed order, so a seed
gives the same schedule on any host and `Schedule.of_seed(seed)` replays a run exactly
(the faults' kinds, targets, times and parameters; the emulation's own timing is the host's).
Faults of the experiment's kinds become `scenario.faults` entries (workloads.faults' YAML
forms); host-level actions (pause, cpu_hog, disk_burst, broker_restart) are carried out by
the nemesis itself during the run (experiments.nemesis.actions). Every fault starts at
EARLIEST_S or later and ends QUIET_END_S before the run does (a crash `forever` excepted);
two faults that touch one node (or both the host) never overlap.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field

from experiments.nemesis.scenarios import (
    EARLIEST_S,
    HOST_KINDS,
    MAX_DURATION_S,
    QUIET_END_S,
    SCENARIOS,
    Draw,
    Scenario,
    scenario,
)

MAX_FAULTS = 3
TRIES = 20  # draws of one fault before it is given up (no room left beside the others)


@dataclass(frozen=True)
class Fault:
    """One drawn fault: its kind, target (a node, "a>b" link, "a|b" partition, or "" for
    the host), start and span (s from the run's epoch; span None: to the run's end, a crash
    only), and its parameters (delay: latency, jitter; loss: rate; slow: factor)."""

    kind: str
    target: str
    at: float
    span: float | None
    params: dict = field(default_factory=dict)

    @property
    def end(self) -> float:
        return float("inf") if self.span is None else self.at + self.span

    @property
    def host(self) -> bool:
        """Carried out by the nemesis (not a scenario.faults entry)."""
        return self.kind in HOST_KINDS

    def touches(self) -> set[str]:
        if self.kind in ("cpu_hog", "disk_burst"):
            return {"host"}
        return set(self.target.replace(">", "|").split("|"))

    def yaml(self) -> dict:
        """The scenario.faults entry (workloads.faults' forms)."""
        entry: dict = {"at": f"{self.at:.3f}s"}
        if self.kind in ("crash", "restart", "slow"):
            entry[self.kind] = self.target
        elif self.kind == "partition":
            entry["partition"] = self.target.split("|")
        elif self.kind in ("delay", "loss"):
            source, target = self.target.split(">")
            entry[self.kind] = {"from": source, "to": target}
        else:
            raise ValueError(f"a {self.kind} is the nemesis's own, not a scenario fault")
        if self.kind == "delay":
            entry["latency"] = f"{self.params['latency'] * 1000:.1f}ms"
            entry["jitter"] = f"{self.params['jitter'] * 1000:.1f}ms"
        elif self.kind == "loss":
            entry["rate"] = round(self.params["rate"], 4)
        elif self.kind == "slow":
            entry["factor"] = round(self.params["factor"], 2)
        if self.span is not None:
            entry["for"] = f"{self.span:.3f}s"
        return entry

    def describe(self) -> str:
        what = f"{self.kind} {self.target}".strip()
        params = " ".join(f"{k}={v:g}" for k, v in self.params.items())
        span = "for good" if self.span is None else f"for {self.span:.2f} s"
        return f"{what} at {self.at:.2f} s {span}" + (f" ({params})" if params else "")


@dataclass(frozen=True)
class Schedule:
    seed: int
    scenario: str
    duration: float
    faults: tuple[Fault, ...]

    @classmethod
    def of_seed(cls, seed: int, only: str | None = None,
                duration: float | None = None) -> Schedule:
        """The schedule of `seed`: its scenario (drawn among all, or `only`), its duration
        (the scenario's default, or `duration`), and 1-3 faults of its envelope."""
        rng = random.Random(seed)
        names = sorted(SCENARIOS)
        name = rng.choice(names)  # drawn even when `only` is given: the rest stays the same
        chosen = scenario(only) if only is not None else SCENARIOS[name]
        length = check_duration(chosen, duration)
        return cls(seed, chosen.name, length, draw_faults(rng, chosen, length))

    def scenario_faults(self) -> list[dict]:
        return [fault.yaml() for fault in self.faults if not fault.host]

    def host_actions(self) -> list[Fault]:
        return [fault for fault in self.faults if fault.host]

    def to_json(self) -> str:
        return json.dumps({"seed": self.seed, "scenario": self.scenario,
                           "duration": self.duration,
                           "faults": [asdict(f) for f in self.faults]}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        data = json.loads(text)
        return cls(int(data["seed"]), data["scenario"], float(data["duration"]),
                   tuple(Fault(**f) for f in data["faults"]))

    def describe(self) -> str:
        faults = "; ".join(f.describe() for f in self.faults)
        return (f"seed {self.seed}: {self.scenario} for {self.duration:g} s: {faults}")


def check_duration(chosen: Scenario, duration: float | None) -> float:
    length = chosen.duration if duration is None else float(duration)
    if not chosen.min_duration <= length <= MAX_DURATION_S:
        raise ValueError(f"a duration of {length:g} s for scenario {chosen.name}: it needs "
                         f"{chosen.min_duration:g} to {MAX_DURATION_S:g} s")
    return length


def draw_faults(rng: random.Random, chosen: Scenario, duration: float) -> tuple[Fault, ...]:
    """1-3 faults: one of the essential draws if the scenario has any, then extras, each
    redrawn until it fits beside the others (up to TRIES times, else left out)."""
    wanted = rng.randint(1, MAX_FAULTS)
    faults: list[Fault] = []
    if chosen.essential:
        essential = rng.choice(chosen.essential)
        faults.append(_fit(rng, essential, chosen, duration, faults) or
                      _draw(rng, essential, chosen, duration))
    while len(faults) < wanted and chosen.extras:
        fault = None
        for _ in range(TRIES):
            fault = _fit(rng, rng.choice(chosen.extras), chosen, duration, faults)
            if fault is not None:
                break
        if fault is None:
            break
        faults.append(fault)
    return tuple(sorted(faults, key=lambda f: (f.at, f.kind, f.target)))


def _fit(rng: random.Random, draw: Draw, chosen: Scenario, duration: float,
         faults: list[Fault]) -> Fault | None:
    fault = _draw(rng, draw, chosen, duration)
    for other in faults:
        if fault.touches() & other.touches() and fault.at < other.end and other.at < fault.end:
            return None
    return fault


def _draw(rng: random.Random, draw: Draw, chosen: Scenario, duration: float) -> Fault:
    target = rng.choice(draw.targets) if draw.targets else ""
    latest_end = duration - QUIET_END_S
    span = rng.uniform(*draw.span)
    if draw.anchor == "move":
        at = (chosen.move_at or 0.0) + rng.uniform(*draw.offset)
    else:
        at = rng.uniform(EARLIEST_S, max(EARLIEST_S, latest_end - span))
    at = max(EARLIEST_S, min(at, latest_end - span))
    forever = draw.forever > 0 and rng.random() < draw.forever
    params = {name: round(rng.uniform(low, high), 4) for name, (low, high) in draw.params}
    return Fault(draw.kind, target, round(at, 3), None if forever else round(span, 3), params)
