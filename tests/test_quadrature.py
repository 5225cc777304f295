"""Quadrature against closed forms and 10^6-sample Monte Carlo."""
import math

import numpy as np
import pytest
import torch
from scipy.stats import norm
from scipy.integrate import trapezoid

from sgpc import quadrature as Q

torch.set_default_dtype(torch.float64)


def test_gauss_hermite_exact_for_polynomials():
    z, w = Q.gauss_hermite(10)
    moments = [1, 0, 1, 0, 3, 0, 15, 0, 105]           # E[t^k] for t ~ N(0, 1)
    for k, mk in enumerate(moments):
        assert abs(float((w * z ** k).sum()) - mk) < 1e-10 * max(1, mk)


@pytest.mark.parametrize("max_grid", [10 ** 6, 0])      # tensor-product grid, then Monte Carlo
def test_expect_and_log_expect_exp_closed_forms(max_grid):
    mean = torch.tensor([[0.3, -0.5], [1.0, 0.2]])
    var = torch.tensor([[0.4, 0.9], [0.1, 0.5]])
    # E[exp(a·f)] = exp(a·m + a²v/2) summed over coordinates in the exponent
    a = torch.tensor([0.7, -0.4])
    exact = (a * mean + 0.5 * a ** 2 * var).sum(-1)
    kw = dict(n_points=20, max_grid=max_grid, n_samples=200_000)
    got = Q.log_expect_exp(lambda F: (F * a).sum(-1), mean, var, **kw)
    # GH is exact to ~1e-12 here; Monte Carlo with 2e5 samples: a few standard errors (~1e-3)
    tol = 1e-10 if max_grid else 5e-3
    torch.testing.assert_close(got, exact, rtol=0, atol=tol)
    got2 = Q.expect(lambda F: (F ** 2).sum(-1), mean, var, **kw)
    torch.testing.assert_close(got2, (mean ** 2 + var).sum(-1), rtol=0, atol=tol * 10)


def test_two_class_largest_is_probit():
    mean = torch.tensor([[0.3, -0.5], [2.0, 2.5]])
    var = torch.tensor([[0.4, 0.9], [0.1, 0.5]])
    p = Q.log_prob_largest(mean, var).exp()
    exact = norm.cdf((mean[:, 0] - mean[:, 1]) / torch.sqrt(var.sum(-1)))
    torch.testing.assert_close(p[:, 0], torch.as_tensor(exact), rtol=0, atol=1e-10)


def test_largest_sums_to_one_and_matches_monte_carlo():
    g = torch.Generator().manual_seed(0)
    N, C = 6, 5
    mean = torch.randn(N, C, generator=g)
    var = 0.1 + torch.rand(N, C, generator=g) * 2
    # Gauss-Hermite in t integrates a Gaussian times near-steps Φ((t-m_k)/√v_k); with variance
    # ratios up to 20 the error of 64 nodes was measured at <= 2.2e-4 over 2000 random rows
    p = Q.log_prob_largest(mean, var, n_points=64).exp()
    torch.testing.assert_close(p.sum(-1), torch.ones(N), rtol=0, atol=5e-4)
    # with comparable variances (ratio <= 3) 32 nodes are accurate to ~4e-6
    var_mod = 0.5 + torch.rand(N, C, generator=g)
    torch.testing.assert_close(Q.log_prob_largest(mean, var_mod).exp().sum(-1), torch.ones(N), rtol=0, atol=2e-5)
    S = 1_000_000
    F = mean + var.sqrt() * torch.randn(S, N, C, generator=g)
    freq = torch.nn.functional.one_hot(F.argmax(-1), C).double().mean(0)
    # 10^6 samples: standard error <= 5e-4; allow 5 standard errors
    torch.testing.assert_close(p, freq, rtol=0, atol=2.5e-3)


