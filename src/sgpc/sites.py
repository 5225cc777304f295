"""EP site algebra shared by every site-based engine (EP, Power EP, SEP, APEP): scalable-ep §2.2–2.3, App. G.

q(u) = p(u) Π_factors φ̃(u) / Z_q, independent over the L latent functions. A factor touches a
few latent functions of one point (the pairwise step factor φ_i^k of eq. 6 touches f^{y_i} and
f^k; a "likelihood" factor p(y_i | f_i) touches all of them), and its site is, for each touched
latent l, rank-one along v_il = K_l⁻¹ k_l(x_i) (eqs. 18–23):

    φ̃(u_l) ∝ exp(−½ c1 (v_ilᵀu_l)² + c2 v_ilᵀu_l).

* The product of all sites is kept in u-space as natural parameters θ̃ = (Λ̃ [L,M,M], h̃ [L,M]),
  so q's natural parameters are θ = θ_prior(ξ) + θ̃ (App. G, eq. 62). With K = L_K L_Kᵀ and
  w = L_K⁻¹u: q(w) = N(P⁻¹b, P⁻¹), P = I + L_KᵀΛ̃L_K, b = L_Kᵀh̃ (reconstruction, eqs. 25–27).
* Cavity projections: removing a rank-one site (c1, c2 along v_o) from q and projecting on the
  current direction v (Sherman–Morrison, eqs. 29–32), with S = Cov_q, m = E_q[u], γ = c1/(1 − c1 v_oᵀSv_o):
      var\\ = vᵀSv + γ (vᵀSv_o)²,   mean\\ = vᵀm + γ (vᵀSv_o)(v_oᵀm) − c2 vᵀSv_o / (1 − c1 v_oᵀSv_o).
  When v = v_o these are the 1-D formulas var\\ = 1/(1/s − c1), mean\\ = var\\ (m/s − c2).
* Moment matching from ∂log Z/∂mean, ∂log Z/∂var of the cavity marginal of f_i (cavity projection
  plus the conditional variance s_i of eq. 5, latent noise included), through the shared
  ``gaussian.moment_match`` (the derivatives, in float64); the new site is (1/α)(θ̂ − θ\\) along v
  (eqs. 47–55, and alpha App. A.17–A.21 for Power EP), written without 1/v (``site_update``).
* log Z_q (eqs. 57–61) / the Power-EP energy (alpha A.23–A.27):
      log Z_q = g(θ) − g(θ_prior) + (1/α) Σ_factors [log Z_f + g(θ^{\\f}) − g(θ)],
  where g(θ^{\\f}) − g(θ) of a rank-one removal equals the same difference for the 1-D projection.
  Its gradient w.r.t. hyper-parameters is eq. (62)/(10): (η − η_prior)ᵀ∂θ_prior/∂ξ + (1/α)Σ ∂log Z_f/∂ξ
  with only the direct dependence of log Z_f (through k_i, K and s_i, with the u-space cavity held
  fixed) — built here as a surrogate whose autograd gradient is exactly that; on a minibatch the
  factor sum is scaled by N/|B| (eq. 12).
* Row weights (``engine``): a point of weight w stores one copy's sites (c1, c2) and contributes them raised to
  the power w, w·(c1, c2) along each v_il (``per_latent``), and w times its factor terms to log Z_q. Its cavity
  removes a = min(α, w) copies' worth (``removed_power``). For w ≥ α that is one copy's α: for integer w, (Power)
  EP on the data with the row repeated w times, whose copies share one cavity and so, updated in parallel, one
  site. For w < α, removing α copies from q, which holds w of them, can leave an improper cavity (a site sharper
  than what q holds along v_il): the cavity removes the whole row instead, and its site is the factor's site
  against the cavity without the row, raised to the power w. With a Gaussian likelihood, whose site is the
  factor itself against any cavity, both give the exact posterior ∝ p(u) Π_i p(y_i|f_i)^{w_i}. A row's term of
  log Z_q is then (w/α)[log Z_f + g(θ^{\\f}) − g(θ^{\\f} + α θ̃_f)], θ^{\\f} its cavity and θ̃_f its one-copy
  site: for a ≥ α, θ^{\\f} + α θ̃_f = θ and this is w times a copy's term of eqs. 57–61.
* Damping guard: a damped step is affine in the damping ρ, so the largest ρ that keeps q (and a
  cavity) positive definite is exact (``pd_step_limit``); ``pd_damping`` caps ρ at a margin of it
  (``PD_MARGIN``, ``PD_MARGIN_POWER`` for α < 1) and ``annealed_damping`` is the schedule of App. E.

What this module does not do: hold or advance an engine's state (``ep.EP``, ``sep.SEP``, ``sep.APEP``),
cache kernel geometry between an update and its loss (``ep``), or EP in function space (``fitc_ep``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from .gaussian import cholesky, log_ndtr, matvec, moment_match, solve_lower, solve_lower_pair, sum_sq, wide_dtype
from .sparse import SparseGP

__all__ = ["Factors", "pairwise_factors", "likelihood_factors", "FACTOR_KINDS", "make_factors", "per_latent",
           "TiedSites", "QState", "is_pd", "pd_step_limit", "PD_MARGIN", "PD_MARGIN_POWER", "pd_damping",
           "whitened_precision", "q_state", "q_from_precision", "directions", "gather", "cavity_projection",
           "site_update", "g_difference", "g_whitened", "log_Zq", "annealed_damping", "removed_power"]


# ----------------------------------------------------------------------------------------------
# Factor structures
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Factors:
    """Which latent functions each factor of each point touches, and its tilted normaliser.

    Attributes:
        latent: [N,F,T] int64, the latent index of each touched slot.
        mask: [N,F] bool, real factors (False = padding, e.g. k = y_i for pairwise factors).
        log_Z: maps cavity marginals of f at the touched slots, mean [N,F,T] and var [N,F,T], to
            log E[φ_f(f)^α] [N,F] (α already applied).
    """

    latent: torch.Tensor
    mask: torch.Tensor
    log_Z: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def pairwise_factors(y: torch.Tensor, n_classes: int) -> Factors:
    """The pairwise step factors φ_i^k = Φ((f^{y_i} − f^k)/·), k ≠ y_i, of scalable-ep eq. (6).

    Under cavity marginals N(a_y, b_y), N(a_k, b_k) of the noisy f's, Z_{i,k} = Φ((a_y − a_k)/√(b_y + b_k))
    (eq. 34): closed form, no quadrature. Slots: t = 0 is f^{y_i}, t = 1 is f^k.
    """
    N, C = y.shape[0], n_classes
    k = torch.arange(C, device=y.device).expand(N, C)
    latent = torch.stack([y[:, None].expand(N, C), k], -1)
    mask = k != y[:, None]

    def log_Z(mean, var):
        return log_ndtr((mean[..., 0] - mean[..., 1]) / torch.sqrt(var[..., 0] + var[..., 1]))

    return Factors(latent=latent, mask=mask, log_Z=log_Z)


def likelihood_factors(likelihood, y: torch.Tensor, alpha: float = 1.0) -> Factors:
    """One factor per point, p(y_i | f_i)^α, touching every latent; log Z from ``likelihood.log_tilted``."""
    N, L = y.shape[0], likelihood.n_latent
    latent = torch.arange(L, device=y.device).expand(N, 1, L)
    mask = torch.ones(N, 1, dtype=torch.bool, device=y.device)

    def log_Z(mean, var):
        return likelihood.log_tilted(y, mean[:, 0], var[:, 0], alpha)[:, None]

    return Factors(latent=latent, mask=mask, log_Z=log_Z)


FACTOR_KINDS = ("pairwise", "likelihood")


def make_factors(kind: str, model: SparseGP, y: torch.Tensor, alpha: float = 1.0) -> Factors:
    """``pairwise_factors`` (kind "pairwise") or ``likelihood_factors`` of the model's likelihood."""
    if kind == "pairwise":
        return pairwise_factors(y, model.n_latent)
    return likelihood_factors(model.likelihood, y, alpha)


