"""The stopping rule (tol, n_iter_no_change, early stopping) and natural-gradient steps of q in the fit loop."""
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from sgpc import GPClassifier
from sgpc import kernels as K
from sgpc.sparse import SparseGP
from sgpc.train import Convergence, TrainSettings, fit
from sgpc.vi import VI
from support import GaussianLikelihood, exact_gp


def regression_problem(N=12, D=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, D, generator=g, dtype=torch.float64)
    y = torch.sin(2 * X[:, 0]) + 0.3 * torch.randn(N, generator=g, dtype=torch.float64)
    return X, y


def conjugate_model(X, noise=0.3):
    """Z = X, no latent noise, Gaussian likelihood, hyper-parameters fixed: the optimal q is the exact posterior
    and the ELBO's maximum is the exact log marginal likelihood (Titsias 2009)."""
    model = SparseGP(K.RBF(X.shape[1], 1, noise=None, lengthscale=0.9), GaussianLikelihood(noise), X.clone())
    for p in model.parameters():
        p.requires_grad_(False)
    Kff = model.Kuu()[0]
    Kj = Kff + 1e-8 * Kff.diagonal().mean() * torch.eye(len(X), dtype=X.dtype)      # the jitter chol_Kuu adds
    return model, Kj


def test_a_unit_natural_gradient_step_lands_on_the_exact_posterior_and_the_fit_stops_there():
    # one natural-gradient step with γ = 1 on a conjugate problem is the exact optimum (Salimbeni et al. 2018):
    # the fit loop takes it from the first backward pass, the objective is then stationary, and the stopping rule
    # ends the fit after n_iter_no_change quiet checks, converged, at the exact log marginal likelihood
    X, y = regression_problem()
    model, Kj = conjugate_model(X)
    _, _, lml = exact_gp(Kj, y, 0.3)
    engine = VI(natgrad_lr=1.0)
    state = engine.init(model, X, y, torch.Generator())
    settings = TrainSettings(learning_rate=0.01, max_iter=100, tol=1e-9, n_iter_no_change=3)
    state, hist = fit(model, engine, state, X, y, settings, generator=torch.Generator().manual_seed(0))
    assert hist.converged
    assert len(hist.iteration) == 1 + 1 + 3          # the prior's objective, then the optimum, then 3 quiet checks
    # tolerance: the reference adds chol_Kuu's jitter (1e-8 × mean diagonal) to K explicitly, the model inside the
    # factorisation; the two log marginal likelihoods differ by ~1e-7 (7e-9 relative), the optimum itself by far less
    assert abs(hist.objective[-1] - lml.item()) < 1e-6
    assert hist.objective[1] == pytest.approx(hist.objective[-1], abs=1e-9)


def test_adam_reaches_the_same_optimum_and_stops_within_tol_of_it():
    # without natural gradients Adam approaches the same maximum; the rule stops it once the objective per datum
    # moves by at most tol per step, which on this problem is within 1e-3 (total) of the optimum
    X, y = regression_problem()
    model, Kj = conjugate_model(X)
    _, _, lml = exact_gp(Kj, y, 0.3)
    engine = VI()
    state = engine.init(model, X, y, torch.Generator())
    settings = TrainSettings(learning_rate=0.05, max_iter=5000, tol=1e-7, n_iter_no_change=10)
    state, hist = fit(model, engine, state, X, y, settings, generator=torch.Generator().manual_seed(0))
    assert hist.converged and len(hist.iteration) < 5000
    assert hist.objective[-1] <= lml.item() + 1e-9        # a lower bound: never above the maximum
    assert lml.item() - hist.objective[-1] < 1e-3


def test_the_rule_counts_quiet_checks_and_minibatch_passes():
    rule = Convergence(tol=0.1, patience=2, steps_per_check=1)
    for v in (0.0, 1.0, 1.05, 1.1):               # a move of 1, then two moves of 0.05
        rule.observe(v)
    assert rule.met
    rule = Convergence(tol=0.1, patience=2, steps_per_check=1)
    for v in (0.0, 0.05, 0.5, 0.55):              # the move of 0.45 resets the count
        rule.observe(v)
    assert not rule.met and rule.count == 1
    rule = Convergence(tol=0.1, patience=1, steps_per_check=3)
    assert [rule.observe(v) for v in (0.0, 3.0, 0.0)] == [None, None, pytest.approx(1.0)]   # a pass's mean
    rule.observe(1.0), rule.observe(1.0)
    assert rule.observe(1.0) == pytest.approx(1.0) and rule.met


def _window_rule(tol, steps_per_pass, patience=10):
    return Convergence(tol, patience, min(steps_per_pass, 50), steps_per_pass)


