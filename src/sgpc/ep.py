"""Expectation propagation with inducing points: EP and Power EP over rank-one sites (scalable-ep §2.2–2.3).

q(u) = p(u) Π_factors φ̃(u) / Z_q, independent over the L latent functions. A factor touches a
few latent functions of one point (the pairwise step factor φ_i^k of eq. 6 touches f^{y_i} and
f^k; a "likelihood" factor p(y_i | f_i) touches all of them), and its site is, for each touched
latent l, rank-one along v_il = K_l⁻¹ k_l(x_i) (eqs. 18–23):

    φ̃(u_l) ∝ exp(−½ c1 (v_ilᵀu_l)² + c2 v_ilᵀu_l).

Shared algebra (used by ``ep`` here and by the tied-factor engines in ``sep.py``):

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

What this module does not do: EP in function space (``fitc_ep.py``) or tied sites (``sep.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, ClassVar

import torch

from .engine import Capabilities, Engine
from .gaussian import cholesky, log_ndtr, moment_match, solve_lower, wide_dtype
from .sparse import InducingPosterior, SparseGP

__all__ = ["Factors", "pairwise_factors", "likelihood_factors", "TiedSites", "QState", "q_state", "q_from_precision",
           "cavity_projection", "site_update", "log_Zq", "g_difference", "directions", "EP", "EPState"]


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


def per_latent(c: torch.Tensor, latent: torch.Tensor, n_latent: int) -> torch.Tensor:
    """Sum slot values c [B,F,T] over the slots of each (point, latent): [L,B]."""
    B = c.shape[0]
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


def _is_pd(P: torch.Tensor) -> bool:
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
# negative still, and with 0.5 Power EP at α = 10⁻³ ran away for 7 of 15 seeds on an MNIST subset
# (benchmarks/alpha_mnist_small_alpha_probe.py, docs/results-alpha.md). (0.1 for EP and SEP too slowed SEP's
# first passes on a binary step-likelihood problem, with no gain.)
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
        return all(_is_pd(P0 + r[:, None, None] * dP) for P0, dP in cones)

    redamped = 0
    if known_pd or all(_is_pd(P0) for P0, _ in cones):
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


def _whitened_precision(Lk: torch.Tensor, sites: TiedSites) -> tuple[torch.Tensor, torch.Tensor]:
    """P = I + L_KᵀΛ̃L_K [L,M,M] and b = L_Kᵀh̃ [L,M]."""
    eye = torch.eye(Lk.shape[-1], dtype=Lk.dtype, device=Lk.device)
    P = eye + Lk.mT @ sites.Lam @ Lk
    return 0.5 * (P + P.mT), (Lk.mT @ sites.h[..., None])[..., 0]


def q_state(model: SparseGP, sites: TiedSites, Lk: torch.Tensor | None = None) -> QState:
    """Reconstruct q(u) = p(u) Π sites (eqs. 25–27). Differentiable w.r.t. the hyper-parameters."""
    Lk = model.chol_Kuu() if Lk is None else Lk
    return q_from_precision(Lk, *_whitened_precision(Lk, sites))


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
    A, kdiag = model.projection(X, Lk)                                   # A = L_K⁻¹ K_uf  [L,M,N]
    V = torch.linalg.solve_triangular(Lk.mT, A, upper=True)             # K⁻¹ K_uf        [L,M,N]
    s = (kdiag - (A * A).sum(-2)).clamp_min(0.0)
    return V.mT, s


def _gather(t: torch.Tensor, latent: torch.Tensor) -> torch.Tensor:
    """Per-(point, latent) values [L,N] gathered at the factor slots latent [N,F,T] -> [N,F,T]."""
    N, F, T = latent.shape
    tN = t.transpose(0, 1)                                               # [N,L]
    return tN.gather(1, latent.reshape(N, F * T)).reshape(N, F, T)


def cavity_projection(q: QState, V: torch.Tensor, V_old: torch.Tensor, c1: torch.Tensor, c2: torch.Tensor,
                      latent: torch.Tensor, R: torch.Tensor | None = None, Ro: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cavity marginals of v_ilᵀu_l at every factor slot, after removing that factor's site.

    Args:
        q: current q (``mean``/``W`` may be detached by the caller).
        V: current directions [L,B,M]; V_old: directions the sites were stored along [L,B,M].
        c1, c2: the factors' site parameters (already multiplied by α for Power EP) [B,F,T].
        latent: [B,F,T].
        R, Ro: Wᵀv along V and along V_old ([L,B,M], q's square root W), if the caller has them.
    Returns:
        cavity mean [B,F,T], cavity var [B,F,T] (of the projection, without s_i),
        and q's own projection marginals along V_old, mean [B,F,T], var [B,F,T] (for g-differences).
    """
    R = V @ q.W if R is None else R                                      # Wᵀv      [L,B,M]  (S = WWᵀ)
    Ro = (R if V_old is V else V_old @ q.W) if Ro is None else Ro
    s_cc = (R * R).sum(-1)                                               # vᵀSv     [L,B]
    s_co = s_cc if V_old is V else (R * Ro).sum(-1)                      # vᵀSv_o
    s_oo = s_cc if V_old is V else (Ro * Ro).sum(-1)
    m_c = (V * q.mean[:, None, :]).sum(-1)
    m_o = m_c if V_old is V else (V_old * q.mean[:, None, :]).sum(-1)
    s_cc, s_co, s_oo, m_c, m_o = (_gather(t, latent) for t in (s_cc, s_co, s_oo, m_c, m_o))
    denom = 1.0 - c1 * s_oo
    gamma = c1 / denom
    var_cav = s_cc + gamma * s_co ** 2
    mean_cav = m_c + gamma * s_co * m_o - c2 * s_co / denom
    return mean_cav, var_cav, m_o, s_oo


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
    P, b = _whitened_precision(Lk, sites)
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
           current: bool = False) -> torch.Tensor:
    """log Z_q (eqs. 57–61) or the Power-EP energy, with the gradient of eq. (62)/(12).

    Args:
        sites: θ̃ (held fixed); factors/X/V_old/c1/c2: the minibatch's factors, inputs, stored site
            directions [L,B,M] and site parameters [B,F,T] (for SEP: the tied site's share, see sep.py);
        alpha: the power; scale: N/|B|.
        Lk, q, Vs, LPb: what a caller has already computed — the Cholesky factor of K_uu (differentiable),
            q = p(u)·θ̃ (detached), ``directions(model, X, Lk)`` and the Cholesky factor of
            ``_whitened_precision(Lk, sites)`` with its linear term (differentiable); R: V @ q.W
            (differentiable in V); current: V_old is V detached and q.W is
            detached (so R serves both; otherwise they are compared, outside ``torch.compile``).
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
    ac1, ac2 = alpha * c1, alpha * c2
    R = V @ q.W if R is None else R
    # the stored directions are the current ones in a full-batch loss right after its update (and SEP's are
    # V detached): one product then serves both, where this took three [L,B,M]×[M,M] products
    same = V_old is V or current or (not torch.compiler.is_compiling() and not (V_old.requires_grad or
                                     q.W.requires_grad) and torch.equal(V_old, V.detach()))
    Ro = R if V_old is V else R.detach() if same else V_old @ q.W
    mean_cav, var_cav, m_o, s_oo = cavity_projection(q, V, V_old, ac1.detach(), ac2.detach(), latent, R=R, Ro=Ro)
    sg = _gather(s, latent)
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
        gdiff = torch.where(flat, 0.0, _g1(mo_c, vo_c.clamp_min(torch.finfo(vo_c.dtype).tiny))
                            - _g1(m_o, s_oo.clamp_min(torch.finfo(s_oo.dtype).tiny))).sum(-1)
        gdiff = gdiff.masked_fill(~factors.mask, 0.0)
    local = (logZ.sum() + gdiff.sum()) / alpha
    return global_term + scale * local


# The kernel geometry of one training step, shared by its site update and its loss: L_K and the directions of the
# minibatch. ``EP.geometry`` forms them once with autograd on; the fit loop passes them to ``update`` (used
# detached) and to the loss (differentiated, eq. 62), which would otherwise form K_uu and K_uf a second time:
# about a sixth of an MNIST-shaped SEP step, K_uf and two triangular solves of a full-batch EP iteration.

def fresh_geometry(model: SparseGP, X) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """L_K and ``directions(model, X, L_K)``, formed now (differentiable where autograd is on)."""
    Lk = model.chol_Kuu()
    return (Lk, *directions(model, X, Lk))


def shared_geometry(model: SparseGP, X) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """``fresh_geometry`` with autograd on, for a step's update and loss to share; None for a hybrid model
    (its feature extractor's dropout draws anew per forward pass, so each use must form its own) or a model
    with nothing to differentiate."""
    if model.feature_extractor is not None or not any(p.requires_grad for p in model.parameters()):
        return None
    with torch.enable_grad():
        return fresh_geometry(model, X)


def detached_geometry(model: SparseGP, X, geometry) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The step's geometry for a site update: ``geometry`` detached, or formed now (without autograd)."""
    if geometry is None:
        with torch.no_grad():
            return fresh_geometry(model, X)
    return tuple(g.detach() for g in geometry)


# ----------------------------------------------------------------------------------------------
# The EP / Power EP engine
# ----------------------------------------------------------------------------------------------

def annealed_damping(damping: float, decay: float, step: float, floor: float) -> float:
    """ρ_t = max(damping · decay^t, floor) (App. E), where the floor never raises a damping the user chose
    below it (EP/SEP with damping=0.01 took steps of 0.05)."""
    return max(damping * decay ** step, min(floor, damping))

@dataclass
class EPState:
    """Explicit EP state: the tied product θ̃, per-factor site parameters c1, c2 [N,F,T], the
    directions they are stored along [N,L,M], the passes over the data so far (``step``, the damping
    clock) and update reports."""

    Lam: torch.Tensor
    h: torch.Tensor
    c1: torch.Tensor
    c2: torch.Tensor
    V: torch.Tensor
    step: float = 0.0
    skipped: int = 0
    redamped: int = 0
    y: torch.Tensor | None = None       # training labels [N]: the factor structure of every site


@dataclass(frozen=True)
class EP(Engine):
    """Settings of EP (``alpha=1``) and Power EP (``alpha`` in (0, 1]).

    Attributes:
        alpha: the power of Power EP (alpha §3.1); 1 gives EP.
        factor: "pairwise" (scalable-ep eq. 6: closed-form Z, the step likelihood) or "likelihood"
            (one factor per point, p(y_i|f_i)^α from the model's likelihood, e.g. robust-max).
        damping: initial damping ρ (App. E); annealed as ρ_t = max(damping · decay^t, min(min_damping, damping)) with
            t the passes over the data so far (a minibatch update adds |B|/N): minibatch training anneals
            per epoch as batch training does per update. (Annealing per minibatch step instead held every
            site update at the 0.05 floor after ~230 steps, ~1 epoch of MNIST: the sites then absorbed
            ~5% of their change per epoch. App. E: minibatch updates are stable without heavy damping.)
    """

    capabilities: ClassVar[Capabilities] = Capabilities(per_row_state=True, closed_form_update=True,
                                                        shared_geometry=True)
    alpha: float = 1.0
    factor: str = "pairwise"
    damping: float = 0.5
    decay: float = 0.99
    min_damping: float = 0.05

    def __post_init__(self):
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha}")
        if self.factor not in FACTOR_KINDS:
            raise ValueError(f"unknown factor {self.factor!r}; valid: 'pairwise', 'likelihood'")
        if self.factor == "pairwise" and self.alpha != 1.0:
            raise ValueError("pairwise step factors have closed-form moments only for alpha = 1; "
                             "use factor='likelihood' (robust-max) for Power EP")
        if not 0.0 < self.damping <= 1.0:
            raise ValueError(f"damping must be in (0, 1], got {self.damping}")

    def factors(self, model: SparseGP, y: torch.Tensor) -> Factors:
        """The factor structure for labels y."""
        return make_factors(self.factor, model, y, self.alpha)

    def init(self, model: SparseGP, X, y, generator) -> EPState:
        """All sites start at zero (q = prior)."""
        L, M = model.n_latent, model.n_inducing
        dt, dev = model.Z.dtype, model.Z.device
        N = 0 if y is None else y.shape[0]
        F, T = (model.n_latent, 2) if self.factor == "pairwise" else (1, model.n_latent)
        z = lambda *s: torch.zeros(*s, dtype=dt, device=dev)
        labels = None if y is None else y.detach().clone()
        return EPState(Lam=z(L, M, M), h=z(L, M), c1=z(N, F, T), c2=z(N, F, T), V=z(N, L, M), y=labels)

    @torch.no_grad()
    def carry(self, model: SparseGP, state: EPState, X, y, keep: torch.Tensor) -> EPState:
        """The state for a new training set that shares rows with the old one (a warm start).

        Args:
            keep [N'] int64: for each new row, the old row whose site it takes over, or −1 for a row
                without one (its site starts at zero); y [N'] the new labels.
        Returns a state whose θ̃ is rebuilt from the kept sites (eqs. 25–27: q = p(u) Π sites), so
        sites of rows that were dropped leave q. The damping clock restarts: the new rows' sites are
        updated with the initial damping, not the annealed one.
        """
        have = keep >= 0
        src = keep.clamp_min(0)

        def take(a):
            return torch.where(have.view(-1, *([1] * (a.dim() - 1))), a[src], torch.zeros((), dtype=a.dtype, device=a.device))

        c1, c2, V = take(state.c1), take(state.c2), take(state.V)
        latent = self.factors(model, y).latent
        L = model.n_latent
        d1, d2 = per_latent(c1, latent, L), per_latent(c2, latent, L)   # [L,N']
        Vt = V.transpose(0, 1)                                          # [L,N',M]
        Lam = Vt.mT @ (d1[..., None] * Vt)
        return EPState(Lam=0.5 * (Lam + Lam.mT), h=(d2[..., None] * Vt).sum(1), c1=c1, c2=c2, V=V,
                       skipped=state.skipped, redamped=state.redamped, y=y.detach().clone())

    def _damping(self, step: float) -> float:
        return annealed_damping(self.damping, self.decay, step, self.min_damping)

    def geometry(self, model: SparseGP, X):
        """L_K and the minibatch's directions, shared by ``update`` and ``loss`` (``shared_geometry``)."""
        return shared_geometry(model, X)

    def counters(self, state: EPState) -> dict[str, int]:
        """Skipped and re-damped site updates (cumulative)."""
        return {"skipped": int(state.skipped), "redamped": int(state.redamped)}

    @torch.no_grad()
    def restore(self, model: SparseGP, state: EPState, Lk: torch.Tensor | None = None) -> EPState:
        """Make q(u) proper again after a hyper-parameter step, shrinking the negative-precision sites.

        Sites are checked for positive-definiteness against the kernel of the step they were computed
        at; a later hyper-parameter step can change K_uu so that I + L_KᵀΛ̃L_K loses definiteness
        when some sites have negative precision (non-log-concave factors, α < 1). Those sites are
        then raised to a power γ = ½, ¼, … (0 at worst, which leaves a sum of positive sites: always
        PD); each shrink counts as one re-damping in the fit history.
        """
        Lk = model.chol_Kuu() if Lk is None else Lk
        if _is_pd(_whitened_precision(Lk, TiedSites(state.Lam, state.h))[0]) or state.y is None:
            return state
        L = model.n_latent
        latent = self.factors(model, state.y).latent                        # [N,F,T]
        neg = (state.c1 < 0).any(-1, keepdim=True)                          # [N,F,1]
        Vt = state.V.transpose(0, 1)                                        # [L,N,M]
        for gamma in [0.5 ** k for k in range(1, 12)] + [0.0]:
            c1 = torch.where(neg, gamma * state.c1, state.c1)
            c2 = torch.where(neg, gamma * state.c2, state.c2)
            d1, d2 = per_latent(c1, latent, L), per_latent(c2, latent, L)   # [L,N]
            Lam = Vt.mT @ (d1[..., None] * Vt)
            h = (d2[..., None] * Vt).sum(1)
            if _is_pd(_whitened_precision(Lk, TiedSites(Lam, h))[0]):
                break
        return replace(state, Lam=0.5 * (Lam + Lam.mT), h=h, c1=c1, c2=c2, redamped=state.redamped + 1)

    @torch.no_grad()
    def update(self, model: SparseGP, state: EPState, X, y, n_total: int, idx=None, *, geometry=None) -> EPState:
        """One parallel damped EP update of the factors of the minibatch (App. E). The minibatch's rows of the
        per-row arrays (c1, c2, V) are written into ``state``'s arrays, which the returned state shares
        (``engine`` module docstring: per-row state is handed over)."""
        idx = torch.arange(X.shape[0], device=X.device) if idx is None else idx
        fac = self.factors(model, y)
        Lk, V, s = detached_geometry(model, X, geometry)   # one factorisation of K_uu; V [L,B,M], s [L,B]
        state = self.restore(model, state, Lk)
        sites = TiedSites(state.Lam, state.h)
        q = q_state(model, sites, Lk)
        V_old = state.V[idx].transpose(0, 1)
        c1_old, c2_old = state.c1[idx], state.c2[idx]
        a = self.alpha
        mean_cav, var_cav, _, _ = cavity_projection(q, V, V_old, a * c1_old, a * c2_old, fac.latent)
        cav_ok = (var_cav >= 0).all(-1) & fac.mask      # 0: v_il = 0, the slot does not see u (site_update)
        var_cav = torch.where(var_cav >= 0, var_cav, torch.ones_like(var_cav))
        c1_new, c2_new, _, ok = site_update(fac, mean_cav, var_cav, _gather(s, fac.latent), a)
        ok = ok & cav_ok
        skipped = int((fac.mask & ~ok).sum())
        # θ̃(ρ) = θ̃₀ + ρ Δθ̃ per latent function: θ̃₀ has the old sites moved to the new directions V, Δθ̃
        # the change to the new site values. ρ is capped per latent at a margin (PD_MARGIN, PD_MARGIN_POWER for α < 1)
        # × the largest step that keeps q proper (pd_step_limit), then halved should rounding still break definiteness.
        L = model.n_latent

        def step_terms(Lam0, h0, c1_old, c2_old):
            """Target slot values, the step Δθ̃ (dLam, dh) and the precisions P0, ΔP of q along it."""
            c1_t = torch.where(ok[..., None], c1_new, c1_old)
            c2_t = torch.where(ok[..., None], c2_new, c2_old)
            dd1 = per_latent(c1_t - c1_old, fac.latent, L)
            dd2 = per_latent(c2_t - c2_old, fac.latent, L)
            dLam = V.mT @ (dd1[..., None] * V)
            dP = q.Lk.mT @ dLam @ q.Lk
            P0, _ = _whitened_precision(q.Lk, TiedSites(Lam0, h0))
            return c1_t, c2_t, 0.5 * (dLam + dLam.mT), (dd2[..., None] * V).sum(1), P0, 0.5 * (dP + dP.mT)

        Lam0, h0 = _replace_sites(state.Lam, state.h, V_old, V, c1_old, c2_old, c1_old, c2_old, fac.latent)
        c1_t, c2_t, dLam, dh, P0, dP = step_terms(Lam0, h0, c1_old, c2_old)
        rho0 = torch.full((L,), self._damping(state.step), dtype=P0.dtype, device=P0.device)
        margin = PD_MARGIN if self.alpha == 1.0 else PD_MARGIN_POWER
        rho, redamped = pd_damping(rho0, [(P0, dP)], margin)
        if rho is None and not _is_pd(P0):
            # q was proper with the sites along their old directions (``restore``), but moved to the new
            # ones a negative-precision site can break it — and then no damping helps, since ρ → 0 leaves
            # θ̃₀: every later update skipped every factor (Power EP at small α after a large step in the
            # length-scales). The sites are moved and shrunk as ``restore`` shrinks them, and the step
            # starts from there.
            state.V[idx] = V.transpose(0, 1)
            state = self.restore(model, replace(state, Lam=Lam0, h=h0), q.Lk)
            Lam0, h0, c1_old, c2_old = state.Lam, state.h, state.c1[idx], state.c2[idx]
            c1_t, c2_t, dLam, dh, P0, dP = step_terms(Lam0, h0, c1_old, c2_old)
            rho, more = pd_damping(rho0, [(P0, dP)], margin)
            redamped += more
        if rho is None:
            return replace(state, step=state.step + X.shape[0] / n_total, skipped=state.skipped + int(fac.mask.sum()),
                           redamped=state.redamped + redamped)
        r = rho[fac.latent]                                             # [B,F,T]: each slot its latent's ρ
        c1 = c1_old + r * (c1_t - c1_old)
        c2 = c2_old + r * (c2_t - c2_old)
        Lam = Lam0 + rho[:, None, None] * dLam
        h = h0 + rho[:, None] * dh
        # The per-site arrays are O(N·L·M): they are written in place (only the minibatch's rows), so
        # that a minibatch step costs O(B) and not a copy of every site; the returned state shares them.
        state.V[idx] = V.transpose(0, 1)
        state.c1[idx], state.c2[idx] = c1, c2
        return replace(state, Lam=Lam, h=h, step=state.step + X.shape[0] / n_total,
                       skipped=state.skipped + skipped, redamped=state.redamped + redamped)

    def loss(self, model: SparseGP, state: EPState, X, y, n_total: int, idx=None, *, geometry=None) -> torch.Tensor:
        """−log Z_q estimate on the minibatch (eq. 12 scaling), gradient per eq. (62); ``geometry``: this step's
        ``geometry(model, X)`` at the current parameters, if the caller formed it."""
        idx = torch.arange(X.shape[0], device=X.device) if idx is None else idx
        fac = self.factors(model, y)
        Lk, V, s = geometry if geometry is not None else fresh_geometry(model, X)    # differentiable, eq. (62)
        return -log_Zq(model, TiedSites(state.Lam, state.h), fac, X, state.V[idx].transpose(0, 1),
                       state.c1[idx], state.c2[idx], self.alpha, n_total / X.shape[0], Lk=Lk, Vs=(V, s))

    @torch.no_grad()
    def posterior(self, model: SparseGP, state: EPState) -> InducingPosterior:
        """q(u) = p(u) Π sites, as mean [L,M] and Cholesky factor [L,M,M]."""
        q = q_state(model, TiedSites(state.Lam, state.h))
        return InducingPosterior(mean=q.mean, chol=cholesky(q.cov, what="EP posterior covariance"))

    def trainable(self, model: SparseGP, state: EPState) -> list:
        """The model's hyper-parameters (sites are updated in closed form by ``update``)."""
        return list(model.parameters())


def _replace_sites(Lam, h, V_old, V, c1_old, c2_old, c1, c2, latent):
    """θ̃ − Σ old sites along V_old + Σ new sites along V, aggregated per (point, latent)."""
    L = Lam.shape[0]
    d1o, d2o, d1, d2 = (per_latent(c, latent, L) for c in (c1_old, c2_old, c1, c2))
    Lam = Lam - V_old.mT @ (d1o[..., None] * V_old) + V.mT @ (d1[..., None] * V)
    h = h - (d2o[..., None] * V_old).sum(1) + (d2[..., None] * V).sum(1)
    return 0.5 * (Lam + Lam.mT), h