def per_latent(c: torch.Tensor, latent: torch.Tensor, n_latent: int, weight: torch.Tensor | None = None) -> torch.Tensor:
    """Sum slot values c [B,F,T] over the slots of each (point, latent): [L,B]; with row weights w [B], w_i times
    point i's sum (its sites raised to the power w_i: the product of all sites is Π_i φ̃_i^{w_i})."""
    B = c.shape[0]
    if weight is not None:
        c = c * weight[:, None, None]
    out = torch.zeros(B, n_latent, dtype=c.dtype, device=c.device)
    out.scatter_add_(1, latent.reshape(B, -1), c.reshape(B, -1))
    return out.T


# ----------------------------------------------------------------------------------------------
# q(u) = prior × tied sites
# ----------------------------------------------------------------------------------------------
@dataclass
class TiedSites:
    """Product of sites in u-space: precision Λ̃ [L,M,M] and linear term h̃ [L,M] (precision form)."""

    Lam: torch.Tensor
    h: torch.Tensor


@dataclass(frozen=True)
class QState:
    """q(u) and the quantities EP needs, for the current hyper-parameters.

    Lk: chol K_uu [L,M,M]; LP: chol P [L,M,M]; b: L_Kᵀh̃ [L,M]; mean: E_q[u] [L,M]; W = L_K L_P⁻ᵀ [L,M,M], a
    square root of Cov_q[u] = L_K P⁻¹ L_Kᵀ = WWᵀ (``cov`` forms it).
    """

    Lk: torch.Tensor
    LP: torch.Tensor
    b: torch.Tensor
    mean: torch.Tensor
    W: torch.Tensor

    @property
    def cov(self) -> torch.Tensor:
        """Cov_q[u] [L,M,M] (one product per access)."""
        cov = self.W @ self.W.mT
        return 0.5 * (cov + cov.mT)


