"""Likelihood contract over every Likelihood subclass in ``sgpc.likelihoods`` (found by walking the package):
shapes, normalised predictions, fast overrides vs the generic default, zero-variance limits, bounds below
the exact expectation; then robust-max specifics (tilted moments, small α, ε)."""
import importlib
import inspect
import math
import pkgutil
from typing import Callable, NamedTuple

import pytest
import torch

from sgpc import likelihoods as LK
from sgpc.likelihoods.base import Likelihood, log1mexp
from sgpc.likelihoods.hinge import expected_hinge_log_prob
from support import GaussianLikelihood

torch.set_default_dtype(torch.float64)
C = 3
MC = 400_000     # samples of the forced Monte Carlo reference


class Case(NamedTuple):
    make: Callable[[], Likelihood]
    reference: str      # how the generic default is evaluated: "mc" (forced Monte Carlo) or "gh" (its grid)
    atol_log: float     # log-space tolerance of an override against that reference
    atol_p: float       # probability-space tolerance (log_tilted at α = 1, predict_log_proba)
    exact_err: float    # error of the class's own expected_log_prob (closed form: rounding; the 20-node grid)
    why: str


# Monte Carlo with 4e5 samples of a bounded log p (|log p| ≤ log(C/ε) = 4.1 for ε = 0.05, ≤ log(100) = 4.6 for
# δ = 0.02; the hinge's −2 max(b, 0) has sd ≤ 2√ν ≤ 2.2 here): s.e. ≤ 3.6e-3, the tolerance ≈ 4 s.e.; a
# probability's s.e. is ≤ 0.5/√MC = 8e-4, the tolerance ≈ 6 s.e.
_MC = dict(reference="mc", atol_log=1.5e-2, atol_p=5e-3,
           why="Monte Carlo reference of a step or kink (Gauss–Hermite is poor there): ≈ 4 standard errors")
# steps widened by √a ≥ 1, or the logistic, against marginal sd ≤ 1.1: the 20-node grid is accurate to ~1e-10
_GH = dict(reference="gh", atol_log=1e-8, atol_p=1e-8, why="smooth integrand on the Gauss–Hermite grid")
CASES = {
    "robustmax": Case(lambda: LK.RobustMax(C, epsilon=0.05), exact_err=1e-12, **_MC),
    "robustmax-learn": Case(lambda: LK.RobustMax(C, epsilon=0.05, learn_epsilon=True), exact_err=1e-12, **_MC),
    "additive-step": Case(lambda: LK.AdditiveGaussian(C, 0.0, delta=0.02), exact_err=1e-12, **_MC),
    "additive-probit": Case(lambda: LK.AdditiveGaussian(C, 1.0, delta=0.02), exact_err=1e-8, **_GH),
    "binary-additive-step": Case(lambda: LK.BinaryAdditiveGaussian(0.0, delta=0.02), exact_err=1e-12, **_MC),
    "binary-additive-logit": Case(lambda: LK.BinaryAdditiveGaussian(2.897, delta=0.02), exact_err=1e-8, **_GH),
    # eq. (26) by QMC with S = 1024 points: probabilities within ~1e-3 (error nearly O(1/S); measured 3e-4),
    # so log-probabilities of classes with p ≥ 0.06 within 2e-2
    "softmax": Case(lambda: LK.Softmax(C), "gh", 2e-2, 2e-3, 1e-8, "QMC prediction with 1024 points"),
    "binary-softmax": Case(lambda: LK.BinarySoftmax(), exact_err=1e-8, **_GH),
    "multiclass-hinge": Case(lambda: LK.MulticlassHinge(C), exact_err=1e-12, **_MC),
    "binary-hinge": Case(lambda: LK.BinaryHinge(), exact_err=1e-12, **_MC),
}
NAMES = list(CASES)
# overrides that are a different quantity from the generic default, not a faster form of it (with the reason)
NOT_THE_DEFAULT = {
    LK.MulticlassHinge: {"predict_log_proba": "P(argmax f* = c): the pseudo-likelihood is not normalised"},
    LK.BinaryHinge: {"predict_log_proba": "P(sign f* = ±1): the pseudo-likelihood is not normalised"},
}
# DESIGN §3: the likelihoods whose VI term is a bound (additive-noise, softmax, hinge)
BOUND_CLASSES = {LK.AdditiveGaussian, LK.BinaryAdditiveGaussian, LK.Softmax, LK.BinarySoftmax, LK.MulticlassHinge,
                 LK.BinaryHinge}


