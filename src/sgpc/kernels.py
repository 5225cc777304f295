"""Covariance functions for the L latent GPs.

Every kernel maps inputs to a stack of L covariance matrices, one per latent function:
``forward(X1 [N,D] or [L,N,D], X2 [M,D] or [L,M,D]) -> [L,N,M]`` and ``diag(X) -> [L,N]``.
Hyper-parameters are stored raw and mapped through softplus plus a floor; their leading axis is
the latent axis, of size L (independent hyper-parameters per latent function, the papers'
default) or 1 (shared, broadcast to L).

The papers' covariance (scalable-ep §4, alpha §5) is an ARD kernel with an amplitude and an
additive latent-noise term: k(x, x') = σ² r(x, x') + σ_n² [x = x'].  The white-noise term
contaminates each f^k(x_i) with independent Gaussian noise (scalable-ep §2.1), so it appears in
``diag`` (the prior variance of f at a training point) and never in the cross-covariances of
``forward``, where X1 and X2 are treated as distinct points.

What this module does not do: sums of kernels beyond the two-term ``Sum``, priors on
hyper-parameters, or structured (Kronecker/grid) algebra.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn.functional import softplus

from .gaussian import wide_dtype

__all__ = ["Kernel", "RBF", "Matern", "Linear", "Sum", "positive", "inverse_positive"]

_FLOOR = 1e-6
LENGTHSCALE_FLOOR = _FLOOR        # the smallest length-scale (and every positive hyper-parameter)


def positive(raw: torch.Tensor, floor: float = _FLOOR) -> torch.Tensor:
    """softplus(raw) + floor: the constrained value of a positive hyper-parameter."""
    return softplus(raw) + floor


def inverse_positive(value: torch.Tensor, floor: float = _FLOOR) -> torch.Tensor:
    """Raw value whose ``positive`` is ``value`` (the inverse of softplus + floor)."""
    v = torch.as_tensor(value - floor).clamp_min(1e-12)
    return v + torch.log(-torch.expm1(-v))


# K(X, X) of at most this many elements·D is computed from exact differences (``_direct_sqdist``), larger
# ones by the expansion ‖x‖² + ‖x'‖² − 2x·x' (one matrix product)
_DIRECT_ELEMENTS = 1 << 22


def _scaled_sqnorm(X: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Σ_d w_d x_d² for X [N,D] or [L,N,D] and w [S,D] (ARD) or [S,1]: [S,N] or [L,N]."""
    XX = X * X
    if w.shape[-1] != X.shape[-1]:                                                  # one length-scale
        return XX.sum(-1) * w
    if X.ndim == 2:
        return (XX @ w.transpose(0, 1)).transpose(0, 1)
    return (XX @ w[:, :, None])[..., 0]


