"""Likelihoods of the additive-noise GP classifiers (Liu et al., additive-noise-gpc §II–III).

The class label comes from an internal function g = f + ε with a robust step on g:

* Gaussian noise ε ~ N(0, a) (the "unifying" family, §II-B and §III-B): a = 0 gives the step
  likelihood (GPC-I), a = 1 the (multinomial) probit (GPC-II), a = 2.897 approximates the logit
  (GPC-III; App. A). Because y ⊥ f | g, the ELBO's data term is E_{q(g)}[log p(y|g)] with
  q(g) = N(μ_f, ν_f + a): one normal CDF for binary labels (eq. 8), the one-dimensional integral
  S_i for C classes (eq. 18), both exact at a = 0 (no division by √a anywhere in the bound).
  ``BinaryAdditiveGaussian`` (one latent function, eqs. 5, 8, 9) and ``AdditiveGaussian``
  (C latent functions, eqs. 15, 18, 19).
* Gumbel noise (§III-D): the softmax likelihood, with the Gumbel error itself as augmenting variable
  and its variational parameter θ_i at the optimum, giving the bound eq. (25). ``Softmax`` (C latent
  functions; prediction eq. 26 by seeded Monte Carlo or by quasi-Monte Carlo) and ``BinarySoftmax``
  (its two-class form on the contrast f = f_1 − f_0, i.e. the exact logistic likelihood σ(f)).

The robustness δ: p(y|g) = 1 − δ when y is the argmax of g, δ/(C − 1) otherwise (eq. 15; eq. 5 for
C = 2). It is stored as the logit of the flip probability ε = Cδ/(C − 1) ∈ (0, 1), which keeps
δ ∈ (0, (C − 1)/C) and makes the a = 0 model exactly the robust-max likelihood with label noise ε.

Important: for a > 0 the bound term E_{q(g)}[log p(y|g)] is *not* E_{q(f)}[log p(y|f)] of the
marginal likelihood p(y|f) = ∫ p(y|g) p(g|f) dg (``log_prob``): it is a lower bound on it (Jensen),
and the two coincide at a = 0. Likewise the GPCsm bound −log(1 + P_i) is a lower bound on
E_q[log softmax]. So every class here declares ``elbo_is_bound``: ``expected_log_prob_bound`` is the
paper's bound term, which is what VI optimises (``elbo_term``), and ``expected_log_prob`` is the exact
E_q[log p(y|f)] (closed form where the bound is exact, a = 0; the generic default otherwise).
Predictions (``log_tilted`` with α = 1, ``predict_log_proba``) are E_q[p(y|f)] of the marginal
likelihood, exactly as eqs. (9), (19), (26).

What this module does not do: treat a as a hyper-parameter (App. B shows the bound always prefers
a = 0), or provide EP-family site updates (these likelihoods are for ``method="vi"``).
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.functional import logsigmoid, softplus
from torch.special import log_ndtr

from .. import quadrature
from .base import Likelihood, log1mexp

__all__ = ["NOISE_VARIANCE", "AdditiveGaussian", "BinaryAdditiveGaussian", "Softmax", "BinarySoftmax",
           "PREDICT_RULES"]

NOISE_VARIANCE = {"step": 0.0, "probit": 1.0, "logit": 2.897}   # a of GPC-I, -II, -III (§II-A, App. A)
PREDICT_RULES = ("qmc", "mc")


def _raw_flip(delta: float, n_classes: int) -> torch.Tensor:
    """logit of ε = Cδ/(C − 1), checking δ ∈ (0, (C − 1)/C)."""
    hi = (n_classes - 1) / n_classes
    if not 0.0 < delta < hi:
        raise ValueError(f"delta must be in (0, {hi:.4g}) for {n_classes} classes, got {delta}")
    eps = delta / hi
    return torch.tensor(math.log(eps) - math.log1p(-eps), dtype=torch.float64)


def _init_robust_step(lik: Likelihood, noise_variance: float, delta: float, learn_delta: bool) -> None:
    """Store a (checked) and δ (as ``raw_flip``, a parameter or a fixed buffer) on ``lik``."""
    a = float(noise_variance)
    if not (a >= 0.0 and math.isfinite(a)):
        raise ValueError(f"noise_variance a must be a finite number >= 0, got {noise_variance}")
    lik.noise_variance = a
    raw = _raw_flip(delta, lik.n_classes)
    if learn_delta:
        lik.raw_flip = nn.Parameter(raw)
    else:
        lik.register_buffer("raw_flip", raw)


def _delta(raw_flip: torch.Tensor, n_classes: int) -> torch.Tensor:
    """δ = (C − 1)/C · σ(raw), a scalar tensor in (0, (C − 1)/C)."""
    return torch.sigmoid(raw_flip) * (n_classes - 1) / n_classes


def _log_hit_miss(raw_flip: torch.Tensor, n_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(log(1 − δ), log(δ/(C − 1))): log p(y|g) when y is / is not the argmax of g (eq. 15)."""
    log_miss = logsigmoid(raw_flip) - math.log(n_classes)                           # log(ε/C) = log(δ/(C−1))
    log_hit = torch.logaddexp(logsigmoid(-raw_flip), log_miss)                      # log(1 − ε + ε/C)
    return log_hit, log_miss


