"""Gaussian algebra against explicit inversion, torch.distributions and 1-D integration."""
import math
import warnings

import numpy as np
import pytest
import torch
from scipy import integrate
from scipy.stats import norm

from sgpc import gaussian as G

torch.set_default_dtype(torch.float64)


def spd(M, seed=0, batch=()):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(*batch, M, M, generator=g)
    return A @ A.transpose(-1, -2) + M * torch.eye(M)


def test_cholesky_pd_no_warning():
    A = spd(5, batch=(3,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        L = G.cholesky(A)
    # base jitter is 1e-8 relative: the reconstruction is within that of A
    torch.testing.assert_close(L @ L.transpose(-1, -2), A, rtol=0, atol=1e-7 * A.diagonal(dim1=-2, dim2=-1).mean().item())


def test_cholesky_escalates_with_warning_then_fails():
    # eigenvalues 1, 1, -1e-6: base jitter (1e-8) is not enough, 1e-5 is
    Q, _ = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(1)))
    A = Q @ torch.diag(torch.tensor([1.0, 1.0, -1e-6])) @ Q.T
    with pytest.warns(G.JitterWarning, match="K_test"):
        G.cholesky(A, what="K_test")
    with pytest.raises(G.NotPositiveDefiniteError, match="not positive definite"):
        G.cholesky(-torch.eye(3))
    with pytest.raises(G.NotPositiveDefiniteError):
        G.cholesky(torch.full((2, 2), float("nan")))


def test_natural_moment_roundtrip_and_inverse():
    S = spd(4, batch=(2,))
    m = torch.randn(2, 4, generator=torch.Generator().manual_seed(3))
    h, Lam = G.moments_to_natural(m, S)
    torch.testing.assert_close(Lam, torch.linalg.inv(S))
    m2, S2 = G.natural_to_moments(h, Lam)
    torch.testing.assert_close(m2, m)
    torch.testing.assert_close(S2, S)


def test_log_normalizer_identity():
    # exp(-1/2 f'Λf + h'f) = exp(g) N(f | μ, Σ) for every f
    S = spd(3, seed=4)
    m = torch.tensor([0.3, -1.0, 2.0])
    h, Lam = G.moments_to_natural(m, S)
    f = torch.tensor([0.1, 0.2, -0.5])
    lhs = -0.5 * f @ Lam @ f + h @ f
    dist = torch.distributions.MultivariateNormal(m, S)
    torch.testing.assert_close(G.log_normalizer(h, Lam), lhs - dist.log_prob(f))
    # and in 1-D against numerical integration
    lam, hh = 2.5, 0.7
    val, _ = integrate.quad(lambda t: math.exp(-0.5 * lam * t * t + hh * t), -50, 50)
    torch.testing.assert_close(G.log_normalizer(torch.tensor([hh]), torch.tensor([[lam]])),
                               torch.tensor(math.log(val)), rtol=1e-10, atol=1e-10)


def test_kl_matches_torch_distributions():
    Sq, Sp = spd(4, seed=5, batch=(2,)), spd(4, seed=6, batch=(2,))
    mq, mp = torch.randn(2, 4), torch.randn(2, 4)
    Lq, Lp = torch.linalg.cholesky(Sq), torch.linalg.cholesky(Sp)
    ref = torch.distributions.kl_divergence(torch.distributions.MultivariateNormal(mq, scale_tril=Lq),
                                            torch.distributions.MultivariateNormal(mp, scale_tril=Lp))
    torch.testing.assert_close(G.kl_gaussian(mq, Lq, mp, Lp), ref)
    ref0 = torch.distributions.kl_divergence(torch.distributions.MultivariateNormal(mq, scale_tril=Lq),
                                             torch.distributions.MultivariateNormal(torch.zeros(4), torch.eye(4)))
    torch.testing.assert_close(G.kl_standard_normal(mq, Lq), ref0)


def test_moment_match_probit_against_quadrature():
    # tilted distribution Φ(f) N(f | m, v): moments by brute-force 1-D integration
    m, v = torch.tensor([[0.4], [-1.2]]), torch.tensor([[0.8], [2.5]])
    logZ, dm, dv = G.moment_match(lambda a, b: torch.special.log_ndtr(a / torch.sqrt(1 + b))[:, 0], m, v)
    mu, var = G.tilted_moments(m, v, dm, dv)
    for i in range(2):
        mi, vi = m[i, 0].item(), v[i, 0].item()
        dens = lambda t, k: t ** k * norm.cdf(t) * norm.pdf(t, mi, math.sqrt(vi))
        Z = integrate.quad(dens, -40, 40, args=(0,))[0]
        E1 = integrate.quad(dens, -40, 40, args=(1,))[0] / Z
        E2 = integrate.quad(dens, -40, 40, args=(2,))[0] / Z
        assert abs(logZ[i].item() - math.log(Z)) < 1e-9
        assert abs(mu[i, 0].item() - E1) < 1e-8
        assert abs(var[i, 0].item() - (E2 - E1 ** 2)) < 1e-8


