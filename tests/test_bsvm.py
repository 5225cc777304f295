"""Tests of sgpc.likelihoods.hinge (multiclass-bayesian-svm §3), the bsvm estimator method and hybrid models."""
import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import integrate, stats
from sklearn.multiclass import OneVsRestClassifier
from sklearn.utils.estimator_checks import parametrize_with_checks

from sgpc import kernels as K
from sgpc.likelihoods.hinge import (BinaryHinge, MulticlassHinge, collapsed_bound, gig_bound, hinge_log_prob,
                                   log_joint_lambda, optimal_alpha)
from sgpc.estimator import GPClassifier, ModelFileError
from sgpc.likelihoods import Likelihood
from sgpc.sparse import SparseGP, marginals
from sgpc.vi import WhitenedGaussian, elbo
from sgpc import uncertainty
from support import weighting_xfails

DT = torch.float64


def t(x):
    return torch.as_tensor(x, dtype=DT)


# -- the pseudo-likelihood and its λ-augmentation -------------------------------------------------
@pytest.mark.parametrize("b", [-2.5, -0.4, 0.0, 0.3, 1.7])
def test_lambda_marginal_is_the_hinge_pseudo_likelihood(b):
    # eq. (8): ∫_0^∞ (2πλ)^{-1/2} exp(−(b+λ)²/(2λ)) dλ = exp(−2 max(b, 0)); quad is accurate to ~1e-10 here
    val, err = integrate.quad(lambda lam: math.exp(float(log_joint_lambda(t(lam), t(b)))), 0.0, np.inf,
                              epsabs=1e-13, epsrel=1e-11, limit=200)
    assert val == pytest.approx(math.exp(-2 * max(b, 0.0)), rel=1e-8, abs=1e-12)


@pytest.mark.parametrize("m,v,alpha", [(0.7, 0.3, 0.5), (-1.2, 2.0, 3.0), (2.0, 0.05, 4.1)])
def test_gig_bound_matches_brute_force_expectation(m, v, alpha):
    # E_{q(λ)}[E_{b~N(m,v)} log p(y,λ|b) − log q(λ)] by quadrature over λ, q = GIG(½, 1, α)
    # (scipy: GIG(p, a, b) = √(b/a) · geninvgauss(p, √(ab))). This checks the Bessel closed form and
    # the signs of eq. (12) independently of the derivation.
    q = stats.geninvgauss(0.5, math.sqrt(alpha), scale=math.sqrt(alpha))
    s = m * m + v

    def integrand(lam):
        e_log_joint = -0.5 * math.log(2 * math.pi * lam) - (s + 2 * m * lam + lam * lam) / (2 * lam)
        return q.pdf(lam) * (e_log_joint - q.logpdf(lam))

    val, _ = integrate.quad(integrand, 0.0, np.inf, epsabs=1e-12, epsrel=1e-10, limit=400)
    assert float(gig_bound(t(m), t(v), t(alpha))) == pytest.approx(val, rel=1e-7, abs=1e-9)


def test_optimal_alpha_maximises_the_bound_and_collapses():
    m, v = t([0.3, -1.0, 2.5]), t([0.2, 1.5, 0.01])
    a_star = optimal_alpha(m, v)
    best = gig_bound(m, v, a_star)
    assert torch.allclose(best, collapsed_bound(m, v), atol=1e-14)
    for f in (0.5, 0.9, 1.1, 2.0):
        assert (gig_bound(m, v, a_star * f) < best).all()
    a = a_star.clone().requires_grad_(True)
    gig_bound(m, v, a).sum().backward()                       # eq. (40) = 0 at the optimum
    assert torch.allclose(a.grad, torch.zeros_like(a.grad), atol=1e-12)


def test_collapsed_bound_zero_variance_limit_and_jensen():
    b = t(np.linspace(-3, 3, 13))
    assert torch.allclose(collapsed_bound(b, torch.zeros_like(b)), hinge_log_prob(b), atol=1e-14)
    # a lower bound of E_{b~N(m,v)}[−2 max(b,0)] = −2(mΦ(m/s) + sφ(m/s)) (closed form), for any m, v
    g = np.random.default_rng(0)
    m, v = g.normal(size=200) * 2, g.gamma(1.0, size=200)
    s = np.sqrt(v)
    exact = -2 * (m * stats.norm.cdf(m / s) + s * stats.norm.pdf(m / s))
    bound = collapsed_bound(t(m), t(v)).numpy()
    assert (bound <= exact + 1e-12).all()
    assert np.abs(bound - exact)[v < 1e-3].max(initial=0.0) < 0.1


