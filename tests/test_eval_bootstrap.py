"""The stratified bootstrap of band-weighted precision and recall."""

from __future__ import annotations

import pytest

from ndd_stream.eval.bootstrap import Outcome, stratified_bootstrap, weighted_rates


def test_weighted_rates_weigh_each_band() -> None:
    outcomes = [Outcome(0, False, True), Outcome(1, True, True), Outcome(1, True, False)]
    assert weighted_rates(outcomes, [3.0, 1.0]) == (0.25, 0.5)


def test_a_perfect_routing_has_no_spread() -> None:
    outcomes = [Outcome(k % 3, k % 2 == 0, k % 2 == 0) for k in range(60)]
    result = stratified_bootstrap(outcomes, [5.0, 2.0, 1.0], resamples=200, target=(0.95, 0.9))
    assert (result.precision.low, result.precision.high) == (1.0, 1.0)
    assert (result.recall.low, result.recall.high) == (1.0, 1.0)
    assert result.meets == 1.0


def test_interval_is_seeded_and_narrows_with_more_pairs() -> None:
    def outcomes(n: int) -> list[Outcome]:
        # one band, half the routed pairs are false duplicates: precision 0.5
        return [Outcome(0, i % 2 == 0, True) for i in range(n)]

    small = stratified_bootstrap(outcomes(20), [1.0], resamples=500, seed=3)
    assert small == stratified_bootstrap(outcomes(20), [1.0], resamples=500, seed=3)
    large = stratified_bootstrap(outcomes(400), [1.0], resamples=500, seed=3)
    assert small.precision.low < 0.5 < small.precision.high
    assert abs(large.precision.median - 0.5) < 0.03
    assert (large.precision.high - large.precision.low
            < (small.precision.high - small.precision.low) / 2)


def test_resampling_stays_within_bands() -> None:
    """A band of only true duplicates never lends pairs to a band of only false ones: with
    one routed false duplicate of weight 1 and routed duplicates of weight 9, every
    resample has precision exactly 0.9."""
    outcomes = [Outcome(0, True, True)] * 5 + [Outcome(1, False, True)] * 5
    result = stratified_bootstrap(outcomes, [9.0 / 5, 1.0 / 5], resamples=100)
    assert result.precision.low == pytest.approx(0.9) == result.precision.high


def test_needs_a_resample() -> None:
    with pytest.raises(ValueError):
        stratified_bootstrap([], [], resamples=0)