def test_jitter_escalates_only_for_the_failing_matrix_and_from_zero():
    good = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    singular = torch.tensor([[1.0, 1.0], [1.0, 1.0 - 1e-4]], dtype=torch.float64)    # indefinite
    with pytest.warns(G.JitterWarning, match="1 of 2 matrices"):
        L = G.cholesky(torch.stack([good, singular]))
    # the good matrix keeps the base jitter (it was factorised with 1e-4 relative jitter before: error 1.5e-4)
    assert float((L[0] @ L[0].mT - good).abs().max()) < 1e-7
    # jitter=0 asks for the exact factor: one try, then the error callers use as their signal
    with pytest.raises(G.NotPositiveDefiniteError, match="without jitter"):
        G.cholesky(singular, jitter=0.0)


@pytest.mark.parametrize("z", [-10.0, -100.0, -300.0, -1000.0])
def test_match_moments_in_float32_models_far_in_the_step_tail(z):
    # Φ(z) factor on a cavity N(z, ½) N(0, ½): in float32 the bracket r(r + z) cancels and the
    # tilted variance came out negative at z = −100 and > 1e4 times too large at z = −1000;
    # match_moments runs in float64, so a float32 caller gets the float64 answer.
    def log_Z(m, v):
        return torch.special.log_ndtr((m[..., 0] - m[..., 1]) / torch.sqrt(v[..., 0] + v[..., 1]))
    ref = {}
    for dtype in (torch.float32, torch.float64):
        m = torch.tensor([[z, 0.0]], dtype=dtype)
        v = torch.tensor([[0.5, 0.5]], dtype=dtype)
        ref[dtype] = G.match_moments(log_Z, m, v)
    for a, b in zip(ref[torch.float32], ref[torch.float64]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=0)
    # closed form: v̂_y = v − v² r(r + z)/s² with r = N(z)/Φ(z) (scipy, float64) and s² = 1
    r = math.exp(norm.logpdf(z) - norm.logcdf(z))
    var_f = ref[torch.float32][2][0, 0].item()
    assert abs(var_f - (0.5 - 0.25 * r * (r + z))) < 1e-5     # float64 log_ndtr: 6e-6 at z = −1000
    # the same rule run in float32 itself (what the engines did before): wrong, as the comment says
    m32, v32 = torch.tensor([[z, 0.0]], dtype=torch.float32), torch.tensor([[0.5, 0.5]], dtype=torch.float32)
    var32 = G.tilted_moments(m32, v32, *G.moment_match(log_Z, m32, v32)[1:])[1][0, 0].item()
    if z == -100.0:
        assert var32 < 0
    if z == -1000.0:
        assert var32 / var_f > 1e4


