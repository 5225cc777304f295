"""Elliptical slice sampling (sgpc.mcmc): exact posteriors where they exist, and the GP conditional."""
import math

import numpy as np
import pytest
import torch

from sgpc import kernels as K
from sgpc.likelihoods import RobustMax
from sgpc.kernels import inverse_positive
from sgpc.mcmc import (_CleanRow, elliptical_slice, posterior_reference, predict_log_proba, prior_cholesky,
                       robust_max_gibbs)

DT = torch.float64


def _gaussian_problem():
    """Two latent GPs at 3 inputs with a Gaussian likelihood N(y | f, s²): (prior chol, log_lik, exact
    posterior mean [2,3], exact posterior covariance [2,3,3])."""
    X = torch.tensor([[-1.0], [0.0], [1.5]], dtype=DT)
    kern = K.RBF(1, 2, lengthscale=1.0, variance=1.5, noise=1e-2, dtype=DT)
    chol = prior_cholesky(kern, X)
    y = torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]], dtype=DT)
    s2 = 0.3
    cov = torch.linalg.inv(torch.linalg.inv(chol @ chol.mT) + torch.eye(3, dtype=DT) / s2)
    mean = (cov @ (y / s2)[..., None])[..., 0]
    return chol, (lambda F: -0.5 * ((F - y) ** 2).sum() / s2), mean, cov


def _moments(samples):
    return samples.mean(0), torch.stack([torch.cov(samples[:, l].T) for l in range(samples.shape[1])])


def test_samples_match_the_exact_gaussian_posterior():
    # the posterior is Gaussian with known moments; the sampler only sees log_lik, so this checks the
    # ellipse construction and the shrinking bracket
    chol, log_lik, mean, cov = _gaussian_problem()
    samples, info = elliptical_slice(log_lik, chol, 20000, burn_in=500, generator=torch.Generator().manual_seed(0))
    emp_mean, emp_cov = _moments(samples)
    assert torch.allclose(emp_mean, mean, atol=0.05) and torch.allclose(emp_cov, cov, atol=0.05)
    assert 1.0 <= info["proposals_per_iteration"] < 10.0


@pytest.mark.slow
def test_a_gaussian_reference_changes_the_moves_not_the_target():
    # generalised elliptical slice: with the exact posterior as reference the rest of the target is
    # constant and every first proposal is accepted; with a reference off in mean and scale the samples
    # still have the exact posterior's moments (a wrong correction term would move them)
    g = torch.Generator().manual_seed(1)
    chol, log_lik, mean, cov = _gaussian_problem()
    exact = (mean, torch.linalg.cholesky(cov))
    samples, info = elliptical_slice(log_lik, chol, 3000, burn_in=0, reference=exact, generator=g)
    assert info["proposals_per_iteration"] == 1.0
    assert torch.allclose(samples.mean(0), mean, atol=0.05)
    off = (mean + 0.3, torch.linalg.cholesky(1.8 * cov))
    samples, info = elliptical_slice(log_lik, chol, 20000, burn_in=500, reference=off, generator=g)
    emp_mean, emp_cov = _moments(samples)
    assert torch.allclose(emp_mean, mean, atol=0.05) and torch.allclose(emp_cov, cov, atol=0.05)
    # the trace is the data log-likelihood of the kept samples, not the slice's rest of the target
    assert torch.allclose(info["log_lik"][-3:], torch.stack([log_lik(F) for F in samples[-3:]]))
    with pytest.raises(ValueError, match="reference must be"):
        elliptical_slice(log_lik, chol, 2, reference=(mean[:1], exact[1]))