class _CentredSqDist(torch.autograd.Function):
    """Σ_d w_d (a_d − b_d)² of centred inputs A [N,D] or [L,N,D], B [M,D] or [L,M,D], with w [S,D] or
    [S,1]: [S or L, N, M], by the expansion n_A + n_B − 2 (A ⊙ w) Bᵀ, its backward written out.

    Autograd's record of that expression (scale, square, sum, and each one's adjoint) made some 25 passes
    over a per-latent Z [L,M,D] per step: 30% of an MNIST VI step was element-wise multiplies of that
    shape (torch.profiler by input shape). The forward here makes 3 passes over A ⊙ w, and the backward
    5, from (G = ∂/∂d², r = G1, s = Gᵀ1, T = GB − r ⊙ A):
        ∂/∂A = −2 w ⊙ T,   ∂/∂B = −2 w ⊙ (GᵀA − s ⊙ B),   ∂/∂w = Σ_m s_m b_m² − Σ_n a_n ⊙ (T + GB)_n.
    When A is B (``same``), G + Gᵀ replaces G in T, ∂/∂A takes both arguments' share and ∂/∂w = −Σ_n a_n ⊙ T_n.
    """

    @staticmethod
    def forward(ctx, A, B, w, same: bool):
        Aw = A * w[:, None, :]
        nA = (Aw * A).sum(-1)                                                       # [S,N]
        nB = nA if same else _scaled_sqnorm(B, w)                                   # [S,M]
        d2 = (Aw @ B.transpose(-1, -2)).mul_(-2.0)
        d2.add_(nA[..., :, None]).add_(nB[..., None, :])
        ctx.same = same
        ctx.save_for_backward(A, B, w)
        return d2

    @staticmethod
    @once_differentiable
    def backward(ctx, G):
        A, B, w = ctx.saved_tensors
        w3 = w[:, None, :]
        if ctx.same:
            G = G + G.transpose(-1, -2)
        GB = G @ B                                                                  # [S,N,D]
        T = torch.addcmul(GB, A, G.sum(-1, keepdim=True), value=-1.0)               # GB − r ⊙ A
        dA = dB = dw = None
        if ctx.needs_input_grad[0]:
            dA = (T * (-2.0 * w3)).sum_to_size(A.shape)
        if not ctx.same and ctx.needs_input_grad[1]:
            s = G.sum(-2)[..., :, None]                                             # [S,M,1]
            U = torch.addcmul(G.transpose(-1, -2) @ A, B, s, value=-1.0)            # GᵀA − s ⊙ B
            dB = (U * (-2.0 * w3)).sum_to_size(B.shape)
        if ctx.needs_input_grad[2]:
            if ctx.same:
                dw = -(A * T).sum(-2)
            else:
                bb = torch.matmul(G.sum(-2)[..., None, :], B * B)[..., 0, :]         # Σ_m s_m b_m²
                dw = bb - (A * (T + GB)).sum(-2)
            dw = dw.sum_to_size(w.shape)
        return dA, dB, dw, None