def test_likelihood_log_probs_and_zero_variance_limits():
    g = torch.Generator().manual_seed(0)
    F = torch.randn(30, 4, generator=g, dtype=DT) * 2
    y = torch.randint(0, 4, (30,), generator=g)
    lik = MulticlassHinge(4)
    b = 1 + F.scatter(1, y[:, None], -math.inf).amax(1) - F.gather(1, y[:, None])[:, 0]
    assert torch.allclose(lik.log_prob(y, F), -2 * b.clamp_min(0))
    assert torch.allclose(lik.expected_log_prob_bound(y, F, torch.zeros_like(F)), lik.log_prob(y, F), atol=1e-12)
    bl = BinaryHinge()
    yb = y % 2
    assert bl.n_latent == 1 and bl.n_classes == 2
    assert torch.allclose(bl.log_prob(yb, F[:, :1]), -2 * (1 - (2 * yb - 1) * F[:, 0]).clamp_min(0))
    assert torch.allclose(bl.expected_log_prob_bound(yb, F[:, :1], torch.zeros_like(F[:, :1])), bl.log_prob(yb, F[:, :1]),
                          atol=1e-12)


def test_two_class_multiclass_bound_below_generic_expected_log_prob():
    # C = 2: the bound (exact in t_n) must lie below E_q[log L] from the base class's quadrature,
    # and the binary model likewise; 60² Gauss–Hermite nodes resolve the kink to ~1e-3 here.
    g = torch.Generator().manual_seed(1)
    mean = torch.randn(40, 2, generator=g, dtype=DT)
    var = torch.rand(40, 2, generator=g, dtype=DT) + 0.05
    y = torch.randint(0, 2, (40,), generator=g)
    lik = MulticlassHinge(2, n_quadrature=60)
    generic = Likelihood.expected_log_prob(lik, y, mean, var)
    assert (lik.expected_log_prob_bound(y, mean, var) <= generic + 2e-3).all()
    bl = BinaryHinge(n_quadrature=200)
    generic_b = Likelihood.expected_log_prob(bl, y, mean[:, :1], var[:, :1])
    assert (bl.expected_log_prob_bound(y, mean[:, :1], var[:, :1]) <= generic_b + 1e-4).all()


def test_predict_log_proba_is_the_argmax_probability():
    g = torch.Generator().manual_seed(2)
    mean = torch.randn(5, 3, generator=g, dtype=DT)
    var = torch.rand(5, 3, generator=g, dtype=DT) + 0.1
    p = MulticlassHinge(3).predict_log_proba(mean, var).exp()
    F = mean + var.sqrt() * torch.randn(200000, 5, 3, generator=g, dtype=DT)
    freq = torch.nn.functional.one_hot(F.argmax(-1), 3).double().mean(0)
    assert torch.allclose(p.sum(1), torch.ones(5, dtype=DT), atol=1e-12)
    assert torch.allclose(p, freq, atol=4 * 0.5 / math.sqrt(200000))      # 4 standard errors (p(1−p) ≤ ¼)
    pb = BinaryHinge().predict_log_proba(mean[:, :1], var[:, :1]).exp()
    assert torch.allclose(pb[:, 1], torch.distributions.Normal(0, 1).cdf(mean[:, 0] / var[:, 0].sqrt()))


# -- the ELBO on a tiny problem -------------------------------------------------------------------
def _tiny_model(lik, n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 2, generator=g, dtype=DT)
    y = torch.randint(0, 2, (n,), generator=g)
    kern = K.RBF(2, lik.n_latent, lengthscale=1.0, variance=2.0, noise=0.05)
    model = SparseGP(kern, lik, X.clone(), learn_inducing=False)
    return model, X, y


