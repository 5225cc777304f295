"""Free-Gaussian q(u) and the variational objective (Hensman et al. 2015; scalable-ep §3).

q(u_l) = N(L_K m̃_l, L_K L̃_l L̃_lᵀ L_Kᵀ) is parameterised in the whitened space v = L_K⁻¹ u
(m̃ [L,M], L̃ [L,M,M] lower triangular), which makes KL(q‖p) = KL(N(m̃, L̃L̃ᵀ) ‖ N(0, I)) and
decouples q from the kernel's scale. The objective is the ELBO of scalable-ep eq. (15):

    ELBO = Σ_i E_{q(f_i)}[log p(y_i | f_i)] − KL(q(u) ‖ p(u)),

estimated on a minibatch B as (N/|B|) Σ_{i∈B} E[log p(y_i|f_i)] − KL (unbiased). With row weights w
(``engine``), each row's term is multiplied by its w_i — the objective of the data with row i repeated w_i
times — and the minibatch estimate (N/|B|) Σ_{i∈B} w_i E[log p(y_i|f_i)] − KL stays unbiased; the α-objectives
weigh their per-row terms the same way, and RPAPEP counts W = Σ_i w_i data factors instead of N.

The engine follows the protocol shared by all methods (``train.fit``): ``init``, ``update``
(a no-op: VI has no closed-form step), ``loss`` (−objective estimate), ``posterior``,
``trainable``. Other free-Gaussian objectives (α-objectives, BSVM) will live here too.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import math

import torch
from torch import nn

from . import natgrad
from .engine import Capabilities, Engine, rows_of
from .gaussian import cholesky, kl_standard_normal, matvec, solve_lower, sum_sq
from .sparse import InducingPosterior, SparseGP, whitened_marginals

__all__ = ["WhitenedGaussian", "elbo", "alpha_objective", "rpapep_objective", "VI", "VIState"]


class WhitenedGaussian(nn.Module):
    """Trainable whitened q(v): mean m̃ [L,M] (init 0) and Cholesky factor L̃ [L,M,M] (init I, i.e. q = prior).

    The factor is the lower triangle of a free matrix; its diagonal's sign does not change
    L̃L̃ᵀ, and ``chol`` flips columns so the returned factor has a positive diagonal.
    """

    def __init__(self, n_latent: int, n_inducing: int, dtype=torch.float64, device=None):
        super().__init__()
        self.mean = nn.Parameter(torch.zeros(n_latent, n_inducing, dtype=dtype, device=device))
        eye = torch.eye(n_inducing, dtype=dtype, device=device)
        self.raw_chol = nn.Parameter(eye.repeat(n_latent, 1, 1))

    @property
    def chol(self) -> torch.Tensor:
        """L̃, [L,M,M] lower triangular with non-negative diagonal."""
        T = torch.tril(self.raw_chol)
        sign = torch.where(T.diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0).to(T.dtype)
        return T * sign[..., None, :]


def _weighted_sum(terms: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Σ_i w_i t_i of per-row terms [B] (Σ_i t_i without weights)."""
    return terms.sum() if weight is None else (weight * terms).sum()


def elbo(model: SparseGP, q: WhitenedGaussian, X: torch.Tensor, y: torch.Tensor, n_total: int,
         weight: torch.Tensor | None = None) -> torch.Tensor:
    """Minibatch estimate of the ELBO, eq. (15): (N/|B|) Σ_B w_i E[log p(y_i|f_i)] − KL.

    Args:
        X [B,D], y [B] (int64), n_total N; weight: the rows' weights w [B] (None: 1 each). Returns a scalar
        (differentiable).
    """
    chol_w = q.chol
    mean, var = whitened_marginals(model, q.mean, chol_w, X)
    ell = _weighted_sum(model.likelihood.elbo_term(y, mean, var), weight)
    kl = kl_standard_normal(q.mean, chol_w).sum()
    return (n_total / X.shape[0]) * ell - kl


def alpha_objective(model: SparseGP, q: WhitenedGaussian, X: torch.Tensor, y: torch.Tensor, n_total: int,
                    alpha: float, weight: torch.Tensor | None = None) -> torch.Tensor:
    """ARPEP objective, alpha paper eq. (9): (N/|B|)(1/α) Σ_B w_i log E_q[p(y_i|f_i)^α] − KL(q ‖ p).

    As α → 0, (1/α) log E[p^α] → E[log p] and this tends to the ELBO (eq. 15); the likelihood's
    ``log_tilted`` keeps the small-α limit stable. Args as ``elbo``; returns a scalar.
    """
    chol_w = q.chol
    mean, var = whitened_marginals(model, q.mean, chol_w, X)
    local = _weighted_sum(model.likelihood.log_tilted(y, mean, var, alpha), weight) / alpha
    return (n_total / X.shape[0]) * local - kl_standard_normal(q.mean, chol_w).sum()


