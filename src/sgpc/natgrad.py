"""Natural-gradient steps for the free-Gaussian q(v) of the VI-family methods (Salimbeni et al. 2018).

The whitened q(v) = Π_l N(v_l | m_l, S_l), S_l = L̃_l L̃_lᵀ (``vi.WhitenedGaussian``: mean [L,M], lower
Cholesky factor [L,M,M]) is moved by a natural-gradient step in its natural parameters, from the ordinary
gradients of the objective w.r.t. (m, S) that the fit loop's one backward pass already produces — the pass
that also gives the hyper-parameters their gradients. Every objective over a free Gaussian q works
unchanged — ``vi.elbo`` (with any likelihood: robust-max, the additive-noise and hinge/BSVM bounds),
``vi.alpha_objective``, ``vi.rpapep_objective`` — since they read q only through ``q.mean`` and ``q.chol``.

* ``moment_grads``: (∂F/∂m, ∂F/∂S) from the ``.grad`` of a ``WhitenedGaussian`` after ``backward``.
* ``grad_cov_from_grad_chol``: ∂F/∂S from ∂F/∂L̃ (the Cholesky factor's backward rule).
* ``expectation_grads``: (∂F/∂η₁, ∂F/∂η₂) = the natural gradient in θ.
* ``natural_gradient_step``: θ ← θ + γ ∂F/∂η and back to (m, L̃), refusing any step whose precision is
  not positive definite (γ halved per latent, counted in ``NatGradInfo``).

What this module does not do: hold q, choose γ, step the hyper-parameters, or run the fit loop (the VI
engine's ``update`` calls ``natural_gradient_step``; the hyper-parameters stay on Adam).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .gaussian import solve_lower

__all__ = ["NatGradInfo", "grad_cov_from_grad_chol", "moment_grads", "expectation_grads",
           "natural_gradient_step"]

# ---------------------------------------------------------------------------------------------------------
# Derivation (per latent function l; q factorises over latents, so every block [M] / [M,M] is independent).
#
# Parameters of q(v) = N(m, S), the Gaussian as an exponential family with statistics t(v) = (v, vvᵀ):
#     natural      θ₁ = S⁻¹m,   θ₂ = −½S⁻¹          (precision form of gaussian.py: h = θ₁, Λ = −2θ₂)
#     expectation  η₁ = E[v] = m,   η₂ = E[vvᵀ] = S + mmᵀ,
#     log-partition A(θ) = −¼ θ₁ᵀθ₂⁻¹θ₁ − ½ log|−2θ₂| (+ const),  ∇_θ A = η,  ∇²_θ A = F(θ) (the Fisher).
# Natural gradient in θ (Salimbeni, Eleftheriadis & Hensman 2018, "Natural gradients in practice"): by the chain rule
# ∂F/∂θ = (∂η/∂θ)ᵀ ∂F/∂η = F(θ) ∂F/∂η, so
#     F(θ)⁻¹ ∂F/∂θ = ∂F/∂η                                                                       (1)
# — no Fisher is formed or inverted. (tests/test_natgrad.py checks (1) against the brute-force Fisher.)
#
# ∂F/∂η from the moment gradients. With m = η₁ and S = η₂ − η₁η₁ᵀ, and G_S = ∂F/∂S taken symmetric
# (F depends on S only through symmetric perturbations, so its gradient along them is ½(G + Gᵀ)):
#     dF = ⟨G_m, dη₁⟩ + ⟨G_S, dη₂ − dη₁mᵀ − m dη₁ᵀ⟩   ⇒   ∂F/∂η₁ = G_m − 2G_S m,   ∂F/∂η₂ = G_S.      (2)
#
# G_S from the one backward pass. The objectives see q through (m, L̃); autograd fills ∂F/∂m and
# Ḡ = ∂F/∂L̃. For S = L̃L̃ᵀ, dS = dL̃ L̃ᵀ + L̃ dL̃ᵀ gives dL̃ = L̃ Φ(L̃⁻¹ dS L̃⁻ᵀ) with Φ(X) = the lower
# triangle of X with its diagonal halved, and so (Murray 2016, "Differentiation of the Cholesky
# decomposition", the reverse-mode rule)
#     G_S = L̃⁻ᵀ sym(Φ(L̃ᵀḠ)) L̃⁻¹,   sym(X) = ½(X + Xᵀ).                                           (3)
# Reading the gradient off L̃ (the leaf the objectives already differentiate to) rather than feeding
# them chol(S) of a leaf S spares a factorisation in every forward pass and leaves the objectives, the
# q module and the loss untouched; the two give the same G_S (tested against torch's Cholesky backward).
#
# The step (θ ← θ + γ ∂F/∂η; γ = 1 in a conjugate model is one exact step to the optimum, since the
# expected log-likelihood is linear in η and ∂KL/∂η = θ − θ_prior; Hensman, Fusi & Lawrence 2013, "Gaussian
# processes for big data", whose SVI step this is):
#     Λ' = Λ − 2γ G_S,     h' = h + γ (G_m − 2 G_S m),      Λ = S⁻¹ = L̃⁻ᵀL̃⁻¹,  h = S⁻¹m.           (4)
# Back to moments without inverting Λ' and refactorising: with P the order-reversing permutation and
# PΛ'P = RRᵀ (lower R), Λ' = (PRP)(PRP)ᵀ with PRP upper triangular, so
#     S' = Λ'⁻¹ = (P R⁻ᵀ P)(P R⁻ᵀ P)ᵀ,   L̃' = P R⁻ᵀ P  (lower, positive diagonal),   m' = L̃'L̃'ᵀ h'.  (5)
# One Cholesky and one triangular inverse per latent. If Λ' is not positive definite (or any result
# is not finite) the step is refused for that latent: γ is halved and (4)–(5) retried; for a positive
# definite Λ and finite gradients a small enough γ always succeeds (Λ − 2γG_S → Λ). After
# ``max_halvings`` failures, or with non-finite gradients, that latent keeps its q (γ = 0) — never NaN.
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NatGradInfo:
    """What a natural-gradient step did, per latent function.

    Attributes:
        lr: [L] the step size used (the requested γ, halved ``halvings`` times; 0 where refused).
        halvings: [L] int64, how many times γ was halved because the precision was not positive definite.
        refused: [L] bool, the latent kept its q (non-finite gradients, or no γ within ``max_halvings``).
    """

    lr: torch.Tensor
    halvings: torch.Tensor
    refused: torch.Tensor

    @property
    def n_halved(self) -> int:
        """Latents whose γ was halved at least once (refused ones included)."""
        return int((self.halvings > 0).sum())

    @property
    def n_refused(self) -> int:
        """Latents that kept their q."""
        return int(self.refused.sum())


def _sym(A: torch.Tensor) -> torch.Tensor:
    """½(A + Aᵀ) over the last two axes."""
    return 0.5 * (A + A.mT)


def grad_cov_from_grad_chol(chol: torch.Tensor, grad_chol: torch.Tensor) -> torch.Tensor:
    """∂F/∂S (symmetric) from ∂F/∂L̃ for S = L̃L̃ᵀ: eq. (3), G_S = L̃⁻ᵀ sym(Φ(L̃ᵀḠ)) L̃⁻¹.

    Φ keeps the lower triangle and halves the diagonal; only the lower triangle of Ḡ matters.

    Args:
        chol: [...,M,M] lower Cholesky factor with positive diagonal; grad_chol: [...,M,M].
    Returns:
        [...,M,M] symmetric. Reference: Murray (2016), Differentiation of the Cholesky decomposition.
    """
    A = chol.mT @ torch.tril(grad_chol)
    Phi = torch.tril(A) - 0.5 * torch.diag_embed(A.diagonal(dim1=-2, dim2=-1))
    Y = torch.linalg.solve_triangular(chol.mT, _sym(Phi), upper=True)               # L̃⁻ᵀ sym(Φ)
    return _sym(torch.linalg.solve_triangular(chol.mT, Y.mT, upper=True).mT)        # (L̃⁻ᵀYᵀ)ᵀ = Y L̃⁻¹


def moment_grads(q, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(∂F/∂m [L,M], ∂F/∂S [L,M,M]) of a ``vi.WhitenedGaussian`` q from the ``.grad`` of its parameters.

    Call after the backward pass of a loss ℓ with F = scale·ℓ (the fit loop minimises ℓ = −F/N, so
    scale = −N; scale = 1 when F itself was backpropagated). ``q.chol`` is tril(raw_chol) with its
    columns' signs flipped to a positive diagonal, so ∂F/∂L̃ = scale · raw_chol.grad · sign (per column).
    A parameter without a gradient (not reached by the objective) counts as zero.
    """
    raw = q.raw_chol
    sign = torch.where(torch.tril(raw).diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0).to(raw.dtype)
    g_mean = torch.zeros_like(q.mean) if q.mean.grad is None else q.mean.grad
    g_raw = torch.zeros_like(raw) if raw.grad is None else raw.grad
    with torch.no_grad():
        grad_chol = scale * torch.tril(g_raw) * sign[..., None, :]
        return scale * g_mean.detach(), grad_cov_from_grad_chol(q.chol.detach(), grad_chol)


