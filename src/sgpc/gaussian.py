"""Gaussian algebra shared by every engine.

Cholesky with dtype-scaled jitter that escalates with a warning (never silently), triangular
solves, natural <-> moment parameters, the log-normaliser g(θ), KL divergences, and the EP
moment-matching rule that turns ∂log Z/∂mean and ∂log Z/∂var of a cavity into tilted moments.

Natural parameters are kept in "precision form" θ = (h, Λ) with h = Σ⁻¹μ and Λ = Σ⁻¹, so that
a Gaussian is ∝ exp(−½ fᵀΛf + hᵀf).  (The papers' θ₂ = −½Λ; the sign convention is the only
difference.)

What this module does not do: anything that knows about kernels, inducing points or data.
"""
from __future__ import annotations

import math
import warnings
from typing import Callable

import torch

__all__ = [
    "JitterWarning", "NotPositiveDefiniteError", "base_jitter", "cholesky", "solve_lower", "solve_lower_pair",
    "moments_to_natural", "natural_to_moments", "log_normalizer", "kl_standard_normal",
    "kl_gaussian", "moment_match", "tilted_moments", "match_moments", "wide_dtype", "log_ndtr", "sum_sq", "matvec",
]


class JitterWarning(UserWarning):
    """A matrix needed more jitter than the default to be factorised."""


class NotPositiveDefiniteError(torch.linalg.LinAlgError):
    """A matrix stayed non-positive-definite after every jitter escalation."""


def base_jitter(dtype: torch.dtype) -> float:
    """Relative jitter added to every factorised covariance: ~1e-8 in float64, ~1e-5 in float32.

    It is √eps scaled down by 100 (float64) / 2 (float32): enough to keep a kernel matrix with
    duplicated inputs factorisable, small against any length-scale or amplitude we fit.
    """
    return 1e-8 if dtype == torch.float64 else 1e-5


def cholesky(A: torch.Tensor, *, jitter: float | None = None, max_tries: int = 6,
             what: str = "matrix") -> torch.Tensor:
    """Lower Cholesky factor of A + j·mean(diag A)·I with escalating j.

    The first try adds the base jitter (``base_jitter(dtype)`` unless given). Each failure
    multiplies the jitter of the failing matrices (only those, in a batch) by 10 and emits a
    ``JitterWarning`` naming ``what``; after ``max_tries`` the ``NotPositiveDefiniteError`` says how
    far it went. ``jitter=0`` asks for the exact factor: one try, and the error on failure.

    Args:
        A: [..., M, M] symmetric matrices.
    Returns:
        [..., M, M] lower-triangular factors.
    """
    j0 = base_jitter(A.dtype) if jitter is None else float(jitter)
    scale = A.diagonal(dim1=-2, dim2=-1).mean(-1).abs().clamp_min(1e-12)[..., None, None]
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    # one jitter per matrix: a failing matrix of a batch escalates alone (the others keep their factor).
    # jitter=0 asks for the exact factor: one try, and a failure is the caller's signal (no escalation)
    if j0 == 0.0:
        L, info = torch.linalg.cholesky_ex(A)
        if bool((info > 0).any()):
            raise NotPositiveDefiniteError(f"{what} is not positive definite (factorised without jitter)")
        return L
    if torch.compiler.is_compiling():
        # inside torch.compile the escalation's host sync would split the graph at every factorisation;
        # one try with the base jitter, and a failed factor is NaN, which the fit loop's check of the
        # objective reports (the eager path, the default, escalates as below)
        L, info = torch.linalg.cholesky_ex(A + (j0 * scale) * eye)
        return torch.where((info > 0)[..., None, None], torch.nan, L)
    j = torch.full(scale.shape, j0, dtype=A.dtype, device=A.device)
    first_bad = None
    for attempt in range(max_tries):
        L, info = torch.linalg.cholesky_ex(A + (j * scale) * eye)
        bad = (info > 0)[..., None, None]
        if not bool(bad.any()):
            if attempt > 0:
                warnings.warn(f"{what} was not positive definite ({first_bad} of {bad.numel()} matrices); factorised "
                              f"with relative jitter up to {float(j.max()):.1e} (default {base_jitter(A.dtype):.0e})",
                              JitterWarning, stacklevel=2)
            return L
        first_bad = int(bad.sum()) if first_bad is None else first_bad
        j = torch.where(bad, 10.0 * j, j)
    raise NotPositiveDefiniteError(
        f"{what} is not positive definite even with relative jitter {float(j.max()) / 10:.1e}; "
        "check for NaN/inf in the inputs or extreme hyper-parameters")