def make(name):
    return CASES[name].make()


def likelihood_classes():
    """Every Likelihood subclass defined in a module of the sgpc.likelihoods package."""
    found = set()
    for info in pkgutil.walk_packages(LK.__path__, LK.__name__ + "."):
        module = importlib.import_module(info.name)
        found |= {c for _, c in inspect.getmembers(module, inspect.isclass)
                  if issubclass(c, Likelihood) and c is not Likelihood and c.__module__ == module.__name__}
    return found


def test_every_likelihood_class_is_covered():
    classes = likelihood_classes()
    assert {LK.RobustMax, LK.Softmax, LK.BinaryHinge} <= classes   # the walk reaches every module
    missing = classes - {type(make(n)) for n in NAMES}
    assert not missing, f"add a CASES entry for {sorted(c.__name__ for c in missing)}"
    assert set(LK.__all__) >= {c.__name__ for c in classes}   # and the package exports them


def test_the_bound_classes_are_declared():
    assert {c for c in likelihood_classes() if c.elbo_is_bound} == BOUND_CLASSES


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    N = 6
    return (torch.randint(0, C, (N,), generator=g), torch.randn(N, C, generator=g),
            0.2 + torch.rand(N, C, generator=g))


def sized(lik, y, m, v):
    """(y, mean, var) cut to the likelihood's classes and latent functions."""
    L = lik.n_latent
    return y % lik.n_classes, m[:, :L], v[:, :L]


def overrides(lik, method):
    return getattr(type(lik), method) is not getattr(Likelihood, method)


def reference(name, method, y, m, v, alpha=1.0):
    """The base-class default of ``method`` on a fresh instance, every expectation from log_prob alone
    (predict_log_proba from the generic log_tilted, not from an override), by the case's rule."""
    lik = make(name)
    if CASES[name].reference == "mc":
        lik.max_grid, lik.n_samples = 0, MC
    if method == "expected_log_prob":
        return Likelihood.expected_log_prob(lik, y, m, v)
    if method == "log_tilted":
        return Likelihood.log_tilted(lik, y, m, v, alpha)
    N = m.shape[0]
    return torch.stack([Likelihood.log_tilted(lik, torch.full((N,), c), m, v, 1.0) for c in range(lik.n_classes)], -1)


@pytest.mark.parametrize("name", NAMES)
def test_shapes(name, data):
    lik = make(name)
    y, m, v = sized(lik, *data)
    N, L = m.shape
    F = m + torch.randn(5, N, L, generator=torch.Generator().manual_seed(1))
    assert lik.log_prob(y, m).shape == (N,)
    lp = lik.log_prob(y, F)
    assert lp.shape == (5, N) and (lp <= 1e-15).all()         # p(y|f) ≤ 1 (the hinge's L too)
    for out in (lik.expected_log_prob(y, m, v), lik.elbo_term(y, m, v), lik.log_tilted(y, m, v, 0.5)):
        assert out.shape == (N,) and torch.isfinite(out).all()
    assert lik.predict_log_proba(m, v).shape == (N, lik.n_classes)
    log_z, mu, var = lik.tilted_moments(y, m, v, 0.5)
    assert log_z.shape == (N,) and mu.shape == var.shape == (N, L)


