"""Elliptical slice sampling for the full (non-sparse) multi-class GP: the MCMC reference.

The alpha-divergence paper (Tables C.3/C.4) compares its approximations with MCMC, the gold standard
their predictive distributions should approach. This module samples the latent values F [L,N] of
the training points from p(F | y) ∝ Π_i p(y_i | f_i) Π_l N(f_l | 0, K_l) with elliptical slice
sampling (Murray, Adams & MacKay 2010), one joint update of all L·N values per iteration:

    ν ~ N(0, K),  log t = log L(F) + log u,  θ ~ U(0, 2π),  [θ_min, θ_max] = [θ − 2π, θ];
    repeat: F' = F cos θ + ν sin θ; accept if log L(F') > log t, else shrink the bracket towards 0
    and draw θ again from it.

With a Gaussian reference N(F | μ, S) close to the posterior (e.g. EP's, ``posterior_reference``) the
ellipses are drawn around μ with ν ~ N(0, S), and the slice is taken on the rest of the target,
log L(F) + log N(F | 0, K) − log N(F | μ, S) (generalised elliptical slice sampling: Nishihara, Murray
& Adams 2014, §3). The target is unchanged; only the moves are. Where the reference is close to the
posterior the rest is nearly constant and the chain takes large steps in the posterior's own geometry;
with the prior's ellipses a sharply constrained posterior (the step likelihood) is crossed in small
steps, and chains started apart stay apart for tens of thousands of iterations.

It needs only the log-likelihood, so any ``Likelihood`` works; the hyper-parameters (kernel, ε)
are fixed, e.g. those of a fitted ``GPClassifier``. Predictions average p(y* | f*) over the samples,
with f* | F the GP conditional at each test point (independent across points and latent
functions) and p(y* | f*) integrated by the likelihood's own ``predict_log_proba``.

The prior covariance at the training points includes the latent-noise term of the papers' kernel
(``kernel.diag``), as in every other engine. Cost: one O(N³) Cholesky per latent function, then
O(L·N²) per ellipse proposal. What this module does not do: sample hyper-parameters.

For the robust-max likelihood there is a second sampler, ``robust_max_gibbs``, which does not slice on
the likelihood but samples its two parts: p(y | f) = (1 − ε) Π_{k≠y} Θ(f_y − f_k) + ε/C is a mixture
over an indicator z (z = 1: the label is clean and f_y must be the largest; z = 0: a label drawn at
random, probability ε, likelihood 1/C), so p(F, z | y) ∝ N(F | 0, K) Π_i [(1 − ε) Θ_i(F)]^{z_i} (ε/C)^{1−z_i}.
Gibbs sampling alternates z | F (independent per point: z_i = 0 where f_i breaks its label's
constraints, else z_i = 1 with probability (1 − ε)/((1 − ε) + ε/C)) and F | z, a Gaussian truncated
by the linear constraints f_i^{y_i} ≥ f_i^k of the clean points, sampled by exact Hamiltonian Monte
Carlo (Pakman & Paninski 2014): in the whitened coordinates the trajectory is an ellipse, each
constraint's value along it is r cos(t − φ), so the time it is hit is known in closed form, and the
particle reflects off the first wall it meets. With ellipse samplers the chains crossed the
near-separating posteriors of ε = 10⁻³ in small steps and did not mix (docs/results/alpha.md); exact HMC
moves along the walls instead of shrinking towards them.

z | F alone mixes the count of noise labels slowly: a clean point satisfies its constraint, so it turns to
noise with probability ε/C per iteration, however strongly its neighbours vote against its label. The
optional row sweeps (``row_sweep_every``) draw each point's (z_i, f_i) jointly from its conditional given
the other points, with f_i integrated out of z_i: P(clean) ∝ (1 − ε) P(y_i wins | F_{−i}), P(noise) ∝ ε/C,
the first the label-largest integral of ``quadrature``; f_i then follows exactly (adaptive-rejection hull of
the log-concave density of f_i^{y_i}, inverse CDFs for the rest).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
from scipy import special
from scipy.linalg import solve_triangular

from . import quadrature
from .gaussian import cholesky, solve_lower

__all__ = ["prior_cholesky", "posterior_reference", "elliptical_slice", "robust_max_gibbs", "predict_log_proba",
           "split_rhat"]


@torch.no_grad()
def prior_cholesky(kernel, X: torch.Tensor) -> torch.Tensor:
    """Lower Cholesky factor [L,N,N] of the prior covariance of f at the training inputs X [N,D]."""
    K = kernel(X, X)
    K = K - torch.diag_embed(K.diagonal(dim1=-2, dim2=-1)) + torch.diag_embed(kernel.diag(X))
    return cholesky(K, what="K_ff")


@torch.no_grad()
def posterior_reference(model, q, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The joint Gaussian q(F) = ∫ p(F | u) q(u) du of a fitted sparse model at X [N,D], as a reference
    for ``elliptical_slice``: mean [L,N] and lower Cholesky factor [L,N,N] of the covariance
    K_ff − Q_ff + Aᵀ S_w A (A = L_K⁻¹ K_uf, S_w the whitened covariance of q(u); K_ff with the latent
    noise on its diagonal, as ``prior_cholesky``). ``marginals`` gives its diagonal."""
    from .sparse import _whiten        # the module is sampling-only; sparse imports nothing from here
    Lk = model.chol_Kuu()
    mean_w, chol_w = _whiten(q, Lk)
    A = solve_lower(Lk, model.kernel(model.Z, X))                                  # [L,M,N]
    B = chol_w.transpose(-1, -2) @ A                                               # [L,M,N]
    K = model.kernel(X, X)
    K = K - torch.diag_embed(K.diagonal(dim1=-2, dim2=-1)) + torch.diag_embed(model.kernel.diag(X))
    cov = K - A.transpose(-1, -2) @ A + B.transpose(-1, -2) @ B
    mean = (A.transpose(-1, -2) @ mean_w[..., None])[..., 0]                       # [L,N]
    return mean, cholesky(0.5 * (cov + cov.transpose(-1, -2)), what="q(F)")


