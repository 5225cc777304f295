"""SEP: tied sites equal EP with one factor, memory independent of N, minibatch unbiasedness."""
import pytest
import torch

from sgpc import kernels as K
from sgpc.ep import EP
from sgpc.likelihoods import RobustMax
from sgpc.sep import SEP
from sgpc.sparse import SparseGP
from sgpc.train import TrainSettings, fit
from support import GaussianLikelihood, classification_problem as problem

torch.set_default_dtype(torch.float64)


def sweeps(engine, model, X, y, n):
    st = engine.init(model, X, y, None)
    for _ in range(n):
        st = engine.update(model, st, X, y, len(X))
    return st


@pytest.mark.parametrize("kind", ["gaussian", "pairwise"])
def test_sep_with_one_factor_equals_ep(kind):
    # one data point and one factor (Gaussian likelihood, or C = 2 pairwise): q/φ̃^{1/1} is EP's cavity
    g = torch.Generator().manual_seed(0)
    X = torch.randn(1, 2, generator=g)
    if kind == "gaussian":
        model = SparseGP(K.RBF(2, 1, noise=0.05), GaussianLikelihood(0.3), torch.randn(3, 2, generator=g))
        y, factor = torch.tensor([0.7]), "likelihood"
    else:
        model = SparseGP(K.RBF(2, 2, noise=0.05), RobustMax(2), torch.randn(2, 3, 2, generator=g))
        y, factor = torch.tensor([1]), "pairwise"
    ep, sep = EP(factor=factor, damping=0.5, decay=1.0), SEP(factor=factor, damping=0.5, decay=1.0)
    s_ep, s_sep = sweeps(ep, model, X, y, 60), sweeps(sep, model, X, y, 60)
    q1, q2 = ep.posterior(model, s_ep), sep.posterior(model, s_sep)
    torch.testing.assert_close(q2.mean, q1.mean, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(q2.cov, q1.cov, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(sep.loss(model, s_sep, X, y, 1), ep.loss(model, s_ep, X, y, 1), rtol=1e-6, atol=1e-8)


def test_state_size_does_not_grow_with_N():
    sizes = []
    for N in (10, 1000):
        model, X, y = problem(N)
        st = SEP().init(model, X, y, None)
        sizes.append(sum(t.numel() for t in (st.Lam, st.h, st.counts)))
    assert sizes[0] == sizes[1] == 3 * 4 * 4 + 3 * 4 + 3


def test_slot_counts_of_pairwise_factors():
    model, X, y = problem(20)
    counts = SEP().init(model, X, y, None).counts
    N_l = torch.bincount(y, minlength=3).double()
    torch.testing.assert_close(counts, N_l * 2 + (20 - N_l))          # (C-1) N_l + (N - N_l) with C = 3


def test_minibatch_objective_averages_to_full_batch_and_fit_improves():
    model, X, y = problem(12)
    for kind in ("local", "tied"):
        sep = SEP(log_z=kind)
        st = sweeps(sep, model, X, y, 10)
        full = sep.loss(model, st, X, y, 12)
        parts = [sep.loss(model, st, X[i:i + 4], y[i:i + 4], 12) for i in (0, 4, 8)]
        torch.testing.assert_close(sum(parts) / 3, full, rtol=1e-10, atol=1e-10)
    sep = SEP()
    # hyper-parameter learning raises the converged log Z_q (EP updates alone need not be monotone)
    model, X, y = problem(40)
    before = -sep.loss(model, sweeps(sep, model, X, y, 100), X, y, 40).item()
    st = sep.init(model, X, y, None)
    st, hist = fit(model, sep, st, X, y, TrainSettings(learning_rate=0.02, max_iter=150, batch_size=10),
                   generator=torch.Generator().manual_seed(0))
    after = -sep.loss(model, sweeps(sep, model, X, y, 100), X, y, 40).item()
    assert after > before + 2.0, (before, after)    # measured +8.3 (log_z='tied' on its own estimate: +0.97)
    assert st.skipped == 0


def test_sep_approaches_ep_on_a_larger_problem():
    # not equal (tied cavities are an approximation) but close in predictive terms
    from sgpc.sparse import predict_log_proba
    model, X, y = problem(60)
    s_ep = sweeps(EP(decay=1.0), model, X, y, 150)
    s_sep = sweeps(SEP(decay=1.0), model, X, y, 150)
    p1 = predict_log_proba(model, EP().posterior(model, s_ep), X).exp()
    p2 = predict_log_proba(model, SEP().posterior(model, s_sep), X).exp()
    assert (p1 - p2).abs().max() < 0.1


def test_tied_site_broken_by_a_kernel_change_is_shrunk_not_fatal():
    model, X, y = problem(N=20)
    sep = SEP()
    st = sweeps(sep, model, X, y, 20)
    L, M = st.h.shape
    st.Lam = st.Lam - 100.0 * torch.eye(M).expand(L, M, M)     # improper under the current kernel
    with pytest.raises(Exception):
        sep.posterior(model, st)
    st2 = sep.update(model, st, X, y, len(X))
    assert st2.redamped > st.redamped
    q = sep.posterior(model, st2)
    assert torch.isfinite(q.cov).all()
    # the full-data refresh at the end of a fit repairs it the same way (it raised NotPositiveDefiniteError)
    from sgpc.train import refresh
    st3 = refresh(model, sep, st, X, y)
    assert st3.redamped > st.redamped and torch.isfinite(sep.posterior(model, st3).cov).all()


def _fd_and_autograd(sep, model, X, y, checks, h=1e-5):
    """Autograd's gradient of −loss at SEP convergence and central differences of the converged −loss."""
    params = dict(model.named_parameters())
    model.zero_grad()
    sep.loss(model, sweeps(sep, model, X, y, 300), X, y, len(X)).backward()
    grad = torch.tensor([-params[n].grad[i].item() for n, i in checks])
    fd = []
    for name, index in checks:
        vals = []
        for sign in (1, -1):
            with torch.no_grad():
                params[name][index] += sign * h
            vals.append(-sep.loss(model, sweeps(sep, model, X, y, 300), X, y, len(X)).item())
            with torch.no_grad():
                params[name][index] -= sign * h
        fd.append((vals[0] - vals[1]) / (2 * h))
    return grad, torch.tensor(fd)


@pytest.mark.slow   # ~28 s on the 2 cores: `make test-slow`
def test_local_log_z_gradient_follows_the_converged_objective():
    # SEP's fixed point is not stationary for its log Z_q estimate, so eq. (62) is not exact for SEP;
    # with local sites it still points where central differences of the converged estimate do (measured
    # cosine 0.993), while the tied-cavity reading points elsewhere (measured cosine −0.14: wrong-signed
    # length-scale and noise gradients, amplitude gradients 3-10x too negative)
    model, X, y = problem(N=60, M=3)
    checks = [("kernel.raw_lengthscale", (0, 1)), ("kernel.raw_variance", (0,)), ("kernel.raw_variance", (2,)),
              ("kernel.raw_noise", (1,)), ("Z", (0, 1, 0))]
    cos = {}
    for kind in ("local", "tied"):
        grad, fd = _fd_and_autograd(SEP(damping=0.5, decay=1.0, log_z=kind), model, X, y, checks)
        assert fd.abs().max() > 0.05                                   # not a trivially flat objective
        cos[kind] = float(grad @ fd / (grad.norm() * fd.norm()))
    assert cos["local"] > 0.95, cos
    assert cos["tied"] < 0.5, cos


def test_unknown_log_z_is_rejected():
    with pytest.raises(ValueError, match="log_z"):
        SEP(log_z="exact")


def test_cavity_precision_from_the_tied_sites_precision():
    # SEP forms the cavity's whitened precision from the tied site's (P_c = I + keep·(P − I), b_c = keep·b)
    # instead of from the scaled sites: the two must agree, as must q_from_precision with q_state
    from sgpc.sites import TiedSites, q_from_precision, q_state, whitened_precision
    from sgpc.sep import SEPState
    g = torch.Generator().manual_seed(0)
    L, M = 3, 5
    Lk = torch.linalg.cholesky(torch.eye(M) + (lambda R: R @ R.mT)(torch.randn(L, M, M, generator=g)))
    R = torch.randn(L, M, M, generator=g)
    state = SEPState(Lam=R @ R.mT, h=torch.randn(L, M, generator=g), counts=torch.tensor([4.0, 7.0, 1.0]))
    P, b = whitened_precision(Lk, TiedSites(state.Lam, state.h))
    keep = 1.0 - 1.0 / state.counts
    Pc, bc = SEP._cavity_precision(state, P, b)
    Pc_ref, bc_ref = whitened_precision(Lk, TiedSites(state.Lam * keep[:, None, None], state.h * keep[:, None]))
    torch.testing.assert_close(Pc, Pc_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(bc, bc_ref, rtol=1e-12, atol=1e-12)
    q = q_from_precision(Lk, P, b)
    cov = Lk @ torch.linalg.inv(P) @ Lk.mT
    torch.testing.assert_close(q.cov, 0.5 * (cov + cov.mT), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(q.mean, (Lk @ torch.linalg.solve(P, b[..., None]))[..., 0], rtol=1e-10, atol=1e-12)

    class Model:
        def chol_Kuu(self):
            return Lk
    torch.testing.assert_close(q_state(Model(), TiedSites(state.Lam, state.h)).W, q.W, rtol=0, atol=0)