def rpapep_objective(model: SparseGP, q: WhitenedGaussian, X: torch.Tensor, y: torch.Tensor, n_total: int,
                     alpha: float, weight: torch.Tensor | None = None,
                     n_factors: float | None = None) -> torch.Tensor:
    """RPAPEP energy, alpha paper eq. (10): q a free Gaussian and the prior one more factor.

    With N + 1 tied factors each approximated by q^{1/(N+1)}, c = 1 − α/(N+1), and (whitened) prior
    θ_p = (0, I):
        log Z_q = g(θ) + (1/α) [ Σ_i (log E_{q^c}[p(y_i|f_i)^α] + g(cθ) − g(θ))
                                 + g(cθ + αθ_p) − α g(θ_p) − g(θ) ],
    where q^c = N(m, Σ/c) is the cavity. α = 1 gives an EP energy with a free q; α → 0 gives the
    ELBO (checked in the tests). The data sum is estimated on the minibatch (× N/|B|). With row weights w [B]
    (``weight``), a row's term counts w_i times and N in the formulas above is the number of data factors
    ``n_factors`` = W = Σ_i w_i over all rows (the data with row i repeated w_i times); None: N = n_total.
    """
    N = n_total if n_factors is None else n_factors
    c = 1.0 - alpha / (N + 1)
    chol_w = q.chol
    M = q.mean.shape[-1]
    Lk = model.chol_Kuu()
    A, kdiag = model.projection(X, Lk)
    mean = matvec(A.mT, q.mean)
    B = chol_w.mT @ A
    var = kdiag - sum_sq(A, -2) + sum_sq(B, -2) / c
    local = _weighted_sum(model.likelihood.log_tilted(y, mean.T, var.clamp_min(torch.finfo(var.dtype).tiny).T, alpha),
                          weight)
    # The Gaussian terms of eq. (10), g(θ) + (1/α)[N(g(cθ) − g(θ)) + g(cθ + αθ_p) − αg(θ_p) − g(θ)], in
    # closed form. With Σ = L̃L̃ᵀ, θ' = cθ + αθ_p has precision cΣ⁻¹ + αI = Σ⁻¹(cI + αΣ) and shift cΣ⁻¹m,
    # and collecting terms (the (M/2) log 2π constants and every mᵀΣ⁻¹m cancel) leaves, per latent,
    #     −½ mᵀQ⁻¹m + log|L̃| − ½ log|Q| / α − (N+1)(M/2) log(c) / α,     Q = I + (α/c)Σ.
    # Q's eigenvalues are ≥ 1, so nothing here inverts Σ: the form stays finite and accurate in float32
    # when q is nearly singular (forming cΣ⁻¹ + αI and subtracting the g's did not, on MNIST). As α → 0 it
    # tends to −KL(q‖p) = −½(tr Σ + mᵀm − M − log|Σ|), the ELBO's (checked in the tests).
    eye = torch.eye(M, dtype=chol_w.dtype, device=chol_w.device)
    Q = eye + (alpha / c) * (chol_w @ chol_w.mT)
    Lq = cholesky(0.5 * (Q + Q.mT), jitter=0.0, what="RPAPEP prior-factor term I + (α/c)Σ")
    t = solve_lower(Lq, q.mean[..., None])[..., 0]
    log_chol = torch.log(chol_w.diagonal(dim1=-2, dim2=-1).abs()).sum(-1)
    gauss = -0.5 * (t * t).sum(-1) + log_chol - torch.log(Lq.diagonal(dim1=-2, dim2=-1)).sum(-1) / alpha \
        - (N + 1) * 0.5 * M * math.log1p(-alpha / (N + 1)) / alpha
    return (n_total / X.shape[0]) * local / alpha + gauss.sum()


@dataclass
class VIState:
    """Explicit state of the VI engine: the variational parameters, the natural-gradient steps that had to
    be shortened (``halved``) or were refused (``refused``) to keep q proper, and the training rows' weights
    ``w`` [N] (None: 1 each)."""

    q: WhitenedGaussian
    halved: int = 0
    refused: int = 0
    w: torch.Tensor | None = None