def test_the_minibatch_rule_is_met_by_noise_alone_and_not_by_a_trend_the_noise_cannot_explain():
    rng = np.random.default_rng(0)
    noise = 0.05 * rng.standard_normal(4000)            # a per-step scatter like pendigits' (~0.04 per datum)
    flat = _window_rule(1e-4, steps_per_pass=30)
    met_at = next(i for i, v in enumerate(-0.5 + noise) if flat.observe(v) is not None and flat.met)
    assert 300 <= met_at + 1 < 1000                     # not before 10 windows of 30 steps; soon after
    # a rise of 1e-3 per step is 0.03 per window: about 25 standard errors of the slope through 10 window means
    rising = _window_rule(1e-4, steps_per_pass=30)
    for i, v in enumerate(-0.5 + 1e-3 * np.arange(4000) + noise):
        rising.observe(v)
        assert not rising.met, i
    # without noise the slope alone decides: a trend of 2e-4 per pass (1e-5 per step, 20 steps per pass) is within
    # tol = 3e-4 per pass and beyond tol = 1e-4
    for tol, met in ((3e-4, True), (1e-4, False)):
        rule = _window_rule(tol, steps_per_pass=20)
        for v in 1e-5 * np.arange(200):
            rule.observe(v)
        assert rule.met is met


def test_the_minibatch_rule_is_the_t_test_of_a_least_squares_slope():
    # brute force: scipy's regression slope and its standard error, on window means that are neither flat nor linear
    from scipy import stats
    rng = np.random.default_rng(1)
    outcomes = set()
    for trial in range(50):
        means = np.cumsum(rng.standard_normal(10)) * rng.uniform(0.001, 0.1) + rng.uniform(-0.02, 0.02) * np.arange(10)
        rule = _window_rule(tol=2e-3, steps_per_pass=100)   # windows of 50 steps, half a pass: 1e-3 per window
        for m in means:
            for _ in range(50):
                rule.observe(m)
        fit = stats.linregress(np.arange(10), means)
        assert rule.met is bool(abs(fit.slope) <= 1e-3 + 2.0 * fit.stderr), trial
        outcomes.add(rule.met)
    assert outcomes == {True, False}


