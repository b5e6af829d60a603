"""Bloom filter and HyperLogLog: sizes, no false negatives, error rates within their bounds."""

from __future__ import annotations

import pytest

from workloads.riot.sketches import BloomFilter, HyperLogLog


def test_bloom_filter_size_follows_the_optimal_formula() -> None:
    bloom = BloomFilter(capacity=1000, fp_rate=0.01)
    # m = -n ln p / (ln 2)^2 = 9585.06 -> 9586 bits; k = m / n ln 2 = 6.64 -> 7 hashes
    assert (bloom.bits, bloom.hashes) == (9586, 7)


def test_bloom_filter_has_no_false_negatives_and_about_the_configured_false_positives() -> None:
    bloom = BloomFilter(capacity=2000, fp_rate=0.01)
    members = [f"sensor-{i}" for i in range(2000)]
    bloom.update(members)
    assert all(member in bloom for member in members)
    strangers = [f"stranger-{i}" for i in range(20000)]
    rate = sum(s in bloom for s in strangers) / len(strangers)
    assert 0.005 <= rate <= 0.02


def test_bloom_filter_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="capacity >= 1"):
        BloomFilter(0)


def test_hyperloglog_is_within_three_standard_errors_on_ten_thousand_values() -> None:
    sketch = HyperLogLog(precision=10)
    for i in range(10000):
        sketch.add(f"medallion-{i}")
        sketch.add(f"medallion-{i // 2}")  # repeats must not count
    assert sketch.standard_error == pytest.approx(0.0325)
    assert abs(sketch.estimate() - 10000) <= 3 * sketch.standard_error * 10000


def test_hyperloglog_counts_small_sets_almost_exactly() -> None:
    sketch = HyperLogLog(precision=10)
    for i in range(50):
        sketch.add(str(i))
    assert round(sketch.estimate()) in (49, 50, 51)