def is_pd(P: torch.Tensor) -> bool:
    """Whether every matrix of the batch P [...,M,M] has a Cholesky factor."""
    return not bool((torch.linalg.cholesky_ex(P)[1] > 0).any())


def pd_step_limit(P0: torch.Tensor, P1: torch.Tensor) -> torch.Tensor:
    """Per matrix of the batch, sup{ρ > 0 : P0 + ρ(P1 − P0) is positive definite} for PD P0: [...] (inf if all ρ).

    With P0 = L Lᵀ, P0 + ρD = L (I + ρ L⁻¹DL⁻ᵀ) Lᵀ is PD iff 1 + ρ λ_min(L⁻¹DL⁻ᵀ) > 0. A damped site step is
    affine in the damping ρ, so this bounds the damping that keeps q (or a cavity) proper exactly, instead
    of by repeated halving — the non-log-concave factors of Power EP at small α give the label slot a
    negative site precision (alpha paper §3.1), and a full parallel step then leaves the PD cone.
    """
    L0 = torch.linalg.cholesky(P0)
    D = P1 - P0
    S = solve_lower(L0, solve_lower(L0, D).mT)                          # L⁻¹ D L⁻ᵀ
    lam_min = torch.linalg.eigvalsh(0.5 * (S + S.mT))[..., 0]
    return torch.where(lam_min < 0, -1.0 / lam_min.clamp_max(-torch.finfo(S.dtype).tiny),
                       torch.full_like(lam_min, math.inf))


# Fraction of the PD limit a damped step may use: a capped step lowers q's precision (relative to the current
# one, L⁻¹P(ρ)L⁻ᵀ with P0 = LLᵀ) by at most this fraction in any direction. EP and SEP (α = 1) use PD_MARGIN.
# Power EP at α < 1 uses PD_MARGIN_POWER: at α → 0 every robust-max factor gives its label slot a negative site
# precision while P(f_y largest) is small, sites computed against a q near the edge of the cone are more
# negative still, and a margin of 0.5 let Power EP at α = 10⁻³ run away (docs/design-notes.md). (0.1 for EP and
# SEP too slowed SEP's first passes on a binary step-likelihood problem, with no gain.)
PD_MARGIN = 0.5
PD_MARGIN_POWER = 0.1


