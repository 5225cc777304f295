"""RMGPC / SMGPC: EP updates vs brute-force tilted moments, Beta moment matching, the ρ → 0 limit,
evidence gradients, outlier detection, and the estimator."""
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats
from sklearn.datasets import load_iris
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler

from sgpc import GPClassifier
from sgpc import fitc_ep as F
from sgpc import kernels as K
from sgpc import rmgpc as R
from sgpc.engine import write_constants
from sgpc.likelihoods import RobustMax
from sgpc.sparse import SparseGP, marginals, predict_log_proba

torch.set_default_dtype(torch.float64)


def problem(N=25, C=3, D=2, M=None, seed=0, n_flip=3, noise=0.05):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, D, generator=g)
    y = (X[:, 0] > 0).long() + (X[:, 1] > 0.5).long()
    y[:n_flip] = (y[:n_flip] + 1) % C
    Z = X if M is None else X[:M]                       # M = None: the full GP (Z = X, fixed)
    model = SparseGP(K.RBF(D, C, noise=noise, lengthscale=[1.0, 1.3]), RobustMax(C), Z.expand(C, *Z.shape).clone(),
                     learn_inducing=False)
    return model, X, y


def converged(engine, model, X, y, tol=1e-11):
    st = engine.run(F.fitc_prior(model, X), engine.init(model, X, y, None), tol=tol, max_sweeps=5000)
    assert st.converged and st.skipped == 0
    return st


