"""Tests of sgpc.metrics: hand-computed values on tiny examples, limiting cases, and input errors.

Tolerances: the hand-computed values are exact up to float64 rounding of a few operations, so 1e-12.
"""
import math

import numpy as np
import pytest

from sgpc import metrics

# three points, three classes; predictions 0, 1, 0 (the last one wrong)
Y = np.array([0, 1, 2])
P = np.array([[0.7, 0.2, 0.1],
              [0.3, 0.5, 0.2],
              [0.55, 0.35, 0.1]])


def test_error_rate_hand_computed():
    assert metrics.error_rate(Y, P) == pytest.approx(1 / 3, abs=1e-12)
    assert metrics.error_rate(Y, np.array([0, 1, 0])) == pytest.approx(1 / 3, abs=1e-12)


def test_error_rate_with_labels():
    classes = np.array(["cat", "dog", "eel"])
    assert metrics.error_rate(classes[Y], P, classes=classes) == pytest.approx(1 / 3, abs=1e-12)


def test_nll_hand_computed():
    expected = -(math.log(0.7) + math.log(0.5) + math.log(0.1)) / 3
    assert metrics.nll(Y, P) == pytest.approx(expected, abs=1e-12)


def test_nll_of_zero_probability_is_large_and_finite():
    value = metrics.nll([1], [[1.0, 0.0]])
    assert math.isfinite(value) and value == pytest.approx(-math.log(metrics.PROB_FLOOR), rel=1e-12)
    assert value > 700


def test_brier_hand_computed():
    # rows: 0.3²+0.2²+0.1² = 0.14; 0.3²+0.5²+0.2² = 0.38; 0.55²+0.35²+0.9² = 1.235
    assert metrics.brier(Y, P) == pytest.approx((0.14 + 0.38 + 1.235) / 3, abs=1e-12)


def test_brier_limits():
    eye = np.eye(3)
    assert metrics.brier([0, 1, 2], eye) == 0.0
    assert metrics.brier([1, 2, 0], eye) == pytest.approx(2.0, abs=1e-15)


def test_ece_hand_computed():
    # n_bins=10: confidences 0.7 (correct), 0.5 (correct), 0.55 (wrong) fall in three different bins
    expected = (abs(1 - 0.7) + abs(1 - 0.5) + abs(0 - 0.55)) / 3
    assert metrics.ece(Y, P, n_bins=10) == pytest.approx(expected, abs=1e-12)


def test_ece_zero_for_perfect_calibration():
    # 10 points at confidence 0.8 of which 8 are right; 5 points at confidence 0.6 of which 3 are right
    p = np.array([[0.8, 0.2]] * 10 + [[0.4, 0.6]] * 5)
    y = np.array([0] * 8 + [1] * 2 + [1] * 3 + [0] * 2)
    assert metrics.ece(y, p) == pytest.approx(0.0, abs=1e-12)


def test_ece_overconfident():
    # confidence 0.9 but only half right: ECE = |0.5 − 0.9| = 0.4
    p = np.array([[0.9, 0.1]] * 4)
    assert metrics.ece([0, 0, 1, 1], p) == pytest.approx(0.4, abs=1e-12)


def test_ece_matches_explicit_loop():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4) * 0.5, size=200)
    y = rng.integers(0, 4, size=200)
    n = 7
    conf, correct = p.max(1), p.argmax(1) == y
    expected = 0.0
    for b in range(n):
        lo, hi = b / n, (b + 1) / n
        inside = (conf > lo) & (conf <= hi)
        if inside.any():
            expected += inside.mean() * abs(correct[inside].mean() - conf[inside].mean())
    assert metrics.ece(y, p, n_bins=n) == pytest.approx(expected, abs=1e-12)


def test_reliability_curve_bins():
    p = np.array([[0.9, 0.1], [0.95, 0.05], [0.4, 0.6]])
    curve = metrics.reliability_curve([0, 1, 1], p, n_bins=5)
    np.testing.assert_allclose(curve["bin_edges"], [0, 0.2, 0.4, 0.6, 0.8, 1.0])
    np.testing.assert_array_equal(curve["count"], [0, 0, 1, 0, 2])   # 0.6 lies on an edge: bin (0.4, 0.6]
    assert curve["confidence"][4] == pytest.approx(0.925, abs=1e-12)
    assert curve["accuracy"][4] == pytest.approx(0.5, abs=1e-12)
    assert curve["accuracy"][2] == 1.0
    assert np.isnan(curve["confidence"][0]) and np.isnan(curve["accuracy"][3])