def test_the_rule_checks_windows_of_a_pass_within_8_and_50_steps():
    for N, batch, per_check in ((2560, 256, 10), (100_000, 256, 50), (150, 32, 8), (2000, 1024, 8), (8793, 1024, 8)):
        rule = Convergence.of_fit(TrainSettings(batch_size=batch, tol=1e-4), N, monitored=False)
        assert (rule.steps_per_check, rule.steps_per_pass) == (per_check, N // batch)
    held_out = Convergence.of_fit(TrainSettings(batch_size=256, tol=1e-4), 100_000, monitored=True)
    assert held_out.steps_per_check == 390 and held_out.steps_per_pass is None     # early stopping: per pass
    full = Convergence.of_fit(TrainSettings(tol=1e-4), 100_000, monitored=False)
    assert full.steps_per_check == 1 and full.steps_per_pass is None


def test_the_minibatch_rule_resumes_from_its_state():
    values = 0.05 * np.random.default_rng(2).standard_normal(700)
    whole, first = _window_rule(1e-4, 30), _window_rule(1e-4, 30)
    trace = [(whole.observe(v), whole.met) for v in values]
    for v in values[:333]:
        first.observe(v)
    second = _window_rule(1e-4, 30)
    second.load_state_dict(first.state_dict())
    assert trace[333:] == [(second.observe(v), second.met) for v in values[333:]]


def test_max_iter_auto_is_500_steps_on_the_full_batch_and_2000_with_minibatches():
    from sgpc.registry import max_iter_of
    assert max_iter_of({"max_iter": "auto", "batch_size": None, "method": "ep"}) == 500
    assert max_iter_of({"max_iter": "auto", "batch_size": "auto", "method": "auto"}) == 500   # until resolved
    assert max_iter_of({"max_iter": "auto", "batch_size": 64, "method": "sep"}) == 2000
    assert max_iter_of({"max_iter": 7, "batch_size": 64, "method": "sep"}) == 7


def test_a_default_minibatch_fit_converges_before_its_ceiling(iris):
    # the rule the per-pass stationarity test could not meet: a sep fit in minibatches of 32 rows stops on its own
    X, y = iris
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = GPClassifier(batch_size=32, n_inducing=10, random_state=0).fit(X, y)
    assert est.method_ == "sep" and est.converged_ and est.n_iter_ < 2000
    assert est.history_["monitored"][-1]["iteration"] == est.n_iter_       # it stopped at a check
    assert est.score(X, y) > 0.9


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def test_a_fit_stops_before_its_ceiling_and_says_it_converged(iris):
    X, y = iris
    est = GPClassifier(method="ep", n_inducing=10, max_iter=2000, tol=1e-3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est.fit(X, y)
    assert est.converged_ and est.n_iter_ < 2000
    assert est.score(X, y) > 0.9


def test_a_fit_that_hits_max_iter_warns_and_says_so(iris):
    X, y = iris
    with pytest.warns(ConvergenceWarning, match=r"stopped after 3 iterations .* before it converged"):
        est = GPClassifier(n_inducing=5, max_iter=3, random_state=0).fit(X, y)
    assert not est.converged_ and est.n_iter_ == 3
    with warnings.catch_warnings():                   # tol=None: run to the ceiling, no warning
        warnings.simplefilter("error", ConvergenceWarning)
        est = GPClassifier(n_inducing=5, max_iter=3, tol=None, random_state=0).fit(X, y)
    assert est.n_iter_ == 3 and not est.converged_


def test_early_stopping_monitors_held_out_rows(iris):
    X, y = iris
    est = GPClassifier(n_inducing=8, max_iter=400, early_stopping=True, validation_fraction=0.2, tol=1e-3,
                       n_iter_no_change=5, random_state=0).fit(X, y)
    assert est.converged_ and est.n_iter_ < 400
    assert est.history_["monitored"] and all(v["value"] <= 0 for v in est.history_["monitored"])   # log-likelihoods
    # the held-out rows were not trained on: the model's inducing inputs came from 80% of the rows
    with pytest.raises(ValueError, match="early_stopping holds out validation_fraction=0.5 of the 4 rows"):
        GPClassifier(early_stopping=True, validation_fraction=0.5).fit(X[[0, 1, 50, 100]], y[[0, 1, 50, 100]])


@pytest.mark.parametrize("params,match", [
    ({"tol": -1.0}, "tol must be"), ({"n_iter_no_change": 0}, "n_iter_no_change must be a positive integer"),
    ({"validation_fraction": 1.0}, "validation_fraction must be"), ({"early_stopping": "yes"}, "early_stopping"),
    ({"method": "vi", "method_params": {"natgrad_lr": 0.0}}, "natgrad_lr must be"),
    ({"method": "ep", "method_params": {"natgrad_lr": 0.1}},
     "unknown method_params key 'natgrad_lr' for method='ep'; valid: 'damping'"),
    ({"method": "vi", "method_params": {"natgrad_lr": 0.1}, "optimizer": "lbfgs"}, "natgrad_lr applies to"),
])
def test_stopping_and_natgrad_options_are_checked(iris, params, match):
    X, y = iris
    with pytest.raises(ValueError, match=match):
        GPClassifier(**params).fit(X, y)


def test_natural_gradients_fit_a_classifier_and_resume_exactly(iris, tmp_path):
    X, y = iris
    kw = dict(method="vi", n_inducing=8, method_params={"natgrad_lr": 0.2}, max_iter=20, tol=None, random_state=0)
    full = GPClassifier(**kw).fit(X, y)
    assert np.isfinite(full.history_["objective"]).all()
    assert full.history_["objective"][-1] > full.history_["objective"][0]
    ck = tmp_path / "ck.pt"
    GPClassifier(**{**kw, "max_iter": 10}).fit(X, y, checkpoint_path=str(ck), checkpoint_every=5)
    resumed = GPClassifier(**kw).fit(X, y, checkpoint_path=str(ck), checkpoint_every=5, resume=True)
    np.testing.assert_array_equal(resumed.predict_proba(X), full.predict_proba(X))


def test_tol_auto_is_the_methods_tolerance_in_a_full_batch_fit():
    from sgpc import fitting
    from sgpc.registry import METHODS
    tol = lambda **kw: fitting.settings(GPClassifier(**kw))["tol"]
    assert tol() == METHODS["ep"].tol == 3e-4                  # the default: a full-batch ep fit
    assert tol(batch_size=32) == 1e-4                          # minibatches: checks are passes' means
    assert tol(method="vi", likelihood="softmax") == tol(method="sep", batch_size=32) == 1e-4
    # sep, and vi with robust-max, on the full batch fit as ep does
    assert tol(method="sep") == tol(method="vi") == METHODS["sep"].full_batch_fit["tol"] == 3e-4
    assert tol(tol=1e-6) == 1e-6 and tol(tol=None) is None
    with pytest.raises(ValueError, match="tol"):
        GPClassifier(tol="fast").fit([[0.0], [1.0]], [0, 1])
    # and the fit loop stops on it: the last n_iter_no_change checks moved by at most 3e-4 per datum, sooner than
    # the same fit at 1e-4
    X, y = load_iris(return_X_y=True)
    est = GPClassifier(random_state=0).fit(X, y)
    steps = np.abs(np.diff(np.asarray(est.history_["objective"]) / len(X)))[-10:]
    assert est.converged_ and steps.max() <= 3e-4
    assert est.n_iter_ < GPClassifier(random_state=0, tol=1e-4).fit(X, y).n_iter_
