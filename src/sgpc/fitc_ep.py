"""EP in function space on the FITC prior: the ``gfitc`` engine, and the machinery ``rmgpc`` reuses.

Model (scalable-ep §2.1 and §3; Kim & Ghahramani 2006; Naish-Guzman & Holden 2008): L = C
independent latent functions with FITC priors

    f^l ~ N(0, K_l),   K_l = Q_l + D_l,   Q_l = K_fu K_uu⁻¹ K_uf,   D_l = diag(k_ii + σ_n² − [Q_l]_ii),

and the exact step likelihood p(y_i | f_i) = Π_{k≠y_i} Θ(f_i^{y_i} − f_i^k) (scalable-ep eq. 1), with
one EP factor ψ_ik = Θ(f_i^{y_i} − f_i^k) per (i, k≠y_i). Each factor gets a Gaussian site that
factorises over the two latents it touches, kept in natural (precision) form so that negative
precisions — which non-log-concave factors such as RMGPC's produce — stay representable:

    ψ̃_ik = Z̃_ik exp(−½ τ^y_ik (f_i^{y_i})² + ν^y_ik f_i^{y_i}) · exp(−½ τ^k_ik (f_i^k)² + ν^k_ik f_i^k).

Layout (``PairSites``): four [N,C] tensors; entry [i,k] belongs to ψ_ik ("y side" on f_i^{y_i},
"k side" on f_i^k); column y_i is unused and kept at zero. Per (i,l) the site totals add:
τ_il = τ^k_il for l ≠ y_i and τ_{i,y_i} = Σ_k τ^y_ik (``site_totals``).

The factor is pluggable: ``log_factor(m_y, v_y, m_k, v_k) -> log Z [N,C]`` is the log normaliser of
the factor under the cavity N(m_y, v_y) N(m_k, v_k); moments follow from its derivatives through
the shared rule ``gaussian.match_moments`` (Seeger 2006; run in float64 for any model dtype). The default
is the step factor, log Z = log Φ((m_y − m_k)/√(v_y + v_k)). RMGPC swaps in its mixed factor.

EP: parallel updates (every factor from the same posterior, then every site replaced), damped
(site ← old + damping·(new − old); damping = 1 is plain EP), guarded (a site update with
non-finite values, non-positive tilted variance or non-positive local posterior precision is
skipped; a latent whose posterior would become non-PD or give a non-positive cavity variance has
its updates re-damped by halving, and skipped after five halvings), counted, and run to
convergence (max change of any site parameter < tol) before each hyper-parameter step
(scalable-ep §3: "run EP until convergence before updating the hyper-parameters"), at most
``max_sweeps`` sweeps a step; once the hyper-parameters are stationary the fit loop lets a run that
has not converged go on to ``SETTLE_SWEEPS`` × ``max_sweeps`` sweeps (``GFITC.settle``).

What this module does not do: minibatches or stochastic site updates (the FITC evidence has no
sum over the data, scalable-ep §3), EP on the inducing values (that is ``ep``/``sep``), or any
N×N matrix: everything is O(N M²) per latent function.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, ClassVar, NamedTuple

import torch
from torch import nn

from .engine import Capabilities, Engine, refuse_weights
from .gaussian import NotPositiveDefiniteError, log_ndtr, match_moments, matvec, solve_lower, sum_sq
from .sparse import InducingPosterior, SparseGP

__all__ = ["PairSites", "FITCPrior", "fitc_prior", "zero_sites", "factor_mask", "site_totals",
           "posterior_marginals", "cavities", "step_log_Z", "tilted_pair_moments", "site_log_normalizers",
           "SweepResult", "ep_sweep", "EPReport", "reset_invalid", "run_ep", "log_evidence", "inducing_posterior",
           "GFITC", "GFITCState"]

LogFactor = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
_MAX_HALVINGS = 5


class PairSites(NamedTuple):
    """Site natural parameters of the pairwise factors, each [N,C]; entry [i,k] belongs to ψ_ik."""

    tau_y: torch.Tensor
    nu_y: torch.Tensor
    tau_k: torch.Tensor
    nu_k: torch.Tensor


@dataclass(frozen=True)
class FITCPrior:
    """The FITC prior at the training inputs, K = D + AᵀA per latent.

    chol_Kuu [L,M,M] (L_K), A = L_K⁻¹ K_uf [L,M,N], d = k_ii + σ_n² − ‖a_i‖² [L,N] (clamped at 0).
    """

    chol_Kuu: torch.Tensor
    A: torch.Tensor
    d: torch.Tensor


def fitc_prior(model: SparseGP, X: torch.Tensor) -> FITCPrior:
    """FITC prior pieces of ``model`` at inputs X [N,D] (differentiable w.r.t. the model's parameters)."""
    Lk = model.chol_Kuu()
    A, kdiag = model.projection(X, Lk)
    return FITCPrior(chol_Kuu=Lk, A=A, d=(kdiag - sum_sq(A, -2)).clamp_min(0.0))


def zero_sites(N: int, C: int, dtype=torch.float64, device=None) -> PairSites:
    """All sites at zero (posterior = prior): four [N,C] zero tensors."""
    return PairSites(*(torch.zeros(N, C, dtype=dtype, device=device) for _ in range(4)))


def factor_mask(y: torch.Tensor, C: int) -> torch.Tensor:
    """[N,C] bool, True where the factor ψ_ik exists (k ≠ y_i)."""
    return torch.arange(C, device=y.device)[None, :] != y[:, None]


def site_totals(y: torch.Tensor, sites: PairSites) -> tuple[torch.Tensor, torch.Tensor]:
    """Total site precision and precision-mean per (i,l): τ [N,C], ν [N,C] (the factors' sides add)."""
    onehot = torch.nn.functional.one_hot(y, sites.tau_y.shape[1]).to(sites.tau_y.dtype)
    tau = sites.tau_k + onehot * sites.tau_y.sum(1, keepdim=True)
    nu = sites.nu_k + onehot * sites.nu_y.sum(1, keepdim=True)
    return tau, nu


# ---------------------------------------------------------------------------------------------
# Posterior of one FITC latent under Gaussian sites, in O(N M²) (Naish-Guzman & Holden 2008;
# GPML infFITC_EP; Rasmussen & Williams §3.6 for the full-GP case). Per latent, with T = diag(τ),
# prior K = D + VVᵀ, V = Aᵀ [N,M]:
#
#   Σ = (K⁻¹ + T)⁻¹,   μ = Σν.
#
# Woodbury on K⁻¹ = D⁻¹ − D⁻¹V(I + VᵀD⁻¹V)⁻¹VᵀD⁻¹ gives K⁻¹ + T = W − U B⁻¹ Uᵀ with W = D⁻¹ + T,
# U = D⁻¹V, B = I + VᵀD⁻¹V; Woodbury again, with the element-wise identities
#   W⁻¹ = diag(d g),  W⁻¹U = diag(g) V,  B − UᵀW⁻¹U = I + Vᵀ diag(r) V,
#   g = 1/(1 + τ d),  r = τ g = τ/(1 + τ d),
# yields
#   Σ = diag(d g) + diag(g) V P⁻¹ Vᵀ diag(g),   P = I + A diag(r) Aᵀ   [M,M],
#   diag Σ = d g + g² ‖L_P⁻¹ a_i‖²,   μ = d g ν + g ∘ (Aᵀ P⁻¹ A (g ν)).
# No D⁻¹ or T⁻¹ appears: valid for d → 0 (the noise-free Z = X limit, where g → 1, r → τ) and for
# τ < 0. Validity: the block matrix [[W, U], [Uᵀ, B]] has Schur complements K⁻¹ + T (of B, always
# PD) and P (of W), so for d > 0:  Σ is PD  ⇔  1 + τ d > 0 for every i and P is PD. (Σ PD already
# forces W ⪰ K⁻¹ + T ≻ 0, since K⁻¹ ⪯ D⁻¹.)
#
# The normaliser of prior × sites (each site exp(−½τf² + νf), unnormalised):
#   log ∫ N(f|0,K) Π_i exp(−½τ_i f_i² + ν_i f_i) df = −½ log|I + K T| + ½ νᵀΣν,
#   |I + TK| = |I + TD| |I + (I + TD)⁻¹ T V Vᵀ| = Π_i (1 + τ_i d_i) · |P|,
#   νᵀΣν = Σ_i d_i g_i ν_i² + ‖L_P⁻¹ A (g ν)‖².
#
# q(u): integrating f_i out of p(f_i | u) = N(f_i | a_iᵀv, d_i) (v = L_K⁻¹u, prior N(0, I)) against
# the site gives exp(−½ r_i (a_iᵀv)² + g_i ν_i a_iᵀv), so q(v) = N(P⁻¹ A(g ν), P⁻¹) — the same P,
# valid for τ < 0 — and q(u) = N(L_K m_v, L_K P⁻¹ L_Kᵀ). Marginals of q(u) at new inputs through
# ``sparse.marginals`` are then exactly the FITC predictive distribution.
# ---------------------------------------------------------------------------------------------
def _posterior(prior: FITCPrior, tau: torch.Tensor, nu: torch.Tensor):
    """(mean [N,L], var [N,L], chol_P [L,M,M], c = L_P⁻¹A(gν) [L,M], ok [L]) without raising."""
    t, n, d, A = tau.transpose(0, 1), nu.transpose(0, 1), prior.d, prior.A       # [L,N]
    one_td = 1.0 + t * d
    ok = (one_td > 0).all(-1)
    g = 1.0 / torch.where(one_td > 0, one_td, torch.ones_like(one_td))
    r = t * g
    M = A.shape[-2]
    eye = torch.eye(M, dtype=A.dtype, device=A.device)
    P = eye + (A * r[:, None, :]) @ A.transpose(-1, -2)
    Lp, info = torch.linalg.cholesky_ex(P)
    ok = ok & (info == 0)
    if not bool(ok.all()):      # keep the failed latents finite; callers only use the ok ones
        Lp = torch.where(ok[:, None, None], Lp, eye)
    B = solve_lower(Lp, A)                                                            # [L,M,N]
    c = solve_lower(Lp, matvec(A, g * n)[..., None])[..., 0]                          # [L,M]
    var = d * g + g * g * sum_sq(B, -2)
    mean = d * g * n + g * matvec(B.mT, c)
    ok = ok & torch.isfinite(var).all(-1) & torch.isfinite(mean).all(-1) & (var > 0).all(-1)
    return mean.transpose(0, 1), var.transpose(0, 1), Lp, c, ok


def posterior_marginals(prior: FITCPrior, tau: torch.Tensor, nu: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Marginals of q(f) ∝ p_FITC(f) Π exp(−½τf² + νf) at the training inputs, O(N M²) per latent.

    Σ = (K⁻¹ + T)⁻¹, μ = Σν through the Woodbury form in the comment above (valid for τ < 0).

    Args:
        prior: ``fitc_prior(model, X)``; tau, nu: site totals [N,L].
    Returns:
        mean [N,L], var [N,L].
    Raises:
        NotPositiveDefiniteError: when the posterior of some latent is not positive definite.
    """
    mean, var, _, _, ok = _posterior(prior, tau, nu)
    if not bool(ok.all()):
        bad = torch.nonzero(~ok).flatten().tolist()
        raise NotPositiveDefiniteError(f"FITC-EP posterior of latent function(s) {bad} is not positive definite")
    return mean, var


def cavities(y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, sites: PairSites):
    """Cavity marginals q^{\\ik}(f_i^{y_i}) q^{\\ik}(f_i^k) of every factor: (m_y, v_y, m_k, v_k), each [N,C].

    Posterior marginal ÷ that factor's site side (RMGPC supplement eq. 3 in natural form). Column
    y_i holds the posterior marginals (no factor there).
    """
    lam, h = 1.0 / var, mean / var                                                    # [N,C]
    lam_y, h_y = lam.gather(1, y[:, None]), h.gather(1, y[:, None])                   # [N,1]
    v_y = 1.0 / (lam_y - sites.tau_y)
    v_k = 1.0 / (lam - sites.tau_k)
    return v_y * (h_y - sites.nu_y), v_y, v_k * (h - sites.nu_k), v_k


def step_log_Z(m_y: torch.Tensor, v_y: torch.Tensor, m_k: torch.Tensor, v_k: torch.Tensor) -> torch.Tensor:
    """log ∫ Θ(f_y − f_k) N(f_y|m_y,v_y) N(f_k|m_k,v_k) = log Φ((m_y − m_k)/√(v_y + v_k)), element-wise."""
    return log_ndtr((m_y - m_k) / torch.sqrt(v_y + v_k))


def tilted_pair_moments(log_factor: LogFactor, m_y, v_y, m_k, v_k):
    """log Z and the tilted marginal moments of both latents of every factor, all [N,C].

    From ∂log Z/∂(mean, var) of the cavity (``gaussian.match_moments``: autograd, in float64,
    results cast back to the cavity's dtype): exact marginal moments because the cavity factorises over the two
    latents. Returns (log Z, m̂_y, v̂_y, m̂_k, v̂_k).
    """
    mean = torch.stack([m_y, m_k], -1)
    var = torch.stack([v_y, v_k], -1)
    log_Z, new_mean, new_var = match_moments(
        lambda m, v: log_factor(m[..., 0], v[..., 0], m[..., 1], v[..., 1]), mean, var)
    log_Z, new_mean, new_var = log_Z.to(m_y.dtype), new_mean.to(m_y.dtype), new_var.to(m_y.dtype)
    return log_Z, new_mean[..., 0], new_var[..., 0], new_mean[..., 1], new_var[..., 1]


def _log_site_integral(m, v, tau, nu):
    """log ∫ N(f|m,v) exp(−½τf² + νf) df = −½ log(1+vτ) + ½(2mν + vν² − m²τ)/(1+vτ)."""
    one = 1.0 + v * tau
    return -0.5 * torch.log(one) + 0.5 * (2.0 * m * nu + v * nu * nu - m * m * tau) / one


def site_log_normalizers(y: torch.Tensor, sites: PairSites, mean: torch.Tensor, var: torch.Tensor,
                         log_factor: LogFactor = step_log_Z) -> torch.Tensor:
    """log Z̃_ik: the site normaliser that makes ∫ ψ̃_ik q^{\\ik} = Z_ik (R&W eq. 3.65 terms); [N,C], 0 at y_i.

    log Z̃_ik = log Z_ik − log ∫ N(m_y, v_y) e^{−½τ^y f² + ν^y f} − log ∫ N(m_k, v_k) e^{−½τ^k f² + ν^k f}.
    Args: mean, var: posterior marginals [N,C] under ``sites``.
    """
    m_y, v_y, m_k, v_k = cavities(y, mean, var, sites)
    out = (log_factor(m_y, v_y, m_k, v_k) - _log_site_integral(m_y, v_y, sites.tau_y, sites.nu_y)
           - _log_site_integral(m_k, v_k, sites.tau_k, sites.nu_k))
    return torch.where(factor_mask(y, mean.shape[1]), out, torch.zeros_like(out))


def _latent_validity(y, sites, mean, var, ok):
    """ok [L] further requiring a positive cavity variance for every site side of the latent."""
    lam = 1.0 / var
    mask = factor_mask(y, var.shape[1])
    bad_y = (mask & ~(lam.gather(1, y[:, None]) - sites.tau_y > 0)).any(1)         # [N] -> latent y_i
    bad_k = (mask & ~(lam - sites.tau_k > 0)).any(0)                                # [C] -> latent k
    bad = bad_k | (torch.zeros_like(ok, dtype=var.dtype).index_add_(0, y, bad_y.to(var.dtype)) > 0)
    return ok & ~bad


def _blend(old: PairSites, new: PairSites, step_y: torch.Tensor, step_k: torch.Tensor) -> PairSites:
    return PairSites(old.tau_y + step_y * (new.tau_y - old.tau_y), old.nu_y + step_y * (new.nu_y - old.nu_y),
                     old.tau_k + step_k * (new.tau_k - old.tau_k), old.nu_k + step_k * (new.nu_k - old.nu_k))


class SweepResult(NamedTuple):
    """One parallel EP sweep: new sites, the posterior marginals under them [N,C], and its report."""

    sites: PairSites
    mean: torch.Tensor
    var: torch.Tensor
    n_skipped: int       # one-latent site updates refused (kept at their old value)
    n_redamped: int      # one-latent site updates applied with a step smaller than ``damping``
    max_change: float    # max |Δ|/(1 + |old|) over every site parameter actually applied


@torch.no_grad()
def ep_sweep(prior: FITCPrior, y: torch.Tensor, sites: PairSites, *, damping: float = 0.5,
             log_factor: LogFactor = step_log_Z, marginals: tuple[torch.Tensor, torch.Tensor] | None = None
             ) -> SweepResult:
    """One parallel, damped, guarded EP sweep over all factors ψ_ik.

    For every factor at once: cavity (``cavities``), tilted moments (``tilted_pair_moments``), new
    site = tilted ÷ cavity in natural parameters (τ̂ = 1/v̂ − 1/v, ν̂ = m̂/v̂ − m/v), damped
    old + damping·(new − old). Guards: a site side with non-finite values, v̂ ≤ 0 or 1/v + τ ≤ 0,
    or whose factor has a non-finite log Z, is skipped; then per latent, if the posterior is not PD
    or a cavity variance is non-positive, that latent's updates are re-damped (step halved up to
    five times, then skipped). ``sites`` must give a valid posterior (``run_ep`` ensures it).

    Args:
        prior: ``fitc_prior``; y [N] int64; sites: current ``PairSites``.
        damping: weight of the new site, in (0, 1].
        log_factor: the factor's log normaliser (default: the step factor).
        marginals: posterior (mean, var) [N,C] under ``sites`` if already known.
    Returns:
        ``SweepResult``.
    """
    C = sites.tau_y.shape[1]
    if marginals is None:
        marginals = posterior_marginals(prior, *site_totals(y, sites))
    mean, var = marginals
    mask = factor_mask(y, C)
    m_y, v_y, m_k, v_k = cavities(y, mean, var, sites)
    log_Z, mh_y, vh_y, mh_k, vh_k = tilted_pair_moments(log_factor, m_y, v_y, m_k, v_k)
    new = PairSites(1.0 / vh_y - 1.0 / v_y, mh_y / vh_y - m_y / v_y, 1.0 / vh_k - 1.0 / v_k, mh_k / vh_k - m_k / v_k)
    prop = _blend(sites, new, damping, damping)
    valid = mask & torch.isfinite(log_Z)
    ok_y = valid & torch.isfinite(prop.tau_y) & torch.isfinite(prop.nu_y) & (vh_y > 0) & (1.0 / v_y + prop.tau_y > 0)
    ok_k = valid & torch.isfinite(prop.tau_k) & torch.isfinite(prop.nu_k) & (vh_k > 0) & (1.0 / v_k + prop.tau_k > 0)
    n_skipped = int((mask & ~ok_y).sum() + (mask & ~ok_k).sum())
    prop = PairSites(torch.where(ok_y, prop.tau_y, sites.tau_y), torch.where(ok_y, prop.nu_y, sites.nu_y),
                     torch.where(ok_k, prop.tau_k, sites.tau_k), torch.where(ok_k, prop.nu_k, sites.nu_k))

    # per-latent re-damping: the latents' posteriors are independent, so each has its own step
    step = torch.ones(C, dtype=var.dtype, device=var.device)
    for attempt in range(_MAX_HALVINGS + 2):
        cand = _blend(sites, prop, step[y][:, None], step[None, :])
        mean_new, var_new, _, _, ok = _posterior(prior, *site_totals(y, cand))
        ok = _latent_validity(y, cand, mean_new, var_new, ok)
        if bool(ok.all()):
            break
        if attempt == _MAX_HALVINGS:
            step = torch.where(ok, step, torch.zeros_like(step))     # skip; old sites are valid
        else:
            step = torch.where(ok, step, 0.5 * step)
    changed_y = ok_y & (step[y][:, None] < 1)
    changed_k = ok_k & (step[None, :] < 1)
    n_redamped = int((changed_y & (step[y][:, None] > 0)).sum() + (changed_k & (step[None, :] > 0)).sum())
    n_skipped += int((changed_y & (step[y][:, None] == 0)).sum() + (changed_k & (step[None, :] == 0)).sum())
    # relative change: sites of confidently classified points grow large, where an absolute tolerance never triggers
    max_change = max(float(((a - b).abs() / (1.0 + b.abs())).max()) if a.numel() else 0.0 for a, b in zip(cand, sites))
    return SweepResult(cand, mean_new, var_new, n_skipped, n_redamped, max_change)


@dataclass(frozen=True)
class EPReport:
    """What ``run_ep`` did: sweeps run, whether it converged, guarded updates, latents reset to the prior."""

    n_sweeps: int
    converged: bool
    n_skipped: int
    n_redamped: int
    n_reset: int
    max_change: float


@torch.no_grad()
def reset_invalid(prior: FITCPrior, y: torch.Tensor, sites: PairSites):
    """Warm-start guard: zero the sites of every latent whose posterior under ``prior`` is invalid.

    A latent is invalid when its posterior is not PD or a site side has a non-positive cavity
    variance (e.g. negative site precisions after a hyper-parameter step).

    Returns:
        (sites, mean [N,C], var [N,C], n_reset) with the posterior marginals under the returned sites.
    """
    mean, var, _, _, ok = _posterior(prior, *site_totals(y, sites))
    ok = _latent_validity(y, sites, mean, var, ok)
    n_reset = int((~ok).sum())
    if n_reset:
        keep_y, keep_k = ok[y][:, None].to(var.dtype), ok[None, :].to(var.dtype)
        sites = PairSites(sites.tau_y * keep_y, sites.nu_y * keep_y, sites.tau_k * keep_k, sites.nu_k * keep_k)
        mean, var = posterior_marginals(prior, *site_totals(y, sites))
    return sites, mean, var, n_reset


@torch.no_grad()
def run_ep(prior: FITCPrior, y: torch.Tensor, sites: PairSites, *, damping: float = 0.5, tol: float = 1e-4,
           max_sweeps: int = 100, log_factor: LogFactor = step_log_Z):
    """Parallel EP sweeps from ``sites`` until every site parameter changes by less than ``tol`` (relative).

    Warm start: if ``sites`` give an invalid posterior under ``prior`` (e.g. after a
    hyper-parameter step with negative site precisions), that latent's sites are reset to zero
    (counted in ``n_reset``). Convergence requires a sweep with max change < tol and no guarded
    updates.

    Returns:
        (sites, mean [N,C], var [N,C], ``EPReport``) with the posterior marginals under the final sites.
    """
    sites, mean, var, n_reset = reset_invalid(prior, y, sites)
    n_skipped = n_redamped = n_sweeps = 0
    converged, max_change = False, math.inf
    for n_sweeps in range(1, max_sweeps + 1):
        res = ep_sweep(prior, y, sites, damping=damping, log_factor=log_factor, marginals=(mean, var))
        sites, mean, var = res.sites, res.mean, res.var
        n_skipped += res.n_skipped
        n_redamped += res.n_redamped
        max_change = res.max_change
        if max_change < tol and res.n_skipped == 0 and res.n_redamped == 0:
            converged = True
            break
    return sites, mean, var, EPReport(n_sweeps, converged, n_skipped, n_redamped, n_reset, max_change)


def log_evidence(prior: FITCPrior, tau: torch.Tensor, nu: torch.Tensor, log_Z_site: torch.Tensor) -> torch.Tensor:
    """EP estimate of log p(y): log Z_EP = Σ_l log ∫ p_FITC(f^l) Π_i e^{−½τ_il f² + ν_il f} df + Σ_ik log Z̃_ik.

    Rasmussen & Williams eq. (3.65) generalised to FITC, per latent (comment above ``_posterior``):
        −½ Σ_i log(1 + τ_i d_i) − log|L_P| + ½ [Σ_i d_i g_i ν_i² + ‖L_P⁻¹A(gν)‖²],
    O(N M²). Differentiable w.r.t. the hyper-parameters and inducing inputs through ``prior`` with
    the sites (τ, ν, log Z̃) held fixed; at an EP fixed point that is the exact gradient of log Z_EP
    (Seeger 2006: the cavity dependence of log Z̃ has zero derivative there).

    Args:
        prior: ``fitc_prior``; tau, nu: site totals [N,L]; log_Z_site: log Z̃ [N,C] (``site_log_normalizers``).
    Returns:
        scalar.
    """
    t, n, d, A = tau.transpose(0, 1), nu.transpose(0, 1), prior.d, prior.A
    one_td = 1.0 + t * d
    g = 1.0 / one_td
    M = A.shape[-2]
    P = torch.eye(M, dtype=A.dtype, device=A.device) + (A * (t * g)[:, None, :]) @ A.transpose(-1, -2)
    Lp, info = torch.linalg.cholesky_ex(P)
    if bool((info > 0).any()) or bool((one_td <= 0).any()):
        raise NotPositiveDefiniteError("the FITC-EP posterior is not positive definite at these hyper-parameters; "
                                       "re-run EP (engine.update) before evaluating the evidence")
    c = solve_lower(Lp, matvec(A, g * n)[..., None])[..., 0]
    quad = (d * g * n * n).sum() + (c * c).sum()
    return (-0.5 * torch.log(one_td).sum() - torch.log(Lp.diagonal(dim1=-2, dim2=-1)).sum()
            + 0.5 * quad + log_Z_site.sum())


def inducing_posterior(prior: FITCPrior, tau: torch.Tensor, nu: torch.Tensor) -> InducingPosterior:
    """q(u) ∝ p(u) Π_i ∫ p(f_i|u) e^{−½τ_i f_i² + ν_i f_i} df_i = N(L_K P⁻¹A(gν), L_K P⁻¹ L_Kᵀ).

    Valid for τ < 0 (as long as the posterior is PD). The lower Cholesky factor of P⁻¹ comes from
    the reversed factorisation: with J the exchange matrix and J P J = L_J L_Jᵀ, P⁻¹ = R Rᵀ for
    the lower-triangular R = J L_J⁻ᵀ J, so ``chol`` = L_K R is lower triangular with positive diagonal.

    Args: prior: ``fitc_prior``; tau, nu: site totals [N,L]. Returns ``InducingPosterior`` ([L,M], [L,M,M]).
    """
    _, _, Lp, c, ok = _posterior(prior, tau, nu)
    if not bool(ok.all()):
        raise NotPositiveDefiniteError("the FITC-EP posterior is not positive definite; cannot form q(u)")
    m_v = torch.linalg.solve_triangular(Lp.transpose(-1, -2), c[..., None], upper=True)[..., 0]
    Lj = torch.linalg.cholesky((Lp @ Lp.transpose(-1, -2)).flip(-1, -2))             # J P J = L_J L_Jᵀ
    eye = torch.eye(Lj.shape[-1], dtype=Lj.dtype, device=Lj.device).expand_as(Lj)
    R = torch.linalg.solve_triangular(Lj.transpose(-1, -2), eye, upper=True).flip(-1, -2)
    Lk = prior.chol_Kuu
    return InducingPosterior(mean=(Lk @ m_v[..., None])[..., 0], chol=Lk @ R)


# ---------------------------------------------------------------------------------------------
# The engine (protocol of ``train.fit``: update → loss → backward → optimiser step).
# ---------------------------------------------------------------------------------------------
@dataclass
class GFITCState:
    """Explicit state of the GFITC engine: training data, sites, site normalisers and engine reports.

    Tensors: X [N,D], y [N] int64, tau_y/nu_y/tau_k/nu_k [N,C] (``PairSites`` layout), log_Z_site [N,C].
    Reports (plain numbers): ``skipped``, ``redamped``, ``reset`` are cumulative since ``init`` (the
    fit loop logs their changes); ``sweeps`` and ``converged`` describe the last ``update``.
    """

    X: torch.Tensor
    y: torch.Tensor
    tau_y: torch.Tensor
    nu_y: torch.Tensor
    tau_k: torch.Tensor
    nu_k: torch.Tensor
    log_Z_site: torch.Tensor
    sweeps: int = 0
    converged: bool = False
    skipped: int = 0
    redamped: int = 0
    reset: int = 0

    @property
    def sites(self) -> PairSites:
        """The four site tensors as ``PairSites``."""
        return PairSites(self.tau_y, self.nu_y, self.tau_k, self.nu_k)

    def report(self) -> dict:
        """Engine report for a fit history: {"sweeps", "converged", "skipped", "redamped", "reset"}."""
        return {"sweeps": self.sweeps, "converged": self.converged, "skipped": self.skipped,
                "redamped": self.redamped, "reset": self.reset}


# ``settle``'s sweep cap, in units of ``max_sweeps``: parallel EP on these factors has slow modes (the largest relative
# site change shrinks by ~1% a sweep late in a fit, docs/design-notes.md), so a run from sites that lag by a few
# percent needs tens of sweeps more than a step allows
SETTLE_SWEEPS = 5


@dataclass(frozen=True)
class GFITC(Engine):
    """Settings of the GFITC engine (scalable-ep §3): EP in function space on the FITC prior, full batch.

    Attributes:
        damping: weight of the new site in (0, 1]; 1 = undamped EP.
        tol: EP stops when no site parameter changes by more than this (relative to 1 + |value|) in a sweep
            (the estimator's ``method_params["ep_tol"]``, 1e-2 there; 1e-3 here and in the paper scripts).
        max_sweeps: cap on EP sweeps per ``update``. Each update warm-starts from the previous sites,
            so over a fit EP keeps converging; on satimage (M = 129) parallel EP from zero sites
            still changed sites by 13% (relative) after 55 sweeps, so "to convergence" at every
            step would cost ~100 sweeps per hyper-parameter step. ``state.report()`` says whether the
            last update converged.
        log_factor: log normaliser of one pairwise factor under its cavity (default: step).
    """

    capabilities: ClassVar[Capabilities] = Capabilities(per_row_state=True, full_batch_only=True,
                                                        closed_form_update=True)
    damping: float = 0.5
    tol: float = 1e-3
    max_sweeps: int = 20
    log_factor: LogFactor = field(default=step_log_Z, repr=False)

    def __post_init__(self):
        if not 0.0 < self.damping <= 1.0:
            raise ValueError(f"damping must be in (0, 1], got {self.damping}")
        if not self.tol > 0:
            raise ValueError(f"tol must be > 0, got {self.tol}")
        if self.max_sweeps < 1:
            raise ValueError(f"max_sweeps must be >= 1, got {self.max_sweeps}")

    def init(self, model: SparseGP, X: torch.Tensor | None, y: torch.Tensor | None,
             generator: torch.Generator, weight: torch.Tensor | None = None) -> GFITCState:
        """Zero sites (posterior = prior) for the N training rows; X = y = None gives an empty state to load into."""
        refuse_weights(self, weight)   # a repeated row is another f_i, with its own FITC residual: no site power
        C = model.n_latent
        ref = model.Z
        if C < 2:
            raise ValueError(f"GFITC needs one latent function per class (at least 2), got {C}")
        if X is None or y is None:
            X = torch.zeros(0, ref.shape[-1], dtype=ref.dtype, device=ref.device)
            y = torch.zeros(0, dtype=torch.long, device=ref.device)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= C):
            raise ValueError(f"labels must be class indices in 0..{C - 1}")
        s = zero_sites(X.shape[0], C, dtype=ref.dtype, device=ref.device)
        return GFITCState(X=X.detach(), y=y.long(), tau_y=s.tau_y, nu_y=s.nu_y, tau_k=s.tau_k, nu_k=s.nu_k,
                          log_Z_site=torch.zeros_like(s.tau_y))

    @torch.no_grad()
    def carry(self, model: SparseGP, state: GFITCState, X: torch.Tensor, y: torch.Tensor,
              keep: torch.Tensor, weight: torch.Tensor | None = None) -> GFITCState:
        """The state for a new training set X, y (a warm start): each row takes over the sites of the old
        row ``keep`` names (−1: zero sites); the next ``update`` runs EP from there."""
        refuse_weights(self, weight)
        have = (keep >= 0)[:, None]
        src = keep.clamp_min(0)

        def take(a):
            return torch.where(have, a[src], torch.zeros((), dtype=a.dtype, device=a.device))

        return GFITCState(X=X.detach(), y=y.long(), tau_y=take(state.tau_y), nu_y=take(state.nu_y),
                          tau_k=take(state.tau_k), nu_k=take(state.nu_k), log_Z_site=take(state.log_Z_site),
                          skipped=state.skipped, redamped=state.redamped, reset=state.reset)

    @staticmethod
    def _check_full_batch(state: GFITCState, X: torch.Tensor, idx: torch.Tensor | None) -> None:
        n = state.tau_y.shape[0]
        in_order = idx is None or (idx.shape[0] == n and bool((idx.cpu() == torch.arange(n)).all()))
        if X.shape[0] != n or not in_order:
            raise ValueError(f"GFITC is full-batch only: got {X.shape[0]} rows but the EP sites belong to the "
                             f"{n} training rows, in order (minibatches are not supported; use batch_size=None, "
                             "or method='ep'/'sep' for minibatch training)")

    def update(self, model: SparseGP, state: GFITCState, X: torch.Tensor, y: torch.Tensor, n_total: int,
               idx: torch.Tensor | None = None, *, geometry=None) -> GFITCState:
        """Run EP to convergence at the current hyper-parameters (warm start from ``state``'s sites), at most
        ``max_sweeps`` sweeps."""
        return self._run(model, state, X, y, idx, self.max_sweeps)

    @torch.no_grad()
    def _run(self, model: SparseGP, state: GFITCState, X: torch.Tensor, y: torch.Tensor, idx: torch.Tensor | None,
             max_sweeps: int) -> GFITCState:
        self._check_full_batch(state, X, idx)
        y = y.long()
        prior = fitc_prior(model, X)
        sites, mean, var, rep = run_ep(prior, y, state.sites, damping=self.damping, tol=self.tol,
                                       max_sweeps=max_sweeps, log_factor=self.log_factor)
        log_Z_site = site_log_normalizers(y, sites, mean, var, self.log_factor)
        return GFITCState(X=X.detach(), y=y, tau_y=sites.tau_y, nu_y=sites.nu_y, tau_k=sites.tau_k,
                          nu_k=sites.nu_k, log_Z_site=log_Z_site, sweeps=rep.n_sweeps, converged=rep.converged,
                          skipped=state.skipped + rep.n_skipped, redamped=state.redamped + rep.n_redamped,
                          reset=state.reset + rep.n_reset)

    def loss(self, model: SparseGP, state: GFITCState, X: torch.Tensor, y: torch.Tensor, n_total: int,
             idx: torch.Tensor | None = None, *, geometry=None) -> torch.Tensor:
        """−log Z_EP with the sites held fixed (scalar, differentiable w.r.t. the model's parameters)."""
        self._check_full_batch(state, X, idx)
        tau, nu = site_totals(state.y, state.sites)
        return -log_evidence(fitc_prior(model, X), tau, nu, state.log_Z_site)

    def posterior(self, model: SparseGP, state: GFITCState) -> InducingPosterior:
        """q(u) implied by the FITC prior and the sites at the current hyper-parameters (``inducing_posterior``)."""
        with torch.no_grad():
            tau, nu = site_totals(state.y, state.sites)
            return inducing_posterior(fitc_prior(model, state.X), tau, nu)

    def trainable(self, model: SparseGP, state: GFITCState) -> list[nn.Parameter]:
        """Hyper-parameters and inducing inputs; the sites are set by EP, not by the optimiser."""
        return list(model.parameters())

    def counters(self, state: GFITCState) -> dict[str, int]:
        """Skipped and re-damped site updates, latents reset to the prior (cumulative)."""
        return {"skipped": int(state.skipped), "redamped": int(state.redamped), "reset": int(state.reset)}

    def converged(self, state: GFITCState) -> bool:
        """Whether the last EP run converged within ``max_sweeps``."""
        return bool(state.converged)

    def settle(self, model: SparseGP, state: GFITCState, X: torch.Tensor, y: torch.Tensor, n_total: int,
               idx: torch.Tensor | None = None) -> GFITCState:
        """EP from ``state``'s sites at the current hyper-parameters, at most ``SETTLE_SWEEPS`` × ``max_sweeps``
        sweeps (``Engine.settle``)."""
        return self._run(model, state, X, y, idx, SETTLE_SWEEPS * self.max_sweeps)