@torch.no_grad()
def elliptical_slice(log_lik: Callable[[torch.Tensor], torch.Tensor], chol: torch.Tensor, n_samples: int, *,
                     burn_in: int = 500, thin: int = 1, f0: torch.Tensor | None = None,
                     reference: tuple[torch.Tensor, torch.Tensor] | None = None,
                     generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
    """Samples of F [L,N] from p(F) ∝ exp(log_lik(F)) N(F | 0, chol cholᵀ).

    Args:
        log_lik: F [L,N] -> scalar log-likelihood.
        chol: [L,N,N] lower Cholesky factors of the prior covariances.
        n_samples: samples kept; burn_in: iterations discarded first; thin: iterations per kept sample.
        f0: initial state (default: zeros, or the reference's mean).
        reference: (mean [L,N], chol [L,N,N]) of a Gaussian N(μ, S) close to the posterior: ellipses
            around μ with directions from S, the slice on log_lik(F) + log N(F|0,K) − log N(F|μ,S)
            (module doc). None: the prior's ellipses (plain elliptical slice sampling).
        generator: the only randomness (seeded: reproducible).
    Returns:
        (samples [n_samples,L,N], info): info["proposals_per_iteration"] (mean ellipse proposals) and
        info["log_lik"], the log-likelihood log_lik(F) of each kept sample [n_samples] (a trace for
        ``split_rhat``).
    """
    if n_samples < 1 or burn_in < 0 or thin < 1:
        raise ValueError(f"need n_samples >= 1, burn_in >= 0, thin >= 1; got {n_samples}, {burn_in}, {thin}")
    L, N = chol.shape[0], chol.shape[-1]
    dt = chol.dtype
    if reference is None:
        centre, directions = torch.zeros(L, N, dtype=dt, device=chol.device), chol

        def rest(F):                         # the part of the log target that the ellipses do not carry
            return float(log_lik(F))
    else:
        centre, directions = reference
        if centre.shape != (L, N) or directions.shape != chol.shape:
            raise ValueError(f"reference must be (mean [{L},{N}], chol [{L},{N},{N}]), got "
                             f"{tuple(centre.shape)} and {tuple(directions.shape)}")

        def rest(F):
            a = solve_lower(chol, F[..., None])
            b = solve_lower(directions, (F - centre)[..., None])
            return float(log_lik(F)) - 0.5 * float((a * a).sum() - (b * b).sum())
    f = centre.clone() if f0 is None else f0.clone()
    r = rest(f)
    if not math.isfinite(r):
        raise ValueError("the initial state has zero likelihood; pass an f0 with finite log_lik")
    out, trace, proposals = [], [], 0
    total = burn_in + n_samples * thin
    for it in range(total):
        nu = (directions @ torch.randn(L, N, 1, dtype=dt, generator=generator).to(chol.device))[..., 0]
        u = float(torch.rand((), dtype=dt, generator=generator))
        log_t = r + (math.log(u) if u > 0.0 else -math.inf)      # float32 draws are 0 once in ~1.7e7
        theta = 2.0 * math.pi * float(torch.rand((), dtype=dt, generator=generator))
        lo, hi = theta - 2.0 * math.pi, theta
        while True:
            proposals += 1
            f_new = centre + (f - centre) * math.cos(theta) + nu * math.sin(theta)
            r_new = rest(f_new)
            if r_new > log_t:
                f, r = f_new, r_new
                break
            if theta < 0.0:
                lo = theta
            else:
                hi = theta
            theta = lo + (hi - lo) * float(torch.rand((), dtype=dt, generator=generator))
        if it >= burn_in and (it - burn_in) % thin == thin - 1:
            out.append(f)
            trace.append(float(log_lik(f)) if reference is not None else r)
    return torch.stack(out), {"proposals_per_iteration": proposals / total,
                              "log_lik": torch.tensor(trace, dtype=torch.float64)}


@torch.no_grad()
def robust_max_gibbs(chol: torch.Tensor, y: torch.Tensor, likelihood, n_samples: int, *, burn_in: int = 500,
                     thin: int = 1, f0: torch.Tensor | None = None, travel_time: float = 0.5 * math.pi,
                     max_bounces: int = 1_000_000, row_sweep_every: int = 0,
                     generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
    """Samples of F [L,N] from p(F | y) ∝ Π_i p(y_i | f_i) N(F | 0, chol cholᵀ) for the robust-max
    likelihood (``likelihoods.RobustMax``, one latent function per class), by Gibbs sampling of the
    label-noise indicators and exact HMC of the truncated Gaussian (module doc).

    One iteration: z | F; then a fresh velocity v ~ N(0, I) in the whitened coordinates w (F_l = chol_l w_l)
    and the trajectory w(t) = w cos t + v sin t for ``travel_time``, reflected at each wall it meets. It is
    run in F-space (F(t) = F cos t + U sin t with U = chol v): a wall's value f_i^y − f_i^k along it is
    a cos t + b sin t = r cos(t − φ), hit first at t = φ + π/2 (mod 2π); the reflection
    v ← v − 2 (c·v / |c|²) c, with c the wall's normal in w-space, is U_y −= β K_y[:, i], U_k += β K_k[:, i]
    with β = 2 (u_i^y − u_i^k)/(K_y[i,i] + K_k[i,i]). Cost: O(L·N) per reflection, O(L·N²) per iteration
    for the velocity; K = chol cholᵀ is formed once.

    Args:
        chol: [L,N,N] lower Cholesky factors of the prior covariances (``prior_cholesky``); L = C ≥ 2.
        y: [N] labels in 0..L−1. likelihood: the ``RobustMax`` being sampled (its ε and C = L).
        n_samples, burn_in, thin: as ``elliptical_slice``.
        f0: initial state [L,N] (default zeros: every point starts as label noise, which is allowed).
        travel_time: HMC time per iteration (π/2: for an untruncated Gaussian, an independent draw).
        max_bounces: a guard per iteration against a trajectory trapped by rounding (raises).
        row_sweep_every: if > 0, every that many iterations (from the first) a sweep over the points draws
            each (z_i, f_i) jointly from its conditional given the other points, f_i integrated out of z_i's
            (``_row_sweep``; O(N) label-largest integrals and O(L·N²) per sweep). z | F alone leaves a clean
            point clean with probability ≥ 1 − ε/C per iteration even where the posterior calls it noise as
            often as not, so the count of noise labels mixes in ~C/ε iterations; the sweep moves it at once.
        generator: the only randomness (seeded: reproducible).
    Returns:
        (samples [n_samples,L,N], info): info["log_lik"], log p(y | F) of each kept sample (for
        ``split_rhat``); info["bounces_per_iteration"]; info["noise_labels"], the mean number of points
        with z = 0 per iteration; info["sweep_noise_labels"], the mean number drawn as noise per row sweep.
    """
    if n_samples < 1 or burn_in < 0 or thin < 1:
        raise ValueError(f"need n_samples >= 1, burn_in >= 0, thin >= 1; got {n_samples}, {burn_in}, {thin}")
    if chol.dim() != 3 or chol.shape[-1] != chol.shape[-2] or chol.shape[0] < 2:
        raise ValueError(f"chol must be [L,N,N] with L >= 2 latent functions (one per class), got {tuple(chol.shape)}")
    L, N = chol.shape[0], chol.shape[-1]
    yy = torch.as_tensor(y).detach().cpu().numpy()
    if yy.shape != (N,) or not np.issubdtype(yy.dtype, np.integer) or (N and (yy.min() < 0 or yy.max() >= L)):
        raise ValueError(f"y must be [{N}] integer labels in 0..{L - 1}")
    from .likelihoods import RobustMax
    if not isinstance(likelihood, RobustMax) or likelihood.n_classes != L:
        raise ValueError(f"likelihood must be a RobustMax with {L} classes (one latent function each), "
                         f"got {likelihood!r}")
    if not travel_time > 0.0:
        raise ValueError(f"travel_time must be > 0, got {travel_time}")
    if row_sweep_every < 0:
        raise ValueError(f"row_sweep_every must be >= 0 (0: no sweeps), got {row_sweep_every}")
    R = chol.detach().cpu().to(torch.float64).numpy()
    K = R @ R.transpose(0, 2, 1)                                         # [L,N,N]
    Kd = np.einsum("lii->li", K)                                         # [L,N]
    cols = np.arange(N)
    walls = np.ones((L, N), dtype=bool)
    walls[yy, cols] = False                                              # slot (k, i) is a wall f_i^{y_i} ≥ f_i^k
    log_a, log_b = (float(v) for v in likelihood._log_a_b())
    log_clean = float(torch.nn.functional.logsigmoid(-likelihood.raw_epsilon))    # log(1 − ε)
    p_clean = math.exp(log_clean - log_a)                                        # (1 − ε)/a
    F = np.zeros((L, N)) if f0 is None else torch.as_tensor(f0).detach().cpu().to(torch.float64).numpy().copy()
    if F.shape != (L, N) or not np.isfinite(F).all():
        raise ValueError(f"f0 must be a finite [{L},{N}] state, got shape {tuple(F.shape)}")

    def margin(A):                                                       # f_i^{y_i} − f_i^k, [L,N] (0 at k = y_i)
        return A[yy, cols][None, :] - A

    def satisfied(A):                                                    # [N]: f_i^{y_i} is the strict max
        return ((margin(A) > 0.0) | ~walls).all(0)

    if row_sweep_every:
        eye = np.eye(N)
        R_inv = np.stack([solve_triangular(R[l], eye, lower=True) for l in range(L)])
        Prec = R_inv.transpose(0, 2, 1) @ R_inv                             # K_l⁻¹, [L,N,N]

    out, trace, bounces, noise, sweeps, sweep_noise = [], [], 0, 0, 0, 0
    total = burn_in + n_samples * thin
    for it in range(total):
        if row_sweep_every and it % row_sweep_every == 0:
            sweep_noise += _row_sweep(F, Prec, yy, log_clean, log_b, generator)
            sweeps += 1
        u = torch.rand(N, dtype=torch.float64, generator=generator).numpy()
        z = satisfied(F) & (u < p_clean)                                 # z | F
        noise += int(N - z.sum())
        inactive = ~(walls & z[None, :])
        v = torch.randn(L, N, 1, dtype=torch.float64, generator=generator).numpy()
        U = (R @ v)[..., 0]
        left, n_bounce = float(travel_time), 0
        while True:
            a, b = margin(F), margin(U)
            t = np.mod(np.arctan2(b, a) + 0.5 * math.pi, 2.0 * math.pi)
            t[inactive] = np.inf
            j = int(np.argmin(t))
            tj = float(t.flat[j])
            step = min(tj, left)
            c, s = math.cos(step), math.sin(step)
            F, U = F * c + U * s, U * c - F * s
            if tj >= left:
                break
            k, i = divmod(j, N)
            yi = yy[i]
            beta = 2.0 * (U[yi, i] - U[k, i]) / (Kd[yi, i] + Kd[k, i])
            U[yi] -= beta * K[yi, :, i]
            U[k] += beta * K[k, :, i]
            left -= tj
            n_bounce += 1
            if n_bounce > max_bounces:
                raise RuntimeError(f"exact HMC made more than {max_bounces} reflections in one iteration; "
                                   "the prior covariance may be near singular (check the kernel's noise term)")
        bounces += n_bounce
        if it >= burn_in and (it - burn_in) % thin == thin - 1:
            out.append(torch.from_numpy(F.copy()))
            n_ok = int(satisfied(F).sum())
            trace.append(n_ok * log_a + (N - n_ok) * log_b)
    samples = torch.stack(out).to(dtype=chol.dtype, device=chol.device)
    return samples, {"log_lik": torch.tensor(trace, dtype=torch.float64), "bounces_per_iteration": bounces / total,
                     "noise_labels": noise / total, "sweep_noise_labels": sweep_noise / sweeps if sweeps else None}


_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


class _CleanRow:
    """One point's latent values f [L] ~ N(m, diag(s²)) restricted to 'its label y wins' (f^y > f^k, k ≠ y),
    for exact draws.

    The label value t = f^y has the log-concave density g(t) ∝ exp ℓ(t),
        ℓ(t) = −(t − m_y)²/(2 s_y²) + Σ_{k≠y} log Φ((t − m_k)/s_k),
    and given t the others are independent normals truncated above at t. ``sample`` draws t exactly by
    rejection from the upper hull of three tangents of ℓ: at the mode t* and at the two points where
    ℓ = ℓ(t*) − 1 (Gilks & Wild 1992; for a log-concave density that hull accepts a fair share of draws
    whatever the scales), then the others by inverse CDFs. (The probability of the restriction,
    P(f^y is the largest), is ``quadrature.log_prob_label_largest``.)
    """

    def __init__(self, m: np.ndarray, s: np.ndarray, y: int):
        others = np.arange(m.shape[0]) != y
        self.my, self.sy, self.mk, self.sk = float(m[y]), float(s[y]), m[others], s[others]
        mode, _, _ = quadrature.label_integrand_mode(torch.from_numpy(m[None]), torch.from_numpy(s[None]),
                                                     torch.tensor([y]), tol=1e-12)
        t = float(mode[0])
        self.mode = t
        self.top = self.log_density(np.array([t]))[0]
        step = 1.0 / math.sqrt(-self.slope(t)[1])            # the curvature's scale at the mode
        self.inner = [self._level(-step), self._level(step)]  # the hull's outer tangent points, ℓ = top − 1

    def _level(self, step: float) -> float:
        """A point on the side sign(step) of the mode near ℓ = top − 1 (ℓ falls monotonically away from the
        mode): found by doubling step, then 12 bisections — the hull only needs a point near the level."""
        near, far = self.mode, self.mode + step
        while self.log_density(np.array([far]))[0] > self.top - 1.0:
            near, far = far, self.mode + 2.0 * (far - self.mode)
        for _ in range(12):
            mid = 0.5 * (near + far)
            if self.log_density(np.array([mid]))[0] > self.top - 1.0:
                near = mid
            else:
                far = mid
        return 0.5 * (near + far)

    def log_density(self, t: np.ndarray) -> np.ndarray:
        u = (t[:, None] - self.mk) / self.sk
        return -0.5 * ((t - self.my) / self.sy) ** 2 + special.log_ndtr(u).sum(-1)

    def slope(self, t: float) -> tuple[float, float]:
        """ℓ'(t) and ℓ''(t), with the Mills ratio r = φ/Φ and r' = −r(u + r)."""
        u = (t - self.mk) / self.sk
        r = np.exp(-0.5 * u * u - _LOG_SQRT_2PI - special.log_ndtr(u))
        return (-(t - self.my) / self.sy ** 2 + float((r / self.sk).sum()),
                -1.0 / self.sy ** 2 - float((r * (u + r) / self.sk ** 2).sum()))

    def sample(self, generator) -> tuple[float, np.ndarray]:
        """(f^y, the other values [L−1]), an exact draw."""
        t0, t2 = self.inner
        (l0, l2), s0, s2 = self.log_density(np.array([t0, t2])), self.slope(t0)[0], self.slope(t2)[0]
        z01, z12 = t0 + (self.top - l0) / s0, t2 + (self.top - l2) / s2         # where the tangents meet the top
        w = np.array([1.0 / s0, z12 - z01, -1.0 / s2])                           # the hull's three masses ÷ e^top
        cum = np.cumsum(w) / w.sum()
        for _ in range(10_000):
            u = 1.0 - torch.rand(3, dtype=torch.float64, generator=generator).numpy()         # in (0, 1]
            piece = int(np.searchsorted(cum, u[0]))
            if piece == 0:
                t = z01 + math.log(u[1]) / s0
                hull = self.top + s0 * (t - z01)
            elif piece == 1:
                t, hull = z01 + u[1] * (z12 - z01), self.top
            else:
                t = z12 + math.log(u[1]) / s2
                hull = self.top + s2 * (t - z12)
            if math.log(u[2]) <= self.log_density(np.array([t]))[0] - hull:
                break
        else:
            raise RuntimeError("rejection sampling of a label value failed 10 000 times (a non-concave density?)")
        # the others: N(m_k, s_k²) truncated to (−∞, t], by the inverse CDF in log space (ndtri_exp)
        b = (t - self.mk) / self.sk
        log_u = np.log(1.0 - torch.rand(b.shape[0], dtype=torch.float64, generator=generator).numpy())
        x = np.minimum(special.ndtri_exp(log_u + special.log_ndtr(b)), b)
        return t, self.mk + self.sk * x


def _row_sweep(F: np.ndarray, Prec: np.ndarray, yy: np.ndarray, log_clean: float, log_noise: float, generator) -> int:
    """One systematic-scan Gibbs sweep over the points, each drawing (z_i, f_i) | F_{−i} jointly (f_i all L
    latent values of point i), in place. With f_i integrated out, P(z_i = clean | F_{−i}) ∝ (1 − ε) P_i and
    P(noise) ∝ ε/C, P_i the probability that y_i wins under the GP conditional N(f_i | F_{−i}); then f_i is
    drawn from that conditional, truncated to 'y_i wins' if clean. The conditional of latent l is
    N(f_l[i] − (Λ_l f_l)[i]/Λ_l[i,i], 1/Λ_l[i,i]) with Λ_l = K_l⁻¹; Λ f is kept up to date as f_i moves.
    Returns the number of points drawn as noise."""
    L, N = F.shape
    G = np.einsum("lij,lj->li", Prec, F)                                       # Λ_l f_l, [L,N]
    diag = np.einsum("lii->li", Prec)
    sd = 1.0 / np.sqrt(diag)
    var_t = torch.from_numpy(np.ascontiguousarray((sd * sd).T))                # [N,L]
    n_noise = 0
    for i in range(N):
        m = F[:, i] - G[:, i] / diag[:, i]
        log_p = float(quadrature.log_prob_label_largest(torch.from_numpy(yy[i:i + 1]).long(),
                                                        torch.from_numpy(m[None]), var_t[i:i + 1])[0])
        p_clean = 1.0 / (1.0 + math.exp(min(log_noise - log_clean - log_p, 700.0)))
        if float(torch.rand(1, dtype=torch.float64, generator=generator)) < p_clean:
            new = np.empty(L)
            others = np.arange(L) != yy[i]
            new[yy[i]], new[others] = _CleanRow(m, sd[:, i], int(yy[i])).sample(generator)
        else:
            new = m + sd[:, i] * torch.randn(L, dtype=torch.float64, generator=generator).numpy()
            n_noise += 1
        G += Prec[:, :, i] * (new - F[:, i])[:, None]
        F[:, i] = new
    return n_noise


def split_rhat(traces) -> float:
    """Split-R̂ of a scalar quantity from several chains (Gelman et al., Bayesian Data Analysis 3rd ed.,
    §11.4): each chain [n] is cut into halves, and with W the mean within-half variance and B/n the
    variance of the half means, R̂ = √(((n−1)/n · W + B/n) / W). Values near 1 (say < 1.01–1.05) are
    needed for the chains to be read as draws from one distribution; it is far above 1 when chains (or
    the two halves of a chain) sit in different places.

    Args:
        traces: [chains, draws] (array-like; at least 1 chain of at least 4 draws).
    """
    t = torch.as_tensor(traces, dtype=torch.float64)
    if t.dim() != 2 or t.shape[1] < 4:
        raise ValueError(f"traces must be [chains, draws] with at least 4 draws, got shape {tuple(t.shape)}")
    n = t.shape[1] // 2
    halves = torch.cat([t[:, :n], t[:, -n:]])                 # [2·chains, n] (the middle draw of odd n dropped)
    W = halves.var(dim=1, unbiased=True).mean()
    B_over_n = halves.mean(dim=1).var(unbiased=True)
    if W == 0:
        return 1.0 if B_over_n == 0 else math.inf
    return float(torch.sqrt(((n - 1) / n * W + B_over_n) / W))


@torch.no_grad()
def predict_log_proba(kernel, likelihood, X: torch.Tensor, chol: torch.Tensor, samples: torch.Tensor,
                      X_test: torch.Tensor) -> torch.Tensor:
    """log of the sample average of p(y* = c | F) at X_test [T,D]: [T,C].

    For each sample F [L,N]: f*_l | F ~ N(K_*l K_l⁻¹ f_l, k_**l − K_*l K_l⁻¹ K_l*) (k_** with the latent
    noise), and p(y* | F) = ∫ p(y* | f*) q(f* | F) df* by ``likelihood.predict_log_proba``.
    """
    A = solve_lower(chol, kernel(X, X_test))                                       # [L,N,T]
    var = (kernel.diag(X_test) - (A * A).sum(-2)).clamp_min(torch.finfo(A.dtype).tiny).transpose(0, 1)   # [T,L]
    W = solve_lower(chol, samples.permute(1, 2, 0))                                # L⁻¹ f: [L,N,S]
    means = (A.transpose(-1, -2) @ W).permute(2, 1, 0)                             # [S,T,L]
    logp = torch.stack([likelihood.predict_log_proba(m, var) for m in means])       # [S,T,C]
    return torch.logsumexp(logp, 0) - math.log(samples.shape[0])
