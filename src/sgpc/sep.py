"""Stochastic EP (SEP) with inducing points: all sites tied into one factor per latent function (scalable-ep §2.3.1; Li et al. 2015).

Instead of N·(C−1) rank-one sites, SEP stores their product φ̃_l per latent function as natural
parameters in u-space (Λ̃ [L,M,M], h̃ [L,M]); memory O(L·M²), independent of N. A factor's
cavity divides q by the average site: q^{\\f} ∝ q / φ̃_l^{1/n_l} on every latent l the factor touches,
n_l being the number of factor slots on latent l in the whole data set (for the pairwise factors
of eq. 6: N_l(C−1) + (N − N_l) with N_l the points of class l). The cavity is the same for every
factor, so its projections on v_il cost one O(M²) product per point and latent.

Update (parallel over a minibatch B with n_{B,l} slots on latent l, damping ρ):
    θ̃_l ← θ̃_l + ρ [Σ_{slots in B on l} θ_new − (n_{B,l}/n_l) θ̃_l],
which for ρ = 1 and one factor is SEP's θ̃ ← (1 − 1/n)θ̃ + θ_new. The new local sites come from the
same moment matching as EP (``sites.site_update``).

log Z_q and its gradient (§2.3.1: "all the other steps are carried out as in the original EP
algorithm") come in two readings, ``SEP.log_z``:
  "local" (default): each minibatch factor's own rank-one site is recomputed from the SEP cavity (the
      site SEP's update would propose for it) and EP's estimate (eqs. 57–61, ``sites.log_Zq``) is
      evaluated with those sites, gradient by eq. (62). On small problems run to convergence this
      tracks central differences of the converged objective in sign and size.
  "tied": the cavity of every factor is q/φ̃_l^{1/n_l}, with g(θ^{\\f}) − g(θ) for that full-rank
      removal. Eq. (62) applied to this form ignores that SEP's fixed point (q's natural parameters =
      the average of the projected tilted ones) is not a stationary point of it; the resulting
      gradient can have the wrong sign (length-scales, noise) and pushes the kernel amplitudes down
      (docs/design-notes.md; measured on MNIST in docs/results/scalable-ep.md). Kept for comparison.

APEP (alpha paper §3.2) ties the sites the same way, with the cavity q/φ̃^{α/N}, but optimises
the tied factor's natural parameters by gradient ascent on the Power-EP energy (eq. 8) together with
the hyper-parameters, instead of moment matching.

Row weights (``engine``). Both count a row of weight w as w copies of it: SEP's slot counts n_l, a
minibatch's n_{B,l} and Σ θ_new sum w_i per slot (the tied site stays n_l copies of the average site, and the
cavity q/φ̃^{1/n_l} removes one copy's), and each row's log Z_q terms count w_i times; APEP's energy weighs each
row's term by w_i and has W = Σ_i w_i factors in place of N. For integer weights, a full-batch fit is the fit on
the data with row i repeated w_i times.

What this module does not do: per-site storage (``ep.py``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from .engine import Capabilities, Engine, rows_of
from .ep import detached_geometry, fresh_geometry, shared_geometry
from .sites import (FACTOR_KINDS, Factors, TiedSites, annealed_damping, cavity_projection, directions, g_whitened,
                    gather, is_pd, log_Zq, make_factors, pd_damping, per_latent, q_from_precision, q_state,
                    site_update, whitened_precision)
from .gaussian import cholesky, matvec, solve_lower, sum_sq
from .sparse import InducingPosterior, SparseGP

__all__ = ["SEP", "LOG_Z_KINDS", "SEPState", "SEPIncrement", "slot_counts", "APEP", "APEPState", "TiedFactor", "apep_energy"]


def slot_counts(factors: Factors, n_latent: int) -> torch.Tensor:
    """Number of factor slots touching each latent function: [L] (float; unweighted)."""
    lat = factors.latent[factors.mask]                                   # [n_factors, T]
    return torch.bincount(lat.reshape(-1), minlength=n_latent).to(torch.float64)


@dataclass
class SEPState:
    """Tied sites θ̃ (u-space), slot counts n_l [L] (weighted: Σ w_i over the slots), passes over the data so
    far (``step``, the damping clock as in ``ep.EP``), update reports, and the training rows' weights ``w`` [N]
    (None: 1 each)."""

    Lam: torch.Tensor
    h: torch.Tensor
    counts: torch.Tensor
    step: float = 0.0
    skipped: int = 0
    redamped: int = 0
    w: torch.Tensor | None = None


@dataclass
class SEPIncrement:
    """One minibatch's contribution to the tied sites: Σ w_i θ_new (Lam [L,M,M], h [L,M]), slots
    updated per latent n_b [L] (Σ w_i), and counts [3] = (skipped factors, all factors, all slots (Σ w_i)) as
    floats."""

    Lam: torch.Tensor
    h: torch.Tensor
    n_b: torch.Tensor
    counts: torch.Tensor


LOG_Z_KINDS = ("local", "tied")
REMOVABLE = 1.0 - 1e-6   # "local": a site is removed from q only if c1·vᵀSv < this (the cavity stays proper along v)


@dataclass(frozen=True)
class SEP(Engine):
    """Settings of SEP. ``factor`` and the damping schedule as in ``ep.EP`` (α = 1); ``log_z``: which
    estimate of log Z_q the hyper-parameters follow, "local" or "tied" (module docstring)."""

    capabilities: ClassVar[Capabilities] = Capabilities(streamable=True, increment=True, closed_form_update=True,
                                                        shared_geometry=True, rescalable=True, weighted=True)
    factor: str = "pairwise"
    damping: float = 0.5
    decay: float = 0.99
    min_damping: float = 0.05
    log_z: str = "local"

    def __post_init__(self):
        if self.factor not in FACTOR_KINDS:
            raise ValueError(f"unknown factor {self.factor!r}; valid: 'pairwise', 'likelihood'")
        if self.log_z not in LOG_Z_KINDS:
            raise ValueError(f"unknown log_z {self.log_z!r}; valid: {', '.join(map(repr, LOG_Z_KINDS))}")
        if not 0.0 < self.damping <= 1.0:
            raise ValueError(f"damping must be in (0, 1], got {self.damping}")

    def factors(self, model: SparseGP, y: torch.Tensor) -> Factors:
        """The factor structure for labels y."""
        return make_factors(self.factor, model, y, 1.0)

    def init(self, model: SparseGP, X, y, generator, weight=None) -> SEPState:
        """θ̃ = 0 (q = prior); slot counts from the full label vector and the rows' weights [N] (None: 1 each)."""
        L, M = model.n_latent, model.n_inducing
        dt, dev = model.Z.dtype, model.Z.device
        if y is None:
            counts = torch.ones(L, dtype=dt, device=dev)
        elif self.factor == "pairwise":          # from the (weighted) rows per class, N_l = Σ_{i: y_i = l} w_i
            counts = self.counts_from_classes(torch.bincount(y, weights=weight, minlength=L).to(dt).to(dev))
        else:
            counts = torch.full((L,), float(y.shape[0] if weight is None else weight.sum()), dtype=dt, device=dev)
        return SEPState(Lam=torch.zeros(L, M, M, dtype=dt, device=dev), h=torch.zeros(L, M, dtype=dt, device=dev),
                        counts=counts, w=None if weight is None else weight.detach().clone())

    def counts_from_classes(self, N_l: torch.Tensor) -> torch.Tensor:
        """Slot counts n_l [L] from the points per class N_l [L] (what a streamed fit knows up front; weighted
        points: their weights' sums).

        Pairwise factors (eq. 6): N_l(C−1) + (N − N_l) — slot_counts without the O(N·C) factor table;
        likelihood factors: N on every latent."""
        if self.factor == "pairwise":
            return N_l * (N_l.shape[0] - 1) + (N_l.sum() - N_l)
        return torch.full_like(N_l, float(N_l.sum()))

    @torch.no_grad()
    def carry(self, model: SparseGP, state: SEPState, X, y, keep: torch.Tensor, weight=None) -> SEPState:
        """The state for a new training set (a warm start; ``keep`` as in ``ep.EP.carry``, unused here; ``weight``
        the new rows' weights or None).

        The tied site is n_l copies of one average site (§2.3.1): with the new slot counts n'_l it
        becomes n'_l copies, θ̃_l ← θ̃_l · n'_l / n_l. The damping clock restarts."""
        fresh = self.init(model, None, y, None, weight)
        return replace(self.rescale(state, fresh.counts), w=fresh.w)

    @torch.no_grad()
    def rescale(self, state: SEPState, counts: torch.Tensor) -> SEPState:
        """The tied site for new slot counts n'_l [L]: θ̃_l · n'_l / n_l (what ``carry`` does; a streamed warm
        start knows only the class counts)."""
        scale = counts / state.counts.clamp_min(1.0)
        return replace(state, Lam=state.Lam * scale[:, None, None], h=state.h * scale[:, None], counts=counts, step=0.0)

    @staticmethod
    def _cavity_precision(state: SEPState, P: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The cavity q/φ̃^{1/n}'s whitened precision and linear term from the tied site's (P, b): the cavity
        keeps the fraction 1 − 1/n_l of θ̃_l, so P_c = I + keep·(P − I) and b_c = keep·b, with no products."""
        keep = 1.0 - 1.0 / state.counts.clamp_min(1.0)
        eye = torch.eye(P.shape[-1], dtype=P.dtype, device=P.device)
        return eye + keep[:, None, None] * (P - eye), keep[:, None] * b

    @torch.no_grad()
    def update(self, model: SparseGP, state: SEPState, X, y, n_total: int, idx=None, *, geometry=None,
               reduce: Callable[[SEPIncrement], object] | None = None) -> SEPState:
        """One parallel damped SEP update over the minibatch: ``apply(increment(...))``. ``reduce`` (data-
        parallel training) sums the increment over the ranks in place before it is applied."""
        Lk, V, s = detached_geometry(model, X, geometry)     # one factorisation of K_uu for the whole step
        state, P, b = self._restore(state, Lk)  # and one whitened precision of the tied site
        inc = self.increment(model, state, X, y, Lk, idx=idx, Pb=(P, b), Vs=(V, s))
        if reduce is not None:
            reduce(inc)
        return self.apply(model, state, inc, Lk, restored=True, P0=P)

    @torch.no_grad()
    def restore(self, model: SparseGP, state: SEPState, Lk: torch.Tensor | None = None) -> SEPState:
        """Make q and the cavity proper again after a hyper-parameter step changed K_uu.

        The tied site is checked for definiteness against the kernel it was updated with; if the
        new kernel breaks it, the site is raised to the power γ = ½, ¼, … (0 at worst: q = prior),
        counted as one re-damping.
        """
        return self._restore(state, model.chol_Kuu() if Lk is None else Lk)[0]

    def _restore(self, state: SEPState, Lk: torch.Tensor) -> tuple[SEPState, torch.Tensor, torch.Tensor]:
        """``restore``, also returning the whitened precision and linear term (P, b) of the state returned."""
        def proper(st):
            P, b = whitened_precision(Lk, TiedSites(st.Lam, st.h))
            return is_pd(P) and is_pd(self._cavity_precision(st, P, b)[0]), P, b

        ok, P, b = proper(state)
        if ok:
            return state, P, b
        for gamma in [0.5 ** k for k in range(1, 12)] + [0.0]:
            trial = replace(state, Lam=gamma * state.Lam, h=gamma * state.h)
            ok, P, b = proper(trial)
            if ok:
                break
        return replace(trial, redamped=state.redamped + 1), P, b

    @torch.no_grad()
    def increment(self, model: SparseGP, state: SEPState, X, y, Lk: torch.Tensor | None = None, *,
                  idx: torch.Tensor | None = None, Pb: tuple[torch.Tensor, torch.Tensor] | None = None,
                  Vs: tuple[torch.Tensor, torch.Tensor] | None = None) -> SEPIncrement:
        """The minibatch's sums Σ w_i θ_new and slot counts n_{B,l}: additive over disjoint shards of a
        minibatch, so data-parallel training all-reduces them (``distributed``) before ``apply``. ``idx``: the
        minibatch's rows of the data set (their weights; all rows when None). ``Pb``, ``Vs``: the tied site's
        whitened precision and linear term under ``Lk``, and ``directions(model, X, Lk)``, if the caller has them."""
        fac = self.factors(model, y)
        Lk = model.chol_Kuu() if Lk is None else Lk
        V, s = directions(model, X, Lk) if Vs is None else Vs
        c1, c2, ok = self._local_sites(model, state, fac, Lk, V, s, Pb)
        L = model.n_latent
        w = rows_of(state.w, idx)
        d1, d2 = per_latent(c1, fac.latent, L, w), per_latent(c2, fac.latent, L, w)
        used = (ok[..., None].expand_as(fac.latent)).to(V.dtype)
        slot = fac.mask[..., None].expand(fac.latent.shape).to(V.dtype)
        slots = per_latent(slot, fac.latent, L, w).sum()
        counts = torch.stack([(fac.mask & ~ok).sum().to(V.dtype), fac.mask.sum().to(V.dtype), slots])
        return SEPIncrement(Lam=V.mT @ (d1[..., None] * V), h=matvec(V.mT, d2),
                            n_b=per_latent(used, fac.latent, L, w).sum(1), counts=counts)

    @torch.no_grad()
    def apply(self, model: SparseGP, state: SEPState, inc: SEPIncrement, Lk: torch.Tensor | None = None,
              restored: bool = False, P0: torch.Tensor | None = None) -> SEPState:
        """θ̃_l ← θ̃_l + ρ [Σ_B θ_new − (n_{B,l}/n_l) θ̃_l], with ρ bounded so that q and the cavity stay PD.
        ``restored``: ``state`` comes from ``restore`` with this ``Lk``, which has checked that q and the
        cavity are proper, so the damping does not check them again. ``P0``: the tied site's whitened
        precision under ``Lk``, if the caller has it."""
        cav_Lk = model.chol_Kuu() if Lk is None else Lk
        skipped, n_factors = int(inc.counts[0]), int(inc.counts[1])
        passes = float(inc.counts[2] / state.counts.sum())                # |B|/N: the damping clock
        frac = (inc.n_b / state.counts.clamp_min(1.0))
        dLam = inc.Lam - frac[:, None, None] * state.Lam
        dLam = 0.5 * (dLam + dLam.mT)
        dh = inc.h - frac[:, None] * state.h
        keep = (1.0 - 1.0 / state.counts.clamp_min(1.0))[:, None, None]
        if P0 is None:
            P0, _ = whitened_precision(cav_Lk, TiedSites(state.Lam, state.h))
        dP = cav_Lk.mT @ dLam @ cav_Lk
        dP = 0.5 * (dP + dP.mT)
        rho = torch.full_like(frac, annealed_damping(self.damping, self.decay, state.step, self.min_damping))
        # the step is affine in ρ for q and for the cavity (which keeps a fraction `keep` of the tied site)
        eye = torch.eye(P0.shape[-1], dtype=P0.dtype, device=P0.device)
        Pc0 = eye + keep * (P0 - eye)
        rho, redamped = pd_damping(rho, [(P0, dP), (Pc0, keep * dP)], known_pd=restored)
        if rho is None:
            return replace(state, step=state.step + passes, skipped=state.skipped + n_factors,
                           redamped=state.redamped + redamped)
        return replace(state, Lam=state.Lam + rho[:, None, None] * dLam, h=state.h + rho[:, None] * dh,
                       step=state.step + passes, skipped=state.skipped + skipped, redamped=state.redamped + redamped)

    @torch.no_grad()
    def _local_sites(self, model: SparseGP, state: SEPState, fac: Factors, Lk: torch.Tensor, V, s, Pb=None):
        """The rank-one sites SEP proposes for the factors ``fac`` of the rows whose ``directions`` are
        V [L,B,M], s [L,B]: moment matching (eqs. 39–55) against the common cavity q/φ̃^{1/n}; ``Pb`` as
        in ``increment``. Returns c1, c2 [B,F,T] (0 where the update is invalid) and the validity mask ok [B,F]."""
        P, b = whitened_precision(Lk, TiedSites(state.Lam, state.h)) if Pb is None else Pb
        cav = q_from_precision(Lk, *self._cavity_precision(state, P, b))
        zeros = torch.zeros(fac.latent.shape, dtype=V.dtype, device=V.device)
        mean_cav, var_cav, _, _ = cavity_projection(cav, V, V, zeros, zeros, fac.latent)
        c1, c2, _, ok = site_update(fac, mean_cav, var_cav, gather(s, fac.latent), 1.0)
        c1 = torch.where(ok[..., None], c1, torch.zeros_like(c1))
        c2 = torch.where(ok[..., None], c2, torch.zeros_like(c2))
        return c1, c2, ok

    def geometry(self, model: SparseGP, X):
        """L_K and the minibatch's directions, shared by ``update`` and ``loss`` (``shared_geometry``)."""
        return shared_geometry(model, X)

    def counters(self, state: SEPState) -> dict[str, int]:
        """Skipped and re-damped site updates (cumulative)."""
        return {"skipped": int(state.skipped), "redamped": int(state.redamped)}

    def loss(self, model: SparseGP, state: SEPState, X, y, n_total: int, idx=None, *, geometry=None) -> torch.Tensor:
        """−log Z_q estimate on the minibatch (eq. 12), gradient as eq. (62); ``log_z`` picks the reading;
        ``geometry``: this step's ``geometry(model, X)`` at the current parameters, if the caller formed it. Each
        row's terms count w_i times (its weight, from the rows ``idx``)."""
        fac = self.factors(model, y)
        w = rows_of(state.w, idx)
        if self.log_z == "local":
            sites = TiedSites(state.Lam, state.h)
            Lk, V, s = geometry if geometry is not None else fresh_geometry(model, X)   # differentiable, eq. (62)
            P, b = whitened_precision(Lk, sites)                        # differentiable: the global term
            LP = cholesky(P, jitter=0.0, what="EP posterior precision")
            with torch.no_grad():
                Vd, Lkd, Pb = V.detach(), Lk.detach(), (P.detach(), b.detach())
                c1, c2, _ = self._local_sites(model, state, fac, Lkd, Vd, s.detach(), Pb)
                q = q_from_precision(Lkd, *Pb, LP=LP.detach())
            R = V @ q.W                                                  # Wᵀv, differentiable in V: log_Zq's too
            s_cc = sum_sq(R)                                             # vᵀSv [L,B], differentiable: log_Zq's too
            with torch.no_grad():
                # a site proposed against the SEP cavity need not be in q yet (early in a fit, before the
                # tied site has absorbed it): removing it would leave a cavity with a huge or negative
                # variance along v and the estimate meaningless. Such a factor keeps q as its cavity.
                s_q = gather(s_cc.detach(), fac.latent)
                keep = ((c1 * s_q) < REMOVABLE).all(-1, keepdim=True)
                c1, c2 = c1 * keep, c2 * keep
            return -log_Zq(model, sites, fac, X, Vd, c1, c2, 1.0, n_total / X.shape[0], Lk=Lk, q=q, Vs=(V, s),
                           LPb=(LP, b), R=R, current=True, weight=w, s_cc=s_cc)
        sites = TiedSites(state.Lam, state.h)
        Lk, V, s = geometry if geometry is not None else fresh_geometry(model, X)
        P, b = whitened_precision(Lk, sites)
        g_q = g_whitened(cholesky(P, jitter=0.0, what="EP posterior precision"), b)   # [L], differentiable
        global_term = g_q.sum()
        with torch.no_grad():
            cav = q_from_precision(Lk.detach(), *self._cavity_precision(state, P.detach(), b.detach()))
            # g(θ^{\f}) − g(θ) on each latent: the same for every factor touching it
            G = g_whitened(cav.LP, cav.b) - g_q.detach()
        zeros = torch.zeros(fac.latent.shape, dtype=V.dtype, device=V.device)
        mean_cav, var_cav, _, _ = cavity_projection(cav, V, V, zeros, zeros, fac.latent)
        logZ = fac.log_Z(mean_cav, var_cav + gather(s, fac.latent)).masked_fill(~fac.mask, 0.0)
        gterms = G[fac.latent] * fac.mask[..., None]                          # [B,F,T]
        if w is None:
            local = logZ.sum() + gterms.sum()
        else:                                                                 # each row's terms w_i times
            local = (w * (logZ.sum(-1) + gterms.sum((-2, -1)))).sum()
        return -(global_term + (n_total / X.shape[0]) * local)

    @torch.no_grad()
    def posterior(self, model: SparseGP, state: SEPState) -> InducingPosterior:
        """q(u) = p(u) φ̃(u)."""
        q = q_state(model, TiedSites(state.Lam, state.h))
        return InducingPosterior(mean=q.mean, chol=cholesky(q.cov, what="SEP posterior covariance"))

    def trainable(self, model: SparseGP, state: SEPState) -> list:
        """The model's hyper-parameters."""
        return list(model.parameters())


# ----------------------------------------------------------------------------------------------
# APEP: the tied factor optimised by gradient of the Power-EP energy
# ----------------------------------------------------------------------------------------------
class TiedFactor(torch.nn.Module):
    """A trainable tied factor per latent function in whitened coordinates w = L_K⁻¹u.

    q(w) ∝ N(w | 0, I) φ̃(w) with φ̃ = exp(−½ wᵀTTᵀw + bᵀw): precision P = I + TTᵀ, linear term b.
    T is lower triangular; TTᵀ ⪰ 0 keeps q and every cavity I + (1 − α/N)TTᵀ positive definite by
    construction (a restriction: sites with negative precision cannot be represented). T starts at
    0.1·I (T = 0 would be a saddle of the energy in T), b at 0.
    """

    def __init__(self, n_latent: int, n_inducing: int, dtype=torch.float64, device=None):
        super().__init__()
        eye = torch.eye(n_inducing, dtype=dtype, device=device)
        self.raw_T = torch.nn.Parameter(0.1 * eye.repeat(n_latent, 1, 1))
        self.b = torch.nn.Parameter(torch.zeros(n_latent, n_inducing, dtype=dtype, device=device))

    def precision(self, scale: float = 1.0, dtype=None) -> torch.Tensor:
        """I + scale·TTᵀ, [L,M,M] (in ``dtype`` if given, differentiably)."""
        return self.precisions((scale,), dtype)[0]

    def precisions(self, scales, dtype=None) -> list[torch.Tensor]:
        """[I + s·TTᵀ for s in scales] from one product TTᵀ (q's and the cavity's in ``apep_energy``)."""
        T = torch.tril(self.raw_T if dtype is None else self.raw_T.to(dtype))
        eye = torch.eye(T.shape[-1], dtype=T.dtype, device=T.device)
        TT = T @ T.mT
        return [eye + s * TT for s in scales]


def _gw(P: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(g(P, b) without constants [L], chol P, P⁻¹b) for a whitened Gaussian ∝ exp(−½wᵀPw + bᵀw)."""
    LP = cholesky(P, jitter=0.0, what="APEP precision")
    a = solve_lower(LP, b[..., None])[..., 0]
    mean = torch.linalg.solve_triangular(LP.mT, a[..., None], upper=True)[..., 0]
    return 0.5 * (a * a).sum(-1) - torch.log(LP.diagonal(dim1=-2, dim2=-1)).sum(-1), LP, mean


def apep_energy(model: SparseGP, factor: TiedFactor, X, y, n_total: int, alpha: float,
                weight: torch.Tensor | None = None, n_factors: float | None = None) -> torch.Tensor:
    """Power-EP energy with tied factors, alpha eq. (8): log Z_q estimated on a minibatch.

        log Z_q = g(θ) − g(θ_prior) + (1/α) Σ_i [log E_{q^{\\α}}[p(y_i|f_i)^α] + g(θ^{\\α}) − g(θ)],
    with the cavity θ^{\\α} = θ_prior + (1 − α/N) θ̃ the same for every point. Differentiable in the
    factor and the hyper-parameters. Returns a scalar. With row weights w [B] (``weight``), row i's term
    counts w_i times and N is the number of factors ``n_factors`` = W = Σ_i w_i over all rows (None: n_total);
    the minibatch's sum is scaled by n_total/|B| either way.
    """
    N = n_total if n_factors is None else n_factors
    c = 1.0 - alpha / N
    # The M×M algebra runs in float64 whatever the model's dtype: N(g(θ^{\α}) − g(θ))/α multiplies the
    # difference of two nearly equal log-normalisers by N/α (1.2·10⁵ on MNIST at α = 0.5), more than
    # float32 can resolve — there the energy came out 5% off and the factor's gradient had cosine 0.2 with
    # the float64 one. It costs O(L·M³), small next to the minibatch's O(L·M²·B).
    wide, dt = torch.float64, factor.b.dtype
    b = factor.b.to(wide)
    P_q, P_cav = factor.precisions((1.0, c), wide)
    g_q, _, _ = _gw(P_q, b)
    g_cav, L_cav, mean_cav = _gw(P_cav, c * b)
    gauss = (g_q.sum() + N * (g_cav - g_q).sum() / alpha).to(dt)
    L_cav, mean_cav = L_cav.to(dt), mean_cav.to(dt)
    Lk = model.chol_Kuu()
    A, kdiag = model.projection(X, Lk)
    S = solve_lower(L_cav, A)                                            # cavity cov = L_cav⁻ᵀL_cav⁻¹
    mean = matvec(A.mT, mean_cav)
    var = kdiag - sum_sq(A, -2) + sum_sq(S, -2)
    local = model.likelihood.log_tilted(y, mean.T, var.clamp_min(torch.finfo(var.dtype).tiny).T, alpha)
    local = local.sum() if weight is None else (weight * local).sum()
    return gauss + (n_total / X.shape[0]) * local / alpha


@dataclass
class APEPState:
    """The trainable tied factor, and the training rows' weights ``w`` [N] (None: 1 each)."""

    factor: TiedFactor
    w: torch.Tensor | None = None


@dataclass(frozen=True)
class APEP(Engine):
    """Settings of APEP: the power α in (0, 1]."""

    capabilities: ClassVar[Capabilities] = Capabilities(streamable=True, weighted=True)
    alpha: float = 0.5

    def __post_init__(self):
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha}")

    def init(self, model: SparseGP, X, y, generator, weight=None) -> APEPState:
        """q starts near the prior (T = 0.1·I, b = 0); ``weight``: the rows' weights [N] (None: 1 each)."""
        return APEPState(TiedFactor(model.n_latent, model.n_inducing, dtype=model.Z.dtype, device=model.Z.device),
                         w=None if weight is None else weight.detach().clone())

    def carry(self, model, state: APEPState, X, y, keep, weight=None) -> APEPState:
        """A warm start keeps the tied factor as it is (it enters the energy as a whole; N only sets the cavity),
        with the new rows' weights."""
        return replace(state, w=None if weight is None else weight.detach().clone())

    def update(self, model, state, X, y, n_total, idx=None, *, geometry=None) -> APEPState:
        """No closed-form step: the factor is optimised by gradient with the hyper-parameters."""
        return state

    def loss(self, model, state, X, y, n_total, idx=None, *, geometry=None) -> torch.Tensor:
        """−energy estimate (scalar, differentiable); the rows ``idx`` give the minibatch's weights."""
        n_factors = None if state.w is None else float(state.w.sum())
        return -apep_energy(model, state.factor, X, y, n_total, self.alpha, rows_of(state.w, idx), n_factors)

    @torch.no_grad()
    def posterior(self, model: SparseGP, state: APEPState) -> InducingPosterior:
        """q(u) = L_K q(w)."""
        _, LP, mean_w = _gw(state.factor.precision(1.0), state.factor.b)
        Lk = model.chol_Kuu()
        root = Lk @ torch.linalg.solve_triangular(LP.mT, torch.eye(LP.shape[-1], dtype=LP.dtype,
                                                                  device=LP.device).expand_as(LP), upper=True)
        return InducingPosterior(mean=(Lk @ mean_w[..., None])[..., 0],
                                 chol=cholesky(root @ root.mT, what="APEP posterior covariance"))

    def trainable(self, model: SparseGP, state: APEPState) -> list:
        """Hyper-parameters and the tied factor."""
        return list(model.parameters()) + list(state.factor.parameters())
