"""VI engine: exactness with a Gaussian likelihood, gradients, minibatch unbiasedness."""
import math

import pytest
import torch

from sgpc import kernels as K
from sgpc.likelihoods import RobustMax
from sgpc.sparse import SparseGP, marginals
from sgpc.train import TrainSettings, fit
from sgpc.vi import VI, WhitenedGaussian, elbo
from support import GaussianLikelihood, exact_gp

torch.set_default_dtype(torch.float64)


def regression_problem(N=12, D=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, D, generator=g)
    y = torch.sin(2 * X[:, 0]) + 0.3 * torch.randn(N, generator=g)
    return X, y


def test_elbo_at_optimum_equals_exact_log_marginal_likelihood():
    # With Z = X, no latent noise and a Gaussian likelihood, the optimal q(u) is the exact
    # posterior p(f | y) and the ELBO equals log N(y | 0, K + σ²I) (Titsias 2009).
    X, y = regression_problem()
    noise = 0.3
    model = SparseGP(K.RBF(2, 1, noise=None, lengthscale=0.9), GaussianLikelihood(noise), X.clone())
    Kff = model.Kuu()[0]
    Kj = Kff + 1e-8 * Kff.diagonal().mean() * torch.eye(len(X))      # the jitter chol_Kuu adds
    mean, cov, lml = exact_gp(Kj, y, noise)
    Lk = model.chol_Kuu()[0]
    q = WhitenedGaussian(1, len(X))
    with torch.no_grad():
        q.mean.copy_(torch.linalg.solve_triangular(Lk, mean[:, None], upper=False).T)
        W = torch.linalg.solve_triangular(Lk, torch.linalg.cholesky(cov + 1e-12 * torch.eye(len(X))), upper=False)
        q.raw_chol.copy_(W[None])
    value = elbo(model, q, X, y, len(X))
    torch.testing.assert_close(value, lml, rtol=0, atol=1e-5)
    # ... and it is a maximum: optimising from the prior reaches the same value, never more
    state = VI().init(model, X, y, torch.Generator())
    for p in model.parameters():
        p.requires_grad_(False)
    settings = TrainSettings(optimizer="lbfgs", learning_rate=1.0, max_iter=200)
    state, hist = fit(model, VI(), state, X, y, settings, generator=torch.Generator().manual_seed(0))
    assert hist.objective[-1] <= lml.item() + 1e-6
    assert abs(hist.objective[-1] - lml.item()) < 1e-4


def classification_problem(N=15, D=2, C=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, D, generator=g)
    y = torch.randint(0, C, (N,), generator=g)
    return X, y


def test_elbo_gradient_finite_differences():
    X, y = classification_problem()
    g = torch.Generator().manual_seed(2)
    model = SparseGP(K.RBF(2, 3, noise=0.1), RobustMax(3, epsilon=0.01, learn_epsilon=True),
                     torch.randn(3, 4, 2, generator=g))
    q = WhitenedGaussian(3, 4)
    with torch.no_grad():
        q.mean.normal_(generator=g)
        q.raw_chol.add_(0.1 * torch.randn(3, 4, 4, generator=g))
    names = [n for n, _ in model.named_parameters()] + ["q." + n for n, _ in q.named_parameters()]
    values = [p.detach().clone().requires_grad_(True) for p in list(model.parameters()) + list(q.parameters())]
    assert {"kernel.raw_lengthscale", "kernel.raw_variance", "kernel.raw_noise", "Z",
            "likelihood.raw_epsilon"} <= set(names)

    def f(*ps):
        mp = {n: p for n, p in zip(names, ps) if not n.startswith("q.")}
        qp = {n[2:]: p for n, p in zip(names, ps) if n.startswith("q.")}
        return torch.func.functional_call(
            _Wrap(model, q), {**{"model." + k: v for k, v in mp.items()}, **{"q." + k: v for k, v in qp.items()}},
            (X, y))

    assert torch.autograd.gradcheck(f, tuple(values), eps=1e-6, atol=1e-5, rtol=1e-4)


class _Wrap(torch.nn.Module):
    def __init__(self, model, q):
        super().__init__()
        self.model, self.q = model, q

    def forward(self, X, y):
        return elbo(self.model, self.q, X, y, len(X))


def test_minibatch_elbo_is_unbiased_over_a_partition():
    X, y = classification_problem(N=12)
    model = SparseGP(K.RBF(2, 3, noise=0.1), RobustMax(3), X[:4].clone())
    q = WhitenedGaussian(3, 4)
    with torch.no_grad():
        q.mean.normal_(generator=torch.Generator().manual_seed(3))
    full = elbo(model, q, X, y, 12)
    parts = [elbo(model, q, X[i:i + 4], y[i:i + 4], 12) for i in range(0, 12, 4)]
    torch.testing.assert_close(sum(parts) / 3, full, rtol=1e-12, atol=1e-10)


def test_posterior_unwhitens():
    X, y = classification_problem()
    model = SparseGP(K.RBF(2, 3), RobustMax(3), X[:4].clone())
    state = VI().init(model, X, y, torch.Generator())
    with torch.no_grad():
        state.q.mean.normal_(generator=torch.Generator().manual_seed(4))
    q = VI().posterior(model, state)
    # marginals through the unwhitened posterior equal the whitened computation
    from sgpc.sparse import whitened_marginals
    torch.testing.assert_close(marginals(model, q, X), whitened_marginals(model, state.q.mean, state.q.chol, X),
                               rtol=1e-6, atol=1e-6)