def test_ep_site_update_float32_matches_float64_in_the_tail():
    # the pairwise step sites of scalable-ep eqs. 47–55 for two points far on the wrong side
    # (z = −100/√0.7 and −60/√0.7): float32 models get the float64 sites
    from sgpc.sites import pairwise_factors, site_update
    y = torch.tensor([0, 1])
    res = {}
    for dtype in (torch.float32, torch.float64):
        factors = pairwise_factors(y, 2)
        mean_cav = torch.tensor([[[0.0, 0.0], [-60.0, 40.0]], [[30.0, -30.0], [0.0, 0.0]]], dtype=dtype)
        var_cav = torch.full((2, 2, 2), 0.3, dtype=dtype)
        s = torch.full((2, 2, 2), 0.05, dtype=dtype)
        res[dtype] = site_update(factors, mean_cav, var_cav, s, 1.0)
    c1_32, c2_32, lz_32, ok_32 = res[torch.float32]
    c1_64, c2_64, lz_64, ok_64 = res[torch.float64]
    real = factors.mask
    assert ok_32[real].all() and ok_64[real].all()
    assert c1_32.dtype == torch.float32 and lz_32.dtype == torch.float32
    torch.testing.assert_close(c1_32.double()[real], c1_64[real], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(c2_32.double()[real], c2_64[real], rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(lz_32.double()[real], lz_64[real], rtol=1e-6, atol=0)


def test_cholesky_inside_torch_compile_is_one_graph_and_marks_failures_nan():
    # under torch.compile the jitter escalation (a host sync per factorisation) is replaced by one try
    # with the base jitter; a matrix that fails comes back NaN instead of splitting the graph
    good = spd(4, seed=3, batch=(2,))
    bad = good.clone()
    bad[1] = -bad[1]                                                   # negative definite
    eager = G.cholesky(good)
    ex = torch._dynamo.explain(lambda A: G.cholesky(A))(good)
    assert ex.graph_break_count == 0
    fn = torch.compile(lambda A: G.cholesky(A), dynamic=False)
    torch.testing.assert_close(fn(good), eager)
    out = fn(bad)
    torch.testing.assert_close(out[0], eager[0])
    assert torch.isnan(out[1]).all()


def test_log_ndtr_derivative_far_in_the_tail():
    # EP's tilted variance of a step factor keeps only 1 − r(r + z) ≈ 1/z² of the bracket; with torch's
    # derivative of log_ndtr it was 2e-5 off at z = −100, 3% at −300 and of the wrong sign at −1000
    mpmath = pytest.importorskip("mpmath")
    from sgpc.gaussian import log_ndtr
    from sgpc.sites import pairwise_factors
    mpmath.mp.dps = 50
    z = torch.tensor([-1000.0, -300.0, -100.0, -10.0, 0.0, 5.0, 30.0, 40.0], dtype=torch.float64, requires_grad=True)
    (r,) = torch.autograd.grad(log_ndtr(z).sum(), z)
    exact_r = [float(mpmath.npdf(v) / mpmath.ncdf(v)) for v in z.tolist()]
    assert torch.allclose(r, torch.tensor(exact_r, dtype=torch.float64), rtol=1e-12, atol=0.0)
    assert torch.equal(log_ndtr(z.detach()), torch.special.log_ndtr(z.detach()))
    # the tilted variance of one pairwise factor, cavity N(m, 1) for f_y and N(0, 1e-6) for f_k: all the
    # cavity's variance is in f_y, so v̂_y = 1 − r(r + z) to leading order
    factors = pairwise_factors(torch.tensor([0]), 2)
    for zv, tol in ((-100.0, 1e-7), (-300.0, 2e-5), (-1000.0, 1e-3)):     # 1.5e-8, 3e-6, 1e-4 measured
        s = math.sqrt(1.0 + 1e-6)
        mean = torch.tensor([[[zv * s, 0.0]]], dtype=torch.float64)
        var = torch.tensor([[[1.0, 1e-6]]], dtype=torch.float64)
        _, _, v_hat = G.match_moments(lambda m, v: factors.log_Z(m, v), mean, var)
        zz = mpmath.mpf(zv)
        rr = mpmath.npdf(zz) / mpmath.ncdf(zz)
        exact = float(1 - rr * (rr + zz) / (1 + mpmath.mpf("1e-6")))
        assert abs(float(v_hat[0, 0, 0]) - exact) < tol * exact
    w = torch.tensor([-30.0, -3.0, 0.5, 4.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(log_ndtr, (w,))


@pytest.mark.parametrize("dim", [-1, -2])
def test_sum_sq_is_the_autograd_sum_of_squares_with_its_gradient(dim):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 7, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn((3, 7) if dim == -2 else (3, 5), generator=g, dtype=torch.float64)
    got = G.sum_sq(x, dim)
    want = (x * x).sum(dim)
    assert torch.equal(got, want)                                       # the same value bit for bit
    torch.testing.assert_close(torch.autograd.grad((w * got).sum(), x)[0],
                               torch.autograd.grad((w * want).sum(), x)[0], rtol=1e-14, atol=1e-14)
    assert torch.autograd.gradcheck(lambda t: G.sum_sq(t, dim), (x,))


@pytest.mark.parametrize("transpose", [False, True])
def test_a_wide_solve_through_the_inverse_equals_the_substitution_with_its_gradients(transpose):
    """``solve_lower`` with K ≥ WIDE_SOLVE·M right-hand sides multiplies by L⁻¹; it must give L⁻¹B (L⁻ᵀB) and the
    same gradients in L and B as the substitution, which it still runs below the threshold."""
    M, K = 7, 7 * G.WIDE_SOLVE
    L0 = torch.linalg.cholesky(spd(M, seed=3, batch=(2,)))
    B0 = torch.randn(2, M, K, generator=torch.Generator().manual_seed(4))
    W = torch.randn(2, M, K, generator=torch.Generator().manual_seed(5))        # a fixed cotangent

    def solve_and_grads(fn):
        L, B = L0.clone().requires_grad_(), B0.clone().requires_grad_()
        X = fn(L, B)
        (X * W).sum().backward()
        return X.detach(), torch.tril(L.grad), B.grad

    reference = (lambda L, B: torch.linalg.solve_triangular(L.mT, B, upper=True)) if transpose else \
        (lambda L, B: torch.linalg.solve_triangular(L, B, upper=False))
    for got, want in zip(solve_and_grads(lambda L, B: G.solve_lower(L, B, transpose)), solve_and_grads(reference)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    narrow = G.solve_lower(L0, B0[..., :M], transpose)                          # below the threshold: substitution
    torch.testing.assert_close(narrow, reference(L0, B0[..., :M]), rtol=0, atol=0)


def test_a_wide_solve_in_float32_is_as_accurate_as_the_substitution_on_an_ill_conditioned_kernel():
    """An RBF K_uu of 100 close inducing inputs in 2-D with float32's base jitter (condition number ~10⁶): the
    directions K⁻¹K_uf and the conditional variances 1 − ‖L⁻¹k‖² through the inverse (formed in float64) must be as
    accurate as float32 substitution, both measured against float64 solves of the same float32 factor (an inverse
    formed in float32 was 3.3× less accurate here)."""
    g = torch.Generator().manual_seed(0)
    Z, X = torch.randn(100, 2, generator=g), torch.randn(1024, 2, generator=g)
    k = lambda a, b: torch.exp(-0.5 * torch.cdist(a, b) ** 2)                   # noqa: E731
    Kuu = k(Z, Z).float() + G.base_jitter(torch.float32) * torch.eye(100, dtype=torch.float32)
    assert torch.linalg.cond(Kuu.double()) > 1e5
    L, Kuf = torch.linalg.cholesky(Kuu), k(Z, X).float()
    A64 = torch.linalg.solve_triangular(L.double(), Kuf.double(), upper=False)
    V64 = torch.linalg.solve_triangular(L.double().mT, A64, upper=True)

    def errors(A, V):
        s_err = ((A.double() ** 2).sum(0) - (A64 ** 2).sum(0)).abs().max()
        return (V.double() - V64).norm() / V64.norm(), s_err

    A_sub = torch.linalg.solve_triangular(L, Kuf, upper=False)
    sub = errors(A_sub, torch.linalg.solve_triangular(L.mT, A_sub, upper=True))
    A_inv = G.solve_lower(L, Kuf)
    inv = errors(A_inv, G.solve_lower(L, A_inv, transpose=True))
    assert sub[0] > 1e-4                                    # float32 does lose digits here: the test has teeth
    for got, base in zip(inv, sub):
        assert got <= 1.5 * base, (inv, sub)


@pytest.mark.parametrize("layout", ["contiguous", "transposed view"])
def test_matvec_is_the_batched_matrix_vector_product_with_its_gradients(layout):
    """``matvec`` forms A @ x as the one-row product xᵀAᵀ (faster on the CPU); values and gradients in A and x must
    be those of A @ x[..., None], for A laid out either way (the directions V are a transposed view)."""
    g = torch.Generator().manual_seed(6)
    base = torch.randn(3, 9, 40, generator=g)
    A0 = base.mT if layout == "transposed view" else base.mT.contiguous()          # [3,40,9]
    x0, w = torch.randn(3, 9, generator=g), torch.randn(3, 40, generator=g)

    def value_and_grads(fn):
        A, x = A0.detach().clone().requires_grad_(), x0.clone().requires_grad_()
        out = fn(A, x)
        (out * w).sum().backward()
        return out.detach(), A.grad, x.grad

    for got, want in zip(value_and_grads(G.matvec), value_and_grads(lambda A, x: (A @ x[..., None])[..., 0])):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("K", [5, 7 * G.WIDE_SOLVE])
def test_solve_lower_pair_is_both_solves(K):
    """(L⁻¹B, L⁻ᵀL⁻¹B) from one inverse (wide B) or two substitutions (narrow B) are the two solves."""
    L = torch.linalg.cholesky(spd(7, seed=8, batch=(3,)))
    B = torch.randn(3, 7, K, generator=torch.Generator().manual_seed(9))
    A, V = G.solve_lower_pair(L, B)
    want_A = torch.linalg.solve_triangular(L, B, upper=False)
    torch.testing.assert_close(A, want_A, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(V, torch.cholesky_solve(B, L), rtol=1e-10, atol=1e-12)