def pd_damping(rho: torch.Tensor, cones: list, margin: float = PD_MARGIN, known_pd: bool = False
               ) -> tuple[torch.Tensor | None, int]:
    """Damping per latent function [L] for a step θ(ρ) whose precisions are P0 + ρ ΔP for each (P0, ΔP) in
    ``cones`` (q, and for SEP the cavity): ρ capped at ``margin`` × ``pd_step_limit`` — checked with one
    Cholesky at ρ/margin in the common case — then halved up to 6 times should rounding still break
    definiteness. ``known_pd``: the caller has just checked every P0 (SEP's ``restore``), so it is not
    factorised again. Returns (ρ, number of re-dampings), ρ None when no damping keeps every P proper."""
    def proper(r):
        return all(is_pd(P0 + r[:, None, None] * dP) for P0, dP in cones)

    redamped = 0
    if known_pd or all(is_pd(P0) for P0, _ in cones):
        if proper(rho / margin):
            # P(0) and P(ρ/margin) are PD, and P(ρ) lies between them on a line (margin ≤ 1): the PD cone is
            # convex, so P(ρ) is PD too, with no Cholesky of its own
            return rho, redamped
        limit = torch.stack([pd_step_limit(P0, P0 + dP) for P0, dP in cones]).amin(0)
        rho = torch.minimum(rho, margin * limit)
        redamped += 1
    for _ in range(6):
        if proper(rho):
            return rho, redamped
        rho = 0.5 * rho
        redamped += 1
    return None, redamped


def whitened_precision(Lk: torch.Tensor, sites: TiedSites) -> tuple[torch.Tensor, torch.Tensor]:
    """P = I + L_KᵀΛ̃L_K [L,M,M] and b = L_Kᵀh̃ [L,M]."""
    eye = torch.eye(Lk.shape[-1], dtype=Lk.dtype, device=Lk.device)
    P = eye + Lk.mT @ sites.Lam @ Lk
    return 0.5 * (P + P.mT), (Lk.mT @ sites.h[..., None])[..., 0]


def q_state(model: SparseGP, sites: TiedSites, Lk: torch.Tensor | None = None) -> QState:
    """Reconstruct q(u) = p(u) Π sites (eqs. 25–27). Differentiable w.r.t. the hyper-parameters."""
    Lk = model.chol_Kuu() if Lk is None else Lk
    return q_from_precision(Lk, *whitened_precision(Lk, sites))


def q_from_precision(Lk: torch.Tensor, P: torch.Tensor, b: torch.Tensor, LP: torch.Tensor | None = None) -> QState:
    """q(u) from its whitened precision P = I + L_KᵀΛ̃L_K and linear term b (``q_state`` without forming P);
    ``LP``: P's Cholesky factor, if the caller has it."""
    LP = cholesky(P, jitter=0.0, what="EP posterior precision") if LP is None else LP
    # Cov_q[u] = L_K P⁻¹ L_Kᵀ is kept as its square root W = L_K L_P⁻ᵀ: one triangular solve, where P⁻¹ and
    # the covariance took a solve and three products (what the cavity projections need is W's rows' products)
    W = solve_lower(LP, Lk.mT).mT
    # P⁻¹b [L,M,1] by two triangular solves: torch.cholesky_solve's batched CUDA kernel (MAGMA) allocates
    # while it runs, which a CUDA graph cannot capture
    mean_w = torch.linalg.solve_triangular(LP.mT, solve_lower(LP, b[..., None]), upper=True)
    return QState(Lk=Lk, LP=LP, b=b, mean=(Lk @ mean_w)[..., 0], W=W)