def _fit_q(model, X, y, steps=300):
    q = WhitenedGaussian(model.n_latent, model.n_inducing)
    opt = torch.optim.Adam(q.parameters(), lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        (-elbo(model, q, X, y, X.shape[0])).backward()
        opt.step()
    return q


@pytest.mark.parametrize("lik", [BinaryHinge(), MulticlassHinge(2)], ids=["binary", "two-class"])
def test_elbo_is_below_monte_carlo_log_evidence(lik):
    # log ∫ Π_n L(y_n|f_n) p(f) df, f_l ~ N(0, K + σ_n² I) independently per latent, by Monte Carlo
    model, X, y = _tiny_model(lik)
    q = _fit_q(model, X, y)
    with torch.no_grad():
        bound = float(elbo(model, q, X, y, X.shape[0]))
        cov = model.kernel(X, X) + torch.diag_embed(model.kernel.diag(X) - model.kernel.variance[:, None])
        g = torch.Generator().manual_seed(3)
        S = 400000
        Lc = torch.linalg.cholesky(cov)                                             # [L,N,N]
        F = (Lc @ torch.randn(lik.n_latent, X.shape[0], S, generator=g, dtype=DT)).permute(2, 1, 0)
        w = lik.log_prob(y, F).sum(-1).exp()                                        # [S]
        log_z = math.log(float(w.mean()))
        se = float(w.std()) / math.sqrt(S) / float(w.mean())                      # relative s.e. of the mean
    assert bound <= log_z + 4 * se
    # the fitted q is not trivial: it beats q = prior, whose bound is far from log Z
    with torch.no_grad():
        prior_bound = float(elbo(model, WhitenedGaussian(model.n_latent, model.n_inducing), X, y, X.shape[0]))
    assert prior_bound < bound


def test_elbo_gradients_finite_difference():
    lik = MulticlassHinge(3)
    g = torch.Generator().manual_seed(4)
    X = torch.randn(8, 2, generator=g, dtype=DT)
    y = torch.randint(0, 3, (8,), generator=g)
    model = SparseGP(K.RBF(2, 3, noise=0.01), lik, X[:4].clone())
    mean0 = torch.randn(3, 4, generator=g, dtype=DT)
    chol0 = torch.eye(4, dtype=DT).repeat(3, 1, 1) + 0.1 * torch.randn(3, 4, 4, generator=g, dtype=DT).tril()

    def objective(mean_w, chol_w):       # elbo reads only q.mean and q.chol
        return elbo(model, SimpleNamespace(mean=mean_w, chol=chol_w.tril()), X, y, 8)

    assert torch.autograd.gradcheck(objective, (mean0.requires_grad_(), chol0.requires_grad_()), eps=1e-6, atol=1e-5)
    # and through the marginals (hyper-parameters, Z): gradcheck expected_log_prob in (mean, var)
    mean = torch.randn(6, 3, generator=g, dtype=DT).requires_grad_()
    var = (torch.rand(6, 3, generator=g, dtype=DT) + 0.1).requires_grad_()
    yy = torch.randint(0, 3, (6,), generator=g)
    assert torch.autograd.gradcheck(lambda m, v: lik.expected_log_prob_bound(yy, m, v), (mean, var), eps=1e-6, atol=1e-6)
    assert torch.autograd.gradcheck(lambda m, v: BinaryHinge().expected_log_prob_bound(yy % 2, m, v),
                                    (mean[:, :1], var[:, :1]), eps=1e-6, atol=1e-6)


# -- the estimator --------------------------------------------------------------------------------
def _blobs(n_per=20, C=3, sep=6.0, seed=0):
    g = np.random.default_rng(seed)
    centres = sep * np.eye(C, 2) if C <= 2 else sep * np.stack([np.cos(2 * np.pi * np.arange(C) / C),
                                                                np.sin(2 * np.pi * np.arange(C) / C)], 1)
    X = np.concatenate([c + g.normal(size=(n_per, 2)) for c in centres])
    return X, np.repeat(np.arange(C), n_per)


def test_binary_bsvm_separable_zero_training_error():
    X, y = _blobs(25, 2, sep=5.0)
    X = X - X.mean(0)
    est = GPClassifier(method="bsvm", kernel="linear", n_inducing=10, max_iter=300, learning_rate=0.05,
                       random_state=0).fit(X, y)
    assert est.model_.n_latent == 1
    assert (est.predict(X) == y).all()


def test_bsvm_multiclass_estimator_shared_inducing_and_save_load(tmp_path):
    X, y = _blobs(20, 3, sep=4.0)
    labels = np.array(["a", "b", "c"])[y]
    est = GPClassifier(method="bsvm", n_inducing=8, max_iter=150, learning_rate=0.05, random_state=0).fit(X, labels)
    assert est.model_.Z.shape == (8, 2)                       # one set of inducing inputs for all classes
    assert isinstance(est.model_.likelihood, MulticlassHinge)
    assert est.score(X, labels) > 0.95
    p = est.predict_proba(X)
    assert np.allclose(p.sum(1), 1.0)
    est.save(tmp_path / "m.pt")
    back = GPClassifier.load(tmp_path / "m.pt")
    assert np.allclose(back.predict_proba(X), p, atol=1e-12)


def test_one_vs_rest_baseline_uses_binary_bsvm():
    X, y = _blobs(15, 3, sep=4.0)
    ovr = OneVsRestClassifier(GPClassifier(method="bsvm", n_inducing=6, max_iter=100, learning_rate=0.05,
                                           random_state=0)).fit(X, y)
    assert all(e.model_.n_latent == 1 for e in ovr.estimators_)
    assert ovr.score(X, y) > 0.9


def test_bsvm_rejects_unknown_options():
    with pytest.raises(ValueError, match="feature_extractor"):
        GPClassifier(method="bsvm", feature_extractor="cnn").fit(*_blobs(5, 2))
    with pytest.raises(ValueError, match="free-Gaussian"):
        GPClassifier(method="ep", feature_extractor=torch.nn.Identity()).fit(*_blobs(5, 2))


# -- hybrid models --------------------------------------------------------------------------------
def _mlp(seed=0, d_in=2, d_out=3):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d_in, 8), torch.nn.Tanh(), torch.nn.Linear(8, d_out))


