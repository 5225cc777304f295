"""The robust-max likelihood (scalable-ep eq. 13, alpha eq. 2): the argmax of f with label noise ε.

Its three expectations are exact up to one one-dimensional Gauss–Hermite integral,
P(f_y is the largest) (``quadrature.prob_label_largest``), so no Monte Carlo is involved; each is
tested against the base class's generic default.

What this module does not do: learn anything but ε, or approximate E_q[log p] by a bound.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .. import quadrature
from .base import Likelihood

__all__ = ["RobustMax"]

# predictions: P(f_c largest) in linear space (``quadrature.prob_largest``) while ε/C is above e^-600, where P's
# underflow below ~1e-308 cannot reach p = (1 − ε) P + ε/C; pairs with P provably below PREDICT_FLOOR · ε/C skip
# the panels (an 18-class prediction took 31 s for 4 000 rows in log space, most of it on panels)
LINEAR_PREDICT_MIN_LOG_B = -600.0
PREDICT_FLOOR = 1e-16


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
        log_eps = torch.nn.functional.logsigmoid(self.raw_epsilon)
        log_1m = torch.nn.functional.logsigmoid(-self.raw_epsilon)
        log_b = log_eps - math.log(self.n_classes)
        if float(log_b) > LINEAR_PREDICT_MIN_LOG_B:
            # p = (1 − ε) P + ε/C: P in linear space, and pairs whose P is provably below ε/C · 1e-16 left at
            # their Gauss–Hermite value, so p moves by less than its rounding (``quadrature.prob_largest``)
            b = log_b.exp().to(mean.dtype)
            P = quadrature.prob_largest(mean, var, self.n_points_predict, floor=PREDICT_FLOOR * float(b))
            out = torch.log(log_1m.exp().to(mean.dtype) * P + b)
        else:
            log_P = quadrature.log_prob_largest(mean, var, self.n_points_predict)
            out = torch.logaddexp(log_1m + log_P, log_b)
        # renormalise the quadrature error away so the rows are exact distributions
        return out - torch.logsumexp(out, -1, keepdim=True)