def test_posterior_reference_is_the_joint_of_the_sparse_marginals():
    # its diagonal must be sparse.marginals' variances and its mean their means; with Z = X and S = K_uu
    # (q = prior) it is the prior itself
    from sgpc.sparse import InducingPosterior, SparseGP, marginals
    g = torch.Generator().manual_seed(2)
    X = torch.randn(7, 2, generator=g, dtype=DT)
    kern = K.RBF(2, 3, lengthscale=1.3, variance=0.8, noise=1e-2, dtype=DT)
    model = SparseGP(kern, RobustMax(3), X[:4].clone())
    A = torch.randn(3, 4, 4, generator=g, dtype=DT) * 0.3
    q = InducingPosterior(torch.randn(3, 4, generator=g, dtype=DT), torch.linalg.cholesky(A @ A.mT + 0.2 * torch.eye(4, dtype=DT)))
    mean, chol = posterior_reference(model, q, X)
    m, v = marginals(model, q, X)
    assert torch.allclose(mean, m.T, atol=1e-10)
    assert torch.allclose((chol @ chol.mT).diagonal(dim1=-2, dim2=-1), v.T, atol=1e-8)
    model = SparseGP(kern, RobustMax(3), X.clone())
    prior = InducingPosterior(torch.zeros(3, 7, dtype=DT), torch.linalg.cholesky(kern(X, X)))
    mean, chol = posterior_reference(model, prior, X)
    P = prior_cholesky(kern, X)
    assert torch.allclose(mean, torch.zeros_like(mean)) and torch.allclose(chol @ chol.mT, P @ P.mT, atol=1e-8)


def test_prior_samples_without_likelihood_and_seeded_reproducibility():
    X = torch.linspace(-2, 2, 4, dtype=DT)[:, None]
    kern = K.RBF(1, 1, lengthscale=0.7, variance=2.0, noise=1e-3, dtype=DT)
    chol = prior_cholesky(kern, X)
    a, info = elliptical_slice(lambda F: torch.zeros((), dtype=DT), chol, 20000, burn_in=0,
                               generator=torch.Generator().manual_seed(1))
    assert info["proposals_per_iteration"] == 1.0                  # every first proposal is accepted
    assert torch.allclose(torch.cov(a[:, 0].T), (chol @ chol.mT)[0], atol=0.1)
    b, _ = elliptical_slice(lambda F: torch.zeros((), dtype=DT), chol, 20000, burn_in=0,
                            generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="n_samples"):
        elliptical_slice(lambda F: torch.zeros(()), chol, 0)
    with pytest.raises(ValueError, match="zero likelihood"):
        elliptical_slice(lambda F: torch.tensor(-math.inf), chol, 5)


def test_a_slice_height_draw_of_exactly_zero_is_not_an_error(monkeypatch):
    # float32 uniforms are exactly 0 about once in 1.7e7 draws (a ~3e-4 chance per 5 500-iteration chain);
    # log 0 = −∞ is a valid slice height (every proposal is above it), math.log(0) raised
    X = torch.linspace(-2, 2, 3, dtype=torch.float32)[:, None]
    chol = prior_cholesky(K.RBF(1, 1, lengthscale=0.7, noise=1e-3, dtype=torch.float32), X)
    real, calls = torch.rand, []

    def rand(*args, **kwargs):
        calls.append(1)
        return torch.zeros((), dtype=kwargs.get("dtype")) if len(calls) == 1 else real(*args, **kwargs)

    monkeypatch.setattr(torch, "rand", rand)
    samples, info = elliptical_slice(lambda F: -(F ** 2).sum(), chol, 3, burn_in=0,
                                     generator=torch.Generator().manual_seed(0))
    assert len(calls) > 1 and bool(torch.isfinite(samples).all())


def test_predictions_use_the_gp_conditional_of_each_sample():
    # with two given samples the prediction is the average of the likelihood's predictive at the
    # conditional moments K_*f K⁻¹ f and k_** − K_*f K⁻¹ K_f* (checked with dense numpy algebra)
    g = torch.Generator().manual_seed(2)
    X, Xs = torch.randn(6, 2, generator=g, dtype=DT), torch.randn(4, 2, generator=g, dtype=DT)
    kern = K.RBF(2, 3, lengthscale=1.2, variance=1.0, noise=1e-2, dtype=DT)
    lik = RobustMax(3)
    chol = prior_cholesky(kern, X)
    samples = torch.randn(2, 3, 6, generator=g, dtype=DT)
    got = predict_log_proba(kern, lik, X, chol, samples, Xs).exp().numpy()
    Kf = (chol @ chol.mT).detach().numpy()
    Ksf = kern(Xs, X).detach().numpy()
    kss = kern.diag(Xs).detach().numpy()
    expect = 0.0
    for F in samples.numpy():
        m = np.stack([Ksf[l] @ np.linalg.solve(Kf[l], F[l]) for l in range(3)], 1)
        v = np.stack([kss[l] - np.einsum("tn,tn->t", Ksf[l], np.linalg.solve(Kf[l], Ksf[l].T).T) for l in range(3)], 1)
        expect = expect + lik.predict_log_proba(torch.as_tensor(m), torch.as_tensor(v)).exp().numpy() / 2
    assert np.allclose(got, expect, atol=1e-10)
    assert np.allclose(got.sum(1), 1.0)