class Kernel(nn.Module):
    """Base class: amplitude σ², optional white-noise σ_n² and ARD length-scales ℓ per latent GP.

    A new kernel overrides one method, ``correlation(X1, X2) -> [L,N,M]``, built from the scaled
    distances/inner products the base provides (equal to 1 at zero distance for stationary kernels).

    Args:
        input_dim: D.
        n_latent: L, number of latent functions.
        shared: one set of hyper-parameters for all latent functions (else one per latent).
        lengthscale: initial ℓ (scalar or [D]); default √D, the usual scale for standardised inputs.
        variance: initial amplitude σ².
        noise: initial latent-noise variance σ_n²; ``None`` removes the term.
        ard: one length-scale per input dimension (else one per latent function).
    """

    def __init__(self, input_dim: int, n_latent: int = 1, *, shared: bool = False,
                 lengthscale=None, variance: float = 1.0, noise: float | None = None,
                 ard: bool = True, dtype=torch.float64):
        super().__init__()
        if input_dim < 1 or n_latent < 1:
            raise ValueError(f"input_dim and n_latent must be >= 1, got {input_dim}, {n_latent}")
        self.input_dim = int(input_dim)
        self.n_latent = int(n_latent)
        self.shared = bool(shared)
        n_sets = 1 if shared else self.n_latent
        n_ls = self.input_dim if ard else 1
        if lengthscale is None:
            lengthscale = math.sqrt(self.input_dim)
        ls = torch.as_tensor(lengthscale, dtype=dtype)
        ls = ls.expand(n_ls) if ls.ndim == 0 else ls.reshape(n_ls)
        self.raw_lengthscale = nn.Parameter(inverse_positive(ls).repeat(n_sets, 1).clone())
        self.raw_variance = nn.Parameter(inverse_positive(torch.full((n_sets,), float(variance), dtype=dtype)))
        self.raw_noise = None if noise is None else nn.Parameter(
            inverse_positive(torch.full((n_sets,), float(noise), dtype=dtype)))

    # -- constrained hyper-parameters, latent axis first ------------------------------------
    def _expand(self, value: torch.Tensor) -> torch.Tensor:
        return value.expand(self.n_latent, *value.shape[1:])

    @property
    def lengthscale(self) -> torch.Tensor:
        """ℓ, [L, D] (or [L, 1] when not ARD)."""
        return self._expand(positive(self.raw_lengthscale))

    @property
    def variance(self) -> torch.Tensor:
        """Amplitude σ², [L]."""
        return self._expand(positive(self.raw_variance))

    @property
    def noise(self) -> torch.Tensor:
        """Latent-noise variance σ_n², [L] (zeros when the kernel has no noise term)."""
        if self.raw_noise is None:
            return torch.zeros(self.n_latent, dtype=self.raw_variance.dtype, device=self.raw_variance.device)
        return self._expand(positive(self.raw_noise))

    # -- the interface ------------------------------------------------------------------------
    def _check(self, X: torch.Tensor) -> None:
        if X.ndim not in (2, 3) or X.shape[-1] != self.input_dim:
            raise ValueError(f"expected inputs of shape [N,{self.input_dim}] or [L,N,{self.input_dim}], "
                             f"got {tuple(X.shape)}")

    # Internally the hyper-parameters keep their stored axis of S = 1 (shared) or L sets: a shared
    # kernel on [N,D] inputs is evaluated once and broadcast to L by ``forward``/``diag`` (a view).
    def _inv_sq_lengthscale(self) -> torch.Tensor:
        return positive(self.raw_lengthscale) ** -2                                 # [S,D]

    def scaled_inner(self, X1: torch.Tensor, X2: torch.Tensor) -> torch.Tensor:
        """Σ_d x_d x'_d / ℓ_d², [S,N,M] (S = 1 for a shared kernel on [N,D] inputs, else L); the
        ℓ-scaling is applied to X1, the model's side (the inducing inputs), unless only X2 has a latent
        axis — a rule of the shapes' ranks alone, so a query row's value never depends on how many rows
        come with it."""
        self._check(X1)
        self._check(X2)
        w = self._inv_sq_lengthscale().to(X1.dtype)                                 # [S,D]
        if X1.ndim == 3 or X2.ndim == 2:
            return (X1 * w[:, None, :]) @ X2.transpose(-1, -2)
        return X1 @ (X2 * w[:, None, :]).transpose(-1, -2)

    def scaled_sqnorm(self, X: torch.Tensor) -> torch.Tensor:
        """Σ_d x_d² / ℓ_d², [S,N]."""
        self._check(X)
        return _scaled_sqnorm(X, self._inv_sq_lengthscale().to(X.dtype))

    def scaled_sqdist(self, X1: torch.Tensor, X2: torch.Tensor) -> torch.Tensor:
        """Σ_d (x_d − x'_d)² / ℓ_d², [S,N,M], clamped at 0 (the expansion can round below).

        X1 is the model's side (the inducing inputs Z, or training inputs) and X2 the query rows: each column
        of the result is a function of its own row of X2 and of X1 only, whatever other rows X2 holds.

        By the expansion ‖x‖² + ‖x'‖² − 2x·x' (one matrix product, ``_CentredSqDist``), which cancels where
        x ≈ x' relative to ‖x‖/ℓ. So both sides are first centred on the mean of X1 (exact for a distance;
        it removes a common offset: in float32, inputs offset by 1000 gave RBF values off by 0.63) — X1's,
        not X2's, so that one far query row cannot move the centre of the others. A float32 model expands
        in float64 the columns whose rounding would be too large (``_wide_columns``: at coincident points
        float32 left d² ≈ 1e-7·‖x‖²/ℓ², which Matérn-½ turns into a kernel off by 0.022 at ℓ = 0.1); the
        result is cast back (docs/design-notes.md, "Kernels"). A query row too large for the dtype's
        squared norm gets d² = inf (its kernel values 0), or NaN where even the product overflows.
        """
        self._check(X1)
        self._check(X2)
        if X1 is X2 and X1.shape[-2] ** 2 * X1.shape[-1] <= _DIRECT_ELEMENTS and self._expansion_rounds(X1):
            return self._direct_sqdist(X1)
        dtype, wide = X1.dtype, wide_dtype(X1)
        same = X1 is X2
        if X1.ndim == 3 and X2.ndim == 2:
            # per-latent inducing inputs against query rows: one centre for all latent functions, so the rows are
            # centred once ([N,D]); a centre per latent made an [L,N,D] copy of them, and of their squares
            centre = X1.detach().reshape(-1, X1.shape[-1]).mean(0, keepdim=True)
        else:
            centre = X1.detach().mean(-2, keepdim=True)
        A = X1 - centre
        B = A if same else X2 - centre
        w = self._inv_sq_lengthscale().to(dtype)                                    # [S,D] or [S,1]
        if wide == dtype:
            d2 = self._expanded(A, B, w, same)
        else:
            with torch.no_grad():
                n1 = _scaled_sqnorm(A, w)
                n2 = n1 if same else _scaled_sqnorm(B, w)
            cols = self._wide_columns(n1, n2, same)
            if cols is None:
                d2 = self._expanded(A, B, w, same)
            elif cols is True:
                Aw = A.to(wide)
                d2 = self._expanded(Aw, Aw if same else B.to(wide), w.to(wide), same).to(dtype)
            else:       # some query rows widen, the rest stay narrow: each column as if it were alone
                # every column narrow, then the widened ones replaced: the narrow products keep the batch's shape, so
                # a column does not depend on which others widen (products over the narrow columns alone changed
                # one in its last bit: a matrix product's kernels depend on its sizes)
                widened = torch.nonzero(cols).flatten()
                wide_part = self._expanded(A.to(wide), B.index_select(-2, widened).to(wide), w.to(wide), False)
                d2 = self._expanded(A, B, w, False).index_copy(-1, widened, wide_part.to(dtype))
        if same:
            # k(X, X): the diagonal is exactly 0. The expansion leaves ~1e-16·|x|² there, and a kernel of
            # r = √d² (Matérn ½: 1 − 3e-8 instead of 1) turns that rounding into a visible error that
            # depends on the BLAS build
            eye = torch.eye(d2.shape[-1], dtype=torch.bool, device=d2.device)
            d2 = d2.masked_fill(eye, 0.0)
        return d2.clamp_min(0.0)

    @staticmethod
    def _expanded(A: torch.Tensor, B: torch.Tensor, w: torch.Tensor, same: bool) -> torch.Tensor:
        """n_A + n_B − 2 (A ⊙ w) Bᵀ of centred inputs (``_CentredSqDist``; plain autograd inside torch.compile)."""
        if torch.compiler.is_compiling():       # the compiler fuses autograd's element-wise work itself
            return (_scaled_sqnorm(A, w)[..., :, None] + _scaled_sqnorm(B, w)[..., None, :]
                    - 2.0 * (A * w[:, None, :]) @ B.transpose(-1, -2))
        return _CentredSqDist.apply(A, B, w, same)

    # Rounding of d² a narrow (float32) expansion may leave: eps·(max ‖x − x̄‖² + max ‖x' − x̄‖²)/ℓ².
    # An error δ in d² moves a kernel smooth in d² (RBF, Matérn 3/2, 5/2) by ≈ δ/2 of its value, so
    # 2e-6 keeps it a tenth of float32's base jitter (1e-5); Matérn-½ (k ≈ 1 − √d²) sets 1e-12.
    _d2_tolerance = 2e-6

    def _wide_columns(self, n1: torch.Tensor, n2: torch.Tensor, same: bool):
        """Which query columns of a narrow-dtype expansion, with scaled squared norms ``n1`` [S,N] (the model's
        side) and ``n2`` [S,M] (the query rows), must be expanded in ``wide_dtype`` to keep d²'s rounding,
        eps·(max n1 + n2_m), below ``_d2_tolerance``: None (no column), True (all, or ``same``: K(X, X) is
        decided as a whole) or a bool mask [M]. Decided per column, so that whether one query row widens
        never depends on the others. Widening always doubled the cost of a float32 kernel at MNIST scale
        (docs/design-notes.md, "Kernels"). Inside torch.compile (no host sync) always True."""
        if torch.compiler.is_compiling():
            return True
        if n1.numel() == 0 or n2.numel() == 0:
            return None                                                    # no distances to round
        eps = torch.finfo(n1.dtype).eps
        reach = n1.detach().amax() + n2.detach().amax(0)                   # [M]
        cols = ~(reach * eps <= self._d2_tolerance)                        # NaN/inf: widen
        if same:
            return True if bool(cols.any()) else None
        n_wide = int(cols.sum())                                           # one host sync
        return None if n_wide == 0 else True if n_wide == cols.numel() else cols

    def _expansion_rounds(self, X: torch.Tensor) -> bool:
        """Whether the expansion's rounding, eps·max ‖x − x̄‖²/ℓ² (float64 at the least), exceeds 1e-12 of the
        kernel's scale: then ``_direct_sqdist`` is worth its cost (taken always, it made a satimage VI step
        at M = 100, D = 36 take 8.2–8.7 ms instead of 6.1–6.4; docs/design-notes.md). Inside
        torch.compile (no host sync) always False."""
        if torch.compiler.is_compiling():
            return False
        with torch.no_grad():
            Xc = X - X.mean(-2, keepdim=True)
            w = self._inv_sq_lengthscale().to(X.dtype)
            reach = float(((Xc * Xc).amax(-2) * w).sum(-1).max())       # ≥ max_i ‖x_i − x̄‖²/ℓ²
        return reach * torch.finfo(torch.float64).eps > 1e-12

    def _direct_sqdist(self, X: torch.Tensor) -> torch.Tensor:
        """Σ_d (x_d − x'_d)² / ℓ_d² of X with itself, [S,N,N], from the differences themselves.

        For K_uu (small M): the expansion's rounding, ~eps·‖x‖²/ℓ², made K_uu of an RMGPC fit on
        standardised iris (length-scales down to 6e-5) indefinite, with an eigenvalue of −5.6e-8 of its mean
        diagonal; differences are exact at coincident points and accurate near them.
        """
        self._check(X)
        w = self._inv_sq_lengthscale().to(X.dtype)                                  # [S,D]
        diff = X[..., :, None, :] - X[..., None, :, :]                              # [N,N,D] or [L,N,N,D]
        if X.ndim == 2 and w.shape[-1] == X.shape[-1]:                              # ARD: one product
            return ((diff * diff) @ w.transpose(0, 1)).permute(2, 0, 1)
        return ((diff * diff) * w[:, None, None, :]).sum(-1)      # [L,N,N,D], or one length-scale (w [S,1])

    def correlation(self, X1: torch.Tensor, X2: torch.Tensor) -> torch.Tensor:
        """r(x, x'): [N,D] or [L,N,D], [M,D] or [L,M,D] -> [S,N,M] (S = 1 or L, broadcast by ``forward``).
        The one method a kernel overrides, built from ``scaled_sqdist``/``scaled_inner``."""
        raise NotImplementedError

    def correlation_diag(self, X: torch.Tensor) -> torch.Tensor:
        """r(x, x) -> [1,N] (broadcast to L); 1 for stationary kernels."""
        self._check(X)
        return torch.ones(1, X.shape[-2], dtype=X.dtype, device=X.device)

    def forward(self, X1: torch.Tensor, X2: torch.Tensor) -> torch.Tensor:
        """Cross-covariance σ² r(X1, X2): [L,N,M] (no white-noise term). For a shared kernel on [N,D]
        inputs it is computed once and returned as a broadcast view: do not write into it."""
        K = positive(self.raw_variance)[:, None, None] * self.correlation(X1, X2)
        return K.expand(self.n_latent, *K.shape[1:])

    def diag(self, X: torch.Tensor) -> torch.Tensor:
        """Prior variance k(x, x) + σ_n² at each input: [L,N] (a broadcast view for a shared kernel)."""
        d = positive(self.raw_variance)[:, None] * self.correlation_diag(X)
        if self.raw_noise is not None:
            d = d + positive(self.raw_noise)[:, None]
        return d.expand(self.n_latent, d.shape[-1])