@pytest.mark.parametrize("name", NAMES)
def test_probabilities_sum_to_one(name, data):
    # every rule is normalised by construction (a renormalised row, Φ(z) + Φ(−z), or an average of softmax
    # rows): 1e-12 leaves float64 rounding only
    lik = make(name)
    _, m, v = sized(lik, *data)
    p = lik.predict_log_proba(m, 3.0 * v).exp()
    torch.testing.assert_close(p.sum(1), torch.ones(len(m)), rtol=0, atol=1e-12)
    assert (p >= 0).all()


@pytest.mark.parametrize("name", NAMES)
def test_overrides_match_the_generic_default(name, data):
    """Each method a class overrides is the base-class default from log_prob, faster or exact (CASES says
    with which reference rule and why the tolerance is what it is); NOT_THE_DEFAULT lists the exceptions."""
    lik, case = make(name), CASES[name]
    y, m, v = sized(lik, *data)
    exempt = NOT_THE_DEFAULT.get(type(lik), {})
    checked = 0
    if overrides(lik, "expected_log_prob") and "expected_log_prob" not in exempt:
        torch.testing.assert_close(lik.expected_log_prob(y, m, v), reference(name, "expected_log_prob", y, m, v),
                                   rtol=0, atol=case.atol_log)
        checked += 1
    if overrides(lik, "log_tilted") and "log_tilted" not in exempt:
        for alpha in (1.0, 0.5, 0.01):
            got, want = lik.log_tilted(y, m, v, alpha), reference(name, "log_tilted", y, m, v, alpha)
            torch.testing.assert_close(got, want, rtol=0, atol=case.atol_log)
            if alpha == 1.0:
                torch.testing.assert_close(got.exp(), want.exp(), rtol=0, atol=case.atol_p)
        checked += 1
    if overrides(lik, "predict_log_proba") and "predict_log_proba" not in exempt:
        torch.testing.assert_close(lik.predict_log_proba(m, v).exp(), reference(name, "predict_log_proba", y, m, v).exp(),
                                   rtol=0, atol=case.atol_p)
        checked += 1
    assert checked or name == "multiclass-hinge"              # every other class overrides something


@pytest.mark.parametrize("name", NAMES)
def test_zero_variance_limit(name, data):
    # at ν = 0 every expectation is log p(y | mean); the step-panel rule of the one-latent classes
    # (quadrature.log_expect_exp_step) reaches 1.3e-10 there, the others rounding: 1e-9
    lik = make(name)
    y, m, _ = sized(lik, *data)
    v0 = torch.zeros_like(m)
    lp = lik.log_prob(y, m)
    torch.testing.assert_close(lik.expected_log_prob(y, m, v0), lp, rtol=0, atol=1e-9)
    for alpha in (1.0, 0.3):
        torch.testing.assert_close(lik.log_tilted(y, m, v0, alpha), alpha * lp, rtol=0, atol=1e-9)
    if "predict_log_proba" not in NOT_THE_DEFAULT.get(type(lik), {}):
        N = m.shape[0]
        want = torch.stack([lik.log_prob(torch.full((N,), c), m) for c in range(lik.n_classes)], -1)
        torch.testing.assert_close(lik.predict_log_proba(m, v0), want, rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_elbo_term_is_the_declared_term(name, data):
    lik = make(name)
    y, m, v = sized(lik, *data)
    if lik.elbo_is_bound:
        assert torch.equal(lik.elbo_term(y, m, v), lik.expected_log_prob_bound(y, m, v))
    else:
        assert torch.equal(lik.elbo_term(y, m, v), lik.expected_log_prob(y, m, v))
        with pytest.raises(NotImplementedError, match="no bound"):
            lik.expected_log_prob_bound(y, m, v)


@pytest.mark.parametrize("name", [n for n in NAMES if make(n).elbo_is_bound])
@pytest.mark.parametrize("scale", [0.1, 1.0, 4.0])
def test_bound_is_below_the_exact_expectation(name, scale, data):
    """expected_log_prob_bound ≤ E_q[log p], the exact side being ``expected_log_prob`` (checked against the
    generic default above) within its own error ``exact_err``. The multi-class hinge bounds E_q[log L_{t_n}]
    with the highest-scoring wrong class t_n fixed (hinge module docstring; for C = 2 that is E_q[log L]):
    its exact side is that expectation in closed form."""
    lik = make(name)
    y, m, v = sized(lik, *data)
    v = scale * v
    bound = lik.expected_log_prob_bound(y, m, v)
    if isinstance(lik, LK.MulticlassHinge):
        exact = expected_hinge_log_prob(*lik.contrast(y, m, v))
    else:
        exact = lik.expected_log_prob(y, m, v)
    assert (bound <= exact + CASES[name].exact_err).all(), (bound - exact)


def test_robust_max_log_prob_values():
    for name in ("robustmax", "robustmax-learn"):
        lik = make(name)
        F = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 3.0]])
        y = torch.tensor([0, 0])
        eps = 0.05
        expected = torch.tensor([math.log(1 - eps + eps / C), math.log(eps / C)])
        torch.testing.assert_close(lik.log_prob(y, F), expected)


