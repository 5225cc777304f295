"""Expectation propagation with inducing points: the EP and Power EP engine over rank-one sites (scalable-ep §2.2–2.3).

``EP`` updates every factor's site in parallel from its cavity (``sites.cavity_projection``,
``sites.site_update``), moves the sites to the current directions, damps the step under the
positive-definiteness guard (``sites.pd_damping``) and reports skipped and re-damped factors; its loss
is −log Z_q or the Power-EP energy (``sites.log_Zq``) with the gradient of eq. (62). A row of weight w
(``engine``: row weights) holds one copy's site and contributes it w times; its cavity removes min(α, w) copies
(``sites`` module docstring: row weights). The site algebra and its equations are in ``sites``; here are the
engine (``EPState``, ``EP``) and the kernel geometry an update shares with its loss (``fresh_geometry``,
``shared_geometry``, ``detached_geometry``).

What this module does not do: EP in function space (``fitc_ep.py``) or tied sites (``sep.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from . import sites as site_algebra   # the PD margins are read at call time (tests and probes set them)
from .engine import Capabilities, Engine, rows_of
from .gaussian import cholesky, matvec
from .sites import (FACTOR_KINDS, Factors, TiedSites, annealed_damping, cavity_projection, directions, gather, is_pd,
                    log_Zq, make_factors, pd_damping, per_latent, q_state, removed_power, site_update,
                    whitened_precision)
from .sparse import InducingPosterior, SparseGP

__all__ = ["EP", "EPState", "fresh_geometry", "shared_geometry", "detached_geometry"]


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

@dataclass
class EPState:
    """Explicit EP state: the tied product θ̃ (each row's sites w_i times), per-factor site parameters c1, c2
    [N,F,T] (one copy's), the directions they are stored along [N,L,M], the passes over the data so far
    (``step``, the damping clock) and update reports."""

    Lam: torch.Tensor
    h: torch.Tensor
    c1: torch.Tensor
    c2: torch.Tensor
    V: torch.Tensor
    step: float = 0.0
    skipped: int = 0
    redamped: int = 0
    y: torch.Tensor | None = None       # training labels [N]: the factor structure of every site
    w: torch.Tensor | None = None       # training rows' weights [N]: the power of every row's sites (None: 1)


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
                                                        shared_geometry=True, weighted=True)
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

    def init(self, model: SparseGP, X, y, generator, weight=None) -> EPState:
        """All sites start at zero (q = prior); ``weight``: the rows' weights [N] (None: 1 each)."""
        L, M = model.n_latent, model.n_inducing
        dt, dev = model.Z.dtype, model.Z.device
        N = 0 if y is None else y.shape[0]
        F, T = (model.n_latent, 2) if self.factor == "pairwise" else (1, model.n_latent)
        z = lambda *s: torch.zeros(*s, dtype=dt, device=dev)
        labels = None if y is None else y.detach().clone()
        return EPState(Lam=z(L, M, M), h=z(L, M), c1=z(N, F, T), c2=z(N, F, T), V=z(N, L, M), y=labels,
                       w=None if weight is None else weight.detach().clone())

    @torch.no_grad()
    def carry(self, model: SparseGP, state: EPState, X, y, keep: torch.Tensor, weight=None) -> EPState:
        """The state for a new training set that shares rows with the old one (a warm start).

        Args:
            keep [N'] int64: for each new row, the old row whose site it takes over, or −1 for a row
                without one (its site starts at zero); y [N'] the new labels; weight [N'] their weights (None: 1).
        Returns a state whose θ̃ is rebuilt from the kept sites, each to the power of its row's new weight
        (eqs. 25–27: q = p(u) Π sites^w), so sites of rows that were dropped leave q. The damping clock
        restarts: the new rows' sites are updated with the initial damping, not the annealed one.
        """
        have = keep >= 0
        src = keep.clamp_min(0)

        def take(a):
            return torch.where(have.view(-1, *([1] * (a.dim() - 1))), a[src], torch.zeros((), dtype=a.dtype, device=a.device))

        c1, c2, V = take(state.c1), take(state.c2), take(state.V)
        latent = self.factors(model, y).latent
        L = model.n_latent
        w = None if weight is None else weight.detach().clone()
        d1, d2 = per_latent(c1, latent, L, w), per_latent(c2, latent, L, w)   # [L,N']
        Vt = V.transpose(0, 1)                                          # [L,N',M]
        Lam = Vt.mT @ (d1[..., None] * Vt)
        return EPState(Lam=0.5 * (Lam + Lam.mT), h=_sum_along(d2, Vt), c1=c1, c2=c2, V=V,
                       skipped=state.skipped, redamped=state.redamped, y=y.detach().clone(), w=w)

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
        if is_pd(whitened_precision(Lk, TiedSites(state.Lam, state.h))[0]) or state.y is None:
            return state
        L = model.n_latent
        latent = self.factors(model, state.y).latent                        # [N,F,T]
        neg = (state.c1 < 0).any(-1, keepdim=True)                          # [N,F,1]
        Vt = state.V.transpose(0, 1)                                        # [L,N,M]
        for gamma in [0.5 ** k for k in range(1, 12)] + [0.0]:
            c1 = torch.where(neg, gamma * state.c1, state.c1)
            c2 = torch.where(neg, gamma * state.c2, state.c2)
            d1, d2 = per_latent(c1, latent, L, state.w), per_latent(c2, latent, L, state.w)   # [L,N]
            Lam = Vt.mT @ (d1[..., None] * Vt)
            h = _sum_along(d2, Vt)
            if is_pd(whitened_precision(Lk, TiedSites(Lam, h))[0]):
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
        w = rows_of(state.w, idx)                          # [B] or None: the power of each row's sites
        every_row = _every_row(state, idx)
        if every_row:
            # Full batch: every site is updated now, so θ̃ is first rebuilt with all sites along the current
            # directions — the q of the current hyper-parameters, whose sites are functions of them (eq. 62) —
            # and each cavity removes its site along the direction it projects on. Three [L,N,M] products
            # (θ̃₀, the projections, Δθ̃) where moving the sites one by one took five.
            state.V[idx] = V.transpose(0, 1)
            Lam0, h0 = _sites_along(V, state.c1[idx], state.c2[idx], fac.latent, model.n_latent, w)
            state = replace(state, Lam=Lam0, h=h0)
        state = self.restore(model, state, Lk)
        sites = TiedSites(state.Lam, state.h)
        q = q_state(model, sites, Lk)
        V_old = V if every_row else state.V[idx].transpose(0, 1)
        c1_old, c2_old = state.c1[idx], state.c2[idx]
        a = self.alpha
        # the cavity removes α of one copy's site, or the whole row when its weight is less (``sites.removed_power``)
        removed = removed_power(a, w)
        mean_cav, var_cav, _, _ = cavity_projection(q, V, V_old, removed * c1_old, removed * c2_old, fac.latent)
        cav_ok = (var_cav >= 0).all(-1) & fac.mask      # 0: v_il = 0, the slot does not see u (site_update)
        var_cav = torch.where(var_cav >= 0, var_cav, torch.ones_like(var_cav))
        c1_new, c2_new, _, ok = site_update(fac, mean_cav, var_cav, gather(s, fac.latent), a)
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
            dd1 = per_latent(c1_t - c1_old, fac.latent, L, w)
            dd2 = per_latent(c2_t - c2_old, fac.latent, L, w)
            dLam = V.mT @ (dd1[..., None] * V)
            dP = q.Lk.mT @ dLam @ q.Lk
            P0, _ = whitened_precision(q.Lk, TiedSites(Lam0, h0))
            return c1_t, c2_t, 0.5 * (dLam + dLam.mT), _sum_along(dd2, V), P0, 0.5 * (dP + dP.mT)

        if every_row:
            Lam0, h0 = state.Lam, state.h
        else:
            Lam0, h0 = _replace_sites(state.Lam, state.h, V_old, V, c1_old, c2_old, c1_old, c2_old, fac.latent, w)
        c1_t, c2_t, dLam, dh, P0, dP = step_terms(Lam0, h0, c1_old, c2_old)
        rho0 = torch.full((L,), self._damping(state.step), dtype=P0.dtype, device=P0.device)
        margin = site_algebra.PD_MARGIN if self.alpha == 1.0 else site_algebra.PD_MARGIN_POWER
        rho, redamped = pd_damping(rho0, [(P0, dP)], margin)
        if rho is None and not is_pd(P0):
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
                       state.c1[idx], state.c2[idx], self.alpha, n_total / X.shape[0], Lk=Lk, Vs=(V, s),
                       weight=rows_of(state.w, idx))

    @torch.no_grad()
    def posterior(self, model: SparseGP, state: EPState) -> InducingPosterior:
        """q(u) = p(u) Π sites, as mean [L,M] and Cholesky factor [L,M,M]."""
        q = q_state(model, TiedSites(state.Lam, state.h))
        return InducingPosterior(mean=q.mean, chol=cholesky(q.cov, what="EP posterior covariance"))

    def trainable(self, model: SparseGP, state: EPState) -> list:
        """The model's hyper-parameters (sites are updated in closed form by ``update``)."""
        return list(model.parameters())


def _every_row(state: EPState, idx: torch.Tensor) -> bool:
    """Whether the minibatch idx is every training row in order (a full-batch step)."""
    n = state.c1.shape[0]
    return idx.shape[0] == n and bool((idx == torch.arange(n, device=idx.device)).all())


def _sum_along(d: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """Σ_i d_li v_il [L,M] for d [L,B] and directions V [L,B,M] (one matrix-vector product per latent)."""
    return matvec(V.mT, d)


def _sites_along(V, c1, c2, latent, n_latent: int, weight=None):
    """θ̃ = (Λ̃, h̃) of the sites (c1, c2) [B,F,T] along the directions V [L,B,M], each point's w times."""
    d1, d2 = per_latent(c1, latent, n_latent, weight), per_latent(c2, latent, n_latent, weight)   # [L,B]
    Lam = V.mT @ (d1[..., None] * V)
    return 0.5 * (Lam + Lam.mT), _sum_along(d2, V)


def _replace_sites(Lam, h, V_old, V, c1_old, c2_old, c1, c2, latent, weight=None):
    """θ̃ − Σ old sites along V_old + Σ new sites along V, aggregated per (point, latent), each point's w times."""
    L = Lam.shape[0]
    d1o, d2o, d1, d2 = (per_latent(c, latent, L, weight) for c in (c1_old, c2_old, c1, c2))
    Lam = Lam - V_old.mT @ (d1o[..., None] * V_old) + V.mT @ (d1[..., None] * V)
    h = h - _sum_along(d2o, V_old) + _sum_along(d2, V)
    return 0.5 * (Lam + Lam.mT), h
