"""Likelihoods p(y | f) for C classes through L latent functions.

A likelihood implements one method, ``log_prob(y, F)``. From it the base class derives, by
Gauss–Hermite quadrature (small L) or seeded Monte Carlo (large L):

* ``expected_log_prob(y, mean, var)`` = E_q[log p(y | f)]          (VI)
* ``log_tilted(y, mean, var, alpha)`` = log E_q[p(y | f)^α]          (EP, Power EP, prediction)
* ``predict_log_proba(mean, var)``    = log E_q[p(y = c | f)] for every c
* ``tilted_moments(y, mean, var, alpha)``: moments of Z⁻¹ p(y|f)^α q(f), from the derivatives of
  ``log_tilted`` (the one EP moment-matching rule, ``gaussian.match_moments``).

Subclasses override the first three only for speed or exactness, and each override is tested
against the generic default. Marginals ``mean``/``var`` are [N,L]; labels ``y`` are int64 [N].

What this module does not do: hold data, or know about inducing points and posteriors.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from . import quadrature
from .gaussian import match_moments

__all__ = ["Likelihood", "RobustMax"]


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 − exp(x)) for x ≤ 0, stable at both ends (Mächler 2012)."""
    x = x.clamp_max(-torch.finfo(x.dtype).tiny)
    near = x > -math.log(2.0)
    # each branch only sees inputs where it is finite: torch.where's gradient is 0 × (the other
    # branch's derivative), which is NaN when that derivative is infinite (log1p(−exp(x)) at x → 0)
    half = torch.full_like(x, -math.log(2.0))
    return torch.where(near, torch.log(-torch.expm1(torch.where(near, x, half))),
                       torch.log1p(-torch.exp(torch.where(near, half, x))))