def expectation_grads(mean: torch.Tensor, grad_mean: torch.Tensor, grad_cov: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """The natural gradient in θ, ∂F/∂η (eqs. 1–2): ∂F/∂η₁ = G_m − 2 G_S m, ∂F/∂η₂ = G_S (symmetrised).

    Args:
        mean [...,M], grad_mean = ∂F/∂m [...,M], grad_cov = ∂F/∂S [...,M,M].
    Returns:
        (∂F/∂η₁ [...,M], ∂F/∂η₂ [...,M,M]).
    """
    g2 = _sym(grad_cov)
    return grad_mean - 2.0 * (g2 @ mean[..., None])[..., 0], g2


def _moments_from_precision(h: torch.Tensor, Lam: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. (5): (m = Λ⁻¹h [L,M], lower factor of Λ⁻¹ [L,M,M], ok [L]) with ok false where Λ is not PD."""
    R, info = torch.linalg.cholesky_ex(torch.flip(_sym(Lam), (-2, -1)))
    eye = torch.eye(Lam.shape[-1], dtype=Lam.dtype, device=Lam.device)
    chol = torch.flip(solve_lower(R, eye.expand_as(R)).mT, (-2, -1))                # P R⁻ᵀ P
    mean = (chol @ (chol.mT @ h[..., None]))[..., 0]
    ok = (info == 0) & torch.isfinite(chol).all((-1, -2)) & torch.isfinite(mean).all(-1)
    return mean, chol, ok


def natural_gradient_step(mean: torch.Tensor, chol: torch.Tensor, grad_mean: torch.Tensor,
                          grad_cov: torch.Tensor, lr: float, *, per_latent: bool = True,
                          max_halvings: int = 20) -> tuple[torch.Tensor, torch.Tensor, NatGradInfo]:
    """One natural-gradient ascent step on F for q = Π_l N(m_l, L̃_l L̃_lᵀ): θ ← θ + γ ∂F/∂η (eqs. 4–5).

    Λ' = Λ − 2γ G_S, h' = h + γ(G_m − 2G_S m), then m' = Λ'⁻¹h' and L̃' = chol(Λ'⁻¹). A latent whose Λ' is
    not positive definite has its γ halved and the step retried (``per_latent=True``: each latent on its
    own, the blocks being independent; ``per_latent=False``: one γ for all, halved when any latent fails,
    so the step stays along the joint natural gradient). With non-finite gradients, or no γ found within
    ``max_halvings``, the latent keeps (m, L̃) unchanged. Everything is reported in the ``NatGradInfo``;
    the caller records it. The arithmetic runs in the inputs' dtype and device.

    Args:
        mean [L,M], chol [L,M,M] (lower, positive diagonal): the current whitened q.
        grad_mean [L,M], grad_cov [L,M,M]: ∂F/∂m and ∂F/∂S of the objective F to *maximise*
            (``moment_grads``), at the full objective's scale (γ = 1 is the conjugate-case optimum only
            when F is the whole objective, e.g. (N/|B|)·Σ_B E[log p] − KL, not F/N).
        lr: γ > 0; 1 for a conjugate model, well below 1 for non-conjugate likelihoods and minibatches
            (Salimbeni et al. 2018 increase it gradually from a small value).
    Returns:
        (mean [L,M], chol [L,M,M], info).
    """
    if not lr > 0.0:
        raise ValueError(f"the natural-gradient step size must be positive, got {lr}")
    if max_halvings < 0:
        raise ValueError(f"max_halvings must be >= 0, got {max_halvings}")
    n_latent, M = mean.shape
    g1, g2 = expectation_grads(mean, grad_mean, grad_cov)
    eye = torch.eye(M, dtype=chol.dtype, device=chol.device)
    Linv = solve_lower(chol, eye.expand_as(chol))                                       # L̃⁻¹
    Lam = Linv.mT @ Linv                                                                 # Λ = S⁻¹
    h = (Linv.mT @ (Linv @ mean[..., None]))[..., 0]                                     # h = S⁻¹m
    finite = torch.isfinite(g1).all(-1) & torch.isfinite(g2).all((-1, -2))
    if not per_latent:
        finite = finite.all().expand(n_latent)
    g1 = torch.where(finite[:, None], g1, 0.0)
    g2 = torch.where(finite[:, None, None], g2, 0.0)
    gamma = torch.where(finite, float(lr), 0.0).to(mean.dtype)
    halvings = torch.zeros(n_latent, dtype=torch.long, device=mean.device)
    new_mean, new_chol = mean.clone(), chol.clone()
    pending = finite.clone()                       # latents still looking for an acceptable γ
    for attempt in range(max_halvings + 1):
        m_try, L_try, ok = _moments_from_precision(h + gamma[:, None] * g1, Lam - 2.0 * gamma[:, None, None] * g2)
        if not per_latent:
            ok = ok.all().expand(n_latent)
        accept = pending & ok
        new_mean = torch.where(accept[:, None], m_try, new_mean)
        new_chol = torch.where(accept[:, None, None], L_try, new_chol)
        pending = pending & ~ok
        if not bool(pending.any()):
            break
        if attempt < max_halvings:
            gamma = torch.where(pending, 0.5 * gamma, gamma)
            halvings = halvings + pending.long()
    refused = pending | ~finite
    gamma = torch.where(refused, 0.0, gamma)
    return new_mean, new_chol, NatGradInfo(lr=gamma, halvings=halvings, refused=refused)
