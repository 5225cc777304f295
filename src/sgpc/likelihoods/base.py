"""The likelihood base class: p(y | f) for C classes through L latent functions, and its generic defaults.

A likelihood implements one method, ``log_prob(y, F)``. From it the base class derives, by
Gauss–Hermite quadrature (small L) or seeded Monte Carlo (large L):

* ``expected_log_prob(y, mean, var)`` = E_q[log p(y | f)], always the exact expectation
* ``log_tilted(y, mean, var, alpha)`` = log E_q[p(y | f)^α]          (EP, Power EP, prediction)
* ``predict_log_proba(mean, var)``    = log E_q[p(y = c | f)] for every c
* ``tilted_moments(y, mean, var, alpha)``: moments of Z⁻¹ p(y|f)^α q(f), from the derivatives of
  ``log_tilted`` (the one EP moment-matching rule, ``gaussian.match_moments``).

Subclasses override the first three only for speed or exactness, and each override is tested
against the generic default. A likelihood whose VI objective uses a closed-form *lower bound* of
E_q[log p] instead (additive-noise, softmax, hinge) declares ``elbo_is_bound = True`` and implements
``expected_log_prob_bound``; ``elbo_term`` is the per-point term VI maximises — the bound for those
classes, ``expected_log_prob`` for the others. Marginals ``mean``/``var`` are [N,L]; labels ``y``
are int64 [N].

What this module does not do: hold data, know about inducing points and posteriors, or define a
concrete likelihood (``robust_max``, ``additive``, ``hinge`` do).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .. import quadrature
from ..gaussian import match_moments

__all__ = ["Likelihood", "log1mexp"]


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

    #: True when VI maximises ``expected_log_prob_bound`` (a closed-form lower bound) instead of the exact term.
    elbo_is_bound: bool = False

    def expected_log_prob_bound(self, y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
        """A closed-form lower bound of E_{N(f|mean,var)}[log p(y|f)]: [N]. Implemented by the classes that
        declare ``elbo_is_bound``."""
        raise NotImplementedError(f"{type(self).__name__} declares no bound: its VI term is expected_log_prob")

    def elbo_term(self, y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
        """The per-point data term of the ELBO that VI maximises: ``expected_log_prob_bound`` when the class
        declares ``elbo_is_bound``, else the exact ``expected_log_prob``: [N]."""
        if self.elbo_is_bound:
            return self.expected_log_prob_bound(y, mean, var)
        return self.expected_log_prob(y, mean, var)

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
