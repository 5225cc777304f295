"""Expectations under diagonal Gaussians, and P(f_y is the largest).

* Gauss–Hermite nodes (cached) for ∫ N(t | 0, 1) g(t) dt ≈ Σ_j w_j g(z_j).
* ``expect`` / ``log_expect_exp``: E[g(F)] and log E[exp(g(F))] for F ~ Π_l N(F_l | m_l, v_l),
  by a tensor-product Gauss–Hermite grid when it has at most ``max_grid`` points, else by seeded
  Monte Carlo with common random numbers (deterministic for a given seed).
* ``log_prob_largest``: log P(f_c = max_k f_k) for independent Gaussian f, the one-dimensional
  integral of scalable-ep App. H eq. (68),
      P(f_y largest) = ∫ N(t | m_y, v_y) Π_{k≠y} Φ((t − m_k)/√v_k) dt,
  by Gauss–Hermite in t, in log space (log_ndtr, logsumexp).
  ``prob_label_largest`` and ``prob_largest``: the same integral in linear space (Φ, product), for objectives
  and predictions that need P and not log P — several times cheaper.

* Composite Gauss–Legendre panels whose edges follow every scale in the integrand, where Gauss–Hermite
  at one Gaussian's scale would miss a much narrower step: P(f_c largest) for (row, class) pairs with very
  unequal class variances, and ``log_expect_exp_step`` for one-dimensional step likelihoods.

What this module does not do: error-controlled adaptive quadrature or correlated Gaussians.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np
import torch
from torch.special import log_ndtr

from .gaussian import wide_dtype

__all__ = ["gauss_hermite", "expect", "log_expect_exp", "log_expect_exp_step", "log_prob_largest", "prob_largest", "ndtr",
           "log_prob_label_largest", "prob_label_largest"]


def _constant_result(fn):
    """``torch.compiler.assume_constant_result(fn)`` without importing torch._dynamo, about 2 s of ``import sgpc``
    (``python -X importtime``): that decorator only marks ``fn``, and this sets the same mark
    (``test_quadrature`` checks it against torch's own)."""
    fn._dynamo_marked_constant = True
    return fn


@functools.lru_cache(maxsize=64)
@_constant_result      # numpy is opaque to torch.compile; the nodes are constants
def _hermgauss(n: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    # plain floats, not arrays: torch 2.11's compiler traced the cached arrays as numpy tensors and failed on the
    # second use ("source NumpyTensorSource ... already in seen_sources", on a GPU, 2026-11-26)
    x, w = np.polynomial.hermite.hermgauss(n)
    return tuple((x * math.sqrt(2.0)).tolist()), tuple((w / math.sqrt(math.pi)).tolist())


def gauss_hermite(n: int, dtype=torch.float64, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes z [n] and weights w [n] with Σ_j w_j g(z_j) ≈ E_{t~N(0,1)}[g(t)] (exact for polynomials of degree < 2n)."""
    if n < 1:
        raise ValueError(f"number of Gauss-Hermite points must be >= 1, got {n}")
    z, w = _hermgauss(int(n))
    return (torch.as_tensor(z, dtype=dtype, device=device),
            torch.as_tensor(w, dtype=dtype, device=device))


def _points(mean: torch.Tensor, var: torch.Tensor, n_points: int, n_samples: int, max_grid: int,
            seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Evaluation points F [S,N,L] and log-weights [S] for a diagonal Gaussian [N,L]."""
    L = mean.shape[-1]
    std = var.clamp_min(0.0).sqrt()
    if n_points ** L <= max_grid:
        z, w = gauss_hermite(n_points, mean.dtype, mean.device)
        grids = torch.meshgrid(*([z] * L), indexing="ij")
        Z = torch.stack([g.reshape(-1) for g in grids], -1)                      # [S,L]
        wgrid = torch.meshgrid(*([w.log()] * L), indexing="ij")
        logw = torch.stack([g.reshape(-1) for g in wgrid], -1).sum(-1)             # [S]
    else:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        Z = torch.randn(n_samples, L, generator=gen, dtype=mean.dtype).to(mean.device)
        logw = torch.full((n_samples,), -math.log(n_samples), dtype=mean.dtype, device=mean.device)
    return mean[None] + std[None] * Z[:, None, :], logw


def expect(fn: Callable[[torch.Tensor], torch.Tensor], mean: torch.Tensor, var: torch.Tensor, *,
           n_points: int = 20, n_samples: int = 4096, max_grid: int = 4096, seed: int = 0) -> torch.Tensor:
    """E[fn(F)] for F ~ N(mean, diag(var)).

    Args:
        fn: maps F [S,N,L] to [S,N].
        mean, var: [N,L].
    Returns:
        [N].
    """
    F, logw = _points(mean, var, n_points, n_samples, max_grid, seed)
    return (logw.exp()[:, None] * fn(F)).sum(0)


def log_expect_exp(fn: Callable[[torch.Tensor], torch.Tensor], mean: torch.Tensor, var: torch.Tensor, *,
                   n_points: int = 20, n_samples: int = 4096, max_grid: int = 4096, seed: int = 0
                   ) -> torch.Tensor:
    """log E[exp(fn(F))] for F ~ N(mean, diag(var)), computed with logsumexp.

    Args: as ``expect``. Returns [N].
    """
    F, logw = _points(mean, var, n_points, n_samples, max_grid, seed)
    return torch.logsumexp(logw[:, None] + fn(F), dim=0)


def _standardised(mean: torch.Tensor, var: torch.Tensor, cls: torch.Tensor, n_points: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The integrand's arguments u = (t_j − m_k)/√v_k at the nodes t_j = m_c + √v_c z_j of class c,
    [N,K,J,C], the mask of k = c [N,K,1,C] and the weights w [J]."""
    tiny = torch.finfo(mean.dtype).tiny
    z, w = gauss_hermite(n_points, mean.dtype, mean.device)
    m_c = mean.gather(1, cls)                                                      # [N,K]
    s_c = var.gather(1, cls).clamp_min(tiny).sqrt()
    t = m_c[..., None] + s_c[..., None] * z                                        # [N,K,J]
    s_all = var.clamp_min(tiny).sqrt()
    u = (t[..., None] - mean[:, None, None, :]) / s_all[:, None, None, :]          # [N,K,J,C]
    C = mean.shape[1]
    is_self = cls[..., None] == torch.arange(C, device=mean.device)               # [N,K,C]
    return u, is_self[:, :, None, :], w


# Gauss–Hermite in t at class c's scale resolves Φ((t − m_k)/√v_k) only when √v_k is not much smaller than
# √v_c: at a variance ratio v_c / min_k v_k of 10 the 32-node error reaches 8e-4, at 100 3e-2 (tests). Above
# these ratios a (row, class) pair is integrated by ``_log_largest_panels`` instead (~10× the work of a pair):
# from 4 for predictions (every class, 64 nodes: ≤ 2e-10 below it), from 10 in training objectives (the
# label's class; 32 nodes: ≤ 8e-4 below it); tests/test_quadrature.py checks both.
PANEL_RATIO_PREDICT = 4.0
PANEL_RATIO_LABEL = 10.0
# panel edges at m_k + a·√v_k for every class k (their union, sorted), Gauss–Legendre nodes per panel
_PANEL_EDGES = (-6.0, -3.0, -1.5, 0.0, 1.5, 3.0, 6.0)
_PANEL_NODES = 6


@functools.lru_cache(maxsize=8)
@_constant_result
def _legendre(n: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    x, w = np.polynomial.legendre.leggauss(n)          # as floats, for the reason given at _hermgauss
    return tuple(x.tolist()), tuple(w.tolist())


def _panel_nodes(edges: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gauss–Legendre nodes t [H,P·J] of the P panels between sorted ``edges`` [H,P+1], the panels'
    half-widths [H,P] and the J nodes' weights on [−1, 1] [J]: ∫ g ≈ Σ_p half_p Σ_j w_j g(t_pj)."""
    H = edges.shape[0]
    mid, half = 0.5 * (edges[:, 1:] + edges[:, :-1]), 0.5 * (edges[:, 1:] - edges[:, :-1])
    x, w = (torch.as_tensor(v, dtype=edges.dtype, device=edges.device) for v in _legendre(_PANEL_NODES))
    t = (mid[..., None] + half[..., None] * x).reshape(H, -1)
    return t, half, w


def _panel_log_sum(log_g: torch.Tensor, half: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """log Σ_p half_p Σ_j w_j exp(log_g[:, p·J + j]) for log_g [H,P·J] -> [H]: each panel in log space,
    the panels combined in linear space of their widths.

    Edges coincide (a Gaussian's edge m + a√v on a step's edge, two classes with equal marginals), and a
    panel of width 0 contributes nothing but has the derivative Σ_j w_j g_pj in its width: with the
    widths' logs, clamped at the smallest normal number to stay finite, that derivative was 0 and
    autograd lost one side of every coinciding edge (a probit Power-EP tilted variance of −0.48 for 0.81).
    """
    H, P = half.shape
    per_panel = torch.logsumexp(log_g.reshape(H, P, -1) + w.log(), dim=-1)          # [H,P]
    top = per_panel.detach().amax(-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    return top[:, 0] + torch.log((half * torch.exp(per_panel - top)).sum(-1))


def _log_normal(t: torch.Tensor, mean: torch.Tensor, sd: torch.Tensor) -> torch.Tensor:
    """log N(t | mean, sd²), broadcasting."""
    return -0.5 * ((t - mean) / sd) ** 2 - sd.log() - 0.5 * math.log(2.0 * math.pi)


_SQRT_HALF = math.sqrt(0.5)


def ndtr(x: torch.Tensor) -> torch.Tensor:
    """Φ(x) = erfc(−x/√2)/2, accurate in the lower tail down to ~1e-308. ``torch.special.ndtr`` is not
    (torch 2.13, CPU): 6.106e-16 for Φ(−8) = 6.221e-16, and 0 from x = −10 on (Φ(−10) = 7.6e-24)."""
    return 0.5 * torch.special.erfc(x * -_SQRT_HALF)


# Where P(f_c largest) is below e^_TAIL_LOG_P, the integrand's mass lies far out in class c's tail: beyond
# the reach of nodes placed at class c's own scale (32 Gauss–Hermite nodes end at 7.1 sd, the panels' outer
# edges at 6 sd). For two unit-variance classes 20 sd apart they gave −103.72 for the exact −103.57, 40 sd
# apart −503.5 for −404.3. Such pairs go to the panels, whose edges follow the integrand itself too.
_TAIL_LOG_P = -20.0
_MODE_STEPS = 30
_MODE_CHECK = 5
# the panels reach as far as the integrand's density can be e^-_CUT of its peak's (g ≤ N(t | m_c, v_c)
# bounds where that is), with edges at these fractions of the way from the mode to either end
_CUT = 40.0
_FAN = (0.1, 0.2, 0.35, 0.5, 0.7, 1.0)


@torch.no_grad()
def label_integrand_mode(mean: torch.Tensor, s: torch.Tensor, c: torch.Tensor, tol: float = 1e-6
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The mode t* of the integrand g(t) = N(t | m_c, s_c²) Π_{k≠c} Φ((t − m_k)/s_k) of P(f_c largest), for
    rows mean/s (standard deviations) [H,C] and classes c [H]: (t*, σ* = (−(log g)''(t*))^(−1/2), log g(t*)),
    each [H]. A row's Newton iteration stops after its first step below ``tol``·σ* (30 steps at most), so
    each row's result depends on that row alone, whatever else is in the batch. Whether every row has
    stopped is asked every ``_MODE_CHECK`` steps: on a GPU each question waits for the device.

    With u_k = (t − m_k)/s_k and the inverse Mills ratio λ_k = φ(u_k)/Φ(u_k):
        (log g)'  = −(t − m_c)/s_c² + Σ_k λ_k / s_k,
        (log g)'' = −1/s_c² − Σ_k λ_k (u_k + λ_k) / s_k².
    g is log-concave. Newton starts at t = m_c, where (log g)' ≥ 0, and each λ_k(u_k + λ_k) only falls as t
    grows, so |(log g)''| at an iterate bounds it on the way to the mode. Each step is at most the distance
    to the mode, and the iterates rise to it monotonically.
    """
    C = mean.shape[1]
    others = c[:, None] != torch.arange(C, device=mean.device)
    m_c, s_c = mean.gather(1, c[:, None])[:, 0], s.gather(1, c[:, None])[:, 0]
    half_log_2pi = 0.5 * math.log(2.0 * math.pi)

    def log_g_and_derivatives(t):
        u = (t[:, None] - mean) / s
        log_cdf = log_ndtr(u) * others
        lam = torch.exp(-0.5 * u * u - half_log_2pi - log_cdf) * others
        log_g = -0.5 * ((t - m_c) / s_c) ** 2 - s_c.log() - half_log_2pi + log_cdf.sum(-1)
        d1 = -(t - m_c) / s_c ** 2 + (lam / s).sum(-1)
        # λ(u + λ) lies in (0, 1); far in a tail (u ~ −1e6) λ comes from a difference of two numbers ~u²/2,
        # and the clamp keeps its rounding from turning the curvature's sign
        d2 = -1.0 / s_c ** 2 - ((lam * (u + lam)).clamp(0.0, 1.0) / s ** 2).sum(-1)
        return log_g, d1, d2

    t = m_c.clone()
    moving = torch.ones_like(t, dtype=torch.bool)
    for i in range(_MODE_STEPS):
        _, d1, d2 = log_g_and_derivatives(t)
        step = -d1 / d2
        step = torch.where(torch.isfinite(step) & moving, step, torch.zeros_like(step))
        t = t + step
        moving = moving & (step.abs() > tol * (-d2).rsqrt())
        if (i + 1) % _MODE_CHECK == 0 and not bool(moving.any()):
            break
    log_g, _, d2 = log_g_and_derivatives(t)
    return t, (-d2).rsqrt(), log_g


@torch.no_grad()
def _integrand_edges(mean: torch.Tensor, s: torch.Tensor, c: torch.Tensor,
                     mode: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Panel edges [H,E] that follow the integrand g(t) = N(t | m_c, s_c²) Π_{k≠c} Φ((t − m_k)/s_k) of
    P(f_c largest) itself, for rows mean/s [H,C] and classes c [H]: around its mode t*, at t* + a·σ*
    (a in ``_PANEL_EDGES``; ``label_integrand_mode``), and fanned out from t* to where g ≤ g(t*)·e^−_CUT
    must hold on either side. That is |t − m_c| ≥ R, where N(t | m_c, s_c²) = g(t*)·e^−_CUT, since g ≤ N.

    The fan matters where g is far from Gaussian: beside a competitor much sharper than class c, g rises
    steeply at the competitor's mean and then decays at class c's own, much slower, rate (at s_k = 0.01 s_c,
    6.5 s_c above m_c, a quarter of the mass lay beyond the edges t* + 6σ*).

    ``mode`` is ``label_integrand_mode(mean, s, c)``, found once for all the rows before they are chunked.
    """
    t, width, log_g = mode
    m_c, s_c = mean.gather(1, c[:, None])[:, 0], s.gather(1, c[:, None])[:, 0]
    reach = s_c * (2.0 * (-s_c.log() - 0.5 * math.log(2.0 * math.pi) - log_g + _CUT).clamp_min(0.0)).sqrt()
    a = torch.as_tensor(_PANEL_EDGES, dtype=mean.dtype, device=mean.device)
    f = torch.as_tensor(_FAN, dtype=mean.dtype, device=mean.device)
    edges = torch.cat([t[:, None] + width[:, None] * a,
                       t[:, None] + f * (m_c + reach - t).clamp_min(0.0)[:, None],
                       t[:, None] - f * (t - m_c + reach).clamp_min(0.0)[:, None]], 1)
    # a class of zero variance (s at the smallest normal number) overflows u²: its P is 0 or 1 anyway, and
    # the class-based edges alone do; edges that did not come out finite fall back to m_c
    return torch.where(torch.isfinite(edges), edges, m_c[:, None])


# Run eagerly inside torch.compile: the rows H that need panels vary from batch to batch, and each new H
# recompiled this function and the Newton iteration under it until dynamo's limit of 8, after which every step
# recompiled (benchmarks/perf/vi_step.py --compile). It was a graph break anyway. ``torch.compiler.disable`` imports
# torch._dynamo (about 2 s of ``import sgpc``), so the disabled function is made when a fit first compiles
# (``prepare_for_compile``, called by ``train``), not at import.
_PANELS_UNDER_COMPILE: Callable | None = None


def prepare_for_compile() -> None:
    """Make ``_log_largest_panels`` run eagerly inside torch.compile from now on (``torch.compiler.disable``)."""
    global _PANELS_UNDER_COMPILE
    if _PANELS_UNDER_COMPILE is None:
        _PANELS_UNDER_COMPILE = torch.compiler.disable(_log_largest_panels_eager)


def _log_largest_panels(mean: torch.Tensor, var: torch.Tensor, c: torch.Tensor, linear: bool = False
                        ) -> torch.Tensor:
    """``_log_largest_panels_eager``, run eagerly inside torch.compile once ``prepare_for_compile`` was called."""
    if torch.compiler.is_compiling() and _PANELS_UNDER_COMPILE is not None:
        return _PANELS_UNDER_COMPILE(mean, var, c, linear)
    return _log_largest_panels_eager(mean, var, c, linear)


def _log_largest_panels_eager(mean: torch.Tensor, var: torch.Tensor, c: torch.Tensor, linear: bool = False
                              ) -> torch.Tensor:
    """log P(f_c largest) for rows mean/var [H,C] and classes c [H], by composite Gauss–Legendre in t;
    with ``linear``, P itself from Φ and a product (as ``prob_label_largest``: ~10× cheaper, P < ~1e-308
    underflows to 0).

    Its [H,T,C] array has T ≈ (7·C + 19)·6 nodes per row: rows go in chunks of at most ``_chunk_elements``.

    The panels' edges are the union of m_k + a·√v_k over all classes k (a in ``_PANEL_EDGES``) and of edges
    that follow the integrand itself (``_integrand_edges``: around its mode, and out to where its density
    has fallen by e^-40). So every factor — N(t | m_c, v_c) and each Φ((t − m_k)/√v_k) — is smooth within
    every panel whatever the ratio of the variances, and the integrand's peak is resolved however far into
    class c's tail it lies.
    """
    tiny = torch.finfo(mean.dtype).tiny
    H, C = mean.shape
    s = var.clamp_min(tiny).sqrt()
    mode = label_integrand_mode(mean, s, c)
    rows = max(1, _chunk_elements(mean.device)
               // ((len(_PANEL_EDGES) * (C + 1) + 2 * len(_FAN) - 1) * _PANEL_NODES * C))
    if H <= rows:
        return _panels(mean, s, c, mode, linear)
    return torch.cat([_panels(mean[a:a + rows], s[a:a + rows], c[a:a + rows], tuple(m[a:a + rows] for m in mode),
                              linear) for a in range(0, H, rows)])


def _panels(mean: torch.Tensor, s: torch.Tensor, c: torch.Tensor,
            mode: tuple[torch.Tensor, torch.Tensor, torch.Tensor], linear: bool) -> torch.Tensor:
    """One chunk of ``_log_largest_panels_eager``: rows mean/s (standard deviations) [H,C], classes c [H] and
    the integrand's ``mode`` there (``label_integrand_mode``)."""
    H, C = mean.shape
    a = torch.as_tensor(_PANEL_EDGES, dtype=mean.dtype, device=mean.device)
    edges = torch.cat([(mean[:, :, None] + s[:, :, None] * a).reshape(H, -1), _integrand_edges(mean, s, c, mode)], 1)
    t, half, w = _panel_nodes(edges.sort(-1).values)                               # [H,T]
    log_density = _log_normal(t, mean.gather(1, c[:, None]), s.gather(1, c[:, None]))
    is_self = (c[:, None] == torch.arange(C, device=mean.device))[:, None, :]
    if linear:
        g = log_density.exp() * _halved_cdf_product(mean[:, None, :] - t[..., None], s[:, None, :], is_self)
        return ((g.reshape(*half.shape, -1) @ w) * half).sum(-1)                                  # [H,T] → [H]
    u = (t[..., None] - mean[:, None, :]) / s[:, None, :]                           # [H,T,C]
    return _panel_log_sum(log_density + log_ndtr(u).masked_fill(is_self, 0.0).sum(-1), half, w)


def _halved_cdf_product(d: torch.Tensor, s: torch.Tensor, is_self: torch.Tensor) -> torch.Tensor:
    """Π_{k≠c} Φ((t − m_k)/s_k) over the last axis from d = m_k − t and s_k (broadcasting), with ``is_self``
    marking k = c: Φ(u) = erfc(−u/√2)/2, so the C halves come out of the product as one factor 2^−C (the
    own class's erfc set to 2). Two element-wise passes fewer than ``ndtr`` per factor."""
    e = torch.special.erfc(d * (_SQRT_HALF / s)).masked_fill_(is_self, 2.0)   # erfc's backward reads its input
    return e.prod(-1) * 0.5 ** d.shape[-1]


_STEP_EDGES = (-8.0, -6.0, -4.0, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 4.0, 6.0, 8.0)


def log_expect_exp_step(fn: Callable[[torch.Tensor], torch.Tensor], mean: torch.Tensor, var: torch.Tensor,
                        centre: float = 0.0, scale: float = 1.0) -> torch.Tensor:
    """log E[exp(fn(f))] for f ~ N(mean, var) (mean, var [N]; returns [N]) where exp(fn) is a smoothed step
    around ``centre`` of width ``scale`` (a probit or logistic likelihood, or a power of one).

    Composite Gauss–Legendre panels whose edges follow both the Gaussian (mean + a√var) and the step
    (centre + a·scale), so it stays accurate whatever the ratio of √var to the step's width — Gauss–Hermite
    at the Gaussian's scale misses a step much narrower than √var (a logistic prediction at var = 400 was
    off by 2e-2). ``fn`` maps points [N,T] to [N,T]. The Gaussian's mass beyond ±8√var (1e-15) is left out.
    """
    N = mean.shape[0]
    # below ~1e-7 (relative to the mean) the panels would shrink under the mean's rounding; the expectation
    # is then fn at the mean to O(var) anyway
    s = torch.maximum(var.clamp_min(0.0).sqrt(), 1e-7 * (1.0 + mean.abs()))
    a = torch.as_tensor(_STEP_EDGES, dtype=mean.dtype, device=mean.device)
    edges = torch.cat([mean[:, None] + s[:, None] * a, (centre + scale * a).expand(N, -1)], 1)
    edges = torch.maximum(torch.minimum(edges, (mean + 8.0 * s)[:, None]), (mean - 8.0 * s)[:, None])
    t, half, w = _panel_nodes(edges.sort(-1).values)                                 # [N,T], within ±8√var
    return _panel_log_sum(_log_normal(t, mean[:, None], s[:, None]) + fn(t), half, w)


def _hard(var: torch.Tensor, cls: torch.Tensor, ratio: float) -> torch.Tensor:
    """[N,K] mask of the (row, class) pairs whose variance exceeds another class's by more than ``ratio``."""
    tiny = torch.finfo(var.dtype).tiny
    return var.gather(1, cls) > ratio * var.amin(1, keepdim=True).clamp_min(tiny)


# elements of the largest intermediate array of ``_log_largest`` ([rows, K, J, C] or [pairs, T, C]): rows
# and panel pairs are processed in chunks of at most this size, so memory does not grow like N·C²·J
# (10-class prediction on 4 096 rows: 26M elements, 200 MB per float64 temporary, before chunking; now 8 MB)
_CHUNK_ELEMENTS = 1 << 20
# on a GPU, chunks 16× larger: each chunk costs a few dozen kernel launches and host round trips (``bool(hard.any())``,
# ``nonzero``), and a GPU's memory holds 16M-element temporaries easily
_DEVICE_CHUNK_FACTOR = 16


def _chunk_elements(device: torch.device) -> int:
    """The largest intermediate array's size in elements, per chunk of rows, on ``device``."""
    return _CHUNK_ELEMENTS if device.type == "cpu" else _CHUNK_ELEMENTS * _DEVICE_CHUNK_FACTOR


def _log_largest(mean: torch.Tensor, var: torch.Tensor, cls: torch.Tensor, n_points: int,
                 panel_ratio: float = PANEL_RATIO_LABEL) -> torch.Tensor:
    """log P(f_c largest) for class indices cls [N,K] -> [N,K]: Gauss–Hermite at the class's scale, and
    composite panels (``_log_largest_panels``) for pairs whose variance ratio makes that inaccurate or whose
    P is below e^_TAIL_LOG_P (the integrand's mass beyond the nodes' reach)."""
    (N, C), K = mean.shape, cls.shape[1]
    rows = max(1, _chunk_elements(mean.device) // (K * n_points * C))
    if N > rows:
        return torch.cat([_log_largest(mean[a:a + rows], var[a:a + rows], cls[a:a + rows], n_points, panel_ratio)
                          for a in range(0, N, rows)])
    u, is_self, w = _standardised(mean, var, cls, n_points)
    lphi = log_ndtr(u).masked_fill(is_self, 0.0)
    out = torch.logsumexp(w.log() + lphi.sum(-1), dim=-1)
    hard = _hard(var, cls, panel_ratio) | (out.detach() < _TAIL_LOG_P)
    if bool(hard.any()):
        rows, ks = hard.nonzero(as_tuple=True)
        out = out.index_put((rows, ks), _log_largest_panels(mean[rows], var[rows], cls[rows, ks]))
    return out


def log_prob_largest(mean: torch.Tensor, var: torch.Tensor, n_points: int = 32) -> torch.Tensor:
    """log P(f_c is the largest) for every class, eq. (68) of scalable-ep.

    Args:
        mean, var: independent Gaussian marginals of f, [N,C].
        n_points: Gauss–Hermite nodes in t.
    Returns:
        [N,C]; exp sums to 1 over classes up to quadrature error.
    """
    N, C = mean.shape
    cls = torch.arange(C, device=mean.device).expand(N, C)
    return _log_largest(mean, var, cls, n_points, PANEL_RATIO_PREDICT)


def pairwise_bound(mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """An upper bound on P(f_c is the largest) for every class, [N,C] from mean/var [N,C]: the event needs
    f_c > f_k for every k, so P ≤ min_{k≠c} P(f_c > f_k) = min_{k≠c} Φ((m_c − m_k)/√(v_c + v_k))."""
    tiny = torch.finfo(mean.dtype).tiny
    u = (mean[:, :, None] - mean[:, None, :]) / (var[:, :, None] + var[:, None, :]).clamp_min(tiny).sqrt()
    eye = torch.eye(mean.shape[1], dtype=torch.bool, device=mean.device)
    return ndtr(u).masked_fill(eye, 1.0).amin(-1)


def prob_largest(mean: torch.Tensor, var: torch.Tensor, n_points: int = 64, floor: float = 0.0) -> torch.Tensor:
    """P(f_c is the largest) for every class, in linear space: [N,C] from independent Gaussian marginals
    mean/var [N,C]. The integral and nodes of ``log_prob_largest`` (Gauss–Hermite at the class's scale, the
    panels of ``_log_largest_panels`` for the pairs it would give them), with Φ and a product in place of
    log Φ and a sum: several times cheaper, and equal to ``log_prob_largest(...).exp()`` to rounding where P is
    above ~1e-300 (a sum of positive terms keeps its relative precision; below, P underflows towards 0).

    For outputs that add a constant c to P (robust-max's ε/C), where P's absolute error is what matters:
    ``floor`` > 0 lets the pairs whose P is provably below it (``pairwise_bound``) skip the panels, keeping their
    Gauss–Hermite value clamped to [0, bound], so their absolute error is below ``floor`` (on an 18-class model,
    2 000 of the 17 000 pairs that needed panels; linear space is most of the saving, docs/design-notes.md).
    """
    N, C = mean.shape
    rows = max(1, _chunk_elements(mean.device) // (C * n_points * C))
    if N > rows:
        return torch.cat([prob_largest(mean[a:a + rows], var[a:a + rows], n_points, floor)
                          for a in range(0, N, rows)])
    cls = torch.arange(C, device=mean.device).expand(N, C)
    z, w = gauss_hermite(n_points, mean.dtype, mean.device)
    s = var.clamp_min(torch.finfo(mean.dtype).tiny).sqrt()
    t = mean[..., None] + s[..., None] * z                                             # class c's nodes [N,C,J]
    eye = torch.eye(C, dtype=torch.bool, device=mean.device)[None, :, None, :]
    out = _halved_cdf_product(mean[:, None, None, :] - t[..., None], s[:, None, None, :], eye) @ w   # [N,C]
    hard = _hard(var, cls, PANEL_RATIO_PREDICT) | (out < math.exp(_TAIL_LOG_P))
    # rows go to one grid by their panel pairs before the floor, and the grid follows all of them, so that the
    # floor changes the pairs provably below it and nothing else
    grid = _row_grid_pays(hard, differentiable=torch.is_grad_enabled() and (mean.requires_grad or var.requires_grad))
    grid_pairs = hard & grid[:, None]
    if floor > 0.0:
        bound = pairwise_bound(mean, var)
        negligible = bound < floor
        out = torch.where(negligible, torch.minimum(out, bound), out)
        hard = hard & ~negligible
    alone, on_grid = hard & ~grid[:, None], hard & grid[:, None]
    if bool(alone.any()):
        rows, ks = alone.nonzero(as_tuple=True)
        out = out.index_put((rows, ks), _log_largest_panels(mean[rows], var[rows], cls[rows, ks], linear=True))
    if bool(on_grid.any()):
        at = grid.nonzero(as_tuple=True)[0]
        rows, ks = hard[at].nonzero(as_tuple=True)
        out = out.index_put((at[rows], ks), _prob_largest_row_grid(mean[at], var[at], grid_pairs[at])[rows, ks])
    return out


# A row with at least this many panel pairs integrates them on one grid (``_prob_largest_row_grid``): the pairs'
# own panels cost ~(7·C + 18)·6 nodes × C factors each, the row's grid ~(7·C + 19·h)·6 nodes × C for all h pairs.
# Timed against the pairs' own panels (200 rows, 2 threads, float64): slower at h = 1 (0.65–0.98×), faster from
# h = 2 at every C from 4 to 26 (1.02–1.6× at h = 2, up to 5.2× at C = 18, h = 17); docs/design-notes.md,
# "Predictions with many classes".
_ROW_GRID_MIN_PAIRS = 2
# on a row's grid, class c's integrand is 0 where its own Φ is at most this (t more than 9 sd below m_c)
_OWN_CDF_FLOOR = 1e-19


def _row_grid_pays(hard: torch.Tensor, differentiable: bool = False) -> torch.Tensor:
    """[N] bool: the rows of ``hard`` [N,C] (their panel pairs) that one grid per row integrates more cheaply
    than panels per pair; none where the result is ``differentiable`` (the grid is computed in place, without
    a graph: predictions)."""
    if differentiable:
        return torch.zeros(hard.shape[0], dtype=torch.bool, device=hard.device)
    return hard.sum(1) >= _ROW_GRID_MIN_PAIRS


@torch.no_grad()
def _prob_largest_row_grid(mean: torch.Tensor, var: torch.Tensor, hard: torch.Tensor) -> torch.Tensor:
    """P(f_c largest) [H,C] for rows mean/var [H,C], by composite Gauss–Legendre on one grid per row, valid
    where ``hard`` [H,C] (elsewhere the grid lacks that class's own edges).

    The grid's edges are those of every panel pair of the row at once: m_k + a·√v_k for every class k and
    ``_integrand_edges`` of each pair in ``hard``, so each pair is integrated on a refinement of its own panels
    (``_log_largest_panels_eager``). On it Π_k Φ((t − m_k)/√v_k) is formed once per node, and class c's integrand
    is N(t | m_c, v_c) times that product divided by its own Φ: C factors per node for the whole row where the
    pairs' own panels take C per node per pair. Where class c's own Φ is below ``_OWN_CDF_FLOOR`` (t more than
    9 sd below m_c) the integrand is set to 0: the integrand's mode lies above m_c and the product only
    rises with t, so that part of the line holds at most 2Φ(−9) ≈ 2·10⁻¹⁹ of P, and the division is never
    0/0. In linear space, as ``prob_largest``, and in float64 whatever the inputs' dtype (``gaussian.wide_dtype``:
    the division would otherwise meet float32's underflow at 1e-38): a P below ~1e-290 underflows towards 0.
    """
    dtype = mean.dtype
    mean, var = mean.to(wide_dtype(mean)), var.to(wide_dtype(mean))
    H, C = mean.shape
    s = var.clamp_min(torch.finfo(mean.dtype).tiny).sqrt()
    rows, ks = hard.nonzero(as_tuple=True)
    own = _integrand_edges(mean[rows], s[rows], ks, label_integrand_mode(mean[rows], s[rows], ks))   # [P,E]
    counts = hard.sum(1)
    slot = torch.arange(rows.shape[0], device=mean.device) - (counts.cumsum(0) - counts)[rows]
    # rows with fewer pairs than the most repeat an edge they have (m_0: a = 0 is among _PANEL_EDGES), which
    # makes panels of width 0, worth nothing
    pair_edges = mean[:, :1, None].expand(H, int(counts.max()), own.shape[1]).clone()
    pair_edges[rows, slot] = own
    a = torch.as_tensor(_PANEL_EDGES, dtype=mean.dtype, device=mean.device)
    edges = torch.cat([(mean[:, :, None] + s[:, :, None] * a).reshape(H, -1), pair_edges.reshape(H, -1)], 1)
    edges = edges.sort(-1).values
    step = max(1, _chunk_elements(mean.device) // ((edges.shape[1] - 1) * _PANEL_NODES * C))
    scale = _SQRT_HALF / s                                                                  # [H,C]
    out = []
    for r in range(0, H, step):
        t, half, w = _panel_nodes(edges[r:r + step])                                         # [h,T]
        weight = (half[..., None] * w).reshape(t.shape[0], 1, -1)                             # [h,1,T]
        x = (mean[r:r + step, None, :] - t[..., None]).mul_(scale[r:r + step, None, :])     # [h,T,C]: −u/√2
        cdf = torch.special.erfc(x).mul_(0.5)                                                # Φ(u)
        dropped = cdf <= _OWN_CDF_FLOOR
        product = cdf.prod(-1, keepdim=True)
        others = product / cdf.clamp_min_(_OWN_CDF_FLOOR)                                   # Π_k≠c Φ where kept
        g = x.square_().neg_().exp_().mul_(others).masked_fill_(dropped, 0.0)               # √(2π) s_c N(t|m_c,v_c) Π_k≠c Φ
        out.append((weight @ g)[:, 0] * (scale[r:r + step] / math.sqrt(math.pi)))
    return torch.cat(out).to(dtype)


def log_prob_label_largest(y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor,
                           n_points: int = 32) -> torch.Tensor:
    """log P(f_{y_i} is the largest) for the given labels: y [N] (int64), mean/var [N,C] -> [N]."""
    return _log_largest(mean, var, y.long()[:, None], n_points)[:, 0]


class _LabelLargest(torch.autograd.Function):
    """P(f_c largest) = Σ_j w_j Π_{k≠c} Φ(u_jk), u_jk = (m_c + s_c z_j − m_k)/s_k, s = √v, on Gauss–Hermite
    nodes, with its gradient written out: the VI objective's hottest function. Autograd's backward through
    the element-wise steps over [N,J,C] (and the cumulative products behind ``prod``'s) took about three
    times the forward pass (design notes, "Quadrature"). With G_jk = φ(u_jk) Π_{k'≠k,c} Φ(u_jk') (zero at k = c),

        ∂P/∂m_k = −Σ_j w_j G_jk / s_k (k ≠ c),   ∂P/∂m_c = Σ_k Σ_j w_j G_jk / s_k,
        ∂P/∂s_k = −Σ_j w_j G_jk u_jk / s_k (k ≠ c),   ∂P/∂s_c = Σ_k Σ_j w_j z_j G_jk / s_k,

    and ∂P/∂v = ∂P/∂s / (2s). The leave-one-out product is P_j / Φ(u_jk), with Φ held at ≥ the smallest
    normal number (which moves P by < 1e-307): where Φ(u_jk) is that small, φ(u_jk) ≤ |u_jk| Φ(u_jk) is
    too, so the term is negligible either way. First derivatives only (nothing differentiates twice).
    """

    @staticmethod
    def forward(ctx, mean, var, cls, n_points):
        tiny = torch.finfo(mean.dtype).tiny
        u, is_self, w = _standardised(mean, var, cls[:, None], n_points)
        u, is_self = u[:, 0], is_self[:, 0]                                              # [N,J,C], [N,1,C]
        z = gauss_hermite(n_points, mean.dtype, mean.device)[0]
        inv_s = var.clamp_min(tiny).rsqrt()                                               # [N,C]
        cdf = ndtr(u).masked_fill_(is_self, 1.0).clamp_min_(tiny)
        prod = cdf.prod(-1)                                                               # [N,J]
        ctx.save_for_backward(u, cdf, prod, is_self, inv_s, var, z, w)
        return prod @ w

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        u, cdf, prod, is_self, inv_s, var, z, w = ctx.saved_tensors
        G = torch.exp(u.square().mul_(-0.5)).mul_(prod[..., None] / cdf).masked_fill_(is_self, 0.0)  # ×√(2π)
        wz = torch.stack([w, z * w], 1)                                                   # [J,2]
        Sg = G.mT @ wz                                                                    # [N,C,2]
        Su = (G.mul_(u).mT @ w[:, None])[..., 0]                                          # [N,C]
        scale = (grad / math.sqrt(2.0 * math.pi))[:, None] * inv_s                        # [N,C]
        own = is_self[:, 0, :].to(u.dtype)                                                # one-hot c
        dm, dz = scale * Sg[..., 0], scale * Sg[..., 1]
        d_mean = own * dm.sum(1, keepdim=True) - dm
        d_s = own * dz.sum(1, keepdim=True) - scale * Su
        d_var = torch.where(var > torch.finfo(var.dtype).tiny, 0.5 * d_s * inv_s, 0.0)
        return d_mean, d_var, None, None


def prob_label_largest(y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, n_points: int = 32) -> torch.Tensor:
    """P(f_{y_i} is the largest) itself, in linear space: y [N] (int64), mean/var [N,C] -> [N].

    For objectives that need P rather than log P (the robust-max E[log p] = P log a + (1 − P) log b):
    the same nodes as ``log_prob_label_largest`` with Φ and a product in place of log Φ and a sum,
    several times cheaper (``log_ndtr`` costs ~10 ``ndtr`` on CPU). A P below ~1e-308 underflows to 0,
    which moves such an objective by less than 1e-300; where log P or log(1 − P) is needed (tilted
    normalisers, predictions) use the log-space functions.
    """
    cls = y.long()[:, None]
    out = _LabelLargest.apply(mean, var, cls[:, 0], n_points)
    hard = _hard(var, cls, PANEL_RATIO_LABEL)[:, 0] | (out.detach() < math.exp(_TAIL_LOG_P))
    if bool(hard.any()):
        rows = hard.nonzero(as_tuple=True)[0]
        out = out.index_put((rows,), _log_largest_panels(mean[rows], var[rows], cls[rows, 0], linear=True))
    return out