def test_split_rhat_matches_its_formula_and_flags_chains_that_disagree():
    from sgpc.mcmc import split_rhat
    rng = np.random.default_rng(0)
    # the formula, by hand on a small case: chains cut in halves, W = mean within-half variance,
    # B/n = variance of the half means
    t = np.array([[1.0, 2.0, 4.0, 3.0, 0.0, 5.0], [2.0, 2.5, 1.0, 3.5, 3.0, 2.0]])
    halves = np.array([t[0, :3], t[0, 3:], t[1, :3], t[1, 3:]])
    W = halves.var(axis=1, ddof=1).mean()
    Bn = halves.mean(axis=1).var(ddof=1)
    assert split_rhat(t) == pytest.approx(math.sqrt((2 / 3 * W + Bn) / W), rel=1e-12)
    # independent draws from one distribution: R̂ ≈ 1; chains stuck at different levels, or a trend
    # within each chain (the halves differ): R̂ well above 1
    assert abs(split_rhat(rng.standard_normal((4, 2000))) - 1.0) < 0.01
    assert split_rhat(rng.standard_normal((4, 2000)) + np.arange(4)[:, None]) > 1.5
    assert split_rhat(rng.standard_normal((2, 2000)) + np.linspace(0, 4, 2000)) > 1.2     # ≈ √2 for this trend
    with pytest.raises(ValueError, match="draws"):
        split_rhat(np.zeros((2, 3)))


def test_the_log_likelihood_trace_belongs_to_the_kept_samples():
    X = torch.linspace(-2, 2, 5, dtype=DT)[:, None]
    kern = K.RBF(1, 3, lengthscale=0.8, variance=1.0, noise=1e-3, dtype=DT)
    lik = RobustMax(3)
    y = torch.tensor([0, 1, 2, 1, 0])
    samples, info = elliptical_slice(lambda F: lik.log_prob(y, F.T).sum(), prior_cholesky(kern, X), 30,
                                     burn_in=10, thin=3, generator=torch.Generator().manual_seed(3))
    want = torch.stack([lik.log_prob(y, F.T).sum() for F in samples])
    torch.testing.assert_close(info["log_lik"], want, rtol=1e-12, atol=1e-12)


# -- robust_max_gibbs: label-noise indicators by Gibbs, the truncated Gaussian by exact HMC ---------------

def test_gibbs_at_one_point_matches_the_closed_form_posterior():
    # C = 2, f ~ N(0, I), y = 0: with d = f0 − f1 ~ N(0, 2), P(d > 0 | y) = a/(a + b) (a = 1 − ε + ε/2,
    # b = ε/2) and E[f0] = (a − b)/(a + b) · E[f0 | d > 0] = (a − b)/(a + b)/√π, while E[f0²] = 1 whatever
    # the sign of d. ε = 0.2 makes z flip often, so a wrong z | F step moves P(d > 0)
    chol = torch.eye(1, dtype=DT).expand(2, 1, 1).clone()
    s, info = robust_max_gibbs(chol, torch.tensor([0]), RobustMax(2, epsilon=0.2), 20000, burn_in=100,
                               generator=torch.Generator().manual_seed(0))
    a, b = 0.9, 0.1
    assert abs(float((s[:, 0, 0] > s[:, 1, 0]).double().mean()) - a / (a + b)) < 0.01
    assert torch.allclose(s.mean(0)[:, 0], torch.tensor([1.0, -1.0], dtype=DT) * (a - b) / (a + b) / math.sqrt(math.pi),
                          atol=0.03)
    assert torch.allclose((s ** 2).mean(0)[:, 0], torch.ones(2, dtype=DT), atol=0.04)
    assert 0.1 < info["noise_labels"] < 0.3 and info["bounces_per_iteration"] > 0