# -- each EP update against brute force ----------------------------------------------------------
def test_likelihood_factor_update_matches_integration_over_f_and_enumeration_of_z():
    # Tilted p(f_y, f_k, z) ∝ N(f_y|m_y,v_y) N(f_k|m_k,v_k) Bern(z|σ(q)) Θ(f_y − f_k)^{1−z} c^z. The inner
    # integral over f_k is closed form (truncated-normal moments), the outer one over f_y by adaptive
    # quadrature to 1e-12: the reference is exact to ~1e-9, so the tolerance 1e-7 cannot hide an error.
    C = 4
    c = C ** (-1.0 / (C - 1))
    rng = np.random.default_rng(1)
    for _ in range(6):
        m_y, m_k = rng.normal(0, 1.5, 2)
        v_y, v_k = rng.uniform(0.1, 2.0, 2)
        q = rng.normal(-1, 2)
        s_k = math.sqrt(v_k)

        def inner(fy, power):       # ∫_{-∞}^{fy} f_k^power N(f_k|m_k,v_k) df_k
            a = (fy - m_k) / s_k
            Phi, phi = stats.norm.cdf(a), stats.norm.pdf(a)
            return [Phi, m_k * Phi - s_k * phi, (m_k ** 2 + v_k) * Phi - s_k * (m_k + fy) * phi][power]

        def moment(py, pk):          # E over the z = 0 (step) part, times σ(−q)
            f = lambda fy: fy ** py * inner(fy, pk) * stats.norm.pdf(fy, m_y, math.sqrt(v_y))
            return integrate.quad(f, m_y - 12 * math.sqrt(v_y), m_y + 12 * math.sqrt(v_y), epsabs=1e-13, epsrel=1e-12)[0]

        w0, w1 = 1 / (1 + math.exp(q)), c / (1 + math.exp(-q))
        Z0 = moment(0, 0)
        Z = w0 * Z0 + w1
        Ey = (w0 * moment(1, 0) + w1 * m_y) / Z
        Ey2 = (w0 * moment(2, 0) + w1 * (m_y ** 2 + v_y)) / Z
        Ek = (w0 * moment(0, 1) + w1 * m_k) / Z
        Ek2 = (w0 * moment(0, 2) + w1 * (m_k ** 2 + v_k)) / Z
        p_z1 = w1 / Z
        t = lambda v: torch.tensor([[v]])
        log_Z, mh_y, vh_y, mh_k, vh_k = F.tilted_pair_moments(R.likelihood_log_factor(t(q), C), t(m_y), t(v_y), t(m_k),
                                                              t(v_k))
        q_site = R.likelihood_site_logits(t(m_y), t(v_y), t(m_k), t(v_k), C)
        np.testing.assert_allclose([float(log_Z), float(mh_y), float(vh_y), float(mh_k), float(vh_k)],
                                   [math.log(Z), Ey, Ey2 - Ey ** 2, Ek, Ek2 - Ek ** 2], rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(float(torch.sigmoid(q + q_site)), p_z1, rtol=1e-8)      # eq. 4


def test_prior_factor_update_matches_integration_over_rho_and_beta_matches_two_moments():
    # Tilted p(z, ρ) ∝ Bern(z|σ(q)) ρ^z (1−ρ)^{1−z} Beta(ρ|a,b): quadrature over ρ ∈ (0,1), sum over z.
    rng = np.random.default_rng(2)
    for _ in range(6):
        q, a, b = rng.normal(-1, 2), rng.uniform(0.5, 20), rng.uniform(0.5, 60)
        s0, s1 = 1 / (1 + math.exp(q)), 1 / (1 + math.exp(-q))
        dens = lambda r, z: (s1 * r if z else s0 * (1 - r)) * stats.beta.pdf(r, a, b)
        mom = lambda p, z: integrate.quad(lambda r: r ** p * dens(r, z), 0, 1, epsabs=1e-14, epsrel=1e-12)[0]
        Z = mom(0, 0) + mom(0, 1)
        e1, e2 = (mom(1, 0) + mom(1, 1)) / Z, (mom(2, 0) + mom(2, 1)) / Z
        upd = R.prior_factor_update(torch.tensor([q]), torch.tensor([a]), torch.tensor([b]))
        np.testing.assert_allclose(float(upd.log_Z), math.log(Z), rtol=1e-9)
        np.testing.assert_allclose(float(upd.p_outlier), mom(0, 1) / Z, rtol=1e-9)
        np.testing.assert_allclose(float(torch.sigmoid(torch.tensor(q) + upd.q_site)), mom(0, 1) / Z, rtol=1e-9)
        A, B = float(upd.a_star), float(upd.b_star)           # eq. 10: Beta(A, B) has the mixture's two moments
        np.testing.assert_allclose([A / (A + B), A * (A + 1) / ((A + B) * (A + B + 1))], [e1, e2], rtol=1e-9)
        # the KL projection matches E[log ρ], E[log(1 − ρ)] instead
        A, B = (float(v) for v in R.beta_kl_projection(upd, torch.tensor([a]), torch.tensor([b])))
        el = (integrate.quad(lambda r: math.log(r) * (dens(r, 0) + dens(r, 1)), 0, 1, epsrel=1e-12)[0]) / Z
        np.testing.assert_allclose(float(torch.digamma(torch.tensor(A)) - torch.digamma(torch.tensor(A + B))), el,
                                   rtol=1e-7)


# -- the EP fixed point, evidence and limits ------------------------------------------------------
def test_one_point_two_classes_evidence_is_exact():
    # N = 1, C = 2: one likelihood factor, one prior factor, a tree: EP's Z is exact, p(y) = ρ̄/2 + (1−ρ̄)/2 = 1/2.
    X, y = torch.randn(1, 2), torch.tensor([1])
    model = SparseGP(K.RBF(2, 2, noise=0.05), RobustMax(2), X.expand(2, 1, 2).clone(), learn_inducing=False)
    eng = R.RMGPC(damping=1.0, prior_a=2.0, prior_b=3.0)
    st = converged(eng, model, X, y)
    assert float(eng.log_evidence(model, st, X).detach()) == pytest.approx(math.log(0.5), abs=1e-10)


def test_prior_factor_update_keeps_its_precision_in_float32_at_large_counts():
    # with a + b ~ N the matched Beta is a* = a_cav + O(1): formed from e₂ − e₁² (a variance of ~1e-5 as the
    # difference of numbers near 1e-2) the float32 site was off by ~100 at a + b = 1e5. The reference is
    # exact rational arithmetic on the float32 inputs (σ evaluated in float64).
    from fractions import Fraction as Fr
    for q, a, b in [(-8.0, 1e3, 9e3), (3.0, 1e3, 9e3), (-8.0, 1e4, 9e4), (0.5, 2e4, 3e3)]:
        w1 = Fr(1.0 / (1.0 + math.exp(-(q + math.log(a) - math.log(b)))))
        A, B, s1 = Fr(a), Fr(b), Fr(a) + Fr(b) + 1
        e1 = ((1 - w1) * A + w1 * (A + 1)) / s1
        e2 = ((1 - w1) * A * (A + 1) + w1 * (A + 1) * (A + 2)) / (s1 * (s1 + 1))
        k = (e1 - e2) / (e2 - e1 * e1)
        exact = (float(e1 * k - A), float((1 - e1) * k - B))          # a* − a_cav, b* − b_cav: the site − 1
        upd = R.prior_factor_update(*(torch.tensor([v], dtype=torch.float32) for v in (q, a, b)))
        got = (float(upd.a_star) - a, float(upd.b_star) - b)
        # float32 spacing at 1e5 is 0.008: the site can be no closer than that
        np.testing.assert_allclose(got, exact, rtol=0, atol=2e-2)
        upd64 = R.prior_factor_update(*(torch.tensor([v], dtype=torch.float64) for v in (q, a, b)))
        np.testing.assert_allclose((float(upd64.a_star) - a, float(upd64.b_star) - b), exact, rtol=0, atol=1e-9)


def test_parallel_ep_reaches_a_fixed_point():
    model, X, y = problem()
    eng = R.RMGPC(damping=0.5)
    st = converged(eng, model, X, y)
    again = R.RMGPC(damping=1.0).run(F.fitc_prior(model, X), st, max_sweeps=1)
    for name in ("tau_y", "nu_y", "tau_k", "nu_k", "q_lik", "q_prior", "a_site", "b_site"):
        torch.testing.assert_close(getattr(again, name), getattr(st, name), rtol=1e-8, atol=1e-8)


def test_settle_runs_ep_from_the_given_sites_with_the_larger_cap():
    # settle = run with fitc_ep.SETTLE_SWEEPS × max_sweeps sweeps from the state's sites (Engine.settle)
    model, X, y = problem(M=6)
    eng = R.RMGPC(tol=1e-9, max_sweeps=2)
    st = eng.update(model, eng.init(model, X, y, None), X, y, len(y))
    assert not eng.converged(st) and st.sweeps == 2
    settled = eng.settle(model, st, X, y, len(y))
    ref = eng.run(F.fitc_prior(model, X), st, max_sweeps=F.SETTLE_SWEEPS * 2)
    assert settled.sweeps == ref.sweeps == F.SETTLE_SWEEPS * 2
    for name in ("tau_y", "nu_y", "tau_k", "nu_k", "q_lik", "q_prior", "a_site", "b_site", "log_Z_site"):
        assert torch.equal(getattr(settled, name), getattr(ref, name))
    with pytest.raises(ValueError, match="full-batch"):
        eng.settle(model, st, X[:10], y[:10], len(y))


@pytest.mark.parametrize("M", [None, 6])
def test_rho_forced_to_zero_equals_smgpc(M):
    # a₀/b₀ = 1e-10: the uniform-label term has weight ~1e-10, so every site, the posterior and the
    # evidence agree with SMGPC to ~1e-8 (differences scale with E[ρ]/Φ(u)).
    model, X, y = problem(M=M)
    smgpc = R.RMGPC(outliers=False)
    rm = R.RMGPC(prior_a=1e-3, prior_b=1e7)
    s0, s1 = converged(smgpc, model, X, y, 1e-9), converged(rm, model, X, y, 1e-9)
    assert rm.expected_rho(s1) < 1e-8 and float(rm.outlier_proba(s1).max()) < 1e-6
    prior = F.fitc_prior(model, X)
    m0, v0 = F.posterior_marginals(prior, *F.site_totals(y, s0.sites))
    m1, v1 = F.posterior_marginals(prior, *F.site_totals(y, s1.sites))
    torch.testing.assert_close(m1, m0, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(v1, v0, rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        assert float(rm.log_evidence(model, s1, X)) == pytest.approx(float(smgpc.log_evidence(model, s0, X)), abs=1e-6)


def test_smgpc_is_gfitc():
    model, X, y = problem(M=6)
    st = converged(R.RMGPC(outliers=False), model, X, y)
    sites, mean, var, _ = F.run_ep(F.fitc_prior(model, X), y, F.zero_sites(len(y), 3), tol=1e-11, max_sweeps=5000)
    torch.testing.assert_close(st.tau_k, sites.tau_k, rtol=1e-6, atol=1e-6)


def test_full_gp_prior_with_inducing_at_data_is_exact():
    # FITC with Z = X: Q + diag(k + σ² − Q) = K + σ²I up to the 1e-8 relative jitter on K_uu.
    model, X, _ = problem()
    p = F.fitc_prior(model, X)
    Kfitc = p.A.transpose(-1, -2) @ p.A + torch.diag_embed(p.d)
    Kfull = model.kernel(X, X) + torch.diag_embed(model.kernel.noise[:, None].expand(-1, len(X)))
    torch.testing.assert_close(Kfitc, Kfull, rtol=0, atol=1e-6)


@pytest.mark.parametrize("projection,M,rtol", [("kl", None, 1e-5), pytest.param("kl", 6, 1e-5, marks=pytest.mark.slow),
                                               pytest.param("moments", None, 2e-2, marks=pytest.mark.slow)])
def test_evidence_gradient_matches_finite_differences_with_ep_rerun(projection, M, rtol):
    # d log Z_EP/dθ by central differences with EP re-converged (tol 1e-11) at θ ± h, against autograd at
    # fixed sites. With the KL projection of ρ the fixed point is stationary and they agree to the FD error
    # (~1e-8). The paper's moment matching (eq. 10) is not a KL projection: the agreement is then ~0.3%,
    # which the 2% tolerance accepts while still failing for a wrong s̃ term (a missing term changes the
    # gradient at O(1)).
    model, X, y = problem(M=M)
    eng = R.RMGPC(beta_projection=projection, tol=1e-11, max_sweeps=5000)
    st = converged(eng, model, X, y)
    params = list(model.kernel.parameters())
    grads = torch.autograd.grad(eng.log_evidence(model, st, X), params)
    h = 1e-5
    for p, g in zip(params, grads):
        for j in range(p.numel()):
            vals = []
            for s in (1, -1):
                with torch.no_grad():
                    p.view(-1)[j] += s * h
                st2 = eng.run(F.fitc_prior(model, X), st)
                vals.append(float(eng.log_evidence(model, st2, X).detach()))
                with torch.no_grad():
                    p.view(-1)[j] -= s * h
            fd = (vals[0] - vals[1]) / (2 * h)
            assert float(g.view(-1)[j]) == pytest.approx(fd, rel=rtol, abs=1e-6 if projection == "kl" else 2e-3)


def test_flipped_labels_get_higher_outlier_probability():
    # 3-class problem with 12 of 120 labels flipped: the AUC of σ(q_i) for "flipped vs clean" is 0.976
    # here (measured); >= 0.9 still fails for an uninformative (0.5) or inverted σ(q).
    g = torch.Generator().manual_seed(3)
    N, C = 120, 3
    X = torch.randn(N, 2, generator=g)
    y = (X[:, 0] > 0).long() + (X[:, 1] > 0.5).long()
    flip = torch.randperm(N, generator=g)[:12]
    y[flip] = (y[flip] + 1 + torch.randint(0, C - 1, (12,), generator=g)) % C
    model = SparseGP(K.RBF(2, C, noise=0.01, lengthscale=[1.0, 1.0], variance=4.0), RobustMax(C),
                     X.expand(C, N, 2).clone(), learn_inducing=False)
    eng = R.RMGPC()
    st = converged(eng, model, X, y, 1e-6)
    lab = np.zeros(N)
    lab[flip.numpy()] = 1
    auc = roc_auc_score(lab, eng.outlier_proba(st).numpy())
    print(f"outlier AUC = {auc:.3f}")
    assert auc >= 0.9
    st = eng.update(model, st, X, y, N)
    write_constants(model, eng, st)
    assert float(model.likelihood.epsilon) == pytest.approx(eng.expected_rho(st), rel=1e-10)


# -- estimator -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def noisy_iris():
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    rng = np.random.default_rng(0)
    flip = rng.choice(len(y), 15, replace=False)
    yn = y.copy()
    yn[flip] = (yn[flip] + 1) % 3
    return X, y, yn, flip


@pytest.mark.parametrize("method,n_inducing", [("rmgpc", 150), ("smgpc", 150), ("rmgpc", 20)])
def test_estimator_fit_predict_save_load(noisy_iris, method, n_inducing, tmp_path):
    X, y, yn, flip = noisy_iris
    # learned inducing inputs (not the default) where the model is FITC: load must keep them trainable
    clf = GPClassifier(method=method, optimizer="lbfgs", learning_rate=1.0, max_iter=8, n_inducing=n_inducing,
                       inducing_params={"learn": True}, random_state=0).fit(X, yn)
    assert clf.score(X, y) > 0.9
    P = clf.predict_proba(X)
    np.testing.assert_allclose(P.sum(1), 1, atol=1e-12)
    assert clf.outlier_proba_.shape == (150,)
    if method == "rmgpc":
        eps = clf.model_.likelihood.epsilon.item()
        assert eps == pytest.approx(clf._make_engine().expected_rho(clf.state_), rel=1e-10)
        assert P.min() >= eps / 3 * (1 - 1e-9)              # (1 − E[ρ]) P(argmax) + E[ρ]/C ≥ E[ρ]/C
        lab = np.zeros(150)
        lab[flip] = 1
        assert roc_auc_score(lab, clf.outlier_proba_) > 0.9
    else:
        assert not clf.outlier_proba_.any()
    if n_inducing >= 150:
        assert not clf.model_.Z.requires_grad and torch.equal(clf.model_.Z[0], torch.as_tensor(X))
    clf.save(tmp_path / "m.pt")
    back = GPClassifier.load(tmp_path / "m.pt")
    np.testing.assert_array_equal(back.predict_proba(X), P)
    np.testing.assert_array_equal(back.outlier_proba_, clf.outlier_proba_)
    # the full GP's fixed Z = X is part of the model: it must survive load (it came back trainable)
    assert back.model_.Z.requires_grad == (n_inducing < 150)


@pytest.mark.filterwarnings("ignore:n_inducing=500 is larger")
def test_full_gp_warm_start_keeps_z_on_the_training_rows(noisy_iris, tmp_path):
    X, y, yn, flip = noisy_iris
    clf = GPClassifier(method="rmgpc", optimizer="lbfgs", learning_rate=1.0, max_iter=4, n_inducing=500,
                       random_state=0, warm_start=True).fit(X[:100], yn[:100])
    clf.save(tmp_path / "m.pt")
    back = GPClassifier.load(tmp_path / "m.pt")
    for est in (clf, back):
        # more rows: the full GP of 100 rows becomes the full GP of 150 (Z was left on the old 100 rows)
        est.fit(X, yn)
        assert not est.model_.Z.requires_grad and torch.equal(est.model_.Z[0], torch.as_tensor(X))
        assert est.outlier_proba_.shape == (150,)
    assert clf.score(X, y) > 0.9
    np.testing.assert_allclose(back.predict_proba(X), clf.predict_proba(X), rtol=1e-8, atol=1e-10)
    # fewer inducing points than rows: no longer the full GP, so the fit starts afresh (and Z learned when asked: the
    # full GP's fixed Z does not carry over)
    clf.set_params(n_inducing=20, inducing_params={"learn": True}).fit(X, yn)
    assert clf.model_.Z.shape[-2] == 20 and clf.model_.Z.requires_grad


@pytest.mark.parametrize("params,match", [
    ({"method_params": {"outlier_prior_a": 0.0}}, r"outlier_prior_a must be a finite number in \(0, ∞\)"),
    ({"method_params": {"outlier_prior_b": -1.0}}, r"outlier_prior_b must be a finite number in \(0, ∞\)"),
    ({"method_params": {"outlier_prior_a": "x"}}, "outlier_prior_a must be"),
    ({"batch_size": 10}, "use batch_size=None"),
    ({"likelihood_params": {"learn_epsilon": True}}, r"leave likelihood_params\['learn_epsilon'\] False"),
])
def test_estimator_bad_input(noisy_iris, params, match):
    X, _, yn, _ = noisy_iris
    with pytest.raises(ValueError, match=match):
        GPClassifier(method="rmgpc", optimizer="lbfgs", max_iter=1, **params).fit(X, yn)


def test_engine_bad_settings_and_minibatches():
    with pytest.raises(ValueError, match="damping"):
        R.RMGPC(damping=0.0)
    with pytest.raises(ValueError, match="a0 > 0"):
        R.RMGPC(prior_a=-1.0)
    with pytest.raises(ValueError, match="beta_projection"):
        R.RMGPC(beta_projection="exact")
    model, X, y = problem()
    eng = R.RMGPC()
    st = eng.init(model, X, y, None)
    with pytest.raises(ValueError, match="full-batch only"):
        eng.update(model, st, X[:10], y[:10], len(y), torch.arange(10))
    with pytest.raises(ValueError, match="labels must be class indices"):
        eng.init(model, X, y + 5, None)


def test_prediction_is_robust_max_with_epsilon_rho():
    model, X, y = problem()
    eng = R.RMGPC()
    st = eng.update(model, eng.init(model, X, y, None), X, y, len(y))
    write_constants(model, eng, st)
    q = eng.posterior(model, st)
    rho = eng.expected_rho(st)
    P = predict_log_proba(model, q, X).exp()
    lik0 = RobustMax(3, epsilon=1e-15)              # P(argmax) to 15 digits
    m, v = marginals(model, q, X)
    P_argmax = lik0.predict_log_proba(m, v).exp()
    torch.testing.assert_close(P, (1 - rho) * P_argmax + rho / 3, rtol=1e-8, atol=1e-10)


def _flipped_quadrants(N):
    """N rows in 2-D, 3 classes by quadrant thresholds, 6 labels flipped; a full-GP model (Z = X fixed)."""
    g = torch.Generator().manual_seed(3)
    C = 3
    X = torch.randn(N, 2, generator=g)
    y = (X[:, 0] > 0).long() + (X[:, 1] > 0.5).long()
    flip = torch.randperm(N, generator=g)[:6]
    y[flip] = (y[flip] + 1) % C
    model = SparseGP(K.RBF(2, C, noise=0.01, lengthscale=1.0, variance=4.0), RobustMax(C), X.expand(C, N, 2).clone(),
                     learn_inducing=False)
    return model, X, y, flip


def test_a_vague_beta_prior_keeps_q_rho_proper():
    # with a0 = b0 = 1e-3 the parallel rho-site update drove b below 0 (E[rho] = 1.0013) after one sweep; every
    # later update then failed and E[rho] stayed at 0.63 with outlier probabilities near 1/2 for clean rows
    model, X, y, flip = _flipped_quadrants(60)
    N = len(X)
    eng = R.RMGPC(prior_a=1e-3, prior_b=1e-3)
    prior = F.fitc_prior(model, X)
    st = eng.init(model, X, y, None)
    for _ in range(150):
        st = eng.run(prior, st, max_sweeps=1)
        a, b = eng.beta_posterior(st)
        assert float(a) > 0 and float(b) > 0
    assert eng.expected_rho(st) < 0.3
    p = eng.outlier_proba(st)
    clean = torch.ones(N, dtype=torch.bool)
    clean[flip] = False
    assert float(p[flip].mean()) > 0.7 and float(p[clean].mean()) < 0.2


def test_reset_latents_and_unconverged_runs_reach_the_fit_history():
    # a hyper-parameter step that invalidates a latent's sites reset them to the prior; the fit history said nothing
    from sgpc.train import TrainSettings, fit
    model, X, y, flip = _flipped_quadrants(40)
    N = len(X)
    eng = R.RMGPC(max_sweeps=200, tol=1e-8)
    st = eng.update(model, eng.init(model, X, y, None), X, y, N)
    with torch.no_grad():
        model.kernel.raw_lengthscale.fill_(-1.2)                       # a hyper-parameter step: much shorter ℓ
    st, hist = fit(model, eng, st, X, y, TrainSettings(learning_rate=1e-3, max_iter=3),
                   generator=torch.Generator().manual_seed(0))
    assert st.reset > 0
    assert hist.events and hist.events[-1]["reset"] == st.reset


def test_outlier_probabilities_do_not_outlive_their_fit():
    # set only by rmgpc/smgpc fits and never removed: a later vi fit on 25 rows kept the 40-row array
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    est = GPClassifier(method="rmgpc", n_inducing=8, max_iter=3, random_state=0).fit(X[::3][:40], y[::3][:40])
    assert est.outlier_proba_.shape == (40,)
    est.set_params(method="vi").fit(X[::6][:25], y[::6][:25])
    assert not hasattr(est, "outlier_proba_")
