"""Bayesian support vector machines: the hinge pseudo-likelihoods and their variational bound.

Multi-class (Crammer–Singer) pseudo-likelihood, multiclass-bayesian-svm eqs. (5), (7):

    L(y_n | f) = exp(−2 max(b_n, 0)),   b_n = 1 + max_{t≠y_n} f_t(x_n) − f_{y_n}(x_n),
               = ∫_0^∞ (2πλ)^{-1/2} exp(−(b_n + λ)² / (2λ)) dλ            (eq. 8, Lemma 1),

and the binary one of Polson & Scott / Wenzel et al. 2017 (eq. 3) with b_n = 1 − y_n f(x_n),
y_n ∈ {−1, +1}: the same function of b_n, so one bound serves both.

The variational bound (eq. 12). With the improper prior 1[λ ≥ 0] and q(λ_n) = GIG(½, 1, α_n)
(density ∝ λ^{-1/2} exp(−(λ + α_n/λ)/2)), whose moments are E[1/λ] = α^{-1/2}, E[λ] = 1 + √α and
normaliser 2 K_{1/2}(√α) α^{1/4} with K_{1/2}(z) = √(π/(2z)) e^{−z} (closed form of the modified
Bessel function of order ½), the per-point terms of eq. (11) are, with m = E_q[b_n], s = E_q[b_n²]:

    E_q[log p(y_n, λ_n | f)] − E_q[log q(λ_n)]
      = −½log 2π − ½E[log λ] − s E[1/λ]/2 − m − E[λ]/2
        + ¼log α + log 2K_{1/2}(√α) + ½E[log λ] + E[λ]/2 + α E[1/λ]/2
      = −s / (2√α) − √α / 2 − m                                             (all constants cancel).

This is eq. (12)'s data term (the paper's display writes −¼log α − log B_{1/2}(√α) where the
derivation gives +¼log α + log K_{1/2}(√α); its gradient, eq. 40, and Algorithm 1 agree with the
form above). It is maximised by α_n = s = E_q[b_n²] (Algorithm 1, line 4) — exactly, in closed
form — and at that optimum the data term collapses to

    ℓ(m, v) = −m − √(m² + v),   v = Var_q[b_n],

a function of the marginal mean and variance of b_n only. With independent q(f_t), q(f_y),
m = 1 + m_t − m_y and v = v_t + v_y (= κΣ_tκᵀ + κΣ_yκᵀ + 2K̃_nn in the paper's notation), so the
hinge likelihoods below declare ``elbo_is_bound`` and implement ``expected_log_prob_bound`` as ℓ, and
the ordinary VI engine (``vi.elbo``, through ``elbo_term``) maximises eq. (12) with every α_n at its optimum; q(u_j) = N(μ_j, Σ_j) is its free
Gaussian. t_n = argmax_{t≠y_n} of the current mean m_t (the paper's highest-scoring wrong class).
As v → 0, ℓ → −|b| − b = −2 max(b, 0) = log L (tested).

For C = 2 (and the binary model) the bound is a lower bound of E_q[log L]; for C > 2 fixing t_n
replaces max_t f_t by f_{t_n} ≤ max_t f_t, as the paper does, so ℓ is a lower bound of E_q[log L_{t_n}],
the expectation of the pseudo-likelihood with that class fixed (not necessarily of E_q[log L]).
``expected_log_prob`` is the exact E_q[log L]: in closed form for the binary model,
E_{b~N(m,v)}[−2 max(b, 0)] = −2(m Φ(m/√v) + √v φ(m/√v)), and the generic default for C classes.

Prediction: the decision rule is argmax_c f_c (binary: sign f). The pseudo-likelihood is not a
normalised p(y | f), so class probabilities are P(argmax_c f*_c = c) under q(f*) — the limit of the
class frequencies of posterior samples (``uncertainty.sample_labels``), computed by the 1-D
integral of scalable-ep eq. (68) (binary: Φ(m/√v)).

What this module does not do: hold q(u) (the VI engine does), or the one-vs-rest wrapper
(scikit-learn's ``OneVsRestClassifier`` around a 2-class ``GPClassifier(method="bsvm")``).
"""
from __future__ import annotations

import math

import torch
from torch.special import log_ndtr

from .. import quadrature
from .base import Likelihood

__all__ = ["log_joint_lambda", "gig_bound", "optimal_alpha", "collapsed_bound", "hinge_log_prob",
           "expected_hinge_log_prob", "MulticlassHinge", "BinaryHinge"]