def test_label_variant_is_a_column_of_the_full_table():
    g = torch.Generator().manual_seed(1)
    # variance ratios below PANEL_RATIO_PREDICT, so both take Gauss–Hermite (above it the full table, which
    # is for predictions, switches to the panel rule at a lower ratio than the label variant)
    mean, var = torch.randn(8, 4, generator=g), 0.5 + 0.5 * torch.rand(8, 4, generator=g)
    y = torch.randint(0, 4, (8,), generator=g)
    full = Q.log_prob_largest(mean, var)
    torch.testing.assert_close(Q.log_prob_label_largest(y, mean, var), full.gather(1, y[:, None])[:, 0])


def test_zero_variance_limit_is_the_argmax_indicator():
    mean = torch.tensor([[0.3, -0.5, 0.1]])
    p = Q.log_prob_largest(mean, torch.full((1, 3), 1e-14)).exp()
    torch.testing.assert_close(p, torch.tensor([[1.0, 0.0, 0.0]]), rtol=0, atol=1e-8)


def test_linear_space_label_probability_equals_the_log_space_one_and_its_gradients():
    g = torch.Generator().manual_seed(2)
    N, C = 12, 5
    mean = 3.0 * torch.randn(N, C, generator=g)
    mean[0] = torch.tensor([-30.0, 0.0, 1.0, 2.0, 0.5])    # label 0 far below the rest: P ~ 1e-100
    mean[1] = torch.tensor([30.0, 0.0, 1.0, 2.0, 0.5])     # far above: P = 1 - ~1e-90
    var = 0.05 + torch.rand(N, C, generator=g)
    y = torch.randint(0, C, (N,), generator=g)
    y[:2] = 0
    ref = Q.log_prob_label_largest(y, mean, var).exp()
    got = Q.prob_label_largest(y, mean, var)
    assert float(ref[0]) < 1e-60                              # the tail case is really in the tail
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=0)  # relative: holds for the tiny P too
    # gradients of P with respect to the marginals agree with the log-space route's
    m1, v1 = mean.clone().requires_grad_(), var.clone().requires_grad_()
    Q.prob_label_largest(y, m1, v1).sum().backward()
    m2, v2 = mean.clone().requires_grad_(), var.clone().requires_grad_()
    Q.log_prob_label_largest(y, m2, v2).exp().sum().backward()
    for a, b in ((m1.grad, m2.grad), (v1.grad, v2.grad)):
        # per row, to 1e-8 of that row's largest entry (rows span P ~ 1e-100 to 1)
        scale = b.abs().amax(-1, keepdim=True)
        assert bool(((a - b).abs() <= 1e-8 * scale).all()), (a - b).abs() / scale


def test_linear_space_panels_equal_the_log_space_ones():
    # prob_label_largest integrates hard pairs on the panels with Φ and a product (log Φ costs ~10× Φ);
    # it must be the exp of the log-space panel rule, for P near 1 and for P ~ 1e-100 alike
    g = torch.Generator().manual_seed(5)
    mean = 2.0 * torch.randn(9, 4, generator=g)
    mean[0] = torch.tensor([-40.0, 0.0, 1.0, 2.0])
    mean[1] = torch.tensor([40.0, 0.0, 1.0, 2.0])
    var = torch.exp(3.0 * torch.randn(9, 4, generator=g))
    var[:2] = torch.tensor([2.0, 0.01, 0.05, 0.2])
    c = torch.randint(0, 4, (9,), generator=g)
    c[:2] = 0
    ref = Q._log_largest_panels(mean, var, c).exp()
    got = Q._log_largest_panels(mean, var, c, linear=True)
    assert float(ref[0]) < 1e-80 and float(ref[1]) > 0.99
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=0)


def _hard_marginals(seed, N=40, C=6):
    """Marginals whose pairs need every rule: class variances 1e-3–1e3 apart (panels by ratio), means tens of
    standard deviations apart (panels by tail, P ~ 1e-100), and ordinary rows."""
    g = torch.Generator().manual_seed(seed)
    mean = 3.0 * torch.randn(N, C, generator=g)
    var = torch.exp(2.0 * torch.randn(N, C, generator=g))
    mean[0], var[0] = torch.linspace(-40.0, 5.0, C), torch.full((C,), 0.5)
    var[1] = torch.logspace(-3, 3, C)
    return mean, var


