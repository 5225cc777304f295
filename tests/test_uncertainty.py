"""Tests of sgpc.uncertainty: sampled predictive uncertainty and the active-learning loop."""
import math

import numpy as np
import pytest
import torch

from sgpc import uncertainty as U
from sgpc.estimator import GPClassifier
from sgpc.sparse import marginals


def _blobs(n_per=15, C=3, sep=4.0, seed=0):
    g = np.random.default_rng(seed)
    ang = 2 * np.pi * np.arange(C) / C
    centres = sep * np.stack([np.cos(ang), np.sin(ang)], 1)
    X = np.concatenate([c + g.normal(size=(n_per, 2)) for c in centres])
    return X, np.repeat(np.arange(C), n_per)


@pytest.fixture(scope="module", params=["bsvm", "vi"])
def fitted(request):
    X, y = _blobs()
    est = GPClassifier(method=request.param, n_inducing=8, max_iter=150, learning_rate=0.05, random_state=0)
    return est.fit(X, y), X, y


def test_variation_ratio_limits():
    C, S = 4, 400
    assert np.all(U.variation_ratio(np.full((S, 7), 2), C) == 0.0)                # certain prediction
    uniform = np.tile(np.arange(C), S // C)[:, None].repeat(5, 1)                  # each class S/C times
    assert np.allclose(U.variation_ratio(uniform, C), (C - 1) / C)
    # i.i.d. uniform labels: VR → (C−1)/C as S grows (the modal count exceeds S/C by O(√S))
    g = np.random.default_rng(0)
    for S, tol in ((1000, 0.05), (100000, 0.005)):
        vr = U.variation_ratio(g.integers(0, C, size=(S, 3)), C)
        assert np.all(np.abs(vr - (C - 1) / C) < tol)
    with pytest.raises(ValueError, match="class indices"):
        U.variation_ratio(np.array([[0, 5]]), 3)


def test_mutual_information_limits():
    g = np.random.default_rng(1)
    p = g.dirichlet(np.ones(3), size=6)
    same = np.repeat(p[None], 10, 0)                                                # no epistemic spread
    assert np.allclose(U.mutual_information(same), 0.0, atol=1e-12)
    onehot = np.eye(3)[g.integers(0, 3, size=(50, 6))]                              # [S,N,C] one-hot
    mean = onehot.mean(0)
    H = -(mean * np.log(np.where(mean > 0, mean, 1))).sum(1)
    assert np.allclose(U.mutual_information(onehot), H)


def test_samples_match_the_marginals_and_are_seeded(fitted):
    est, X, _ = fitted
    F = U.sample_latents(est, X[:5], n_samples=40000, random_state=3)
    m, v = marginals(est.model_, est.posterior_, torch.as_tensor(X[:5]))
    S = F.shape[0]
    assert torch.allclose(F.mean(0), m, atol=5 * (v.max().sqrt() / math.sqrt(S)).item())   # 5 s.e.
    assert torch.allclose(F.var(0), v, rtol=5 * math.sqrt(2 / S))                            # 5 s.e. of a variance
    assert torch.equal(F[:3], U.sample_latents(est, X[:5], 40000, random_state=3)[:3])
    P = U.sample_probabilities(est, X[:5], 30, 0)
    assert P.shape == (30, 5, 3) and np.allclose(P.sum(-1), 1.0)


def test_sample_frequencies_converge_to_predict_proba_for_bsvm():
    X, y = _blobs(sep=2.0)
    est = GPClassifier(method="bsvm", n_inducing=8, max_iter=100, learning_rate=0.05, random_state=0).fit(X, y)
    S = 20000
    labels = U.sample_labels(est, X[:10], S, random_state=1)
    freq = np.stack([(labels == c).mean(0) for c in range(3)], 1)
    assert np.allclose(freq, est.predict_proba(X[:10]), atol=4 * 0.5 / math.sqrt(S))       # 4 s.e.


def test_certain_points_have_zero_variation_ratio(fitted):
    est, X, y = fitted
    centres = np.stack([X[y == c].mean(0) for c in range(3)])
    far = np.array([[40.0, 40.0], [-35.0, 20.0]])               # far from the data: prior, uncertain
    vr = U.acquisition_scores(est, centres, "variation_ratio", n_samples=500)
    assert np.all(vr < 0.02)
    assert np.all(U.acquisition_scores(est, far, "variation_ratio", n_samples=500) > vr.max())
    for a in U.ACQUISITIONS:
        s = U.acquisition_scores(est, X, a, n_samples=50)
        assert s.shape == (len(X),) and np.all(np.isfinite(s))
    with pytest.raises(ValueError, match="acquisition"):
        U.acquisition_scores(est, X, "margin")


@pytest.mark.parametrize("acquisition", ["variation_ratio", "random", "bald"])
def test_active_learning_loop(acquisition):
    X, y = _blobs(20, 3, sep=3.0)
    Xt, yt = _blobs(10, 3, sep=3.0, seed=1)
    est = GPClassifier(method="bsvm", n_inducing=4, max_iter=60, learning_rate=0.05, random_state=0)
    h = U.active_learning(est, X, y, Xt, yt, n_queries=5, acquisition=acquisition, n_samples=50,
                          refit_max_iter=20, random_state=0)
    assert len(h["error"]) == len(h["nll"]) == len(h["n_labelled"]) == 6
    assert h["n_labelled"] == [3, 4, 5, 6, 7, 8]
    assert len(set(h["queried"])) == 5
    assert not hasattr(est, "model_")                           # the argument is cloned, not fitted
    with pytest.raises(ValueError, match="n_queries"):
        U.active_learning(est, X, y, Xt, yt, n_queries=len(X))


@pytest.fixture
def fits(monkeypatch):
    """Every GPClassifier.fit of the test, as (warm_start, max_iter, rows, M, warm_started_) after it ran."""
    record, real_fit = [], GPClassifier.fit

    def recording_fit(self, X, y, **kw):
        out = real_fit(self, X, y, **kw)
        record.append((self.warm_start, self.max_iter, len(X), self.model_.n_inducing, self.warm_started_))
        return out
    monkeypatch.setattr(GPClassifier, "fit", recording_fit)
    return record


def test_active_learning_from_given_rows_and_with_a_site_method(fits):
    # alpha paper §5.6: the loop starts from given pool rows; a site-based method (ep) warm-starts from its
    # sites like the free-Gaussian ones; warm_start=False refits from scratch with the estimator's settings
    X, y = _blobs(20, 3, sep=3.0)
    Xt, yt = _blobs(10, 3, sep=3.0, seed=1)
    start = np.array([0, 25, 50, 51, 7])
    est = GPClassifier(method="ep", n_inducing=4, max_iter=5, random_state=0)
    h = U.active_learning(est, X, y, Xt, yt, n_queries=3, acquisition="entropy", initial=start,
                          refit_max_iter=2, random_state=0)
    assert h["n_labelled"] == [5, 6, 7, 8] and not set(h["queried"]) & set(start.tolist())
    assert [f[:3] for f in fits] == [(False, 5, 5), (True, 2, 6), (True, 2, 7), (True, 2, 8)]
    assert all(f[4] for f in fits[1:])                     # the refits continued the previous fit
    fits.clear()
    U.active_learning(est, X, y, Xt, yt, n_queries=1, acquisition="random", initial=start, refit_max_iter=2,
                      warm_start=False)
    assert [f[:3] for f in fits] == [(False, 5, 5), (False, 5, 6)]
    fits.clear()
    U.active_learning(GPClassifier(method="vi", n_inducing=4, max_iter=5, random_state=0), X, y, Xt, yt,
                      n_queries=1, acquisition="random", initial=start, refit_max_iter=2)
    assert [f[:3] for f in fits] == [(False, 5, 5), (True, 2, 6)]
    # starting from classes 0 and 2 only: the test rows of class 1 have no probability to score
    with pytest.raises(ValueError, match=r"test labels \[1\] are not among"):
        U.active_learning(est, X, y, Xt, yt, n_queries=1, initial=np.array([0, 1, 40, 41]))
    for bad in ([0, 0, 1], [0, 1, 2], [0, 99], [0.0, 25.0]):    # repeated, one class, out of range, not ints
        with pytest.raises(ValueError, match="initial"):
            U.active_learning(est, X, y, Xt, yt, n_queries=1, initial=np.array(bad))


def test_active_learning_grows_to_n_inducing_and_gives_cold_refits_the_full_budget(fits):
    # 3 classes × 1 initial row: the first fit can use only 3 inducing inputs of the 6 asked for. A warm
    # refit must not keep M = 3 for good (it did, every round), and a refit that has to start afresh gets
    # the estimator's max_iter, not refit_max_iter
    X, y = _blobs(20, 3, sep=3.0)
    Xt, yt = _blobs(10, 3, sep=3.0, seed=1)
    est = GPClassifier(method="vi", n_inducing=6, max_iter=5, random_state=0)
    h = U.active_learning(est, X, y, Xt, yt, n_queries=5, acquisition="random", n_initial_per_class=1,
                          refit_max_iter=2, random_state=0)
    assert h["n_labelled"] == [3, 4, 5, 6, 7, 8]
    # (warm_start, max_iter, rows, M, continued): while M grows with the rows each short refit starts
    # afresh and is redone with the full 5 steps; once M = 6 is reached the refits continue warm
    assert fits == [(False, 5, 3, 3, False),
                    (True, 2, 4, 4, False), (False, 5, 4, 4, False),
                    (True, 2, 5, 5, False), (False, 5, 5, 5, False),
                    (True, 2, 6, 6, False), (False, 5, 6, 6, False),
                    (True, 2, 7, 6, True), (True, 2, 8, 6, True)]


def test_refits_with_zero_iterations_take_no_optimiser_steps(monkeypatch):
    # refit_max_iter=0 read as "unset" (``or``): the warm refits ran the estimator's whole max_iter
    seen = []
    real = GPClassifier.fit

    def recording(self, *args, **kwargs):
        seen.append((self.max_iter, self.warm_start))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(GPClassifier, "fit", recording)
    X, y = _blobs(10, 2, sep=3.0)
    est = GPClassifier(method="vi", n_inducing=2, max_iter=25, random_state=0)
    U.active_learning(est, X, y, X, y, n_queries=2, refit_max_iter=0, acquisition="random", random_state=0)
    assert seen == [(25, False), (0, True), (0, True)]


def test_helpers_check_their_counts_seeds_and_label_arrays():
    # raw numpy/torch errors (IndexError for float labels, TypeError from int(None) and randn(2.5)), a NaN
    # variation ratio for zero samples, classes of the wrong length accepted by error_rate, n_bins=True
    from sgpc import metrics, uncertainty as U
    np.testing.assert_array_equal(U.variation_ratio(np.array([[0.0, 1.0], [1.0, 1.0]]), 2), [0.5, 0.0])
    for args, msg in (((np.zeros((0, 3), int), 2), "S >= 1"), ((np.zeros((2, 3), int), 2.0), "n_classes must be"),
                      ((np.array([[0.5, 1.0]]), 2), "integer class indices")):
        with pytest.raises(ValueError, match=msg):
            U.variation_ratio(*args)
    p = np.array([[0.7, 0.3], [0.2, 0.8]])
    for classes in (["a"], ["a", "b", "c"]):
        with pytest.raises(ValueError, match="classes must name the 2 columns"):
            metrics.error_rate(["a", "b"], p, classes=classes)
    assert metrics.error_rate(["a", "b"], p, classes=["a", "b"]) == 0.0
    with pytest.raises(ValueError, match="n_bins must be a positive integer"):
        metrics.ece([0, 1], p, n_bins=True)
    X = np.random.default_rng(0).normal(size=(30, 2))
    y = (X[:, 0] > 0).astype(int)
    est = GPClassifier(n_inducing=3, max_iter=2, random_state=0).fit(X, y)
    for kw, msg in ((dict(n_samples=2.5), "n_samples must be an integer"), (dict(random_state=None), "integer seed")):
        with pytest.raises(ValueError, match=msg):
            U.sample_latents(est, X, **kw)
    with pytest.raises(ValueError, match="n_queries must be an integer"):
        U.active_learning(est, X[:20], y[:20], X[20:], y[20:], n_queries=1.5)
    with pytest.raises(ValueError, match="n_initial_per_class must be an integer >= 1"):
        U.active_learning(est, X[:20], y[:20], X[20:], y[20:], n_initial_per_class=-1)
    with pytest.raises(ValueError, match="NaN"):
        U.acquisition_scores(est, np.full((2, 2), np.nan), "random")