class Likelihood(nn.Module):
    """Base class. Args: n_classes C; n_quadrature, n_samples, max_grid control the generic defaults."""

    def __init__(self, n_classes: int, *, n_quadrature: int = 20, n_samples: int = 4096, max_grid: int = 8000):
        super().__init__()
        if n_classes < 2:
            raise ValueError(f"a classification likelihood needs at least 2 classes, got {n_classes}")
        self.n_classes = int(n_classes)
        self.n_quadrature = int(n_quadrature)
        self.n_samples = int(n_samples)
        self.max_grid = int(max_grid)

    @property
    def n_latent(self) -> int:
        """L, the number of latent functions (C for multi-class likelihoods)."""
        return self.n_classes

    def log_prob(self, y: torch.Tensor, F: torch.Tensor) -> torch.Tensor:
        """log p(y | f): y [N], F [..., N, L] -> [..., N]."""
        raise NotImplementedError

    def _quad(self) -> dict:
        return dict(n_points=self.n_quadrature, n_samples=self.n_samples, max_grid=self.max_grid)

    def expected_log_prob(self, y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
        """E_{N(f|mean,var)}[log p(y|f)]: [N]."""
        return quadrature.expect(lambda F: self.log_prob(y, F), mean, var, **self._quad())

    def log_tilted(self, y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
        """log E_{N(f|mean,var)}[p(y|f)^α]: [N]."""
        return quadrature.log_expect_exp(lambda F: alpha * self.log_prob(y, F), mean, var, **self._quad())

    def predict_log_proba(self, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
        """log p(y* = c | x*) = log E[p(c | f*)] for every class: [N,C]."""
        N = mean.shape[0]
        cols = [self.log_tilted(torch.full((N,), c, dtype=torch.long, device=mean.device), mean, var, 1.0)
                for c in range(self.n_classes)]
        return torch.stack(cols, -1)

    def decision_scores(self, mean: torch.Tensor, var: torch.Tensor, log_proba: torch.Tensor) -> torch.Tensor:
        """Scores [N,C] whose argmax is the predicted class, given ``log_proba = predict_log_proba(mean, var)``:
        the most probable class (a likelihood with another decision rule overrides this)."""
        return log_proba

    def tilted_moments(self, y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, alpha: float = 1.0
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log Z [N], tilted mean [N,L], tilted var [N,L]) of Z⁻¹ p(y|f)^α N(f | mean, var)."""
        log_Z, new_mean, new_var = match_moments(lambda m, v: self.log_tilted(y, m, v, alpha), mean, var)
        return log_Z.to(mean.dtype), new_mean.to(mean.dtype), new_var.to(mean.dtype)


class RobustMax(Likelihood):
    """Robust-max: p(y | f) = (1 − ε) Π_{k≠y} Θ(f_y − f_k) + ε/C   (scalable-ep eq. 13, alpha eq. 2).

    p takes two values, a = 1 − ε + ε/C when f_y is the largest and b = ε/C otherwise, so with
    P = P(f_y largest) from the one-dimensional integral (``quadrature.log_prob_label_largest``):
        E[log p] = P log a + (1 − P) log b,   log E[p^α] = log(P a^α + (1 − P) b^α),
    exact up to the quadrature in that integral — no Monte Carlo.

    Args:
        n_classes: C.
        epsilon: label-noise probability ε ∈ (0, 1) (Hensman et al. 2015 use 1e-3).
        learn_epsilon: make ε a trainable parameter (stored as a logit).
        n_points: Gauss–Hermite nodes of the 1-D integral in training objectives.
        n_points_predict: nodes for predictive probabilities (more: a prediction is computed once,
            and the integrand is steep when the class variances differ by orders of magnitude).
    """

    def __init__(self, n_classes: int, epsilon: float = 1e-3, *, learn_epsilon: bool = False,
                 n_points: int = 32, n_points_predict: int = 64, **kwargs):
        super().__init__(n_classes, **kwargs)
        if not 0.0 < epsilon < 1.0:
            raise ValueError(f"epsilon must be in (0, 1), got {epsilon}")
        logit = torch.tensor(math.log(epsilon) - math.log1p(-epsilon), dtype=torch.float64)
        if learn_epsilon:
            self.raw_epsilon = nn.Parameter(logit)
        else:
            self.register_buffer("raw_epsilon", logit)
        self.n_points = int(n_points)
        self.n_points_predict = int(n_points_predict)

    @property
    def epsilon(self) -> torch.Tensor:
        """ε, a scalar tensor."""
        return torch.sigmoid(self.raw_epsilon)

    def _log_a_b(self) -> tuple[torch.Tensor, torch.Tensor]:
        log_eps = torch.nn.functional.logsigmoid(self.raw_epsilon)
        log_b = log_eps - math.log(self.n_classes)
        log_a = torch.logaddexp(torch.nn.functional.logsigmoid(-self.raw_epsilon), log_b)
        return log_a, log_b

    def log_prob(self, y, F):
        log_a, log_b = self._log_a_b()
        f_y = F.gather(-1, y.long().expand(*F.shape[:-1])[..., None])               # [...,N,1]
        others = F.scatter(-1, y.long().expand(*F.shape[:-1])[..., None], -math.inf)
        is_max = f_y[..., 0] > others.amax(-1)
        return torch.where(is_max, log_a.to(F.dtype), log_b.to(F.dtype))

    def expected_log_prob(self, y, mean, var):
        log_a, log_b = self._log_a_b()
        P = quadrature.prob_label_largest(y, mean, var, self.n_points).clamp(0.0, 1.0)
        return P * log_a + (1.0 - P) * log_b

    def log_tilted(self, y, mean, var, alpha=1.0):
        # log(P a^α + (1 − P) b^α) = α log b + log1p((e^{α(log a − log b)} − 1) P): stable as α → 0
        # (expm1), and P in linear space — a sum of positive terms, so a small P keeps its relative
        # precision — from the rule with a written-out gradient: the log-space P (log_ndtr, logsumexp,
        # autograd) took ~60% of an APEP/ARPEP/RPAPEP step
        log_a, log_b = self._log_a_b()
        P = quadrature.prob_label_largest(y, mean, var, self.n_points).clamp(0.0, 1.0)
        return alpha * log_b + torch.log1p(torch.expm1(alpha * (log_a - log_b)) * P)

    def predict_log_proba(self, mean, var):
        log_P = quadrature.log_prob_largest(mean, var, self.n_points_predict)
        log_eps = torch.nn.functional.logsigmoid(self.raw_epsilon)
        log_1m = torch.nn.functional.logsigmoid(-self.raw_epsilon)
        out = torch.logaddexp(log_1m + log_P, log_eps - math.log(self.n_classes))
        # renormalise the quadrature error away so the rows are exact distributions
        return out - torch.logsumexp(out, -1, keepdim=True)