def test_linear_space_prediction_table_equals_the_log_space_one(monkeypatch):
    # pair by pair, as the log-space table integrates (rows with several panel pairs: the next test)
    monkeypatch.setattr(Q, "_ROW_GRID_MIN_PAIRS", 10**9)
    mean, var = _hard_marginals(11)
    ref = Q.log_prob_largest(mean, var, 64).exp()
    got = Q.prob_largest(mean, var, 64)
    hard = Q._hard(var, torch.arange(6).expand(40, 6), Q.PANEL_RATIO_PREDICT) | (ref < math.exp(Q._TAIL_LOG_P))
    assert 0 < int(hard.sum()) < hard.numel() and float(ref.min()) < 1e-80     # every rule is exercised
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=0)


@pytest.mark.parametrize("C", [6, 20])
def test_one_grid_per_row_equals_each_pairs_own_panels(C, monkeypatch):
    # a row with several panel pairs integrates them on one grid, a refinement of each pair's own panels:
    # the same P to the panels' quadrature error, for P near 1 and P ~ 1e-100 alike, in float64 or float32
    mean, var = _hard_marginals(16, C=C)
    hard = Q._hard(var, torch.arange(C).expand(40, C), Q.PANEL_RATIO_PREDICT)
    on_grid = Q._row_grid_pays(hard)
    assert int(on_grid.sum()) > 0 and (C == 20 or int(on_grid.sum()) < 40)     # at C = 6 both routes run
    grid = Q.prob_largest(mean, var, 64)
    grid32 = Q.prob_largest(mean.float(), var.float(), 64)
    monkeypatch.setattr(Q, "_ROW_GRID_MIN_PAIRS", 10**9)
    pairs = Q.prob_largest(mean, var, 64)
    assert not torch.equal(grid, pairs) and float(pairs[on_grid].min()) < 1e-80
    torch.testing.assert_close(grid, pairs, rtol=1e-8, atol=1e-300)        # below 1e-300: underflow either way
    torch.testing.assert_close(grid32, pairs.float(), rtol=1e-4, atol=1e-7)
    assert abs(float(grid.sum(1).sub(1).abs().max())) < 1e-8


def test_a_differentiable_prediction_table_takes_each_pairs_panels_with_its_gradients():
    # the row grid is computed in place without a graph, so inputs that need gradients take the pairs' panels
    m = torch.tensor([[0.3, -0.4, 1.0, 0.1]], dtype=torch.float64, requires_grad=True)
    v = torch.tensor([[50.0, 0.2, 0.5, 40.0]], dtype=torch.float64, requires_grad=True)
    assert bool(Q._row_grid_pays(Q._hard(v.detach(), torch.arange(4)[None], Q.PANEL_RATIO_PREDICT)).all())
    assert torch.autograd.gradcheck(lambda a, b: Q.prob_largest(a, b), (m, v), eps=1e-6, atol=1e-7)
    torch.testing.assert_close(Q.prob_largest(m, v).detach(), Q.prob_largest(m.detach(), v.detach()),
                               rtol=1e-8, atol=0)


def test_pairwise_bound_is_exact_for_two_classes_and_an_upper_bound_otherwise():
    mean, var = _hard_marginals(12, C=2)
    exact = torch.as_tensor(norm.cdf(((mean[:, 0] - mean[:, 1]) / var.sum(1).sqrt()).numpy()))   # P(f_0 > f_1)
    torch.testing.assert_close(Q.pairwise_bound(mean, var)[:, 0], exact, rtol=1e-14, atol=0)
    mean, var = _hard_marginals(13)
    P = Q.log_prob_largest(mean, var, 64).exp()
    assert bool((P <= Q.pairwise_bound(mean, var) * (1 + 1e-9)).all())      # 1e-9: quadrature error where P ≈ bound


