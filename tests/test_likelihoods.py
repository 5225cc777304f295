"""Likelihood contract: fast overrides vs the generic defaults, zero-variance limits, tilted moments."""
import inspect
import math

import pytest
import torch

from sgpc import likelihoods as LK
from sgpc.likelihoods.base import log1mexp
from support import GaussianLikelihood

torch.set_default_dtype(torch.float64)
C = 3


def make(name):
    return {"robustmax": lambda: LK.RobustMax(C, epsilon=0.05),
            "robustmax-learn": lambda: LK.RobustMax(C, epsilon=0.05, learn_epsilon=True)}[name]()


NAMES = ["robustmax", "robustmax-learn"]


def test_every_likelihood_class_is_covered():
    classes = {c for _, c in inspect.getmembers(LK, inspect.isclass)
               if issubclass(c, LK.Likelihood) and c is not LK.Likelihood and c.__module__ == LK.__name__}
    assert classes <= {type(make(n)) for n in NAMES}


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    N = 6
    return (torch.randint(0, C, (N,), generator=g), torch.randn(N, C, generator=g),
            0.2 + torch.rand(N, C, generator=g))


def generic(lik, **kw):
    """The base-class default applied to lik.log_prob (no override)."""
    return lambda method: (lambda *a, **k: getattr(LK.Likelihood, method)(lik, *a, **k))


@pytest.mark.parametrize("name", NAMES)
def test_log_prob_values(name):
    lik = make(name)
    F = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 3.0]])
    y = torch.tensor([0, 0])
    eps = 0.05
    expected = torch.tensor([math.log(1 - eps + eps / C), math.log(eps / C)])
    torch.testing.assert_close(lik.log_prob(y, F), expected)


@pytest.mark.parametrize("name", NAMES)
def test_overrides_match_generic_monte_carlo(name, data):
    y, m, v = data
    lik = make(name)
    lik.max_grid, lik.n_samples = 0, 400_000   # force the generic Monte Carlo branch
    g = generic(lik)
    # Monte Carlo of a bounded integrand (|log p| <= 4.1): 4e5 samples give s.e. <~ 3e-3; tolerance 4 s.e.
    torch.testing.assert_close(lik.expected_log_prob(y, m, v), g("expected_log_prob")(y, m, v), rtol=0, atol=1.5e-2)
    for alpha in (1.0, 0.5, 0.01):
        torch.testing.assert_close(lik.log_tilted(y, m, v, alpha), g("log_tilted")(y, m, v, alpha),
                                   rtol=0, atol=1.5e-2)
    torch.testing.assert_close(lik.predict_log_proba(m, v).exp(), g("predict_log_proba")(m, v).exp(),
                               rtol=0, atol=5e-3)


@pytest.mark.parametrize("name", NAMES)
def test_zero_variance_limit(name, data):
    y, m, _ = data
    lik = make(name)
    v0 = torch.full_like(m, 1e-14)
    torch.testing.assert_close(lik.expected_log_prob(y, m, v0), lik.log_prob(y, m), rtol=0, atol=1e-8)
    torch.testing.assert_close(lik.log_tilted(y, m, v0, 0.3), 0.3 * lik.log_prob(y, m), rtol=0, atol=1e-8)
    # predictive probabilities: (1-ε)·[c = argmax] + ε/C
    p = lik.predict_log_proba(m, v0).exp()
    onehot = torch.nn.functional.one_hot(m.argmax(1), C)
    torch.testing.assert_close(p, 0.95 * onehot + 0.05 / C, rtol=0, atol=1e-8)


def test_probabilities_sum_to_one(data):
    _, m, v = data
    p = make("robustmax").predict_log_proba(m, v).exp()
    torch.testing.assert_close(p.sum(1), torch.ones(len(m)), rtol=0, atol=1e-12)


def test_small_alpha_is_stable_and_tends_to_expected_log_prob(data):
    # (1/α) log E[p^α] -> E[log p] as α -> 0 (first-order expansion)
    y, m, v = data
    lik = make("robustmax")
    e = lik.expected_log_prob(y, m, v)
    for alpha, tol in ((1e-3, 1e-2), (1e-6, 1e-5)):
        got = lik.log_tilted(y, m, v, alpha) / alpha
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, e, rtol=0, atol=tol)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_tilted_moments_against_brute_force(alpha, data):
    y, m, v = data
    lik = make("robustmax")
    logZ, mu, var = lik.tilted_moments(y, m, v, alpha)
    g = torch.Generator().manual_seed(5)
    S = 1_000_000
    F = m + v.sqrt() * torch.randn(S, *m.shape, generator=g)
    w = torch.exp(alpha * lik.log_prob(y, F))                                      # [S,N]
    Z = w.mean(0)
    E1 = (w[..., None] * F).mean(0) / Z[:, None]
    E2 = (w[..., None] * F ** 2).mean(0) / Z[:, None]
    # importance-weighted MC with 10^6 samples: relative s.e. ~1e-3 on moments of O(1)
    torch.testing.assert_close(logZ, Z.log(), rtol=0, atol=1e-2)
    torch.testing.assert_close(mu, E1, rtol=0, atol=2e-2)
    torch.testing.assert_close(var, E2 - E1 ** 2, rtol=0, atol=2e-2)