# A solve with at least this many right-hand sides per row of L goes through L⁻¹ (``solve_lower``).
WIDE_SOLVE = 4


def solve_lower(L: torch.Tensor, B: torch.Tensor, transpose: bool = False) -> torch.Tensor:
    """L⁻¹B (or L⁻ᵀB with ``transpose``) for lower-triangular L: [...,M,M], [...,M,K] -> [...,M,K].

    With K ≥ ``WIDE_SOLVE``·M right-hand sides (a minibatch's K_uf, N training rows) it forms L⁻¹ by one
    substitution against the identity (O(M³), in float64 for a float32 L) and multiplies: MKL's batched triangular
    solve runs 2–4× slower than its matrix product at these shapes on the CPU (float32 slower than float64),
    forward and backward (docs/design-notes.md, "Wide triangular solves through the inverse"). With the inverse
    formed wide, a float32 product is as accurate as float32 substitution on kernel matrices up to the float32
    jitter's condition number (tested); formed in float32 it was up to 8× less accurate.
    """
    if _is_wide(L, B):
        inv = _lower_inverse(L)
        return (inv.mT if transpose else inv) @ B
    if transpose:
        return torch.linalg.solve_triangular(L.mT, B, upper=True)
    return torch.linalg.solve_triangular(L, B, upper=False)


