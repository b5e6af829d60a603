"""A nemesis schedule is drawn from its seed alone, round-trips through JSON, and draws only
what its scenario's envelope holds, inside the run."""

from __future__ import annotations

import pytest

from experiments.loader import parse_text
from experiments.nemesis.scenarios import (
    EARLIEST_S,
    HOST_KINDS,
    QUIET_END_S,
    SCENARIOS,
    experiment_text,
)
from experiments.nemesis.schedule import MAX_FAULTS, Schedule

SEEDS = range(200)


def test_a_seed_gives_the_same_schedule_every_time() -> None:
    for seed in SEEDS:
        assert Schedule.of_seed(seed) == Schedule.of_seed(seed)
    assert len({Schedule.of_seed(seed).to_json() for seed in SEEDS}) == len(SEEDS)


def test_a_schedule_survives_its_json() -> None:
    for seed in SEEDS:
        schedule = Schedule.of_seed(seed)
        assert Schedule.from_json(schedule.to_json()) == schedule


def test_every_scenario_is_drawn_and_every_draw_is_in_its_envelope_and_the_run() -> None:
    drawn = set()
    for seed in SEEDS:
        schedule = Schedule.of_seed(seed)
        chosen = SCENARIOS[schedule.scenario]
        drawn.add(schedule.scenario)
        assert 1 <= len(schedule.faults) <= MAX_FAULTS
        allowed = {(d.kind, t) for d in chosen.draws() for t in (d.targets or ("",))}
        if chosen.essential:
            essential = {(d.kind, t) for d in chosen.essential for t in d.targets}
            assert any((f.kind, f.target) in essential for f in schedule.faults), schedule
        for fault in schedule.faults:
            assert (fault.kind, fault.target) in allowed, (seed, fault)
            assert fault.at >= EARLIEST_S, (seed, fault)
            if fault.span is not None:
                assert fault.end <= schedule.duration - QUIET_END_S + 1e-9, (seed, fault)
        for i, a in enumerate(schedule.faults):
            for b in schedule.faults[i + 1:]:
                if a.touches() & b.touches():
                    assert a.end <= b.at or b.end <= a.at, (seed, a, b)
    assert drawn == set(SCENARIOS)


def test_a_scenario_faults_are_a_valid_experiment() -> None:
    for seed in range(60):
        schedule = Schedule.of_seed(seed)
        chosen = SCENARIOS[schedule.scenario]
        text = experiment_text(chosen, "nem-test", schedule.duration, seed,
                               schedule.scenario_faults())
        experiment = parse_text(text)
        faults = experiment.points[0].spec.scenario.faults
        assert len(faults) == len([f for f in schedule.faults if f.kind not in HOST_KINDS])


def test_only_and_duration_keep_the_seed_and_refuse_what_does_not_fit() -> None:
    schedule = Schedule.of_seed(7, "parallel", 30)
    assert (schedule.scenario, schedule.duration) == ("parallel", 30.0)
    assert Schedule.of_seed(7, "parallel", 30) == schedule
    with pytest.raises(ValueError, match="needs 24 to 60 s"):
        Schedule.of_seed(7, "parallel", 20)
    with pytest.raises(KeyError, match="unknown scenario"):
        Schedule.of_seed(7, "teleport")