def test_learnable_epsilon_gets_a_gradient(data):
    y, m, v = data
    lik = make("robustmax-learn")
    lik.expected_log_prob(y, m, v).sum().backward()
    assert lik.raw_epsilon.grad is not None and lik.raw_epsilon.grad.abs() > 0


def test_invalid_arguments():
    with pytest.raises(ValueError, match="epsilon"):
        LK.RobustMax(3, epsilon=0.0)
    with pytest.raises(ValueError, match="at least 2 classes"):
        LK.RobustMax(1)


def test_gaussian_test_likelihood_closed_forms_match_generic():
    lik = GaussianLikelihood(0.3)
    lik.n_quadrature = 150   # the tilted integrand N(y|f,σ²)^α is narrower than q(f): 150 nodes reach 1e-15
    y = torch.tensor([0.2, -1.0, 0.5])
    m, v = torch.tensor([[0.1], [0.4], [-0.3]]), torch.tensor([[0.5], [0.2], [1.1]])
    torch.testing.assert_close(lik.expected_log_prob(y, m, v),
                               LK.Likelihood.expected_log_prob(lik, y, m, v), rtol=1e-10, atol=1e-10)
    for alpha in (1.0, 0.4):
        torch.testing.assert_close(lik.log_tilted(y, m, v, alpha),
                                   LK.Likelihood.log_tilted(lik, y, m, v, alpha), rtol=1e-8, atol=1e-8)


def test_log1mexp_values_and_gradients_are_finite_across_its_range():
    # log(1 − eˣ) and its derivative −1/(e^{−x} − 1) at both sides of the −log 2 switch and next to 0, where
    # the unused branch log1p(−eˣ) has an infinite derivative (it once turned whole EP gradients into NaN)
    x = torch.tensor([-1e-300, -1e-10, -0.3, -math.log(2.0), -0.9, -5.0, -50.0], dtype=torch.float64,
                     requires_grad=True)
    v = log1mexp(x)
    v.sum().backward()
    xs = x.detach()
    import mpmath                                        # 50-digit reference (mpmath comes with torch's sympy)
    mpmath.mp.dps = 50
    ref = torch.tensor([float(mpmath.log(1 - mpmath.exp(mpmath.mpf(float(t))))) for t in xs[1:]])
    torch.testing.assert_close(v.detach()[1:], ref, rtol=1e-12, atol=0)
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(x.grad[1:], -1.0 / torch.expm1(-xs[1:]), rtol=1e-9, atol=0)


def test_robust_max_tilted_normaliser_from_linear_p_equals_the_log_space_form():
    # log E[p^α] = α log b + log1p((e^{α log(a/b)} − 1) P) with P in linear space (the fast rule) against
    # logaddexp(log P + α log a, log(1 − P) + α log b) with P in log space, including P of 1e-30 and 1 − 1e-12,
    # and in float32 (P keeps its relative precision: a sum of positive terms)
    from sgpc import quadrature
    lik = LK.RobustMax(4, epsilon=1e-3)
    y = torch.tensor([0, 0, 0, 1, 2])
    m = torch.tensor([[-12.0, 0.0, 0.5, 0.2], [9.0, 0.0, -1.0, 0.3], [0.1, 0.0, 0.2, -0.1],
                      [0.0, 1.0, 0.0, 0.0], [1.0, 2.0, -3.0, 0.0]], dtype=torch.float64)
    v = torch.tensor([[1.0, 0.5, 0.8, 1.2], [0.3, 0.2, 0.1, 0.4], [2.0, 1.0, 0.5, 3.0],
                      [1.0, 1.0, 1.0, 1.0], [0.5, 4.0, 1.0, 0.2]], dtype=torch.float64)
    log_a, log_b = lik._log_a_b()
    log_P = quadrature.log_prob_label_largest(y, m, v, lik.n_points)
    assert log_P[0] < -60 and log_P[1] > -1e-12
    for alpha in (1e-3, 0.5, 1.0):
        want = torch.logaddexp(log_P + alpha * log_a, log1mexp(log_P) + alpha * log_b)
        torch.testing.assert_close(lik.log_tilted(y, m, v, alpha), want, rtol=1e-12, atol=1e-14)
        got32 = LK.RobustMax(4, epsilon=1e-3).float().log_tilted(y, m.float(), v.float(), alpha)
        torch.testing.assert_close(got32.double(), want, rtol=2e-6, atol=5e-6 * alpha)     # (1/α)·error ≤ 5e-6