class RBF(Kernel):
    """Squared exponential: r = exp(−½ Σ_d (x_d − x'_d)² / ℓ_d²)."""

    def correlation(self, X1, X2):
        return torch.exp(-0.5 * self.scaled_sqdist(X1, X2))


class Matern(Kernel):
    """Matérn with smoothness ν ∈ {1/2, 3/2, 5/2} (Rasmussen & Williams eq. 4.17)."""

    def __init__(self, input_dim: int, n_latent: int = 1, *, nu: float = 2.5, **kwargs):
        if nu not in (0.5, 1.5, 2.5):
            raise ValueError(f"nu must be one of 0.5, 1.5, 2.5, got {nu}")
        super().__init__(input_dim, n_latent, **kwargs)
        self.nu = float(nu)
        if self.nu == 0.5:
            self._d2_tolerance = 1e-12        # k ≈ 1 − √d² near 0: a rounding δ moves k by √δ

    def correlation(self, X1, X2):
        # sqrt has an infinite derivative at 0; the clamp keeps gradients finite on the diagonal
        # and the upper one keeps (1 + s + s²/3)·e^(−s) at 0, not inf·0, for a far row (e^(−1000) is 0 in any dtype)
        r = torch.sqrt(self.scaled_sqdist(X1, X2).clamp(1e-30, 1e6))
        if self.nu == 0.5:
            return torch.exp(-r)
        if self.nu == 1.5:
            s = math.sqrt(3.0) * r
            return (1.0 + s) * torch.exp(-s)
        s = math.sqrt(5.0) * r
        return (1.0 + s + s * s / 3.0) * torch.exp(-s)