@pytest.mark.parametrize("lik", [MulticlassHinge(3), BinaryHinge()], ids=["multiclass", "binary"])
def test_hybrid_gradients_reach_the_feature_extractor(lik):
    net = _mlp().double()
    g = torch.Generator().manual_seed(0)
    X = torch.randn(20, 2, generator=g, dtype=DT)
    y = torch.randint(0, lik.n_classes, (20,), generator=g)
    model = SparseGP(K.RBF(3, lik.n_latent), lik, torch.randn(5, 3, generator=g, dtype=DT), feature_extractor=net)
    assert {id(p) for p in net.parameters()} <= {id(p) for p in model.parameters()}
    q = WhitenedGaussian(lik.n_latent, 5)
    with torch.no_grad():
        q.mean.normal_(generator=g)
    (-elbo(model, q, X, y, 20)).backward()
    for p in net.parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0
    # the features are what the kernel sees
    m, _ = marginals(model, q_post(q, model), X)
    model_plain = SparseGP(model.kernel, lik, model.Z.detach())
    m_plain, _ = marginals(model_plain, q_post(q, model), net(X).detach())
    assert torch.allclose(m, m_plain, atol=1e-12)


def q_post(q, model):
    from sgpc.sparse import InducingPosterior
    Lk = model.chol_Kuu()
    return InducingPosterior(mean=(Lk @ q.mean[..., None])[..., 0].detach(), chol=(Lk @ q.chol).detach())


@pytest.mark.parametrize("method", ["bsvm", "vi"])
def test_hybrid_estimator_trains_a_copy_and_saves_it(method, tmp_path):
    X, y = _blobs(15, 3, sep=3.0)
    net = _mlp(1)
    before = [p.detach().clone() for p in net.parameters()]
    est = GPClassifier(method=method, n_inducing=6, max_iter=60, learning_rate=0.05, random_state=0,
                       feature_extractor=net).fit(X, y)
    fitted = est.model_.feature_extractor
    assert fitted is not net and all(torch.equal(a, b) for a, b in zip(before, net.parameters()))
    assert any(not torch.allclose(a.double(), b) for a, b in zip(before, fitted.parameters()))
    assert est.model_.Z.shape[-1] == 3                       # Z lives in feature space
    p = est.predict_proba(X)
    est.save(tmp_path / "h.pt")
    with pytest.raises(ValueError, match="feature_extractor=module"):
        GPClassifier.load(tmp_path / "h.pt")
    back = GPClassifier.load(tmp_path / "h.pt", feature_extractor=_mlp(7))
    assert np.allclose(back.predict_proba(X), p, atol=1e-12)
    with pytest.raises(ModelFileError):
        GPClassifier.load(tmp_path / "h.pt", feature_extractor=_mlp(7, d_out=4))


