"""Weighted rows: ``fit(sample_weight=...)`` and ``class_weight`` — integer weights equal repeated rows, fractional
weights are exact with a Gaussian likelihood, class weights are sample weights, bad weights are refused in our words,
and methods that cannot weigh rows say so."""
import math
import warnings

import numpy as np
import pytest
import sklearn
import torch
from sklearn.datasets import load_iris
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from sgpc import GPClassifier, fitting
from sgpc import kernels as K
from sgpc.ep import EP
from sgpc.persist import CheckpointError
from sgpc.registry import METHODS
from sgpc.sparse import SparseGP, init_inducing
from sgpc.validation import capable
from support import GaussianLikelihood

WEIGHTED = capable("weighted")
QUICK = dict(method="vi", n_inducing=5, max_iter=5, tol=None, random_state=0)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    keep = np.arange(0, 150, 6)                    # 25 rows, all three classes
    return StandardScaler().fit_transform(X[keep, :2]), y[keep]


def fit(X, y, sample_weight=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # ConvergenceWarning: a few steps on purpose
        return GPClassifier(**{**QUICK, **kw}).fit(X, y, sample_weight=sample_weight)


def test_the_methods_that_weigh_rows():
    # the registry's declared capability, which the estimator, the docs and these tests read
    assert set(WEIGHTED) == set(METHODS) - {"gfitc", "rmgpc", "smgpc"}


@pytest.mark.parametrize("method", WEIGHTED)
def test_integer_weights_equal_repeated_rows(iris, method, monkeypatch):
    # Weights 0–3 against the data with each row repeated that many times (and the rows of weight 0 left out), from
    # the same inducing inputs Z (k-means draws at random) and the same initial length-scales (the weighted spread
    # is the repeated rows' spread). Every method then does the same arithmetic up to the order of its sums: over
    # 8 full-batch steps the objectives and predictions agree to ~1e-13 (measured); 1e-9 leaves room for that,
    # while a row weighed wrongly moves the objective by O(1).
    X, y = iris
    w = np.array([0, 1, 2, 3] * 6 + [2])
    Xr, yr = np.repeat(X, w, axis=0), np.repeat(y, w)
    Z = X[[1, 5, 9, 14, 22]]
    monkeypatch.setattr(fitting, "init_inducing", lambda H, M, init, seed=0, sample_weight=None: Z.copy())
    kw = dict(method=method, max_iter=8)
    weighted, repeated = fit(X, y, w, **kw), fit(Xr, yr, **kw)
    np.testing.assert_allclose(weighted.history_["objective"], repeated.history_["objective"], rtol=1e-9)
    np.testing.assert_allclose(weighted.predict_proba(X), repeated.predict_proba(X), rtol=0, atol=1e-9)
    assert weighted.n_iter_ == 8 and len(weighted.classes_) == 3


def gaussian_ep(alpha, w):
    """Weighted EP with a Gaussian likelihood after two undamped sweeps (the first is exact, the second checks the
    fixed point): the model, data, engine and state."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(10, 2, generator=g, dtype=torch.float64)
    y = torch.sin(2 * X[:, 0]) + 0.2 * torch.randn(10, generator=g, dtype=torch.float64)
    if alpha < 1:    # Power EP is exact for a Gaussian only without conditional variances: Z = X, no latent noise
        model = SparseGP(K.RBF(2, 1, noise=None, lengthscale=0.9), GaussianLikelihood(0.3), X.clone())
    else:
        model = SparseGP(K.RBF(2, 1, noise=0.05, lengthscale=0.9), GaussianLikelihood(0.3), X[:4].clone() + 0.1)
    ep = EP(alpha=alpha, factor="likelihood", damping=1.0)
    st = ep.update(model, ep.init(model, X, y, None, weight=w), X, y, len(X))
    return model, X, y, ep, ep.update(model, st, X, y, len(X))


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_fractional_weights_are_exact_for_a_gaussian_likelihood(alpha):
    # The exact weighted posterior q(u) ∝ p(u) Π_i N(y_i | v_iᵀu, σ_i²)^{w_i} (σ_i² = s_i + σ², the sparse model's
    # factor in u) and its log normaliser, for weights below α (the cavity removes the whole row) and above it (one
    # copy's α). Tolerance: the jitter of K_uu with Z = X moves the answers by ~1e-9.
    w = torch.tensor([0.3, 2.0, 1.0, 0.05, 3.0, 0.7, 1.5, 1.0, 0.2, 4.0], dtype=torch.float64)
    model, X, y, ep, st = gaussian_ep(alpha, w)
    with torch.no_grad():
        Kuu = model.Kuu()[0] + 1e-8 * model.Kuu()[0].diagonal().mean() * torch.eye(model.n_inducing)
        Kuf = model.kernel(model.Z, X)[0]
        V = torch.linalg.solve(Kuu, Kuf)
        var = model.kernel.diag(X)[0] - (Kuf * V).sum(0) + 0.3
        cov = torch.linalg.inv(torch.linalg.inv(Kuu) + (V * (w / var)) @ V.T)
        mean = cov @ (V @ (w * y / var))
        # log ∫ p(u) Π N(y_i | v_iᵀu, σ_i²)^{w_i} du, with N(y|m,σ²)^w = (2πσ²)^{(1−w)/2} w^{−1/2} N(y | m, σ²/w)
        L = torch.linalg.cholesky(Kuf.T @ V + torch.diag(var / w))
        a = torch.cholesky_solve(y[:, None], L)[:, 0]
        log_Z = (-0.5 * y @ a - torch.log(L.diagonal()).sum() - 0.5 * len(X) * math.log(2 * math.pi)
                 + (0.5 * (1 - w) * torch.log(2 * math.pi * var) - 0.5 * torch.log(w)).sum())
        q = ep.posterior(model, st)
        torch.testing.assert_close(q.mean[0], mean, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(q.cov[0], cov, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(-ep.loss(model, st, X, y, len(X)), log_Z, rtol=1e-7, atol=1e-7)


def test_ep_warm_start_raises_each_kept_site_to_its_new_weight():
    # carry rebuilds θ̃ = Σ_i w_i · site_i from the one-copy sites: the same weights give back the same θ̃, doubled
    # weights twice it
    w = torch.tensor([0.3, 2.0, 1.0, 0.05, 3.0, 0.7, 1.5, 1.0, 0.2, 4.0], dtype=torch.float64)
    model, X, y, ep, st = gaussian_ep(1.0, w)
    keep = torch.arange(len(X))
    same, double = ep.carry(model, st, X, y, keep, weight=w), ep.carry(model, st, X, y, keep, weight=2 * w)
    torch.testing.assert_close(same.Lam, st.Lam, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(double.Lam, 2 * st.Lam, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(double.h, 2 * st.h, rtol=1e-10, atol=1e-12)


def test_class_weight_is_a_sample_weight(iris):
    # "balanced": n / (C · bincount(y)), scikit-learn's; with sample weights their sums per class replace the counts;
    # a dict weighs the classes it names; and class weights multiply sample weights
    X, y = iris
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    counts = np.bincount(y)
    balanced = fit(X, y, class_weight="balanced")
    np.testing.assert_allclose(balanced.predict_proba(X), fit(X, y, len(y) / (3 * counts[y])).predict_proba(X),
                               rtol=0, atol=1e-12)
    sw = np.arange(len(y)) % 3 + 0.5
    totals = np.bincount(y, weights=sw)
    both = fit(X, y, sw, class_weight="balanced")
    # the product of the two weights is formed in another order here: weights one rounding apart
    np.testing.assert_allclose(both.predict_proba(X), fit(X, y, sw * sw.sum() / (3 * totals[y])).predict_proba(X),
                               rtol=0, atol=1e-10)
    by_name = fit(X, names, sw, class_weight={"setosa": 2.0, "virginica": 0.25})
    by_row = fit(X, names, sw * np.array([2.0, 1.0, 0.25])[y])
    np.testing.assert_allclose(by_name.predict_proba(X), by_row.predict_proba(X), rtol=0, atol=1e-12)
    assert not np.allclose(by_name.predict_proba(X), fit(X, names, sw).predict_proba(X), atol=1e-3)   # it did weigh


def test_zero_weights_leave_rows_out_for_every_method(iris):
    # rows of weight 0 are not fitted: the fit is the one without them, bit for bit, also for the methods that take
    # no other weights; rmgpc says NaN for their outlier probabilities
    X, y = iris
    w = (np.arange(len(y)) % 4 != 0).astype(float)
    kw = dict(method="gfitc", optimizer="lbfgs", learning_rate=1.0, max_iter=2)
    np.testing.assert_array_equal(fit(X, y, w, **kw).predict_proba(X), fit(X[w > 0], y[w > 0], **kw).predict_proba(X))
    rm = fit(X, y, w, **{**kw, "method": "rmgpc"})
    assert rm.outlier_proba_.shape == (len(y),)
    assert np.isnan(rm.outlier_proba_[w == 0]).all() and np.isfinite(rm.outlier_proba_[w > 0]).all()
    with pytest.raises(ValueError, match=r"y has only one class \(.*1.*\) among the rows of positive weight"):
        fit(X, y, (y == 1).astype(float))


@pytest.mark.parametrize("method", ["gfitc", "rmgpc", "smgpc"])
def test_methods_that_cannot_weigh_rows_say_so(iris, method):
    X, y = iris
    with pytest.raises(ValueError, match=f"method='{method}' cannot weigh rows .* Methods that weigh rows: 'vi', 'ep'"):
        fit(X, y, np.where(y == 0, 2.0, 1.0), method=method, optimizer="lbfgs")
    with pytest.raises(ValueError, match=f"method='{method}' cannot weigh rows"):
        fit(X[:-4], y[:-4], method=method, optimizer="lbfgs", class_weight="balanced")   # 9/8/4 rows: not all 1


@pytest.mark.parametrize("weight,message", [
    (np.ones(3), r"sample_weight has 3 rows, X has 25"),
    (np.ones((25, 2)), r"sample_weight must be one-dimensional.*shape \(25, 2\)"),
    (np.r_[1.0, np.nan, np.ones(22), np.inf], r"NaN or infinity in 2 row\(s\), first: 1, 24"),
    (np.r_[np.ones(5), -1.0, np.ones(19)], r"must be >= 0; it is negative in 1 row\(s\), first: 5"),
    (np.zeros(25), r"sample_weight is zero for every row"),
    (["heavy"] * 25, r"sample_weight must hold numbers"),
])
def test_bad_sample_weights_are_refused_in_our_words(iris, weight, message):
    X, y = iris
    with pytest.raises(ValueError, match=message):
        fit(X, y, weight)


@pytest.mark.parametrize("class_weight,message", [
    ("balance", r"class_weight must be None, 'balanced' or a dict"),
    ([1.0, 2.0], r"class_weight must be None, 'balanced' or a dict"),
    ({0: -1.0}, r"class_weight\[0\] must be a finite number in \[0, ∞\)"),
    ({0: float("nan")}, r"class_weight\[0\] must be a finite number"),
    ({7: 2.0}, r"class_weight names labels that y does not have: \[7\]; y's labels: \[0, 1, 2\]"),
    ({0: 0.0, 1: 0.0, 2: 0.0}, r"sample_weight × class_weight is zero for every row"),
])
def test_bad_class_weights_are_refused_in_our_words(iris, class_weight, message):
    X, y = iris
    with pytest.raises(ValueError, match=message):
        fit(X, y, class_weight=class_weight)


def test_the_argument_is_not_modified_and_any_array_like_works(iris):
    X, y = iris
    w = np.linspace(0.5, 2.0, len(y))
    kept = w.copy()
    a = fit(X, y, w, class_weight="balanced")
    np.testing.assert_array_equal(w, kept)
    np.testing.assert_array_equal(fit(X, y, w.tolist(), class_weight="balanced").predict_proba(X), a.predict_proba(X))


def test_a_streamed_fit_refuses_weights(iris, tmp_path):
    X, y = iris
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    for kw in (dict(sample_weight=np.ones(len(y))), dict(class_weight="balanced")):
        with pytest.raises(ValueError, match="a streamed fit .* takes no sample_weight or class_weight"):
            GPClassifier(**{**QUICK, "batch_size": 10, **{k: v for k, v in kw.items() if k == "class_weight"}}).fit(
                str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), sample_weight=kw.get("sample_weight"))


def test_a_checkpoint_resumes_only_the_same_weights(iris, tmp_path):
    X, y = iris
    path = str(tmp_path / "ck.pt")
    w = np.arange(len(y)) % 3 + 1.0
    GPClassifier(**{**QUICK, "max_iter": 4}).fit(X, y, sample_weight=w, checkpoint_path=path, checkpoint_every=2)
    with pytest.raises(CheckpointError, match="written for other data .* with the same sample weights"):
        GPClassifier(**{**QUICK, "max_iter": 6}).fit(X, y, sample_weight=2 * w, checkpoint_path=path,
                                                     checkpoint_every=2, resume=True)
    with pytest.raises(CheckpointError, match="written for other data"):
        GPClassifier(**{**QUICK, "max_iter": 6}).fit(X, y, checkpoint_path=path, checkpoint_every=2, resume=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumed = GPClassifier(**{**QUICK, "max_iter": 6}).fit(X, y, sample_weight=w, checkpoint_path=path,
                                                               checkpoint_every=2, resume=True)
    assert resumed.n_iter_ == 6


def test_a_class_weight_dict_with_number_labels_saves_and_loads(iris, tmp_path):
    X, y = iris
    est = fit(X, y, class_weight={0: 2.0, np.int64(2): 0.5})
    est.save(tmp_path / "m.pt")
    back = GPClassifier.load(tmp_path / "m.pt")
    assert back.class_weight == {0: 2.0, 2: 0.5}
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))
    np.testing.assert_array_equal(back.fit(X, y).predict_proba(X), est.predict_proba(X))   # refits as it was fitted


def test_sample_weight_through_a_pipeline(iris):
    # scikit-learn's step__param routing, and metadata routing with set_fit_request
    X, y = iris
    w = np.arange(len(y)) % 3 + 0.5
    direct = fit(X, y, w)
    pipe = make_pipeline(FunctionTransformer(), GPClassifier(**QUICK))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(pipe.fit(X, y, gpclassifier__sample_weight=w).predict_proba(X),
                                      direct.predict_proba(X))
        with sklearn.config_context(enable_metadata_routing=True):
            routed = make_pipeline(FunctionTransformer(), GPClassifier(**QUICK).set_fit_request(sample_weight=True))
            np.testing.assert_array_equal(routed.fit(X, y, sample_weight=w).predict_proba(X), direct.predict_proba(X))


def test_early_stopping_holds_out_weighted_rows(iris):
    # the held-out rows keep their weights (the monitor weighs their log-likelihoods); the rest are fitted weighted
    X, y = iris
    w = np.arange(len(y)) % 3 + 1.0
    est = fit(X, y, w, early_stopping=True, validation_fraction=0.3, max_iter=3, method="ep")
    assert est.n_iter_ == 3 and len(est.history_["monitored"]) == 3
    assert est.state_.w is not None and len(est.state_.w) == 17            # 25 rows, 8 held out


def test_weighted_k_means_starts_where_the_weight_is():
    # a row of large weight pulls a centre onto itself; the random start draws rows by weight (never weight 0 rows)
    X = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1], [5.0, 5.0], [5.2, 5.0], [10.0, 0.0]])
    w = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1e6])
    Z = init_inducing(X, 2, "kmeans", seed=0, sample_weight=w)
    assert np.abs(Z - X[5]).sum(1).min() < 1e-4
    Zr = init_inducing(X, 2, "random", seed=0, sample_weight=np.array([0.0, 0.0, 1.0, 0.0, 1.0, 0.0]))
    assert sorted(map(tuple, Zr)) == sorted([tuple(X[2]), tuple(X[4])])


def test_rows_of_small_weight_keep_every_cavity_proper():
    # A row of weight w < 1 holds w of its site in q: a cavity that removed a whole copy could be improper. On wine
    # with class 0 at 1e-4, EP removing one copy's site gave NaN objectives (rejected steps from about step 55, the
    # fit refused at 74); removing at most the row's own weight keeps every step finite.
    from sklearn.datasets import load_wine
    X, y = load_wine(return_X_y=True)
    est = fit(StandardScaler().fit_transform(X), y, method="ep", n_inducing=20, max_iter=70, class_weight={0: 1e-4})
    assert np.isfinite(est.history_["objective"]).all() and est.n_iter_ == 70
    assert not [e for e in est.history_["events"] if e.get("rejected")]