class Linear(Kernel):
    """Linear (dot-product) kernel with ARD weights: k = σ² Σ_d x_d x'_d / ℓ_d²."""

    def correlation(self, X1, X2):
        return self.scaled_inner(X1, X2)

    def correlation_diag(self, X):
        return self.scaled_sqnorm(X)


class Sum(nn.Module):
    """Sum of two kernels over the same inputs (e.g. Matérn-5/2 + RBF, additive-noise paper Table V)."""

    def __init__(self, first: Kernel, second: Kernel):
        super().__init__()
        if (first.input_dim, first.n_latent) != (second.input_dim, second.n_latent):
            raise ValueError("summed kernels must share input_dim and n_latent")
        self.first, self.second = first, second
        self.input_dim, self.n_latent = first.input_dim, first.n_latent

    @property
    def noise(self) -> torch.Tensor:
        """Total latent-noise variance, [L]."""
        return self.first.noise + self.second.noise

    @property
    def lengthscale(self) -> torch.Tensor:
        """The smaller of the two terms' length-scales, element-wise: the finest scale the sum resolves each
        input at, [L,D] (or [L,1] when neither term is ARD)."""
        return torch.minimum(self.first.lengthscale, self.second.lengthscale)

    def forward(self, X1, X2):
        """[L,N,M]."""
        return self.first(X1, X2) + self.second(X1, X2)

    def diag(self, X):
        """[L,N]."""
        return self.first.diag(X) + self.second.diag(X)