def test_entropy_limits():
    np.testing.assert_allclose(metrics.predictive_entropy(np.full((2, 4), 0.25)), [math.log(4)] * 2, rtol=1e-12)
    np.testing.assert_array_equal(metrics.predictive_entropy(np.eye(3)), np.zeros(3))
    assert metrics.predictive_entropy([[0.5, 0.5, 0.0]])[0] == pytest.approx(math.log(2), abs=1e-12)


def test_variation_ratio():
    np.testing.assert_allclose(metrics.variation_ratio(P), [0.3, 0.5, 0.45], atol=1e-12)


def test_evaluate_collects_the_metrics():
    out = metrics.evaluate(Y, P)
    assert set(out) == {"error", "nll", "brier", "ece"}
    assert all(isinstance(v, float) for v in out.values())
    assert out["nll"] == metrics.nll(Y, P) and out["ece"] == metrics.ece(Y, P)
    assert out["error"] == metrics.error_rate(Y, P)
    other = (np.asarray(Y) + 1) % np.asarray(P).shape[1]              # a decision rule that is always wrong
    given = metrics.evaluate(Y, P, pred_idx=other)
    assert given["error"] == 1.0 and given["nll"] == out["nll"]


def test_class_indices():
    classes = np.array(["a", "b", "c"])
    np.testing.assert_array_equal(metrics.class_indices(["c", "a", "c"], classes), [2, 0, 2])
    with pytest.raises(ValueError, match="not among the model's classes"):
        metrics.class_indices(["a", "z"], classes)


@pytest.mark.parametrize("proba, message", [
    (np.array([0.5, 0.5]), "2-D array"),
    (np.array([[0.5, 0.4], [0.5, 0.5]]), "sum to 1 within 1e-06.*row 0 sums to 0.9"),
    (np.array([[1.5, -0.5]]), r"outside \[0, 1\]"),
    (np.array([[np.nan, 1.0]]), "NaN"),
])
def test_bad_proba_raises(proba, message):
    with pytest.raises(ValueError, match=message):
        metrics.nll(np.zeros(len(np.atleast_2d(proba)), dtype=int), proba)


def test_row_sum_within_tolerance_is_accepted():
    metrics.brier([0], [[0.5 + 5e-7, 0.5]])


@pytest.mark.parametrize("y, message", [
    ([0, 1], "has 2 entries but proba has 3 rows"),
    ([0, 1, 3], r"class indices in 0..2"),
    ([0.5, 1, 2], "integer class indices"),
    ([[0, 1, 2]], "1-D"),
])
def test_bad_labels_raise(y, message):
    with pytest.raises(ValueError, match=message):
        metrics.brier(y, P)


@pytest.mark.parametrize("n", [6, 12, 7, 49])
def test_reliability_edge_rule_holds_for_every_bin_count(n):
    # a confidence of exactly k/n belongs to bin k − 1 ((k−1)/n, k/n]; linspace edges one ulp below k/n
    # (n = 6, 12, 49 among them) moved it to bin k
    for k in range(1, n + 1):
        if k / n < 0.5:
            continue                                  # the top probability of two classes is >= 1/2
        curve = metrics.reliability_curve([0], [[k / n, 1 - k / n]], n_bins=n)
        assert int(np.argmax(curve["count"])) == k - 1, (n, k)


def test_evaluate_checks_the_predicted_indices():
    # labels passed as pred_idx (classes [3, 7, 11]) gave an error of 1.0 where the true error is 0
    proba = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])
    y = np.array([0, 1, 2])
    assert metrics.evaluate(y, proba, pred_idx=np.array([0, 1, 2]))["error"] == 0.0
    with pytest.raises(ValueError, match=r"pred_idx must be class indices in 0..2 .* from 3 to 11"):
        metrics.evaluate(y, proba, pred_idx=np.array([3, 7, 11]))
    with pytest.raises(ValueError, match="pred_idx has 2 entries but proba has 3 rows"):
        metrics.evaluate(y, proba, pred_idx=np.array([0, 1]))
