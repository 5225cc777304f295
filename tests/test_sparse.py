"""SparseGP marginals and KL against dense explicit-inverse computations."""
import numpy as np
import pytest
import torch

from sgpc import kernels as K
from sgpc.likelihoods import RobustMax
from sgpc.sparse import InducingPosterior, SparseGP, init_inducing, marginals, predict_log_proba, prior_kl

torch.set_default_dtype(torch.float64)
L, M, D, N = 3, 5, 2, 9


@pytest.fixture
def setup():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, D, generator=g)
    Z = torch.randn(L, M, D, generator=g)
    model = SparseGP(K.RBF(D, L, noise=0.05, lengthscale=[0.8, 1.4]), RobustMax(L), Z)
    A = torch.randn(L, M, M, generator=g)
    q = InducingPosterior(mean=torch.randn(L, M, generator=g), chol=torch.linalg.cholesky(A @ A.mT + 0.1 * torch.eye(M)))
    return model, q, X


def test_marginals_against_explicit_inverse(setup):
    model, q, X = setup
    mean, var = marginals(model, q, X)
    assert mean.shape == var.shape == (N, L)
    k = model.kernel
    for l in range(L):
        Kuu = k(model.Z, model.Z)[l]
        Kuf = k(model.Z, X)[l]
        Ki = torch.linalg.inv(Kuu)
        S = q.cov[l]
        m_ref = Kuf.T @ Ki @ q.mean[l]                                            # eq. (66)
        v_ref = k.diag(X)[l] - ((Kuf.T @ Ki) * Kuf.T).sum(1) + ((Kuf.T @ Ki @ S @ Ki) * Kuf.T).sum(1)   # eq. (67)
        # the base jitter (1e-8 relative) on K_uu bounds the agreement
        torch.testing.assert_close(mean[:, l], m_ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(var[:, l], v_ref, rtol=1e-5, atol=1e-5)


def test_prior_kl_against_torch(setup):
    model, q, _ = setup
    Kuu = model.Kuu()
    ref = sum(torch.distributions.kl_divergence(
        torch.distributions.MultivariateNormal(q.mean[l], scale_tril=q.chol[l]),
        torch.distributions.MultivariateNormal(torch.zeros(M), Kuu[l])) for l in range(L))
    torch.testing.assert_close(prior_kl(model, q), ref, rtol=1e-5, atol=1e-5)


def test_prior_posterior_gives_prior_marginals(setup):
    model, _, X = setup
    Lk = model.chol_Kuu()
    q0 = InducingPosterior(mean=torch.zeros(L, M), chol=Lk)
    mean, var = marginals(model, q0, X)
    torch.testing.assert_close(mean, torch.zeros(N, L))
    torch.testing.assert_close(var, model.kernel.diag(X).T, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(prior_kl(model, q0), torch.tensor(0.0), rtol=0, atol=1e-8)


def test_predict_in_batches_equals_one_batch(setup):
    model, q, X = setup
    torch.testing.assert_close(predict_log_proba(model, q, X, batch_size=2), predict_log_proba(model, q, X))


def test_shared_inducing_inputs_broadcast(setup):
    model, q, X = setup
    shared = SparseGP(model.kernel, model.likelihood, model.Z[0].detach())
    per = SparseGP(model.kernel, model.likelihood, model.Z[0].detach().expand(L, M, D).clone())
    torch.testing.assert_close(marginals(shared, q, X), marginals(per, q, X))


def test_init_inducing():
    X = np.random.default_rng(0).normal(size=(50, 3))
    Zr = init_inducing(X, 7, "random", seed=1)
    assert Zr.shape == (7, 3) and all(any(np.allclose(z, x) for x in X) for z in Zr)
    Zk = init_inducing(X, 7, "kmeans", seed=1)
    assert Zk.shape == (7, 3)
    np.testing.assert_array_equal(Zk, init_inducing(X, 7, "kmeans", seed=1))
    with pytest.raises(ValueError, match="between 1 and"):
        init_inducing(X, 51)
    with pytest.raises(ValueError, match="valid"):
        init_inducing(X, 5, "grid")


def test_kmeans_clusters_a_sample_bounded_in_rows_and_in_rows_times_features(monkeypatch):
    from sgpc import sparse
    assert sparse.kmeans_rows(60000, 784, 100) == 4_000_000 // 784         # MNIST's width: 5 102 rows
    assert sparse.kmeans_rows(60000, 23, 100) == 20000                     # narrow: the row bound
    assert sparse.kmeans_rows(3000, 784, 100) == 3000                      # never more rows than there are
    assert sparse.kmeans_rows(60000, 10**6, 100) == 1000                   # at least 10 rows per centre
    seen = []
    from sklearn.cluster import KMeans
    fit = KMeans.fit
    monkeypatch.setattr(KMeans, "fit", lambda self, X, **kw: (seen.append(X.shape), fit(self, X, **kw))[1])
    monkeypatch.setattr(sparse, "KMEANS_ELEMENTS", 90)                     # 30 rows of 3 features
    X = np.random.default_rng(0).normal(size=(50, 3))
    Z = init_inducing(X, 2, "kmeans", seed=1)
    assert seen == [(30, 3)] and Z.shape == (2, 3)
    np.testing.assert_array_equal(Z, init_inducing(X, 2, "kmeans", seed=1))


def test_model_shape_errors():
    with pytest.raises(ValueError, match="inducing inputs"):
        SparseGP(K.RBF(2, 3), RobustMax(3), torch.zeros(4, 5))
    with pytest.raises(ValueError, match="latent"):
        SparseGP(K.RBF(2, 2), RobustMax(3), torch.zeros(4, 2))


@pytest.mark.parametrize("method", ["vi", "sep", "ep"])
def test_one_prior_fast_path_equals_the_per_latent_computation(method, monkeypatch):
    """Shared kernel + shared Z: K_uu's factor and L_K⁻¹K_uf are computed once and broadcast. A fit
    with that fast path must give the same model as one that computes them for every latent function
    (only the order of floating-point sums may differ: 1e-9 would catch any wrong broadcast, which
    changes results at O(1))."""
    from sgpc import GPClassifier
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)
    kw = dict(method=method, n_inducing=6, max_iter=15, learning_rate=0.05, random_state=0,
              kernel_params={"shared_kernel": True}, inducing_params={"shared": True})
    fast = GPClassifier(**kw).fit(X, y)
    assert fast.model_.one_prior and fast.model_.chol_Kuu().stride(0) == 0      # really a broadcast view
    monkeypatch.setattr(SparseGP, "one_prior", property(lambda self: False))
    slow = GPClassifier(**kw).fit(X, y)
    assert slow.model_.chol_Kuu().stride(0) != 0
    np.testing.assert_allclose(fast.predict_proba(X), slow.predict_proba(X), rtol=1e-9, atol=1e-11)
    for (name, a), (_, b) in zip(fast.model_.state_dict().items(), slow.model_.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11, msg=name)
