"""The sparse GP model and the Gaussian over inducing values that every engine produces.

* ``SparseGP``: kernel + likelihood + inducing inputs Z ([M,D] shared by the latent functions or
  [L,M,D] one set per latent function), learnable or fixed.
* ``InducingPosterior``: q(u) = Π_l N(u_l | mean_l, chol_l chol_lᵀ) (frozen).
* ``marginals``: q(f_i) = ∫ p(f_i | u) q(u) du for each input (scalable-ep eqs. 16–17, 66–67):
      m_i = k_iᵀ K⁻¹ m,   v_i = k_ii + σ_n² − k_iᵀ K⁻¹ k_i + k_iᵀ K⁻¹ S K⁻¹ k_i,
  computed after whitening with the Cholesky factor of K = K_uu (A = L_K⁻¹ K_uf):
      m_i = a_iᵀ m̃,   v_i = k_ii + σ_n² − ‖a_i‖² + ‖L̃ᵀ a_i‖²,  m̃ = L_K⁻¹ m, L̃ = L_K⁻¹ chol.
* ``prior_kl``: KL(q(u) ‖ p(u)), ``predict_log_proba``: batched predictive class probabilities.

How q(u) is parameterised (free, sites, tied factor) is the engines' business, not this module's.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .gaussian import cholesky, kl_standard_normal, solve_lower, sum_sq

__all__ = ["SparseGP", "InducingPosterior", "init_inducing", "marginals", "whitened_marginals",
           "prior_kl", "predict", "predict_log_proba", "evaluating"]


@dataclass(frozen=True)
class InducingPosterior:
    """q(u): mean [L,M] and lower Cholesky factor of the covariance [L,M,M]."""

    mean: torch.Tensor
    chol: torch.Tensor

    @property
    def cov(self) -> torch.Tensor:
        """Covariance S = chol cholᵀ, [L,M,M]."""
        return self.chol @ self.chol.transpose(-1, -2)


# k-means runs on a uniform sample of at most KMEANS_ROWS rows and KMEANS_ELEMENTS rows × features (and at least
# KMEANS_MIN_ROWS_PER_CENTRE rows per centre): a Lloyd iteration costs rows · M · D, and on MNIST (D = 784, M = 100)
# 20 000 rows took 6.4 s against 0.9 s for 5 000, a tenth of the default fit (docs/design-notes.md, "A minibatch
# step at MNIST's width")
KMEANS_ROWS = 20000
KMEANS_ELEMENTS = 4_000_000
KMEANS_MIN_ROWS_PER_CENTRE = 10


def kmeans_rows(n_rows: int, n_features: int, n_inducing: int) -> int:
    """How many rows the k-means initialisation clusters: at most ``KMEANS_ROWS`` and ``KMEANS_ELEMENTS`` / D,
    at least ``KMEANS_MIN_ROWS_PER_CENTRE`` · M, never more than there are."""
    cap = min(KMEANS_ROWS, KMEANS_ELEMENTS // max(n_features, 1))
    return min(n_rows, max(cap, KMEANS_MIN_ROWS_PER_CENTRE * n_inducing))


def init_inducing(X: np.ndarray | torch.Tensor, n_inducing: int, method: str = "kmeans",
                  seed: int = 0, sample_weight: np.ndarray | None = None) -> np.ndarray:
    """Initial inducing inputs [M,D]: k-means centres (scikit-learn; on ``kmeans_rows`` rows drawn uniformly) or
    a random subset of X's rows.

    Args:
        X: [N,D] training inputs; n_inducing: M ≤ N; method: "kmeans" or "random"; seed: integer seed;
        sample_weight: the rows' weights [N] (positive; None: 1 each): weighted k-means, or rows drawn with
            probabilities proportional to them.
    """
    X = np.asarray(X.detach().cpu() if isinstance(X, torch.Tensor) else X, dtype=np.float64)
    if not 1 <= n_inducing <= len(X):
        raise ValueError(f"n_inducing must be between 1 and the number of rows ({len(X)}), got {n_inducing}")
    rng = np.random.default_rng(seed)
    p = None if sample_weight is None else sample_weight / sample_weight.sum()
    if method == "random":
        return X[rng.choice(len(X), n_inducing, replace=False, p=p)].copy()
    if method == "kmeans":
        from sklearn.cluster import KMeans
        from sklearn.exceptions import ConvergenceWarning
        import warnings
        n_rows = kmeans_rows(len(X), X.shape[1], n_inducing)
        rows = slice(None) if n_rows == len(X) else rng.choice(len(X), n_rows, replace=False)
        with warnings.catch_warnings():
            # duplicated rows can leave fewer distinct clusters than M; the centres are still valid
            warnings.simplefilter("ignore", ConvergenceWarning)
            km = KMeans(n_clusters=n_inducing, n_init=1, random_state=seed, max_iter=100).fit(
                X[rows], sample_weight=None if sample_weight is None else sample_weight[rows])
        return km.cluster_centers_.copy()
    raise ValueError(f"unknown inducing initialisation {method!r}; valid: 'kmeans', 'random'")


class SparseGP(nn.Module):
    """Kernel, likelihood and inducing inputs.

    Args:
        kernel: a ``kernels.Kernel`` with n_latent = L.
        likelihood: a ``likelihoods.Likelihood`` with the same L.
        inducing_inputs: [M,D] (shared by the latent functions) or [L,M,D] (one set per latent).
        learn_inducing: optimise Z with the other hyper-parameters.
        feature_extractor: optional ``nn.Module`` h mapping inputs [N,D_in] to features [N,D]
            (hybrid model, multiclass-bayesian-svm §3.4): the kernel acts on h(X), Z lives in feature
            space, and h's parameters are among this module's parameters, so the fit loop trains
            them jointly with the GP by backpropagation.
    """

    def __init__(self, kernel: nn.Module, likelihood: nn.Module, inducing_inputs: torch.Tensor, *,
                 learn_inducing: bool = True, feature_extractor: nn.Module | None = None):
        super().__init__()
        if kernel.n_latent != likelihood.n_latent:
            raise ValueError(f"kernel has {kernel.n_latent} latent functions, likelihood needs {likelihood.n_latent}")
        Z = torch.as_tensor(inducing_inputs)
        if Z.ndim not in (2, 3) or Z.shape[-1] != kernel.input_dim or (Z.ndim == 3 and Z.shape[0] != kernel.n_latent):
            raise ValueError(f"inducing inputs must be [M,{kernel.input_dim}] or [{kernel.n_latent},M,{kernel.input_dim}], "
                             f"got {tuple(Z.shape)}")
        self.kernel = kernel
        self.likelihood = likelihood
        self.feature_extractor = feature_extractor
        if learn_inducing:
            self.Z = nn.Parameter(Z.clone())
        else:
            self.register_buffer("Z", Z.clone())

    @property
    def n_latent(self) -> int:
        """L."""
        return self.kernel.n_latent

    @property
    def n_inducing(self) -> int:
        """M."""
        return self.Z.shape[-2]

    def Kuu(self) -> torch.Tensor:
        """K_uu, [L,M,M] (no white noise: inducing values are noise-free function values)."""
        return self.kernel(self.Z, self.Z)

    @property
    def one_prior(self) -> bool:
        """True when the L latent GPs share the kernel's hyper-parameters and the inducing inputs.

        Their priors are then identical, so the Cholesky factor of K_uu and L_K⁻¹K_uf are computed for
        one latent function and broadcast to L (``expand``: views, no copies) — the O(M³) factorisation
        and the O(M²N) solve are done once instead of L times.
        """
        return bool(getattr(self.kernel, "shared", False)) and self.Z.ndim == 2

    def chol_Kuu(self) -> torch.Tensor:
        """Lower Cholesky factor of K_uu with the dtype's base jitter, [L,M,M] (a broadcast view if ``one_prior``)."""
        K = self.Kuu()
        if self.one_prior:
            return cholesky(K[:1], what="K_uu").expand(K.shape)
        return cholesky(K, what="K_uu")

    def projection(self, X: torch.Tensor, chol_Kuu: torch.Tensor, broadcast: bool = True
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """A = L_K⁻¹ K_uf [L,M,N] and the prior variances k_ii + σ_n² [L,N] (of h(X) for a hybrid model).

        With ``broadcast=False`` and ``one_prior``, A is returned as [1,M,N] (not broadcast to L), for
        callers that fold the L latent functions into one matrix product.
        """
        Kuf, kdiag = self.cross_covariance(X)
        A = solve_lower(chol_Kuu[:Kuf.shape[0]], Kuf)
        return (A.expand(self.n_latent, -1, -1) if broadcast else A), kdiag

    def cross_covariance(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K_uf [L,M,N] — [1,M,N] if ``one_prior`` — and the prior variances k_ii + σ_n² [L,N] (of h(X) for a
        hybrid model): what ``projection`` solves against L_K."""
        H = X if self.feature_extractor is None else self.feature_extractor(X)
        Kuf = self.kernel(self.Z, H)
        return (Kuf[:1] if self.one_prior else Kuf), self.kernel.diag(H)


@contextmanager
def evaluating(model: nn.Module):
    """Run the block with ``model`` (and so a hybrid model's feature extractor) in eval mode.

    Batch normalisation then uses its running statistics and dropout is off, as at prediction time;
    the previous mode is restored afterwards (the fit loop validates between training steps).
    """
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def whitened_marginals(model: SparseGP, mean_w: torch.Tensor, chol_w: torch.Tensor, X: torch.Tensor,
                       chol_Kuu: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Marginals of q(f) at X for a whitened q(v) = N(mean_w, chol_w chol_wᵀ), u = L_K v.

    Args:
        mean_w [L,M], chol_w [L,M,M], X [N,D]; chol_Kuu [L,M,M] if already computed.
    Returns:
        mean [N,L], var [N,L].
    """
    Lk = model.chol_Kuu() if chol_Kuu is None else chol_Kuu
    A, kdiag = model.projection(X, Lk, broadcast=False)                            # [L,M,N] or [1,M,N]
    if A.shape[0] == 1:
        # one prior for all latents: the L products fold into one [L·M, M] × [M, N] product (no batched
        # products with an outer-product backward, no sum over a broadcast A in the backward pass)
        mean = mean_w @ A[0]                                                       # [L,N]
        B = chol_w.transpose(-1, -2) @ A[0]                                        # [L,M,N]
    else:
        mean = (mean_w[:, None, :] @ A)[:, 0, :]                                   # [L,N]
        B = chol_w.transpose(-1, -2) @ A                                           # [L,M,N]
    var = kdiag - sum_sq(A, -2) + sum_sq(B, -2)                              # Q_ff diagonal once if shared
    return mean.transpose(0, 1), var.clamp_min(torch.finfo(var.dtype).tiny).transpose(0, 1)


def _whiten(q: InducingPosterior, chol_Kuu: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return solve_lower(chol_Kuu, q.mean[..., None])[..., 0], solve_lower(chol_Kuu, q.chol)


def marginals(model: SparseGP, q: InducingPosterior, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Marginals of q(f) = ∫ p(f|u) q(u) du at inputs X [N,D]: mean [N,L], var [N,L] (eqs. 66–67)."""
    Lk = model.chol_Kuu()
    mean_w, chol_w = _whiten(q, Lk)
    return whitened_marginals(model, mean_w, chol_w, X, Lk)


def prior_kl(model: SparseGP, q: InducingPosterior) -> torch.Tensor:
    """KL(q(u) ‖ p(u)) summed over the latent functions (a scalar)."""
    Lk = model.chol_Kuu()
    mean_w, chol_w = _whiten(q, Lk)
    return kl_standard_normal(mean_w, chol_w).sum()


@torch.no_grad()
def predict(model: SparseGP, q: InducingPosterior, X: torch.Tensor, batch_size: int = 4096
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(y* = c | x*) [N,C], decision scores [N,C]) for the rows of X [N,D], in batches of ``batch_size``.

    The decision scores are the likelihood's ``decision_scores`` (argmax = predicted class). Memory is
    bounded by the batch, not by N. The model is evaluated in eval mode (``evaluating``).
    """
    lik = model.likelihood
    with evaluating(model):
        Lk = model.chol_Kuu()
        mean_w, chol_w = _whiten(q, Lk)
        lps, scores = [], []
        for start in range(0, X.shape[0], batch_size):
            m, v = whitened_marginals(model, mean_w, chol_w, X[start:start + batch_size], Lk)
            lp = lik.predict_log_proba(m, v)
            lps.append(lp)
            scores.append(lik.decision_scores(m, v, lp))
    return torch.cat(lps, 0), torch.cat(scores, 0)


def predict_log_proba(model: SparseGP, q: InducingPosterior, X: torch.Tensor, batch_size: int = 4096
                      ) -> torch.Tensor:
    """log p(y* = c | x*) for every row of X [N,D] and class c: [N,C] (``predict``'s first output)."""
    return predict(model, q, X, batch_size)[0]