def _mix(raw_flip: torch.Tensor, n_classes: int, log_S: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """log(S (1 − δ)^α + (1 − S) (δ/(C − 1))^α) from log S."""
    log_hit, log_miss = _log_hit_miss(raw_flip, n_classes)
    return torch.logaddexp(log_S + alpha * log_hit, log1mexp(log_S) + alpha * log_miss)


def _exact_expected_log_prob(lik: Likelihood, y, mean, var):
    """E_q[log p(y|f)] of a robust-step additive-noise likelihood: at a = 0 p(y|f) is two-valued and the
    paper's bound is the exact expectation; for a > 0 the base class's generic default."""
    if lik.noise_variance == 0.0:
        return lik.expected_log_prob_bound(y, mean, var)
    return Likelihood.expected_log_prob(lik, y, mean, var)


class BinaryAdditiveGaussian(Likelihood):
    """Binary GPC with additive Gaussian noise (one latent function; additive-noise-gpc §II-B).

    Labels y ∈ {0, 1}, s = 2y − 1; f is the latent function of class 1.
        p(y|f) = (1 − 2δ) Φ(s f/√a) + δ    (eq. 5; the step (1 − 2δ) H(s f) + δ at a = 0),
        E_{q(g)}[log p(y|g)] = log((1 − δ)/δ) Φ(s μ/√(a + ν)) + log δ    (eq. 8; ``expected_log_prob_bound``),
        p(y* = 1) = (1 − 2δ) Φ(μ*/√(a + ν*)) + δ    (eq. 9).

    Args:
        noise_variance: a ≥ 0 (``NOISE_VARIANCE``: 0 step, 1 probit, 2.897 logit).
        delta: initial robustness δ ∈ (0, 1/2); learn_delta: make δ trainable (the paper's default).
    """

    elbo_is_bound = True

    def __init__(self, noise_variance: float = 0.0, delta: float = 1e-3, *, learn_delta: bool = True, **kwargs):
        super().__init__(2, **kwargs)
        _init_robust_step(self, noise_variance, delta, learn_delta)

    @property
    def delta(self) -> torch.Tensor:
        """δ, a scalar tensor in (0, (C − 1)/C)."""
        return _delta(self.raw_flip, self.n_classes)

    @property
    def n_latent(self) -> int:
        """L = 1."""
        return 1

    def _z(self, s_mean: torch.Tensor, var: torch.Tensor | float) -> torch.Tensor:
        """s μ/√(a + ν); at a + ν = 0 the step: +∞ if s μ > 0, −∞ if s μ < 0 and 0 at the tie s μ = 0 (so
        the two classes' probabilities still sum to one there). Where a + ν = 0 the division and the square
        root see 1 instead, so that their derivatives, multiplied by ``where``'s zero, stay finite (∞ · 0 was
        a NaN gradient at ν = 0, and at ν ≤ 1e-18 through log Φ's); a positive a + ν below √tiny (1e-154 in
        float64, 1e-19 in float32) counts as √tiny, where (a + ν)^{-3/2} in the derivative would overflow.
        That moves Φ only where also |μ| < 40·(a + ν)^{1/2}, i.e. below 1e-75 (float64) or 1e-8."""
        total = self.noise_variance + var
        step = torch.where(s_mean > 0, math.inf, torch.where(s_mean < 0, -math.inf, 0.0)).to(s_mean.dtype)
        if isinstance(total, float) and total == 0.0:
            return step
        total = torch.as_tensor(total, dtype=s_mean.dtype, device=s_mean.device)
        positive = total > 0
        floor = math.sqrt(torch.finfo(s_mean.dtype).tiny)
        return torch.where(positive, s_mean / torch.where(positive, total, 1.0).clamp_min(floor).sqrt(), step)

    def _log_cdf(self, s_mean: torch.Tensor, var: torch.Tensor | float) -> torch.Tensor:
        """log Φ(s μ/√(a + ν)) (the step at a + ν = 0, see ``_z``)."""
        return log_ndtr(self._z(s_mean, var))

    def log_prob(self, y, F):
        s = (2 * y - 1).to(F.dtype)
        return _mix(self.raw_flip, self.n_classes, self._log_cdf(s * F[..., 0], 0.0))

    def expected_log_prob(self, y, mean, var):
        return _exact_expected_log_prob(self, y, mean, var)

    def expected_log_prob_bound(self, y, mean, var):
        # eq. (8): Φ log(1 − δ) + (1 − Φ) log δ with Φ = Φ(s μ/√(a + ν))
        log_hit, log_miss = _log_hit_miss(self.raw_flip, self.n_classes)
        s = (2 * y - 1).to(mean.dtype)
        P = quadrature.ndtr(self._z(s * mean[:, 0], var[:, 0]))
        return P * log_hit + (1.0 - P) * log_miss

    def log_tilted(self, y, mean, var, alpha=1.0):
        # α = 1: eq. (9). At a = 0, p(y|f) is two-valued, so E[p^α] is exact for every α. Otherwise
        # p^α is a smoothed step of width √a at f = 0: panels that resolve it at any cavity variance
        if alpha != 1.0 and self.noise_variance > 0.0:
            yc = y.long()[:, None]
            return quadrature.log_expect_exp_step(lambda F: alpha * self.log_prob(yc, F[..., None]), mean[:, 0],
                                                  var[:, 0], 0.0, math.sqrt(self.noise_variance))
        s = (2 * y - 1).to(mean.dtype)
        return _mix(self.raw_flip, self.n_classes, self._log_cdf(s * mean[:, 0], var[:, 0]), alpha)

    def predict_log_proba(self, mean, var):
        N = mean.shape[0]
        cols = [self.log_tilted(torch.full((N,), c, dtype=torch.long, device=mean.device), mean, var)
                for c in (0, 1)]
        return torch.stack(cols, -1)


class AdditiveGaussian(Likelihood):
    """Multi-class GPC with additive Gaussian noise (C latent functions; additive-noise-gpc §III-B).

        p(y|f) = (1 − Cδ/(C − 1)) S_0(f) + δ/(C − 1),  S_0(f) = P(f_y + ε_y > f_c + ε_c ∀c ≠ y)  (eq. 15),
        E_{q(g)}[log p(y|g)] = S_i log(1 − δ) + (1 − S_i) log(δ/(C − 1))    (eq. 18; ``expected_log_prob_bound``),
        p(y* = c) = (1 − δ) S_*^c + δ/(C − 1) (1 − S_*^c)    (eq. 19),
    where S_i = ∫ N(t | μ_y, a + ν_y) Π_{c≠y} Φ((t − μ_c)/√(a + ν_c)) dt is the probability that g_y
    is the largest under q(g) = N(μ, ν + a), by Gauss–Hermite in t (``quadrature``). At a = 0 this
    is the robust-max likelihood with ε = Cδ/(C − 1) (the paper's remark below eq. 18).

    Args:
        n_classes: C ≥ 2 (C = 2 gives the two-latent form; ``BinaryAdditiveGaussian`` is the one-latent one).
        noise_variance: a ≥ 0; delta: initial δ ∈ (0, (C − 1)/C); learn_delta: trainable δ.
        n_points: Gauss–Hermite nodes of S_i in the bound; n_points_predict: nodes in predictions.
    """

    elbo_is_bound = True

    def __init__(self, n_classes: int, noise_variance: float = 0.0, delta: float = 1e-3, *,
                 learn_delta: bool = True, n_points: int = 32, n_points_predict: int = 64, **kwargs):
        super().__init__(n_classes, **kwargs)
        _init_robust_step(self, noise_variance, delta, learn_delta)
        self.n_points = int(n_points)
        self.n_points_predict = int(n_points_predict)

    @property
    def delta(self) -> torch.Tensor:
        """δ, a scalar tensor in (0, (C − 1)/C)."""
        return _delta(self.raw_flip, self.n_classes)

    def _log_S0(self, y: torch.Tensor, F: torch.Tensor) -> torch.Tensor:
        """log S_0(f) = log P(f_y + ε_y largest): y [N], F [..., N, C] -> [..., N]."""
        yy = y.long().expand(*F.shape[:-1])
        if self.noise_variance == 0.0:
            f_y = F.gather(-1, yy[..., None])[..., 0]
            others = F.scatter(-1, yy[..., None], -math.inf).amax(-1)
            return torch.where(f_y > others, 0.0, -math.inf).to(F.dtype)
        flat = F.reshape(-1, F.shape[-1])
        var = torch.full_like(flat, self.noise_variance)
        return quadrature.log_prob_label_largest(yy.reshape(-1), flat, var, self.n_points).reshape(F.shape[:-1])

    def log_prob(self, y, F):
        return _mix(self.raw_flip, self.n_classes, self._log_S0(y, F))

    def expected_log_prob(self, y, mean, var):
        return _exact_expected_log_prob(self, y, mean, var)

    def expected_log_prob_bound(self, y, mean, var):
        # eq. (18)
        log_hit, log_miss = _log_hit_miss(self.raw_flip, self.n_classes)
        S = quadrature.prob_label_largest(y, mean, var + self.noise_variance, self.n_points).clamp(0.0, 1.0)
        return S * log_hit + (1.0 - S) * log_miss

    def log_tilted(self, y, mean, var, alpha=1.0):
        # α = 1: eq. (19) for the observed class. At a = 0 exact for every α (two-valued p).
        if alpha != 1.0 and self.noise_variance > 0.0:
            return super().log_tilted(y, mean, var, alpha)
        log_S = quadrature.log_prob_label_largest(y, mean, var + self.noise_variance, self.n_points_predict)
        return _mix(self.raw_flip, self.n_classes, log_S, alpha)

    def predict_log_proba(self, mean, var):
        # eq. (19) for every class; renormalised so that the quadrature error leaves exact distributions
        log_S = quadrature.log_prob_largest(mean, var + self.noise_variance, self.n_points_predict)
        out = _mix(self.raw_flip, self.n_classes, log_S)
        return out - torch.logsumexp(out, -1, keepdim=True)


def _softmax_bound(y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """−log(1 + P_i), eq. (25), as (μ_y − ν_y/2) − logsumexp_c w_c with w_c = μ_c + ν_c/2 (c ≠ y),
    w_y = μ_y − ν_y/2, since P_i = exp(ν_y/2 − μ_y) Σ_{c≠y} exp(ν_c/2 + μ_c): [N]."""
    yi = y.long()[:, None]
    own = mean.gather(1, yi) - 0.5 * var.gather(1, yi)                             # [N,1]
    w = (mean + 0.5 * var).scatter(1, yi, own)
    return own[:, 0] - torch.logsumexp(w, -1)


class Softmax(Likelihood):
    """Softmax likelihood through Gumbel noise (GPCsm; additive-noise-gpc §III-D, App. C).

        p(y|f) = exp(f_y)/Σ_c exp(f_c) = ∫ φ_G(ε) Π_{c≠y} Φ_G(ε + f_y − f_c) dε    (eqs. 14, 20).
    With q(ε_i) = Gumbel(log θ_i, 1) the per-point bound (eq. 24) is
        −P_i/θ_i − log θ_i − 1/θ_i + 1,  P_i = exp(ν_y/2 − μ_y) Σ_{c≠y} exp(ν_c/2 + μ_c),
    maximised at θ_i* = 1 + P_i, giving −log(1 + P_i) (eq. 25) = −log E_q[Σ_c exp(f_c − f_y)]
    (``expected_log_prob_bound``; ``expected_log_prob`` is the generic E_q[log softmax_y(f)]).

    Prediction (eq. 26) E_q[softmax(f*)] has no closed form. ``predict_rule="mc"`` averages the
    softmax over ``n_samples_predict`` seeded Gaussian draws f = μ + √ν ∘ t (the paper's estimate);
    ``"qmc"`` uses the same number of points from a scrambled Sobol sequence with a fixed seed mapped
    through the normal quantile (a fixed, deterministic rule; its error decays nearly as 1/S
    instead of 1/√S for this smooth integrand, docs/design-notes.md).

    Args:
        n_classes: C ≥ 2.
        n_samples_predict: S, points per prediction; predict_rule: "qmc" or "mc"; seed: their seed.
    """

    elbo_is_bound = True

    def __init__(self, n_classes: int, *, n_samples_predict: int = 1024, predict_rule: str = "qmc",
                 seed: int = 0, **kwargs):
        super().__init__(n_classes, **kwargs)
        if predict_rule not in PREDICT_RULES:
            raise ValueError(f"unknown predict_rule {predict_rule!r}; valid: {', '.join(map(repr, PREDICT_RULES))}")
        if int(n_samples_predict) < 1:
            raise ValueError(f"n_samples_predict must be a positive integer, got {n_samples_predict}")
        self.n_samples_predict = int(n_samples_predict)
        self.predict_rule = predict_rule
        self.seed = int(seed)

    def log_prob(self, y, F):
        return F.log_softmax(-1).gather(-1, y.long().expand(*F.shape[:-1])[..., None])[..., 0]

    def expected_log_prob_bound(self, y, mean, var):
        return _softmax_bound(y, mean, var)

    def log_tilted(self, y, mean, var, alpha=1.0):
        if alpha != 1.0:
            return super().log_tilted(y, mean, var, alpha)
        return self.predict_log_proba(mean, var).gather(1, y.long()[:, None])[:, 0]

    def normal_points(self, dim: int, dtype=torch.float64, device=None) -> torch.Tensor:
        """The S standard-normal points t [S, dim] of the prediction rule (deterministic for a seed)."""
        S = self.n_samples_predict
        if self.predict_rule == "mc":
            gen = torch.Generator(device="cpu").manual_seed(self.seed)
            return torch.randn(S, dim, generator=gen, dtype=dtype).to(device)
        sobol = torch.quasirandom.SobolEngine(dim, scramble=True, seed=self.seed)
        U = sobol.draw(S, dtype=torch.float64).clamp(1e-12, 1 - 1e-12)
        return (math.sqrt(2.0) * torch.erfinv(2.0 * U - 1.0)).to(dtype=dtype, device=device)

    def predict_log_proba(self, mean, var):
        # eq. (26): log (1/S) Σ_s softmax(μ + √ν ∘ t_s), in chunks of samples to bound memory
        N, C = mean.shape
        T = self.normal_points(C, mean.dtype, mean.device)                          # [S,C]
        std = var.clamp_min(0.0).sqrt()
        chunk = max(1, 2 ** 22 // max(1, N * C))
        acc = []
        for s in range(0, T.shape[0], chunk):
            F = mean[None] + std[None] * T[s:s + chunk, None, :]                     # [s,N,C]
            acc.append(torch.logsumexp(F.log_softmax(-1), 0))
        return torch.logsumexp(torch.stack(acc), 0) - math.log(T.shape[0])


class BinarySoftmax(Likelihood):
    """The two-class softmax on one latent function f = f_1 − f_0: the logistic likelihood.

        softmax(f_0, f_1)_y = σ(s (f_1 − f_0)),  s = 2y − 1    (eq. 14 with C = 2; eq. 2 "logit"),
    and eq. (25) with C = 2 becomes −log(1 + exp(−s μ + ν/2)) with μ, ν the mean and variance of
    the contrast (``expected_log_prob_bound``). So a two-class ``Softmax`` with independent latent
    functions is this model with f = f_1 − f_0 (mean μ_1 − μ_0, variance ν_1 + ν_0), identically (tested). Prediction is the
    one-dimensional E_q[σ(s f)] (and the tilted E_q[σ(s f)^α]) by ``quadrature.log_expect_exp_step``,
    accurate at any variance while the step at f = 0 lies within ±8 standard deviations of the mean.
    Beyond (|μ| > 8√ν, which needs √ν ≳ 1 to matter) the probability of the unlikely class, below
    Φ(−8) ≈ 6e-16, is underestimated (the panels stop at ±8√ν and miss the mass near the step):
    predict_proba is unaffected, its log and the NLL of such a point are not.
    """

    elbo_is_bound = True

    def __init__(self, **kwargs):
        super().__init__(2, **kwargs)

    @property
    def n_latent(self) -> int:
        """L = 1."""
        return 1

    def log_prob(self, y, F):
        return logsigmoid((2 * y - 1).to(F.dtype) * F[..., 0])

    def expected_log_prob_bound(self, y, mean, var):
        s = (2 * y - 1).to(mean.dtype)
        return -softplus(0.5 * var[:, 0] - s * mean[:, 0])

    def log_tilted(self, y, mean, var, alpha=1.0):
        s = (2 * y - 1).to(mean.dtype)[:, None]
        # σ(s f)^α is a smoothed step of width ~1.8 at f = 0: panels resolve it at any variance
        return quadrature.log_expect_exp_step(lambda F: alpha * logsigmoid(s * F), mean[:, 0], var[:, 0], 0.0, 1.8)

    def predict_log_proba(self, mean, var):
        N = mean.shape[0]
        out = torch.stack([self.log_tilted(torch.full((N,), c, dtype=torch.long, device=mean.device), mean, var)
                           for c in (0, 1)], -1)
        return out - torch.logsumexp(out, -1, keepdim=True)