def log_joint_lambda(lam: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """log of the integrand of eq. (8): log p(y, λ | f) = −½ log(2πλ) − (b + λ)² / (2λ).

    Integrated over λ ∈ (0, ∞) it gives exp(−2 max(b, 0)) (Lemma 1 with a = 1). Broadcasts.
    """
    return -0.5 * torch.log(2 * math.pi * lam) - 0.5 * (b + lam) ** 2 / lam


def gig_bound(m: torch.Tensor, v: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Per-point data term of eq. (12) for q(λ) = GIG(½, 1, α): −E[b²]/(2√α) − √α/2 − E[b].

    Args:
        m, v: mean and variance of b under q(f), any broadcastable shape; alpha > 0.
    Returns:
        E_q[log p(y, λ | f)] − E_q[log q(λ)], same shape (derivation in the module docstring).
    """
    r = torch.sqrt(alpha)
    return -(m * m + v) / (2.0 * r) - 0.5 * r - m


def optimal_alpha(m: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """α_n maximising ``gig_bound`` for fixed q(f): E_q[b_n²] = m² + v (Algorithm 1, line 4; eq. 40 = 0)."""
    return m * m + v


def collapsed_bound(m: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``gig_bound`` at α = ``optimal_alpha``: ℓ(m, v) = −m − √(m² + v).

    For m < 0 the two terms nearly cancel (a confidently correct point); there the equal form
    −v / (|m| + √(m² + v)) is used, which keeps float32 accurate (m = −1000 gave exactly 0 and no gradient).
    """
    s = torch.sqrt(m * m + v)
    cancelling = -v / (m.abs() + s).clamp_min(torch.finfo(s.dtype).tiny)
    return torch.where(m < 0, cancelling, -m - s)


def hinge_log_prob(b: torch.Tensor) -> torch.Tensor:
    """log L = −2 max(b, 0) (eq. 5) for the hinge argument b."""
    return -2.0 * b.clamp_min(0.0)


def expected_hinge_log_prob(m: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """E_{b~N(m,v)}[log L(b)] = −2(m Φ(m/√v) + √v φ(m/√v)), exactly; −2 max(m, 0) at v = 0. Broadcasts."""
    s = v.clamp_min(torch.finfo(v.dtype).tiny).sqrt()
    z = m / s
    return -2.0 * (m * quadrature.ndtr(z) + s * torch.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi))


def _other_max(y: torch.Tensor, F: torch.Tensor) -> torch.Tensor:
    """max_{t≠y} F_t: y [N], F [...,N,C] -> [...,N]."""
    idx = y.long().expand(*F.shape[:-1])[..., None]
    return F.scatter(-1, idx, -math.inf).amax(-1)


class MulticlassHinge(Likelihood):
    """Multi-class hinge pseudo-likelihood of Theorem 1 (eq. 7), C latent functions.

    ``expected_log_prob_bound`` is the collapsed bound ℓ(m_b, v_b) of eq. (12) with
    b_n = 1 + f_{t_n} − f_{y_n}, t_n = argmax_{t≠y_n} mean_t (a bound of E_q[log L] for C = 2, of
    E_q[log L_{t_n}] for C > 2; ``expected_log_prob`` is the generic default); ``predict_log_proba`` is
    log P(argmax f* = c). Args: n_classes C ≥ 2; n_points_predict: Gauss–Hermite nodes for it.
    """

    elbo_is_bound = True

    def __init__(self, n_classes: int, *, n_points_predict: int = 64, **kwargs):
        super().__init__(n_classes, **kwargs)
        self.n_points_predict = int(n_points_predict)

    def log_prob(self, y, F):
        f_y = F.gather(-1, y.long().expand(*F.shape[:-1])[..., None])[..., 0]
        return hinge_log_prob(1.0 + _other_max(y, F) - f_y)

    def contrast(self, y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and variance of b_n = 1 + f_{t_n} − f_{y_n} under the marginals [N,C]: ([N], [N])."""
        y = y.long()[:, None]
        t = mean.detach().scatter(1, y, -math.inf).argmax(1, keepdim=True)          # highest-scoring wrong class
        m = 1.0 + mean.gather(1, t)[:, 0] - mean.gather(1, y)[:, 0]
        v = var.gather(1, t)[:, 0] + var.gather(1, y)[:, 0]
        return m, v

    def expected_log_prob_bound(self, y, mean, var):
        return collapsed_bound(*self.contrast(y, mean, var))

    def predict_log_proba(self, mean, var):
        out = quadrature.log_prob_largest(mean, var, self.n_points_predict)
        return out - torch.logsumexp(out, -1, keepdim=True)   # remove the quadrature error from the row sums

    def decision_scores(self, mean, var, log_proba):
        """The SVM decision rule, argmax_c of the posterior mean of f*_c (the paper's "mean predictions"):
        the pseudo-likelihood is not normalised, and P(argmax f* = c) favours the classes of largest
        predictive variance where the means are close (rare classes: docs/results/bsvm.md)."""
        return mean


class BinaryHinge(Likelihood):
    """Binary hinge pseudo-likelihood (eq. 3; Wenzel et al. 2017): one latent function, labels {0, 1}.

    With s_n = 2y_n − 1 ∈ {−1, +1}, b_n = 1 − s_n f(x_n); ``expected_log_prob_bound`` is ℓ(1 − s_n m, v),
    ``expected_log_prob`` the exact ``expected_hinge_log_prob(1 − s_n m, v)``,
    and ``predict_log_proba`` is [log Φ(−m/√v), log Φ(m/√v)] = log P(sign f* = ±1).
    """

    elbo_is_bound = True

    def __init__(self, **kwargs):
        super().__init__(2, **kwargs)

    @property
    def n_latent(self) -> int:
        """L = 1."""
        return 1

    @staticmethod
    def _sign(y: torch.Tensor, dtype) -> torch.Tensor:
        return 2.0 * y.to(dtype) - 1.0

    def log_prob(self, y, F):
        return hinge_log_prob(1.0 - self._sign(y, F.dtype) * F[..., 0])

    def expected_log_prob(self, y, mean, var):
        return expected_hinge_log_prob(1.0 - self._sign(y, mean.dtype) * mean[:, 0], var[:, 0])

    def expected_log_prob_bound(self, y, mean, var):
        return collapsed_bound(1.0 - self._sign(y, mean.dtype) * mean[:, 0], var[:, 0])

    def predict_log_proba(self, mean, var):
        z = mean[:, 0] / var[:, 0].clamp_min(torch.finfo(var.dtype).tiny).sqrt()
        return torch.stack([log_ndtr(-z), log_ndtr(z)], -1)