def solve_lower_pair(L: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(L⁻¹B, L⁻ᵀL⁻¹B): ``solve_lower`` then its transpose, from one L⁻¹ when B is wide (a minibatch's
    L_K⁻¹K_uf and K_uu⁻¹K_uf, ``sites.directions``)."""
    if _is_wide(L, B):
        inv = _lower_inverse(L)
        A = inv @ B
        return A, inv.mT @ A
    A = solve_lower(L, B)
    return A, solve_lower(L, A, transpose=True)


def _is_wide(L: torch.Tensor, B: torch.Tensor) -> bool:
    return B.shape[-1] >= WIDE_SOLVE * L.shape[-1]


def _lower_inverse(L: torch.Tensor) -> torch.Tensor:
    """L⁻¹ by substitution against the identity, in float64 for a float32 L (``solve_lower``), in L's dtype."""
    wide = wide_dtype(L)
    eye = torch.eye(L.shape[-1], dtype=wide, device=L.device)
    return torch.linalg.solve_triangular(L.to(wide), eye.expand(L.shape), upper=False).to(L.dtype)


def matvec(A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A @ x for batched matrices A [...,P,Q] and vectors x [...,Q] -> [...,P], formed as the one-row product xᵀAᵀ.

    MKL's batched matrix-vector product runs 6–35× slower than the one-row matrix product at a minibatch's [L,B,M]
    shapes on the CPU, forward and backward, whichever way A is laid out (docs/design-notes.md, "Wide triangular
    solves through the inverse"); the result is the same sums, added in another order.
    """
    return (x[..., None, :] @ A.mT)[..., 0, :]


def moments_to_natural(mean: torch.Tensor, cov: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(μ [...,M], Σ [...,M,M]) -> (h = Σ⁻¹μ, Λ = Σ⁻¹)."""
    L = cholesky(cov, jitter=0.0, what="covariance")
    eye = torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device)
    Linv = solve_lower(L, eye.expand_as(cov))
    Lam = Linv.transpose(-1, -2) @ Linv
    return (Lam @ mean[..., None])[..., 0], Lam


def natural_to_moments(h: torch.Tensor, Lam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(h [...,M], Λ [...,M,M]) -> (μ = Λ⁻¹h, Σ = Λ⁻¹)."""
    L = cholesky(Lam, jitter=0.0, what="precision")
    eye = torch.eye(Lam.shape[-1], dtype=Lam.dtype, device=Lam.device)
    Linv = solve_lower(L, eye.expand_as(Lam))
    cov = Linv.transpose(-1, -2) @ Linv
    return (cov @ h[..., None])[..., 0], cov


def log_normalizer(h: torch.Tensor, Lam: torch.Tensor) -> torch.Tensor:
    """g(θ) = log ∫ exp(−½ fᵀΛf + hᵀf) df = ½ hᵀΛ⁻¹h − ½ log|Λ| + (M/2) log 2π.

    Args: h [...,M], Λ [...,M,M]. Returns [...].
    """
    L = cholesky(Lam, jitter=0.0, what="precision")
    a = solve_lower(L, h[..., None])[..., 0]
    M = h.shape[-1]
    return 0.5 * (a * a).sum(-1) - torch.log(L.diagonal(dim1=-2, dim2=-1)).sum(-1) \
        + 0.5 * M * math.log(2 * math.pi)


def kl_standard_normal(mean: torch.Tensor, chol: torch.Tensor) -> torch.Tensor:
    """KL(N(m, LLᵀ) ‖ N(0, I)) = ½ [tr(LLᵀ) + mᵀm − M − 2 Σ log diag L].

    Args: mean [...,M], chol [...,M,M] lower triangular with positive diagonal. Returns [...].
    """
    M = mean.shape[-1]
    logdet = torch.log(chol.diagonal(dim1=-2, dim2=-1).abs()).sum(-1)
    return 0.5 * ((chol ** 2).sum((-1, -2)) + (mean ** 2).sum(-1) - M) - logdet


def kl_gaussian(mean_q: torch.Tensor, chol_q: torch.Tensor,
                mean_p: torch.Tensor, chol_p: torch.Tensor) -> torch.Tensor:
    """KL(N(m_q, L_qL_qᵀ) ‖ N(m_p, L_pL_pᵀ)), by whitening with L_p.

    Args: means [...,M], lower Cholesky factors [...,M,M]. Returns [...].
    """
    m = solve_lower(chol_p, (mean_q - mean_p)[..., None])[..., 0]
    A = solve_lower(chol_p, chol_q)
    return kl_standard_normal(m, A)


def moment_match(log_Z: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 mean: torch.Tensor, var: torch.Tensor, *, create_graph: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """log Z and its derivatives w.r.t. the cavity mean and variance, by autograd.

    ``log_Z(mean, var)`` must return one value per row of ``mean`` (it is summed before
    differentiation, so rows must not interact).

    Args:
        mean, var: cavity marginals [N, L] (or [N]).
    Returns:
        (log Z [N], ∂log Z/∂mean [N, L], ∂log Z/∂var [N, L]).
    """
    with torch.enable_grad():
        m = mean.detach().requires_grad_(True)
        v = var.detach().requires_grad_(True)
        lz = log_Z(m, v)
        dm, dv = torch.autograd.grad(lz.sum(), (m, v), create_graph=create_graph)
    return (lz if create_graph else lz.detach()), dm, dv


def tilted_moments(mean: torch.Tensor, var: torch.Tensor, dlogZ_dm: torch.Tensor,
                   dlogZ_dv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance of the tilted distribution Z⁻¹ t(f) N(f | m, v) (Seeger 2006).

    μ̂ = m + v ∂log Z/∂m,   v̂ = v − v² [(∂log Z/∂m)² − 2 ∂log Z/∂v]   (scalable-ep App. E).
    Exact per coordinate when the cavity factorises over coordinates.
    """
    new_mean = mean + var * dlogZ_dm
    new_var = var - var ** 2 * (dlogZ_dm ** 2 - 2.0 * dlogZ_dv)
    return new_mean, new_var


class _LogNdtr(torch.autograd.Function):
    """log Φ(z) with its derivative r(z) = φ(z)/Φ(z) = √(2/π) / erfcx(−z/√2).

    EP's tilted variance of a step factor is v − v²/s² · r(r + z) (``tilted_moments``). Far in the tail
    (z → −∞) r(r + z) → 1 and what is left, ≈ 1/z², is all the information: torch's own derivative of
    log_ndtr, exp(log φ − log Φ), carries a relative error of ~z²·1e-16 into r, and so into 1 − r(r + z)
    ~z⁴·1e-16 relative to 1/z²: 2e-5 at z = −100, 3% at −300, the wrong sign at −1000. erfcx is accurate
    to a few ulps everywhere, which leaves the rounding of the bracket itself (terms of size z² that
    cancel to ≈ 1): the tilted variance of a pairwise step factor is then 1.5e-8 off at −100, 3e-6 at
    −300, 1e-4 at −1000 (tests/test_gaussian.py). For z > 38, erfcx(−z/√2) overflows to inf and r = 0,
    as φ(z)/Φ(z) < 1e-300 is.
    """

    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return torch.special.log_ndtr(z)

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return grad * (math.sqrt(2.0 / math.pi) / torch.special.erfcx(-z / math.sqrt(2.0)))


def log_ndtr(z: torch.Tensor) -> torch.Tensor:
    """log Φ(z), element-wise, with a derivative accurate far in the lower tail (`_LogNdtr`);
    differentiable twice (the derivative is built from differentiable operations)."""
    return _LogNdtr.apply(z)


class _SumSq(torch.autograd.Function):
    """Σ x² along one axis, whose backward is one pass, 2g ⊙ x (autograd's record of x ⊙ x and its sum made
    three: g ⊙ x twice and their sum)."""

    @staticmethod
    def forward(ctx, x, dim: int):
        ctx.save_for_backward(x)
        ctx.dim = dim
        return (x * x).sum(dim)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (2.0 * grad).unsqueeze(ctx.dim) * x, None


def sum_sq(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Σ_d x_d² along ``dim`` (the variances vᵀSv = ‖Wᵀv‖² of projections, kᵀK⁻¹k = ‖L⁻¹k‖²): the value of
    ``(x * x).sum(dim)`` bit for bit, with a one-pass backward (``_SumSq``; the autograd form inside
    ``torch.compile``, which fuses it)."""
    if torch.compiler.is_compiling() or not (torch.is_grad_enabled() and x.requires_grad):
        return (x * x).sum(dim)
    return _SumSq.apply(x, dim)


def wide_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype moment matching runs in: float64 unless the device has none (MPS).

    In float32 the tilted variance v − v²[(∂log Z/∂m)² − 2 ∂log Z/∂v] cancels catastrophically
    for a factor far in its tail: for the step factor Φ(z) the bracket is r(r + z) with r ≈ −z,
    and at z = −100 float32 returns a negative variance (float64 is right to 1e-6 there).  The
    per-factor work is O(N·C), small beside the O(M²) matrix work, so it is always done wide.
    """
    return t.dtype if t.device.type == "mps" else torch.float64


def match_moments(log_Z: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                  mean: torch.Tensor, var: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """log Z, tilted mean and tilted variance of Z⁻¹ t(f) N(f | mean, var), computed in ``wide_dtype``.

    ``moment_match`` followed by ``tilted_moments``, on float64 copies of the cavity.  The results
    stay wide so that a caller's site update 1/v̂ − 1/v also runs wide; the caller casts the site
    parameters back to its own dtype.
    """
    wide = wide_dtype(mean)
    mean, var = mean.to(wide), var.to(wide)
    lz, dm, dv = moment_match(log_Z, mean, var)
    new_mean, new_var = tilted_moments(mean, var, dm, dv)
    return lz, new_mean, new_var