def test_warm_start_continues_from_previous_fit():
    X, y = _blobs(15, 3, sep=3.0)
    est = GPClassifier(method="bsvm", n_inducing=6, max_iter=80, learning_rate=0.05, random_state=0).fit(X, y)
    Z = est.model_.Z.detach().clone()
    est.set_params(warm_start=True, max_iter=0).fit(X[::2], y[::2])
    assert torch.equal(est.model_.Z, Z)                     # no re-initialisation, no step
    cold = GPClassifier(method="bsvm", n_inducing=6, max_iter=0, random_state=0).fit(X[::2], y[::2])
    assert not torch.allclose(cold.model_.Z, Z)


@parametrize_with_checks([GPClassifier(method="bsvm", n_inducing=10, max_iter=30, random_state=0)],
                         expected_failed_checks=weighting_xfails)
def test_sklearn_contract_bsvm(estimator, check):
    # every check of scikit-learn's suite passes for the bsvm method (binary and multi-class paths), but those of
    # weighted rows that ``support.weighting_xfails`` explains
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # n_inducing clamped on the checks' tiny data sets
        check(estimator)


def test_column_constant_up_to_rounding_does_not_kill_the_kernel():
    # standardised data subsampled so that a column is constant up to rounding (std ~1e-16): its
    # length-scale must not be initialised at ~0 (that put every test input infinitely far from Z)
    X, y = _blobs(20, 2, sep=4.0)
    X = np.c_[X, np.full(len(X), 0.3) + np.tile([0.0, 5.6e-17], len(X) // 2)]
    assert 0 < X[:, 2].std() < 1e-15
    est = GPClassifier(method="bsvm", n_inducing=8, max_iter=100, learning_rate=0.05, random_state=0).fit(X, y)
    X_new = X.copy()
    X_new[:, 2] += 0.01                                          # the column varies a little at test time
    assert est.score(X_new, y) > 0.95


def test_hybrid_with_batch_norm_predicts_in_eval_mode(tmp_path):
    # training uses batch statistics, prediction the running ones: a prediction must not depend on which
    # other rows are in the call (batch statistics would make it so), a single row must work (batch
    # statistics of one row raise), the user's module and its buffers stay untouched, and save/load
    # carries the running statistics
    X, y = _blobs(15, 3, sep=3.0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3),
                              torch.nn.BatchNorm1d(3, affine=False))
    est = GPClassifier(method="bsvm", n_inducing=6, max_iter=60, batch_size=16, learning_rate=0.05, tol=None,
                       random_state=0, feature_extractor=net).fit(X, y)
    assert torch.equal(net[3].running_var, torch.ones(3)) and int(net[3].num_batches_tracked) == 0
    bn = est.model_.feature_extractor[3]
    assert int(bn.num_batches_tracked) == 60 and not torch.allclose(bn.running_var, torch.ones(3, dtype=DT))
    p = est.predict_proba(X)
    assert np.allclose(np.concatenate([est.predict_proba(X[i:i + 1]) for i in range(len(X))]), p, atol=1e-12)
    assert np.allclose(est.predict_proba(X[:7]), p[:7], atol=1e-12)
    assert not est.model_.training
    est.save(tmp_path / "bn.pt")
    back = GPClassifier.load(tmp_path / "bn.pt", feature_extractor=net)
    assert np.allclose(back.predict_proba(X), p, atol=1e-12)
    assert np.allclose(uncertainty.mean_softmax_entropy(est, X[:1]), uncertainty.mean_softmax_entropy(est, X)[:1])


def test_multiclass_bsvm_predicts_with_the_posterior_mean(tmp_path):
    # the SVM decision rule: argmax of the latent means, not of P(argmax f* = c), which favours a class
    # whose predictive variance is large when the means are close
    from sgpc.sparse import InducingPosterior, marginals
    X, y = _blobs(15, 3, sep=1.0)
    est = GPClassifier(method="bsvm", n_inducing=6, max_iter=40, learning_rate=0.05, random_state=0).fit(X, y)
    q = est.posterior_
    chol = q.chol.clone()
    chol[2] *= 300.0                                                  # class 2: very uncertain
    est.posterior_ = InducingPosterior(mean=q.mean * 0.01, chol=chol)
    mean = marginals(est.model_, est.posterior_, torch.as_tensor(X))[0].detach().numpy()
    pred = est.predict(X)
    assert np.array_equal(pred, est.classes_[mean.argmax(1)])
    by_proba = est.classes_[est.predict_proba(X).argmax(1)]
    assert np.mean(by_proba == 2) > 0.9 and np.mean(pred == 2) < 0.5   # the rules differ here
    np.save(tmp_path / "X.npy", X)                                    # the streamed path uses the same rule
    from sgpc import stream
    assert np.array_equal(est.predict(stream.NpySource(tmp_path / "X.npy")), pred)


def test_bsvm_validation_error_uses_the_decision_rule_of_predict():
    X, y = _blobs(15, 3, sep=1.0)
    Xv, yv = _blobs(10, 3, sep=1.0, seed=1)
    est = GPClassifier(method="bsvm", n_inducing=6, max_iter=15, learning_rate=0.05,
                       random_state=0).fit(X, y, X_val=Xv, y_val=yv, eval_every=5)
    assert est.history_["validation"][-1]["error"] == pytest.approx(np.mean(est.predict(Xv) != yv), abs=1e-12)


def test_collapsed_bound_is_accurate_in_float32_for_confident_points():
    # −m − √(m² + v) cancels for m ≪ 0; float32 must still give −v/(2|m|) to leading order, with a gradient
    m = torch.tensor([-100.0, -1000.0, -3.0, 0.0, 2.0], requires_grad=True)
    v = torch.tensor([0.01, 0.01, 0.5, 0.2, 0.3])
    got = collapsed_bound(m, v)
    from decimal import Decimal, getcontext
    getcontext().prec = 50                                      # the reference with 50 digits
    ref = torch.tensor([float(-Decimal(float(a)) - (Decimal(float(a)) ** 2 + Decimal(float(b))).sqrt())
                        for a, b in zip(m.detach(), v)], dtype=torch.float64)
    torch.testing.assert_close(collapsed_bound(m.detach().double(), v.double()), ref, rtol=1e-14, atol=0)
    torch.testing.assert_close(got.double(), ref, rtol=1e-6, atol=0)
    got.sum().backward()
    assert torch.isfinite(m.grad).all() and m.grad[1] != 0      # d/dm of −v/(2|m|) ≈ −5e-9 at m = −1000


@pytest.mark.parametrize("n_rows", [4096 + 1, 10])
def test_hybrid_initial_features_with_batch_norm_for_any_row_count(n_rows):
    # the initial features were computed in blocks of 4096 and a remainder: 4097 rows left a block of one
    # row, which batch normalisation refuses in training mode
    from sgpc.initialization import extractor_features as _features
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n_rows, 2, generator=g, dtype=torch.float64)
    fx = torch.nn.Sequential(torch.nn.Linear(2, 3, dtype=torch.float64), torch.nn.BatchNorm1d(3, affine=False,
                                                                                              dtype=torch.float64))
    H = _features(fx, X)
    assert H.shape == (n_rows, 3) and np.isfinite(H).all()
    # nearly equal blocks: every block is normalised with the statistics of thousands of rows (or all)
    assert abs(H.mean()) < 0.05 and abs(H.std() - 1.0) < 0.05