@pytest.mark.parametrize("floor", [1e-30, 1e-8])
def test_prediction_table_floor_changes_only_pairs_provably_below_it(floor):
    # pairs with a bound below the floor keep their Gauss-Hermite value clamped to [0, bound]: absolute error
    # below the floor; every other pair is the full rule's value
    mean, var = _hard_marginals(14)
    full = Q.prob_largest(mean, var, 64)
    got = Q.prob_largest(mean, var, 64, floor=floor)
    bound = Q.pairwise_bound(mean, var)
    skipped = bound < floor
    assert 0 < int(skipped.sum()) < skipped.numel()
    assert bool((got[skipped] >= 0).all()) and bool((got[skipped] <= bound[skipped]).all())
    assert bool(((got - full).abs()[skipped] <= floor).all())
    assert torch.equal(got[~skipped], full[~skipped])


def test_prediction_table_in_chunks_equals_one_pass(monkeypatch):
    mean, var = _hard_marginals(15)
    whole = Q.prob_largest(mean, var, 64)
    monkeypatch.setattr(Q, "_CHUNK_ELEMENTS", 6 * 64 * 6 * 7)               # 7 rows per chunk
    torch.testing.assert_close(Q.prob_largest(mean, var, 64), whole, rtol=1e-13, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_written_out_gradient_of_the_label_probability_matches_autograd(dtype):
    # _LabelLargest's backward is derived by hand; autograd through the same forward steps is the reference
    g = torch.Generator().manual_seed(7)
    N, C, J = 30, 5, 20
    mean = (2.0 * torch.randn(N, C, generator=g, dtype=torch.float64)).to(dtype)
    var = (0.2 + torch.rand(N, C, generator=g, dtype=torch.float64)).to(dtype)
    mean[0, 0] = -25.0                                  # Φ factors underflow (float32: most of them)
    cls = torch.randint(0, C, (N,), generator=g)
    cls[0] = 0
    z, w = Q.gauss_hermite(J, dtype)
    gout = torch.rand(N, generator=g, dtype=torch.float64).to(dtype)

    def reference(m, v):
        s = v.sqrt()
        t = m.gather(1, cls[:, None]) + s.gather(1, cls[:, None]) * z
        u = (t[..., None] - m[:, None, :]) / s[:, None, :]
        own = (cls[:, None] == torch.arange(C))[:, None, :]
        return torch.special.ndtr(u).masked_fill(own, 1.0).prod(-1) @ w

    grads = []
    for fn in (lambda m, v: Q._LabelLargest.apply(m, v, cls, J), reference):
        m, v = mean.clone().requires_grad_(), var.clone().requires_grad_()
        out = fn(m, v)
        grads.append((out.detach(), *torch.autograd.grad((out * gout).sum(), (m, v))))
    tol = dict(rtol=1e-10, atol=1e-14) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-6)
    for got, ref in zip(*grads):
        torch.testing.assert_close(got, ref, **tol)
    if dtype == torch.float64:
        assert torch.autograd.gradcheck(lambda m, v: Q._LabelLargest.apply(m, v, cls, J),
                                        (mean.clone().requires_grad_(), var.clone().requires_grad_()))


def _largest_by_adaptive_quadrature(m, v, c):
    """P(f_c largest) by scipy's adaptive quadrature with break points at every class's scale."""
    from scipy import integrate
    s = np.sqrt(v)
    f = lambda t: norm.pdf(t, m[c], s[c]) * np.prod([norm.cdf((t - m[j]) / s[j]) for j in range(len(m)) if j != c])
    lo, hi = m[c] - 12 * s[c], m[c] + 12 * s[c]
    pts = sorted({float(p) for p in np.concatenate([m - 3 * s, m, m + 3 * s]) if lo < p < hi})
    return integrate.quad(f, lo, hi, points=pts, limit=500, epsabs=1e-14, epsrel=1e-12)[0]