@dataclass(frozen=True)
class VI(Engine):
    """Settings of the free-Gaussian engine.

    Attributes:
        alpha: None for the ELBO (``vi``); a value in (0, 1] for an α-objective.
        objective: with alpha, "arpep" (alpha eq. 9) or "rpapep" (alpha eq. 10).
        natgrad_lr: None: q(u) is optimised with the hyper-parameters; γ > 0: q(u) takes natural-gradient
            steps of size γ (``natgrad``) from the same backward pass, and the optimiser only the rest.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(streamable=True, free_gaussian=True, weighted=True)
    alpha: float | None = None
    objective: str = "arpep"
    natgrad_lr: float | None = None

    def __post_init__(self):
        if self.alpha is not None and not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha}")
        if self.natgrad_lr is not None and not (math.isfinite(self.natgrad_lr) and self.natgrad_lr > 0):
            raise ValueError(f"natgrad_lr must be a finite number > 0 or None, got {self.natgrad_lr}")
        if self.objective not in ("arpep", "rpapep"):
            raise ValueError(f"unknown objective {self.objective!r}; valid: 'arpep', 'rpapep'")

    def init(self, model: SparseGP, X: torch.Tensor, y: torch.Tensor, generator: torch.Generator,
             weight: torch.Tensor | None = None) -> VIState:
        """q starts at the prior; ``weight``: the rows' weights [N] (None: 1 each)."""
        Z = model.Z
        return VIState(WhitenedGaussian(model.n_latent, model.n_inducing, dtype=Z.dtype, device=Z.device),
                       w=None if weight is None else weight.detach().clone())

    def carry(self, model: SparseGP, state: VIState, X, y, keep, weight: torch.Tensor | None = None) -> VIState:
        """A warm start keeps q as it is, with the new rows' weights."""
        return replace(state, w=None if weight is None else weight.detach().clone())

    def update(self, model: SparseGP, state: VIState, X: torch.Tensor, y: torch.Tensor, n_total: int,
               idx: torch.Tensor | None = None, *, geometry=None) -> VIState:
        """No closed-form step in VI."""
        return state

    def loss(self, model: SparseGP, state: VIState, X: torch.Tensor, y: torch.Tensor, n_total: int,
             idx: torch.Tensor | None = None, *, geometry=None) -> torch.Tensor:
        """−ELBO (or −ARPEP/−RPAPEP objective) estimate: a differentiable scalar; the rows ``idx`` give the
        minibatch's weights (all rows when None)."""
        w = rows_of(state.w, idx)
        if self.alpha is None:
            return -elbo(model, state.q, X, y, n_total, w)
        if self.objective == "rpapep":
            n_factors = None if state.w is None else float(state.w.sum())
            return -rpapep_objective(model, state.q, X, y, n_total, self.alpha, w, n_factors)
        return -alpha_objective(model, state.q, X, y, n_total, self.alpha, w)

    def posterior(self, model: SparseGP, state: VIState) -> InducingPosterior:
        """q(u) in the unwhitened space: mean L_K m̃, factor L_K L̃."""
        with torch.no_grad():
            Lk = model.chol_Kuu()
            mean = (Lk @ state.q.mean[..., None])[..., 0]
            return InducingPosterior(mean=mean, chol=Lk @ state.q.chol)

    def trainable(self, model: SparseGP, state: VIState) -> list[nn.Parameter]:
        """Hyper-parameters, inducing inputs (if learnable) and variational parameters."""
        return list(model.parameters()) + list(state.q.parameters())

    def natural_parameters(self, model: SparseGP, state: VIState) -> list[nn.Parameter]:
        """q's mean and Cholesky factor when q takes natural-gradient steps (``natgrad_lr``), else none."""
        return [] if self.natgrad_lr is None else [state.q.mean, state.q.raw_chol]

    @torch.no_grad()
    def natural_step(self, model: SparseGP, state: VIState, n_total: float) -> VIState:
        """θ ← θ + γ ∂F/∂η for q (Salimbeni et al. 2018; ``natgrad.natural_gradient_step``) from the gradients of
        the per-datum loss −F/n_total (n_total: the rows' total weight) that the step's backward pass left on q,
        which it consumes."""
        if self.natgrad_lr is None:
            return state
        q = state.q
        grad_mean, grad_cov = natgrad.moment_grads(q, scale=-float(n_total))
        mean, chol, info = natgrad.natural_gradient_step(q.mean.detach(), q.chol.detach(), grad_mean, grad_cov,
                                                         self.natgrad_lr)
        q.mean.copy_(mean)
        q.raw_chol.copy_(chol)
        q.mean.grad = q.raw_chol.grad = None
        return replace(state, halved=state.halved + info.n_halved, refused=state.refused + info.n_refused)

    def counters(self, state: VIState) -> dict[str, int]:
        """Natural-gradient steps refused (as "skipped") and shortened (as "redamped"), cumulative."""
        return {"skipped": int(state.refused), "redamped": int(state.halved)}