def _three_latent_problem(x, lengthscales, noise, y):
    """Three latent GPs with different amplitudes (0.5, 1.5, 3) and the given length-scales at inputs x."""
    X = torch.tensor(x, dtype=DT)[:, None]
    kern = K.RBF(1, 3, lengthscale=1.0, variance=1.5, noise=noise, dtype=DT)
    with torch.no_grad():
        kern.raw_variance.copy_(inverse_positive(torch.tensor([0.5, 1.5, 3.0], dtype=DT)))
        kern.raw_lengthscale.copy_(inverse_positive(torch.tensor(lengthscales, dtype=DT)[:, None]))
    return prior_cholesky(kern, X), torch.tensor(y)


def _three_class_problem():
    """Three close inputs, strongly coupled."""
    return _three_latent_problem([-0.5, 0.0, 0.6], [0.3, 0.7, 2.0], 1e-2, [0, 2, 2])


def _weakly_coupled_problem():
    return _three_latent_problem([-1.0, 0.0, 1.2], [0.4, 0.5, 0.6], 1e-1, [0, 2, 1])


def _importance_posterior(chol, y, lik, g, n=400_000):
    """Prior draws [n,L,N], their normalised weights Π p(y_i | f_i) and the posterior mean they give."""
    prior = (chol[None] @ torch.randn(n, *chol.shape[:2], 1, dtype=DT, generator=g))[..., 0]
    w = torch.softmax(lik.log_prob(y, prior.transpose(1, 2)).sum(-1), 0)
    return prior, w, (w[:, None, None] * prior).sum(0)


def test_gibbs_matches_importance_sampling_from_the_prior():
    # brute force: prior draws weighted by Π p(y_i | f_i) give the posterior mean of F [3,3]. ε = 10⁻³ makes the
    # constraints nearly hard, as in the benchmarks; the latents' kernels differ, so a reflection that
    # used the wrong latent's covariance column (or a wrong reflection coefficient) cannot pass
    g = torch.Generator().manual_seed(0)
    chol, y = _three_class_problem()
    lik = RobustMax(3, epsilon=1e-3)
    _, _, exact = _importance_posterior(chol, y, lik, g)
    s, info = robust_max_gibbs(chol, y, lik, 10000, burn_in=200, generator=g)
    assert (s.mean(0) - exact).abs().max() < 0.05
    # at ε = 10⁻³ label noise is rare and the clean points' constraints hold in almost every kept sample
    clean = (s.argmax(1) == y).all(-1).double().mean()
    assert clean > 0.98 and info["noise_labels"] < 0.05
    assert torch.allclose(info["log_lik"][-3:], torch.stack([lik.log_prob(y, F.T).sum() for F in s[-3:]]))


# -- row sweeps: (z_i, f_i) drawn jointly given the other points ------------------------------------------

@pytest.mark.slow   # ~40 s on the 2 cores: `make test-slow`
def test_label_row_draws_match_brute_force():
    # three classes, unequal variances: log P and the mean of exact draws against plain Monte Carlo
    m, s = np.array([0.0, 1.0, -0.5]), np.array([1.0, 0.3, 2.0])
    rng = np.random.default_rng(0)
    f = rng.normal(m, s, size=(2_000_000, 3))
    wins = f[:, 0] > f[:, 1:].max(1)
    row = _CleanRow(m, s, 0)
    g = torch.Generator().manual_seed(1)
    draws = np.array([np.r_[t, o] for t, o in (row.sample(g) for _ in range(6000))])
    assert (draws[:, 0] > draws[:, 1:].max(1)).all()
    # standard errors of the 6 000 draws' means: 0.008, 0.004, 0.02 (the third value's spread is 1.5)
    np.testing.assert_allclose(draws.mean(0), f[wins].mean(0), atol=0.06)
    np.testing.assert_allclose(draws.std(0), f[wins].std(0), atol=0.05)
    # a competitor 1 000× sharper: f^0 given f^0 > f^1 ≈ 0 is half-normal (mean √(2/π), sd √(1 − 2/π)); a
    # hull with its tangents at the wrong scale would be slow here, a wrong one biased
    edge = np.array([t for t, _ in (_CleanRow(np.zeros(2), np.array([1.0, 1e-3]), 0).sample(g) for _ in range(6000))])
    assert edge.mean() == pytest.approx(math.sqrt(2 / math.pi), abs=0.025)
    assert edge.std() == pytest.approx(math.sqrt(1 - 2 / math.pi), abs=0.02)