@pytest.mark.parametrize("ratio", [30.0, pytest.param(1e3, marks=pytest.mark.slow), 1e4])   # 1e3: ~5 s, test-slow
def test_largest_is_accurate_when_the_class_variances_differ_by_orders_of_magnitude(ratio):
    # Gauss–Hermite at the label's scale cannot resolve a much narrower class's Φ: at variance ratio 100 the
    # error was 1e-2 (64 nodes) to 3e-2 (32); such pairs now go to composite panels
    rng = np.random.default_rng(int(math.log10(ratio)))
    for _ in range(6):
        C = int(rng.integers(2, 6))
        m = rng.normal(size=C) * 1.5
        v = 0.3 * np.exp(rng.uniform(0, math.log(ratio), size=C))
        v[0], v[-1] = 0.3, 0.3 * ratio                                   # span the whole ratio
        ref = np.array([_largest_by_adaptive_quadrature(m, v, c) for c in range(C)])
        got = Q.log_prob_largest(torch.tensor(m)[None], torch.tensor(v)[None], 64).exp()[0].numpy()
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-8)
        lin = Q.prob_largest(torch.tensor(m)[None], torch.tensor(v)[None], 64)[0].numpy()   # the row's grid
        np.testing.assert_allclose(lin, ref, rtol=0, atol=1e-8)
        assert abs(got.sum() - 1.0) < 1e-8
        y = torch.tensor([C - 1])                                         # the widest class: a panel pair
        got_label = Q.log_prob_label_largest(y, torch.tensor(m)[None], torch.tensor(v)[None]).exp().item()
        lin_label = Q.prob_label_largest(y, torch.tensor(m)[None], torch.tensor(v)[None]).item()
        assert abs(got_label - ref[-1]) < 1e-8 and abs(lin_label - ref[-1]) < 1e-8


def test_two_classes_a_million_fold_apart_match_the_probit_closed_form():
    # (scipy's adaptive reference itself is off by 1.5e-7 here; the closed form is exact)
    rng = np.random.default_rng(0)
    m = torch.tensor(rng.normal(size=(40, 2)) * 1.5)
    v = torch.tensor([[0.3, 3e5]]).expand(40, 2)
    exact = torch.as_tensor(norm.cdf((m[:, 1] - m[:, 0]) / v.sum(1).sqrt()))
    torch.testing.assert_close(Q.log_prob_largest(m, v, 64).exp()[:, 1], exact, rtol=0, atol=1e-9)
    torch.testing.assert_close(Q.prob_label_largest(torch.ones(40, dtype=torch.long), m, v), exact, rtol=0, atol=1e-9)


def test_gradients_through_the_panel_rule_match_finite_differences():
    m = torch.tensor([[0.3, -0.4, 1.0]], requires_grad=True)
    v = torch.tensor([[50.0, 0.2, 0.5]], requires_grad=True)              # class 0: 250x the narrowest
    y = torch.tensor([0])
    assert bool(Q._hard(v.detach(), y[:, None], Q.PANEL_RATIO_LABEL).all())
    assert torch.autograd.gradcheck(lambda a, b: Q.log_prob_label_largest(y, a, b), (m, v), eps=1e-6, atol=1e-7)
    assert torch.autograd.gradcheck(lambda a, b: Q.prob_label_largest(y, a, b), (m, v), eps=1e-6, atol=1e-7)
    assert torch.autograd.gradcheck(lambda a, b: Q.log_prob_largest(a, b), (m, v), eps=1e-6, atol=1e-7)


def test_quadrature_nodes_are_constants_to_torch_compile():
    # the Gauss-Hermite and Gauss-Legendre nodes come from numpy, which would split a compiled graph at
    # every call; they are marked constant (the one data-dependent branch left in the objectives is the
    # panel fix-up of hard pairs)
    m = torch.tensor([0.3, -0.2], dtype=torch.float64)
    for fn in (lambda m: Q.gauss_hermite(20, m.dtype)[0].sum() + m.sum(),
               lambda m: Q._panel_nodes(m[None, :])[0].sum() + m.sum()):
        assert torch._dynamo.explain(fn)(m).graph_break_count == 0