def directions(model: SparseGP, X: torch.Tensor, Lk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """v_il = K⁻¹k_l(x_i) as [L,N,M] and the conditional variances s_il = k_ii + σ_n² − kᵀK⁻¹k, [L,N] (eq. 5)."""
    Kuf, kdiag = model.cross_covariance(X)              # [L,M,N]; [1,M,N] with one K_uu for every latent
    A, V = solve_lower_pair(Lk[:Kuf.shape[0]], Kuf)     # A = L_K⁻¹K_uf, V = K⁻¹K_uf (from one L_K⁻¹ when wide)
    s = (kdiag - sum_sq(A, -2)).clamp_min(0.0)          # [L,N]: kdiag is [L,N]
    return V.mT.expand(Lk.shape[0], -1, -1), s


def gather(t: torch.Tensor, latent: torch.Tensor) -> torch.Tensor:
    """Per-(point, latent) values [L,N] gathered at the factor slots latent [N,F,T] -> [N,F,T]."""
    N, F, T = latent.shape
    tN = t.transpose(0, 1)                                               # [N,L]
    return tN.gather(1, latent.reshape(N, F * T)).reshape(N, F, T)


def cavity_projection(q: QState, V: torch.Tensor, V_old: torch.Tensor, c1: torch.Tensor, c2: torch.Tensor,
                      latent: torch.Tensor, R: torch.Tensor | None = None, Ro: torch.Tensor | None = None,
                      current: bool = False, s_cc: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cavity marginals of v_ilᵀu_l at every factor slot, after removing that factor's site.

    Args:
        q: current q (``mean``/``W`` may be detached by the caller).
        V: current directions [L,B,M]; V_old: directions the sites were stored along [L,B,M].
        c1, c2: the factors' site parameters (already multiplied by α for Power EP) [B,F,T].
        latent: [B,F,T].
        R, Ro: Wᵀv along V and along V_old ([L,B,M], q's square root W), if the caller has them.
        current: V_old is V detached and Ro is R detached (a loss right after its update), so q's products along
            V_old are those along V, detached: the [L,B,M] passes are made once.
        s_cc: vᵀSv = Σ R² [L,B] along V (``gaussian.sum_sq(R)``), if the caller has it.
    Returns:
        cavity mean [B,F,T], cavity var [B,F,T] (of the projection, without s_i),
        and q's own projection marginals along V_old, mean [B,F,T], var [B,F,T] (for g-differences).
    """
    R = V @ q.W if R is None else R                                      # Wᵀv      [L,B,M]  (S = WWᵀ)
    Ro = (R if V_old is V else V_old @ q.W) if Ro is None else Ro
    s_cc = sum_sq(R) if s_cc is None else s_cc                           # vᵀSv     [L,B]
    m_c = matvec(V, q.mean)                                              # vᵀm      [L,B]
    if V_old is V:
        s_co = s_oo = s_cc
        m_o = m_c
    elif current:
        # the same values along V_old = V detached; vᵀSv_o = Σ R·Ro differentiates in R once, not twice as Σ R²
        s_oo, m_o = s_cc.detach(), m_c.detach()
        s_co = 0.5 * (s_cc + s_oo)
    else:
        s_co = (R * Ro).sum(-1)                                          # vᵀSv_o
        s_oo = sum_sq(Ro)
        m_o = matvec(V_old, q.mean)
    s_cc, s_co, s_oo, m_c, m_o = (gather(t, latent) for t in (s_cc, s_co, s_oo, m_c, m_o))
    denom = 1.0 - c1 * s_oo
    gamma = c1 / denom
    var_cav = s_cc + gamma * s_co ** 2
    mean_cav = m_c + gamma * s_co * m_o - c2 * s_co / denom
    return mean_cav, var_cav, m_o, s_oo


def removed_power(alpha: float, weight: torch.Tensor | None):
    """The power a = min(α, w) of its one-copy site that each row's cavity removes (module docstring: row weights):
    α without weights (a number), else [B,1,1] for the slots [B,F,T] of rows of weight w [B]."""
    if weight is None:
        return alpha
    return weight.clamp(max=alpha)[:, None, None]


def site_update(factors: Factors, mean_cav: torch.Tensor, var_cav: torch.Tensor, s: torch.Tensor,
                alpha: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """New rank-one site parameters from moment matching (eqs. 39–55; alpha A.12–A.21).

    Args:
        mean_cav, var_cav: cavity projection marginals [B,F,T]; s: conditional variances at the slots [B,F,T].
    Returns:
        c1_new, c2_new [B,F,T], log Z [B,F], ok [B,F] (finite, positive tilted variance).
    """
    # ∂/∂var of the projection equals ∂/∂var of f (var_f = var_proj + s); all in float64 whatever
    # the model's dtype (float32 cancels in the tails: gaussian.match_moments)
    dtype = mean_cav.dtype
    wide = wide_dtype(mean_cav)
    m, v = mean_cav.to(wide), var_cav.to(wide)
    log_Z, dm, dv = moment_match(lambda mm, vv: factors.log_Z(mm, vv + s), m, v)
    # θ̂ − θ\ with the tilted moments μ̂ = m + v·dm, v̂ = v·(1 − vλ), λ = dm² − 2dv (gaussian.tilted_moments):
    # 1/v̂ − 1/v = λ/(1 − vλ) and μ̂/v̂ − m/v = (dm + mλ)/(1 − vλ). Written without 1/v: a slot whose direction
    # v_il vanishes (the latent's kernel underflows between x_i and every inducing input, e.g. a length-scale
    # at its floor) has a cavity variance of exactly 0 and an irrelevant but finite site, where 1/v̂ − 1/v was
    # NaN and skipped the whole factor: every factor, at every later step, once one latent function got there.
    lam = dm ** 2 - 2.0 * dv
    den = 1.0 - v * lam                                                  # v̂ / v
    c1 = (lam / den / alpha).to(dtype)
    c2 = ((dm + m * lam) / den / alpha).to(dtype)
    # (finiteness checked after the cast: a site finite in float64 may overflow float32)
    ok = (den > 0).all(-1) & torch.isfinite(c1).all(-1) & torch.isfinite(c2).all(-1) & torch.isfinite(log_Z)
    return c1, c2, log_Z.to(dtype), ok & factors.mask


def g_difference(Lk: torch.Tensor, sites: TiedSites) -> torch.Tensor:
    """g(θ_prior + θ̃) − g(θ_prior) per latent [L], in whitened form: ½ bᵀP⁻¹b − log|L_P|.

    (The Jacobian of w = L_K⁻¹u adds log|L_K| to both g's and cancels.)
    """
    P, b = whitened_precision(Lk, sites)
    return g_whitened(cholesky(P, jitter=0.0, what="EP posterior precision"), b)


def g_whitened(LP: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """½ bᵀP⁻¹b − log|L_P| [L] from the Cholesky factor L_P of P and b (``g_difference``; a ``QState``
    holds both, so a caller with q already reconstructed pays no second factorisation)."""
    a = solve_lower(LP, b[..., None])[..., 0]
    return 0.5 * (a * a).sum(-1) - torch.log(LP.diagonal(dim1=-2, dim2=-1)).sum(-1)


def _g1(mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """1-D log-normaliser without the 2π constant: ½ log σ² + μ²/(2σ²)."""
    return 0.5 * torch.log(var) + 0.5 * mean ** 2 / var


def log_Zq(model: SparseGP, sites: TiedSites, factors: Factors, X: torch.Tensor, V_old: torch.Tensor,
           c1: torch.Tensor, c2: torch.Tensor, alpha: float, scale: float, *, Lk: torch.Tensor | None = None,
           q: QState | None = None, Vs: tuple[torch.Tensor, torch.Tensor] | None = None,
           LPb: tuple[torch.Tensor, torch.Tensor] | None = None, R: torch.Tensor | None = None,
           current: bool = False, weight: torch.Tensor | None = None, s_cc: torch.Tensor | None = None
           ) -> torch.Tensor:
    """log Z_q (eqs. 57–61) or the Power-EP energy, with the gradient of eq. (62)/(12).

    Args:
        sites: θ̃ (held fixed); factors/X/V_old/c1/c2: the minibatch's factors, inputs, stored site
            directions [L,B,M] and site parameters [B,F,T] (for SEP: the tied site's share, see sep.py);
        alpha: the power; scale: N/|B|.
        Lk, q, Vs, LPb: what a caller has already computed — the Cholesky factor of K_uu (differentiable),
            q = p(u)·θ̃ (detached), ``directions(model, X, Lk)`` and the Cholesky factor of
            ``whitened_precision(Lk, sites)`` with its linear term (differentiable); R: V @ q.W
            (differentiable in V); current: V_old is V detached and q.W is
            detached (so R serves both; otherwise they are compared, outside ``torch.compile``); s_cc: Σ R² [L,B]
            (``gaussian.sum_sq(R)``), if the caller has it.
        weight: the minibatch rows' weights [B] (None: 1 each); a row's factor terms count w times, its cavity
            removes ``removed_power`` of its site (module docstring: row weights).
    Returns:
        A scalar whose value is the estimate of log Z_q and whose gradient w.r.t. the model's
        hyper-parameters is eq. (62): the direct dependence of each log Z_f, the u-space cavity fixed.
    """
    Lk = model.chol_Kuu() if Lk is None else Lk
    global_term = (g_difference(Lk, sites) if LPb is None else g_whitened(*LPb)).sum()
    if q is None:
        with torch.no_grad():
            q = q_state(model, sites, Lk.detach())
    V, s = directions(model, X, Lk) if Vs is None else Vs
    latent = factors.latent
    a = removed_power(alpha, weight)
    ac1, ac2 = a * c1, a * c2
    R = V @ q.W if R is None else R
    # the stored directions are the current ones in a full-batch loss right after its update (and SEP's are
    # V detached): one product then serves both, where this took three [L,B,M]×[M,M] products
    same = V_old is V or current or (not torch.compiler.is_compiling() and not (V_old.requires_grad or
                                     q.W.requires_grad) and torch.equal(V_old, V.detach()))
    Ro = R if V_old is V else R.detach() if same else V_old @ q.W
    mean_cav, var_cav, m_o, s_oo = cavity_projection(q, V, V_old, ac1.detach(), ac2.detach(), latent, R=R, Ro=Ro,
                                                     current=same, s_cc=s_cc)
    sg = gather(s, latent)
    logZ = factors.log_Z(mean_cav, var_cav + sg).masked_fill(~factors.mask, 0.0)
    with torch.no_grad():
        # g(θ^{\f}) − g(θ) along the stored directions (exact rank-one removal); along the current ones the
        # cavity is the one above, and q's own marginals along V_old came with it either way
        m_o, s_oo = m_o.detach(), s_oo.detach()
        if same:
            mo_c, vo_c = mean_cav.detach(), var_cav.detach()
        else:
            mo_c, vo_c, _, _ = cavity_projection(q, V_old, V_old, ac1, ac2, latent, R=Ro, Ro=Ro)
        # a direction with no variance under q (k(x_i, Z) ≈ 0, e.g. a tiny length-scale) carries a
        # site that changes nothing: its term is the limit 0, not 0/0
        flat = (c1 == 0) | (s_oo <= torch.finfo(s_oo.dtype).tiny) | (vo_c <= torch.finfo(vo_c.dtype).tiny)
        if weight is not None:
            # a row of weight w < α: g(θ^{\f} + αθ̃_f) along V_old is not q's, but its cavity's with α sites added
            partial = (weight < alpha)[:, None, None]
            prec = 1.0 / vo_c.clamp_min(torch.finfo(vo_c.dtype).tiny) + alpha * c1
            s_oo = torch.where(partial, 1.0 / prec, s_oo)
            m_o = torch.where(partial, (mo_c / vo_c.clamp_min(torch.finfo(vo_c.dtype).tiny) + alpha * c2) / prec, m_o)
            flat = flat | (s_oo <= torch.finfo(s_oo.dtype).tiny)
        gdiff = torch.where(flat, 0.0, _g1(mo_c, vo_c.clamp_min(torch.finfo(vo_c.dtype).tiny))
                            - _g1(m_o, s_oo.clamp_min(torch.finfo(s_oo.dtype).tiny))).sum(-1)
        gdiff = gdiff.masked_fill(~factors.mask, 0.0)
    if weight is None:
        local = (logZ.sum() + gdiff.sum()) / alpha
    else:                                   # each point's factor terms [B] (eqs. 57–61), w_i times
        local = (weight * (logZ + gdiff).sum(-1)).sum() / alpha
    return global_term + scale * local


def annealed_damping(damping: float, decay: float, step: float, floor: float) -> float:
    """ρ_t = max(damping · decay^t, floor) (App. E), where the floor never raises a damping the user chose
    below it (EP/SEP with damping=0.01 took steps of 0.05)."""
    return max(damping * decay ** step, min(floor, damping))