@pytest.mark.slow   # ~40 s on the 2 cores: `make test-slow`
def test_row_sweeps_alone_sample_the_posterior():
    # HMC all but off (travel time 1e-9): the sweeps must carry the chain. ε = 0.3, so z_i is noise often.
    # Importance sampling from the prior gives the posterior mean of F and P(f_i satisfies y_i) = p_i; a
    # point is drawn as noise with probability 1 − p_i (1 − b/a), b/a the noise share of a satisfied point
    g = torch.Generator().manual_seed(0)
    chol, y = _weakly_coupled_problem()
    lik = RobustMax(3, epsilon=0.3)
    prior, w, exact = _importance_posterior(chol, y, lik, g)
    ll = lik.log_prob(y, prior.transpose(1, 2))                                     # [n,N]
    second = torch.einsum("n,nli,nlj->lij", w, prior, prior)                         # E[f_l,i f_l,j]
    log_a, log_b = (float(v) for v in lik._log_a_b())
    p_sat = (w[:, None] * (ll == log_a)).sum(0)
    noise = float((1.0 - p_sat * (1.0 - math.exp(log_b - log_a))).sum())
    s, info = robust_max_gibbs(chol, y, lik, 5000, burn_in=100, travel_time=1e-9, row_sweep_every=1,
                               generator=torch.Generator().manual_seed(5))
    assert info["sweep_noise_labels"] == pytest.approx(noise, abs=0.04)
    assert (s.mean(0) - exact).abs().max() < 0.08
    # second moments: the conditionals' spread, and the points' coupling through Λ f kept up to date
    # (0.06–0.09 here over three seeds; 0.45–0.50 with a stale Λ f, 0.20–0.23 with the noise draws' sd × 0.9)
    assert (torch.einsum("nli,nlj->lij", s, s) / s.shape[0] - second).abs().max() < 0.15


@pytest.mark.slow   # ~40 s on the 2 cores: `make test-slow`
def test_gibbs_with_row_sweeps_matches_importance_sampling():
    g = torch.Generator().manual_seed(0)
    chol, y = _three_class_problem()
    lik = RobustMax(3, epsilon=1e-3)
    _, _, exact = _importance_posterior(chol, y, lik, g)
    s, info = robust_max_gibbs(chol, y, lik, 8000, burn_in=200, row_sweep_every=2, generator=g)
    assert (s.mean(0) - exact).abs().max() < 0.05
    assert info["sweep_noise_labels"] < 0.05


def test_gibbs_is_seeded_and_checks_its_inputs():
    chol, y = _three_class_problem()
    lik = RobustMax(3, epsilon=1e-3)
    a, _ = robust_max_gibbs(chol, y, lik, 50, burn_in=5, generator=torch.Generator().manual_seed(3))
    b, _ = robust_max_gibbs(chol, y, lik, 50, burn_in=5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == (50, 3, 3)
    with pytest.raises(ValueError, match="labels in 0..2"):
        robust_max_gibbs(chol, torch.tensor([0, 3, 1]), lik, 5)
    with pytest.raises(ValueError, match="L >= 2"):
        robust_max_gibbs(chol[:1], torch.tensor([0, 0, 0]), lik, 5)
    with pytest.raises(ValueError, match="RobustMax with 3 classes"):
        robust_max_gibbs(chol, y, RobustMax(4), 5)
    with pytest.raises(ValueError, match="f0"):
        robust_max_gibbs(chol, y, lik, 5, f0=torch.zeros(2, 3, dtype=DT))
    with pytest.raises(ValueError, match="n_samples"):
        robust_max_gibbs(chol, y, lik, 0)
    with pytest.raises(ValueError, match="row_sweep_every"):
        robust_max_gibbs(chol, y, lik, 5, row_sweep_every=-1)
