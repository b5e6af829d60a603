"""benchmarks/guard.py's pure parts: reading what a benchmark printed, the median of the
rounds' ratios, the decision at 1.10 (a warning when short rounds disagree), the counts both
sides must agree on, and whether one more benchmark fits the budget. No timing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "guard.py"


@pytest.fixture(scope="module")
def guard():
    spec = importlib.util.spec_from_file_location("benchmarks_guard", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_the_values_a_benchmark_printed(guard) -> None:
    text = ("users=2000 threshold=25ms simulated_s=150 wall_s=1.7\n"
            "messages=23830 handovers=11457 migrations=1358\n"
            "cpu_s=1.7 (build 0.3) speedup_cpu=90.1\n"
            "simpy_store_per_s=248692 (before 220907, after 276477)\n"
            "cpu: delivered_per_cpu_s=86490 ratio_cpu=0.380\n"
            "speedup=88.2\nspeedup=90.0\n")
    values = guard.parse_values(text)
    assert values["messages"] == "23830" and values["threshold"] == "25ms"
    assert values["cpu_s"] == "1.7" and values["delivered_per_cpu_s"] == "86490"
    assert values["speedup"] == "90.0"  # the last one printed
    assert "build" not in values and "before" not in values
    assert guard.number(values["wall_s"]) == 1.7
    assert guard.number("+0.25") == 0.25
    assert guard.number(values["threshold"]) is None and guard.number(None) is None


def test_ratios_pair_the_rounds(guard) -> None:
    assert guard.ratios([2.0, 3.0, 4.0], [1.0, 2.0, 4.0]) == [2.0, 1.5, 1.0]
    # A round with a missing figure or a zero base is no ratio.
    assert guard.ratios([2.0, None, 1.0], [1.0, 1.0, 0.0]) == [2.0]


def test_the_median_ratio_decides_at_1_10(guard) -> None:
    ok = guard.decide([1.05, 0.97, 1.12], short_budget=True)
    assert ok.ratio == 1.05 and ok.verdict == "ok"
    assert ok.ratios == [1.05, 0.97, 1.12]
    assert ok.spread == pytest.approx((1.12 - 0.97) / 1.05)
    assert guard.decide([1.10, 1.10, 1.10], short_budget=False).verdict == "ok"
    slower = guard.decide([1.3, 1.45, 1.2, 1.5], short_budget=True)
    assert slower.ratio == pytest.approx(1.375) and slower.verdict == "slower"


def test_rounds_that_disagree_warn_on_a_short_budget(guard) -> None:
    # The median is over 1.10 but one round saw no slowdown.
    assert guard.decide([1.2, 1.15, 0.95], short_budget=True).verdict == "warn"
    assert guard.decide([1.2, 1.15, 0.95], short_budget=False).verdict == "slower"
    # Fewer than three rounds cannot tell, whatever the budget.
    assert guard.decide([1.5, 1.6], short_budget=False).verdict == "warn"
    assert guard.decide([1.5, 1.6], short_budget=False, min_rounds=2).verdict == "slower"
    assert guard.decide([], short_budget=True).verdict == "skipped"


def test_the_guard_fails_on_a_slower_benchmark_or_a_broken_one(guard) -> None:
    assert guard.overall(["ok", "skipped", "ok"], False) == ("ok", 0)
    assert guard.overall(["ok", "warn"], False) == ("warn", 0)
    assert guard.overall(["warn", "slower"], False) == ("fail", 1)
    assert guard.overall(["ok", "error"], True) == ("fail", 1)


def test_counts_that_differ_are_named(guard) -> None:
    this = {"messages": "5872", "migrations": "340", "wall_s": "1.2"}
    base = {"messages": "5872", "migrations": "341", "wall_s": "1.5"}
    keys = ("messages", "handovers", "migrations")
    assert guard.differing_counts(this, base, keys) == {"migrations": ("340", "341")}
    assert guard.differing_counts(this, {**base, "handovers": "7"}, keys) == {
        "migrations": ("340", "341"), "handovers": (None, "7")}
    assert guard.differing_counts(this, this, keys) == {}


def test_one_more_benchmark_fits_three_rounds_or_not(guard) -> None:
    # In: two more pairs of 5 s; the new one three pairs of 2 x 1.5 x 2 s.
    assert guard.fits(28.0, [5.0], cost=1.5, slow=2.0)
    assert not guard.fits(27.9, [5.0], cost=1.5, slow=2.0)
    assert guard.fits(9.0, [], cost=1.5, slow=1.0)


def test_the_size_follows_the_budget(guard) -> None:
    assert guard.size_for(45) == "short"
    assert guard.size_for(120) == guard.size_for(399) == "medium"
    assert guard.size_for(600) == "long"
    names = [b.name for b in guard.benchmarks("short")]
    assert names == ["mobility", "throughput", "scale", "post", "energy"]
