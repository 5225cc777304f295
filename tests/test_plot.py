"""sgpc.plot with the Agg backend: figures are produced, axes are labelled, and the numbers in the artists are
the inputs' (bar heights against per-bin accuracies computed here from scratch, surfaces against
predict_proba on the grid, inducing markers against model_.Z, history lines against history_)."""
import sys
import warnings

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from sgpc import GPClassifier, plot  # noqa: E402

# exact equality is expected where the artist stores the value it was given; 1e-12 where this file recomputes a
# sum (ECE, entropy) in another order than sgpc.metrics
TOL = 1e-12


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _blobs(n=60, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    y = np.arange(n) % 3
    return centres[y] + rng.normal(scale=0.7, size=(n, 2)), y


@pytest.fixture(scope="module")
def fitted():
    X, y = _blobs()
    labels = np.array(["a", "b", "c"])[y]            # string labels: the displays must map them to columns
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")              # ConvergenceWarning: a few steps are enough here
        est = GPClassifier(method="vi", n_inducing=5, max_iter=12, random_state=0).fit(
            X, labels, X_val=X[:15], y_val=labels[:15])
    return est, X, labels


def _accuracy_per_bin(y, proba, n_bins):
    """Per-bin accuracy and mean confidence over (k/n, (k+1)/n], written out point by point."""
    conf, pred = proba.max(1), proba.argmax(1)
    acc, mean_conf, count = [], [], []
    for k in range(n_bins):
        lo, hi = k / n_bins, (k + 1) / n_bins
        rows = [i for i in range(len(y)) if lo < conf[i] <= hi]
        count.append(len(rows))
        acc.append(np.mean([pred[i] == y[i] for i in rows]) if rows else np.nan)
        mean_conf.append(np.mean([conf[i] for i in rows]) if rows else np.nan)
    return np.array(acc), np.array(mean_conf), np.array(count)


def test_missing_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"sgpc\[plot\]"):
        plot.ReliabilityDisplay.from_predictions([0, 1], [[0.9, 0.1], [0.2, 0.8]])


def test_reliability_bars_are_the_per_bin_accuracies():
    rng = np.random.default_rng(1)
    logits = rng.normal(scale=2.0, size=(400, 4))
    proba = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    y = np.array([rng.choice(4, p=p) for p in proba])
    disp = plot.ReliabilityDisplay.from_predictions(y, proba, n_bins=10, name="model")
    acc, conf, count = _accuracy_per_bin(y, proba, 10)
    used = count > 0
    heights = np.array([b.get_height() for b in disp.bars_])
    lefts = np.array([b.get_x() for b in disp.bars_])
    np.testing.assert_array_equal(heights, acc[used])
    np.testing.assert_allclose(lefts, np.arange(10)[used] / 10, rtol=0, atol=TOL)
    np.testing.assert_allclose(disp.line_.get_xdata(), conf[used], rtol=0, atol=TOL)
    ece = np.sum(count[used] / len(y) * np.abs(acc[used] - conf[used]))
    assert disp.ece == pytest.approx(ece, abs=TOL)
    assert disp.ax_.get_xlabel() and disp.ax_.get_ylabel()
    assert any(f"ECE = {ece:.3f}" in t.get_text() and "model" in t.get_text() for t in disp.ax_.get_legend().get_texts())
    assert disp.figure_ is disp.ax_.figure


def test_reliability_binary_vector_equals_two_columns():
    p1 = np.array([0.9, 0.2, 0.65, 0.4, 0.05])
    y = np.array([1, 0, 0, 0, 1])
    a = plot.ReliabilityDisplay.from_predictions(y, p1)
    b = plot.ReliabilityDisplay.from_predictions(y, np.column_stack([1 - p1, p1]))
    assert a.ece == b.ece
    np.testing.assert_array_equal(a.accuracy, b.accuracy)


def test_reliability_from_estimator_maps_labels_and_draws_on_given_axes(fitted):
    est, X, labels = fitted
    _, ax = plt.subplots()
    disp = plot.ReliabilityDisplay.from_estimator(est, X, labels, n_bins=5, ax=ax)
    assert disp.ax_ is ax
    idx = np.searchsorted(est.classes_, labels)
    acc, _, count = _accuracy_per_bin(idx, est.predict_proba(X), 5)
    np.testing.assert_array_equal([b.get_height() for b in disp.bars_], acc[count > 0])
    assert any("GPClassifier (ECE = " in t.get_text() for t in disp.ax_.get_legend().get_texts())


