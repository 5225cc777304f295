"""Test-only helpers shared by several test modules (not part of the library)."""
import math

import torch

from sgpc import kernels as K
from sgpc.likelihoods import Likelihood, RobustMax
from sgpc.sparse import SparseGP


class GaussianLikelihood(Likelihood):
    """Test-only regression likelihood p(y | f) = N(y | f, σ²) with one latent function.

    With it, every approximate method has a known exact answer (the GP posterior), which is how
    the engines are checked. Closed forms below override the base defaults and are themselves
    tested against them.
    """

    def __init__(self, noise: float = 0.3):
        super().__init__(2)
        self.noise = noise

    @property
    def n_latent(self):
        return 1

    def log_prob(self, y, F):
        return -0.5 * math.log(2 * math.pi * self.noise) - 0.5 * (y - F[..., 0]) ** 2 / self.noise

    def expected_log_prob(self, y, mean, var):
        return -0.5 * math.log(2 * math.pi * self.noise) - 0.5 * ((y - mean[:, 0]) ** 2 + var[:, 0]) / self.noise

    def log_tilted(self, y, mean, var, alpha=1.0):
        # ∫ N(y|f,σ²)^α N(f|m,v) df = (2πσ²)^{(1-α)/2} α^{-1/2} N(y | m, σ²/α + v)
        s = self.noise / alpha + var[:, 0]
        return (0.5 * (1 - alpha) * math.log(2 * math.pi * self.noise) - 0.5 * math.log(alpha)
                - 0.5 * torch.log(2 * math.pi * s) - 0.5 * (y - mean[:, 0]) ** 2 / s)


def exact_gp(K, y, noise):
    """Exact GP regression: posterior mean/cov of f at the training inputs and log marginal likelihood."""
    N = K.shape[0]
    A = K + noise * torch.eye(N, dtype=K.dtype)
    L = torch.linalg.cholesky(A)
    alpha = torch.cholesky_solve(y[:, None], L)[:, 0]
    mean = K @ alpha
    V = torch.linalg.solve_triangular(L, K, upper=False)
    cov = K - V.T @ V
    lml = -0.5 * y @ alpha - torch.log(L.diagonal()).sum() - 0.5 * N * math.log(2 * math.pi)
    return mean, cov, lml


def classification_problem(N=14, C=3, M=4, seed=1):
    """A small random C-class problem and a robust-max SparseGP with per-latent inducing inputs."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, 2, generator=g, dtype=torch.float64)
    y = torch.randint(0, C, (N,), generator=g)
    model = SparseGP(K.RBF(2, C, noise=0.1, lengthscale=1.2, variance=2.0), RobustMax(C),
                     torch.randn(C, M, 2, generator=g, dtype=torch.float64))
    return model, X, y


def assert_gradient_matches_fd(model, objective, converge, checks, h=1e-5, rtol=1e-4):
    """At EP convergence, autograd's gradient of ``objective(state)`` (a scalar to maximise) w.r.t. the
    model parameters ``checks`` = [(name, index)] must match central differences with ``converge()``
    (EP re-run to convergence) at θ ± h. Returns the finite differences (so callers can check they are
    not trivially 0)."""
    model.zero_grad()
    (-objective(converge())).backward()
    params = dict(model.named_parameters())
    fds = []
    for name, index in checks:
        p = params[name]
        grad = -p.grad[index].item()
        vals = []
        for sign in (1, -1):
            with torch.no_grad():
                p[index] += sign * h
            state = converge()
            with torch.no_grad():
                vals.append(objective(state).item())
                p[index] -= sign * h
        fd = (vals[0] - vals[1]) / (2 * h)
        assert abs(fd - grad) < rtol * max(1.0, abs(fd)), (name, fd, grad)
        fds.append(fd)
    return fds


def weighting_xfails(estimator) -> dict:
    """The checks of scikit-learn's suite that a ``GPClassifier`` fails by design on weighted rows, with why
    (``expected_failed_checks`` of ``parametrize_with_checks``)."""
    from sgpc.registry import METHODS
    failures = {"check_sample_weight_equivalence_on_dense_data":
                "the inducing inputs start at k-means centres drawn at random, and n_inducing is clamped to the rows: "
                "repeated rows start elsewhere than weighted ones. From the same start integer weights equal repeated "
                "rows (tests/test_sample_weight.py)"}
    from sgpc.registry import AUTO_FULL_BATCH, AUTO_MINIBATCH
    chosen = (AUTO_FULL_BATCH, AUTO_MINIBATCH) if estimator.method == "auto" else (estimator.method,)
    if not all(METHODS[m].capabilities.weighted for m in chosen):
        why = f"method={estimator.method!r} takes weights of 0 and 1 only (EP in function space)"
        failures.update({check: why for check in ("check_sample_weights_list", "check_sample_weights_not_overwritten",
                                                  "check_class_weight_classifiers")})
    return failures