def _dropout_net():
    return torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Dropout(0.3), torch.nn.Linear(8, 3),
                               torch.nn.BatchNorm1d(3, affine=False))


def test_hybrid_fits_with_dropout_follow_random_state_and_resume_exactly(tmp_path):
    # dropout drew from torch's global generator: two fits with the same random_state differed by up to
    # 0.04 in probability, and a resumed fit by up to 0.29 from the uninterrupted one
    X, y = _blobs(15, 3, sep=3.0)
    kw = dict(method="bsvm", n_inducing=6, batch_size=16, learning_rate=0.05, random_state=0)
    torch.manual_seed(1)
    a = GPClassifier(max_iter=20, feature_extractor=_dropout_net(), **kw)
    net = a.feature_extractor
    a.fit(X, y)
    torch.manual_seed(2)
    before = torch.get_rng_state()
    b = GPClassifier(max_iter=20, feature_extractor=net, **kw).fit(X, y)
    assert torch.equal(torch.get_rng_state(), before)              # the caller's generator is left as it was
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    ck = str(tmp_path / "ck.pt")
    GPClassifier(max_iter=10, feature_extractor=net, **kw).fit(X, y, checkpoint_path=ck, checkpoint_every=10)
    c = GPClassifier(max_iter=20, feature_extractor=net, **kw)
    c.fit(X, y, checkpoint_path=ck, checkpoint_every=10, resume=True)
    np.testing.assert_array_equal(c.predict_proba(X), a.predict_proba(X))