def test_boundary_surface_inducing_and_points(fitted):
    est, X, labels = fitted
    disp = plot.BoundaryDisplay.from_estimator(est, X, labels, grid_resolution=15, xlabel="first", ylabel="second")
    grid = np.column_stack([disp.xx0.ravel(), disp.xx1.ravel()])
    p = est.predict_proba(grid)
    entropy = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=1)
    np.testing.assert_allclose(disp.uncertainty_.ravel(), entropy, rtol=0, atol=TOL)
    assert disp.xx0.min() == pytest.approx(X[:, 0].min() - 0.5) and disp.xx1.max() == pytest.approx(X[:, 1].max() + 0.5)
    Z = est.model_.Z.detach().numpy().reshape(-1, 2)
    np.testing.assert_array_equal(disp.inducing_.get_offsets(), Z)
    np.testing.assert_array_equal(disp.scatter_.get_offsets(), X)
    assert (disp.ax_.get_xlabel(), disp.ax_.get_ylabel()) == ("first", "second")
    assert disp.colorbar_.ax.get_ylabel() == "predictive entropy (nats)"
    assert len(disp.boundary_.allsegs) == 2               # two levels between three classes


def test_boundary_variation_ratio_two_classes_and_other_estimators():
    from sklearn.linear_model import LogisticRegression
    X, y = _blobs()
    y = (y > 0).astype(int)
    lr = LogisticRegression().fit(X, y)
    disp = plot.BoundaryDisplay.from_estimator(lr, X, y, uncertainty="variation_ratio", grid_resolution=12)
    grid = np.column_stack([disp.xx0.ravel(), disp.xx1.ravel()])
    np.testing.assert_array_equal(disp.uncertainty_.ravel(), 1 - lr.predict_proba(grid).max(1))
    assert disp.inducing_ is None                          # not a GPClassifier: nothing to mark
    assert len(disp.boundary_.allsegs) == 1
    with pytest.raises(ValueError, match=r"2-D inputs"):
        plot.BoundaryDisplay.from_estimator(lr, np.c_[X, X[:, :1]])
    with pytest.raises(ValueError, match="uncertainty must be"):
        plot.BoundaryDisplay.from_estimator(lr, X, uncertainty="bald")


def test_history_lines_are_the_history(fitted):
    est = fitted[0]
    disp = plot.plot_history(est)
    h = est.history_
    np.testing.assert_array_equal(disp.objective_line_.get_xdata(), h["iteration"])
    np.testing.assert_array_equal(disp.objective_line_.get_ydata(), h["objective"])
    np.testing.assert_array_equal(disp.validation_line_.get_xdata(), [r["time"] for r in h["validation"]])
    np.testing.assert_array_equal(disp.validation_line_.get_ydata(), [r["nll"] for r in h["validation"]])
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in disp.axes_)
    with pytest.raises(TypeError, match="GPClassifier"):
        plot.plot_history(object())


def test_outlier_bars_are_the_sorted_probabilities():
    X, y = _blobs(36)
    y = y.copy()
    flipped = np.zeros(len(y), dtype=bool)
    flipped[[1, 7]] = True
    y[flipped] = (y[flipped] + 1) % 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = GPClassifier(method="rmgpc", n_inducing=8, max_iter=3, random_state=0).fit(X, y)
    disp = plot.OutlierDisplay.from_estimator(est, flipped=flipped)
    heights = np.array([b.get_height() for b in disp.bars_])
    np.testing.assert_array_equal(heights, np.sort(est.outlier_proba_)[::-1])
    np.testing.assert_array_equal(heights, est.outlier_proba_[disp.order])
    red = np.array([b.get_facecolor() for b in disp.bars_])
    np.testing.assert_array_equal((red == matplotlib.colors.to_rgba("C3")).all(1), flipped[disp.order])
    assert disp.expected_rho == pytest.approx(float(est.model_.likelihood.epsilon))
    assert disp.ax_.get_xlabel() and disp.ax_.get_ylabel()
    vi = GPClassifier(method="vi", n_inducing=4, max_iter=2, random_state=0, tol=None).fit(X, y)
    with pytest.raises(ValueError, match="rmgpc"):
        plot.OutlierDisplay.from_estimator(vi)