@pytest.mark.parametrize("name", ["robustmax", "robustmax-learn"])
def test_robust_max_zero_variance_prediction(name, data):
    y, m, _ = data
    lik = make(name)
    v0 = torch.full_like(m, 1e-14)
    torch.testing.assert_close(lik.expected_log_prob(y, m, v0), lik.log_prob(y, m), rtol=0, atol=1e-8)
    torch.testing.assert_close(lik.log_tilted(y, m, v0, 0.3), 0.3 * lik.log_prob(y, m), rtol=0, atol=1e-8)
    # predictive probabilities: (1-ε)·[c = argmax] + ε/C
    p = lik.predict_log_proba(m, v0).exp()
    onehot = torch.nn.functional.one_hot(m.argmax(1), C)
    torch.testing.assert_close(p, 0.95 * onehot + 0.05 / C, rtol=0, atol=1e-8)


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
                               Likelihood.expected_log_prob(lik, y, m, v), rtol=1e-10, atol=1e-10)
    for alpha in (1.0, 0.4):
        torch.testing.assert_close(lik.log_tilted(y, m, v, alpha),
                                   Likelihood.log_tilted(lik, y, m, v, alpha), rtol=1e-8, atol=1e-8)


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


@pytest.mark.parametrize("epsilon", [1e-3, 0.3, 1e-290])
def test_robust_max_prediction_in_linear_space_equals_the_log_space_formula(epsilon, monkeypatch):
    # predict_log_proba takes P in linear space (and skips the panels of pairs provably below ε/C · 1e-16)
    # while ε/C > e^-600; below that (ε = 1e-290) the log-space route. Both must be log((1 − ε) P + ε/C),
    # renormalised, with P from the log-space rule. Pair by pair, as the log-space rule integrates: rows with
    # several panel pairs take one grid per row in linear space, equal to these panels to their quadrature
    # error (tests/test_quadrature.py, test_one_grid_per_row_equals_each_pairs_own_panels).
    from sgpc import quadrature
    monkeypatch.setattr(quadrature, "_ROW_GRID_MIN_PAIRS", 10**9)
    g = torch.Generator().manual_seed(3)
    C = 6
    mean = 3.0 * torch.randn(50, C, generator=g, dtype=torch.float64)
    var = torch.exp(2.0 * torch.randn(50, C, generator=g, dtype=torch.float64))
    mean[0] = torch.linspace(-40.0, 5.0, C)
    lik = LK.RobustMax(C, epsilon=epsilon).double()
    log_P = quadrature.log_prob_largest(mean, var, lik.n_points_predict)
    ref = torch.logaddexp(math.log1p(-epsilon) + log_P, torch.tensor(math.log(epsilon / C), dtype=torch.float64))
    ref = ref - torch.logsumexp(ref, -1, keepdim=True)
    torch.testing.assert_close(lik.predict_log_proba(mean, var), ref, rtol=0, atol=1e-13)