def test_a_warm_start_refits_cold_when_the_feature_extractor_changes(tmp_path):
    # the extractor was not part of what a warm start compares: a new one was silently unused, a removed
    # one kept, and the saved model then did not load with the estimator's own extractor
    X, y = _blobs(15, 3, sep=3.0)
    est = GPClassifier(method="vi", n_inducing=6, max_iter=5, random_state=0, warm_start=True).fit(X, y)
    net = _dropout_net()
    est.set_params(feature_extractor=net).fit(X, y)
    assert not est.warm_started_ and est.model_.feature_extractor is not None
    est.fit(X, y)
    assert est.warm_started_                                        # the same extractor: continued
    other = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    est.set_params(feature_extractor=other).fit(X, y)
    assert not est.warm_started_ and len(est.model_.feature_extractor) == 3
    est.save(tmp_path / "m.pt")
    GPClassifier.load(tmp_path / "m.pt", feature_extractor=other)
    est.set_params(feature_extractor=None).fit(X, y)
    assert not est.warm_started_ and est.model_.feature_extractor is None


def test_a_rejected_step_rolls_back_the_batch_norm_statistics():
    # a diverging step pushed the running statistics to inf; the parameters were rolled back, the
    # statistics were not, and every later prediction was NaN
    from sgpc.train import TrainSettings, fit
    from sgpc.vi import VI
    from sgpc.likelihoods import RobustMax

    class Corrupting(VI):
        def loss(self, model, state, X, y, n_total, idx=None, *, geometry=None):
            object.__setattr__(self, "calls", getattr(self, "calls", 0) + 1)
            out = super().loss(model, state, X, y, n_total, idx)
            if self.calls == 4:                        # as a forward pass with overflowing activations does
                model.feature_extractor[4].running_var.data.fill_(math.inf)
                return out * math.nan
            return out

    X, y = (torch.as_tensor(a) for a in _blobs(15, 3, sep=3.0))
    net = _dropout_net().double()
    model = SparseGP(K.RBF(3, 3), RobustMax(3), torch.randn(6, 3, dtype=torch.float64), feature_extractor=net)
    engine = Corrupting()
    state = engine.init(model, X, y, torch.Generator())
    state, hist = fit(model, engine, state, X, y.long(), TrainSettings(max_iter=8, learning_rate=0.01),
                      generator=torch.Generator())
    assert [e["rejected"] for e in hist.events] == [1]
    assert bool(torch.isfinite(net[4].running_var).all())


def test_lbfgs_line_search_moves_batch_norm_statistics_once_per_step():
    # every objective evaluation of L-BFGS's line search ran the extractor in training mode: the
    # running statistics moved up to 25 times per step (num_batches_tracked counted evaluations), and
    # dropout drew new masks between the trials of one line search
    X, y = _blobs(15, 3, sep=3.0)
    torch.manual_seed(0)
    est = GPClassifier(method="bsvm", n_inducing=6, max_iter=8, optimizer="lbfgs", learning_rate=0.5,
                       random_state=0, feature_extractor=_dropout_net()).fit(X, y)
    bn = est.model_.feature_extractor[4]
    steps = len(est.history_["iteration"])
    assert steps == 8 and int(bn.num_batches_tracked) == steps
    assert est.score(X, y) > 0.9