def test_log_prob_largest_in_chunks_equals_one_pass(monkeypatch):
    # rows and panel pairs are processed in chunks bounded by _CHUNK_ELEMENTS (prediction at C = 100 needed
    # ~15 MB per row at once); the chunked result must be the one-pass result, hard pairs included
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(37, 5, generator=g, dtype=torch.float64)
    var = torch.exp(2.0 * torch.randn(37, 5, generator=g, dtype=torch.float64))     # many ratios > 4
    whole = Q.log_prob_largest(mean, var)
    y = torch.randint(0, 5, (37,), generator=g)
    whole_label = Q.prob_label_largest(y, mean, var)
    sizes = []
    real = Q._panel_nodes                              # called once per chunk of panel rows
    monkeypatch.setattr(Q, "_panel_nodes", lambda edges: sizes.append(edges.shape[0]) or real(edges))
    # 3 rows; 3 panel pairs (T·C = 53·6·5: 7·5 class edges + 19 that follow the integrand make 53 panels)
    monkeypatch.setattr(Q, "_CHUNK_ELEMENTS", 5 * 64 * 5 * 3)
    chunked = Q.log_prob_largest(mean, var)
    torch.testing.assert_close(chunked, whole, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(Q.prob_label_largest(y, mean, var), whole_label, rtol=1e-13, atol=1e-15)
    assert len(sizes) > 3 and max(sizes) == 3


@pytest.mark.parametrize("means", [[0.0, 0.0, 0.0], [0.3, 0.0, 0.0]])
def test_panel_gradients_where_panel_edges_coincide(means):
    # two classes with one marginal put every panel edge twice: the zero-width panels' derivative in
    # their width was dropped (∂P/∂m off by a factor of 5, the two equal classes' of opposite sign)
    y = torch.tensor([2])
    mean, var = torch.tensor([means]), torch.tensor([[1.0, 1.0, 20.0]])               # ratio 20: the panel path
    for fn in (lambda m, v: Q.prob_label_largest(y, m, v), lambda m, v: Q.log_prob_label_largest(y, m, v)):
        m, v = mean.clone().requires_grad_(), var.clone().requires_grad_()
        gm, gv = torch.autograd.grad(fn(m, v).sum(), (m, v))
        h = 1e-6
        for j in range(3):
            e = torch.zeros_like(mean)
            e[0, j] = h
            assert abs(gm[0, j] - (fn(mean + e, var) - fn(mean - e, var)).sum() / (2 * h)) < 1e-6
            assert abs(gv[0, j] - (fn(mean, var + e) - fn(mean, var - e)).sum() / (2 * h)) < 1e-6


def test_ndtr_is_accurate_in_the_lower_tail():
    # torch.special.ndtr (torch 2.13, CPU) gives 6.106e-16 for Φ(−8) and 0 from −10 on; the robust-max
    # objectives' linear-space P uses this one
    x = torch.tensor([3.0, 0.0, -5.0, -8.0, -10.0, -20.0, -37.0])
    torch.testing.assert_close(Q.ndtr(x), torch.special.log_ndtr(x).exp(), rtol=1e-13, atol=0)


_TAIL_GAPS = [-10.0, -15.0, -20.0, -25.0, -30.0, -40.0, -100.0]


@pytest.mark.parametrize("v1", [1.0, 0.3, 0.05, 3.0, 1e-4, 10.0])
def test_largest_far_in_the_tail_matches_the_two_class_closed_form(v1):
    # P(f_0 > f_1) = Φ((m_0 − m_1)/√(v_0 + v_1)). Far in class 0's tail the integrand's mass lies beyond
    # nodes placed at class 0's scale: two unit-variance classes 20 sd apart gave −103.72 for −103.57, and
    # 40 sd apart −503.5 for −404.3; beside a competitor of variance 1e-4, 6.5 sd up, −24.27 for −23.94
    gaps = torch.tensor(_TAIL_GAPS + [-6.5, -2.0, 0.0, 3.0])
    mean = torch.stack([torch.zeros_like(gaps), -gaps], 1)
    var = torch.tensor([1.0, v1]).expand_as(mean).clone().requires_grad_()
    m = mean.clone().requires_grad_()
    exact = torch.special.log_ndtr((m[:, 0] - m[:, 1]) / var.sum(-1).sqrt())
    y = torch.zeros(len(gaps), dtype=torch.long)
    got = Q.log_prob_label_largest(y, m, var)
    tail = exact.detach() < -20.0
    assert int(tail.sum()) >= 3
    torch.testing.assert_close(got[tail], exact[tail], rtol=1e-9, atol=0)
    torch.testing.assert_close(got, exact, rtol=1e-6, atol=1e-8)
    both = Q.log_prob_largest(m.detach(), var.detach())
    torch.testing.assert_close(both[:, 0], exact.detach(), rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(both[:, 1], torch.special.log_ndtr(-(m[:, 0] - m[:, 1]) / var.sum(-1).sqrt()).detach(),
                               rtol=1e-6, atol=1e-8)
    # the linear-space P, relative, wherever it is a normal number
    normal = exact.detach() > -700.0
    torch.testing.assert_close(Q.prob_label_largest(y, m.detach(), var.detach())[normal].log(),
                               exact.detach()[normal], rtol=1e-6, atol=1e-8)
    # gradients of log P in the tail: those of the closed form
    g_got = torch.autograd.grad(got[tail].sum(), (m, var))
    g_exact = torch.autograd.grad(exact[tail].sum(), (m, var))
    for a, b in zip(g_got, g_exact):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)


def _brute_log_largest(m, v, c, n=2_000_001):
    """log ∫ N(t | m_c, v_c) Π_{k≠c} Φ((t − m_k)/√v_k) dt on a uniform grid of n points (trapezoid, in log space)."""
    s = np.sqrt(v)
    t = np.linspace(m.min() - 12 * s.max(), m.max() + 12 * s.max(), n)
    log_g = norm.logpdf(t, m[c], s[c]) + sum(norm.logcdf((t - m[k]) / s[k]) for k in range(len(m)) if k != c)
    top = log_g.max()
    return top + np.log(trapezoid(np.exp(log_g - top), t))     # scipy's: numpy < 2 has no np.trapezoid


@pytest.mark.parametrize("m, v", [
    ([0.0, 15.0, 18.0, -2.0], [1.0, 0.5, 2.0, 1.0]),          # class 0 deep below two competitors
    ([0.0, 6.5, -3.0, 1.0], [1.0, 1e-4, 0.3, 4.0]),            # a competitor 100× sharper, 6.5 sd up
    ([-30.0, 0.0, 1.0, 2.0], [0.05, 1.0, 0.3, 0.7]),           # a narrow class 30 below the rest
])
def test_largest_in_the_tail_against_brute_force_with_four_classes(m, v):
    mean, var = torch.tensor([m]), torch.tensor([v])
    got = Q.log_prob_largest(mean, var)[0].numpy()
    ref = np.array([_brute_log_largest(np.array(m), np.array(v), c) for c in range(4)])
    tail = ref < -20.0
    assert tail.sum() >= 1
    np.testing.assert_allclose(got[tail], ref[tail], rtol=1e-9, atol=0)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)   # the rest: 32 Gauss–Hermite nodes' accuracy


def test_constant_result_marks_a_function_as_torchs_decorator_does():
    # quadrature marks its node functions without importing torch._dynamo at import time; the mark must be the
    # one torch's assume_constant_result sets (a torch that marks otherwise fails here, not silently in a graph)
    import torch._dynamo

    def a():
        return 1

    def b():
        return 1
    torch._dynamo.assume_constant_result(a)
    Q._constant_result(b)
    assert vars(a) and vars(a) == vars(b)


def test_panels_run_eagerly_inside_torch_compile_once_prepared():
    # the panel fix-up is a graph break under torch.compile (prepare_for_compile, called by the fit loop's
    # compiled loss), so that batches with other numbers of hard rows do not recompile it
    import torch._dynamo
    mean = torch.tensor([[0.0, 3.0, -1.0]], dtype=torch.float64)
    var = torch.tensor([[1e-4, 4.0, 1.0]], dtype=torch.float64)
    c = torch.tensor([0])
    Q.prepare_for_compile()
    out = torch._dynamo.explain(lambda m, v: Q._log_largest_panels(m, v, c) + 1.0)(mean, var)
    assert out.op_count == 1                  # the graph holds the addition only (traced, the panels were ~115 ops)
    torch.testing.assert_close(Q._log_largest_panels(mean, var, c), Q._log_largest_panels_eager(mean, var, c))


def _log_integrand(t, mean, s, c):
    """log g(t) = log N(t | m_c, s_c²) + Σ_{k≠c} log Φ((t − m_k)/s_k), for one row, at points t [T] (float64)."""
    others = [k for k in range(len(mean)) if k != c]
    return (torch.distributions.Normal(mean[c], s[c]).log_prob(t)
            + sum(torch.special.log_ndtr((t - mean[k]) / s[k]) for k in others))


def test_label_integrand_mode_is_the_mode_with_its_curvature():
    # brute force: the returned t* maximises log g on a fine grid, σ* is the curvature's (−(log g)'')^(−1/2) by
    # central differences, and log g(t*) is the integrand's value there
    g = torch.Generator().manual_seed(3)
    mean = 3.0 * torch.randn(12, 4, generator=g, dtype=torch.float64)
    s = torch.exp(1.5 * torch.randn(12, 4, generator=g, dtype=torch.float64))     # ratios up to ~100
    c = torch.randint(0, 4, (12,), generator=g)
    t, width, log_g = Q.label_integrand_mode(mean, s, c)
    for i in range(12):
        grid = t[i] + width[i] * torch.linspace(-3, 3, 60001, dtype=torch.float64)
        vals = _log_integrand(grid, mean[i], s[i], int(c[i]))
        assert abs(float(grid[vals.argmax()] - t[i])) <= 2e-4 * float(width[i])
        h = 1e-4 * width[i]                # a competitor 100× sharper than σ* bends the integrand on its own scale
        lo, mid, hi = _log_integrand(torch.stack([t[i] - h, t[i], t[i] + h]), mean[i], s[i], int(c[i]))
        assert abs(float((-(hi - 2 * mid + lo) / h ** 2).rsqrt() / width[i]) - 1.0) < 1e-3
        assert abs(float(mid - log_g[i])) < 1e-12


def test_label_integrand_mode_of_a_row_does_not_depend_on_the_others():
    # each row stops after its own first step below the tolerance: a row that needs one Newton step and a row
    # that needs many give, together, bitwise what each gives alone (a prediction is a function of its row only)
    g = torch.Generator().manual_seed(5)
    mean = torch.randn(9, 5, generator=g, dtype=torch.float64)
    s = torch.exp(torch.randn(9, 5, generator=g, dtype=torch.float64))
    mean[0], s[0] = torch.tensor([40.0, 0.0, 0.0, 0.0, 0.0]), torch.tensor([1.0, 1e-2, 1.0, 1.0, 1.0])  # far tail
    c = torch.randint(0, 5, (9,), generator=g)
    c[0] = 1
    whole = Q.label_integrand_mode(mean, s, c)
    for i in range(9):
        alone = Q.label_integrand_mode(mean[i:i + 1], s[i:i + 1], c[i:i + 1])
        for a, b in zip(alone, whole):
            assert torch.equal(a[0], b[i])
