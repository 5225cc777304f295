"""Diagnostics of a finished fit: did it learn anything from the data, and did it settle?

A fit can end without an error and still be useless. Three such endings are reported here, from the fitted
model alone (no refit, no randomness):

* **at the prior**: the predictive class probabilities at the training rows are those of the prior q(u) = p(u)
  — the data had no influence. This happens when every training row is far from every inducing input in
  length-scales (an ``init_lengthscale`` far below the features' spread: K_uf ≈ 0, so no site and no gradient
  reaches q), or when the labels carry no signal the model can use. Measured as
      d = max_{i,c} |p_q(y_i = c | x_i) − p_prior(y_i = c | x_i)|
  over up to ``N_ROWS`` training rows (evenly spaced, deterministic); the fit is at the prior when d < ``TOL``.
* **not converged**: the fit stopped before its stopping rule was met (``History.converged`` is False: an
  iteration ceiling, or an inner EP run that did not converge; the estimator's ``ConvergenceWarning``).
* **stalled**: its EP guard had to reset latent functions to the prior (``Engine.counters``' "reset": site
  updates that left a non-positive-definite posterior, as undamped EP, ``damping=1``, oscillating), so the fit
  it returns may be a restart rather than a solution.

``diagnose`` computes all three; ``warn`` turns the last two into warnings. The estimator calls ``diagnose`` and
``warn`` once, at the end of every fit, and keeps the result as ``converged_``, ``stalled_``, ``at_prior_`` and
``prior_distance_``.

What this module does not do: decide when a fit stops (``train``), or check inputs (``validation``).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from .sparse import InducingPosterior, SparseGP, predict

__all__ = ["FitDiagnostics", "DegenerateFitWarning", "diagnose", "prior_posterior", "warn", "N_ROWS", "TOL"]

N_ROWS = 512        # training rows the prior check predicts (evenly spaced): O(N_ROWS·L·M²), not O(N·L·M²)
TOL = 1e-3          # a class probability within this of the prior's at every checked row: "at the prior"


class DegenerateFitWarning(UserWarning):
    """A fit ended without learning from the data (its predictions are the prior's)."""


@dataclass(frozen=True)
class FitDiagnostics:
    """What ``diagnose`` found.

    converged: the stopping rule was met (``History.converged``).
    at_prior: the predictions at the training rows are the prior's (``prior_distance < TOL``).
    prior_distance: max |p_q − p_prior| over the checked rows and classes (0: exactly the prior).
    reset: latent functions the EP guard reset to the prior during the fit (``Engine.counters``).
    """

    @property
    def stalled(self) -> bool:
        """EP had to restart latent functions from the prior (not converging is ``converged``)."""
        return self.reset > 0

    converged: bool
    at_prior: bool
    prior_distance: float
    reset: int = 0


def prior_posterior(model: SparseGP) -> InducingPosterior:
    """q(u) = p(u) = N(0, K_uu): mean [L,M] zeros, chol [L,M,M] the Cholesky factor of K_uu."""
    with torch.no_grad():
        Lk = model.chol_Kuu()
        return InducingPosterior(mean=torch.zeros(Lk.shape[:-1], dtype=Lk.dtype, device=Lk.device),
                                 chol=Lk.contiguous())


def diagnose(model: SparseGP, q: InducingPosterior, X: torch.Tensor, converged: bool,
             counters: dict[str, int]) -> FitDiagnostics:
    """``FitDiagnostics`` of a fitted model with posterior ``q`` on (up to ``N_ROWS`` of) its training rows X [N,D];
    ``converged``: ``History.converged``; ``counters``: the engine's guard counters (``Engine.counters``)."""
    n = X.shape[0]
    reset = int(counters.get("reset", 0))
    if n == 0:
        return FitDiagnostics(bool(converged), False, float("nan"), reset)
    if n > N_ROWS:
        X = X[torch.linspace(0, n - 1, N_ROWS, device=X.device).round().long()]
    lp_q, _ = predict(model, q, X)
    lp_0, _ = predict(model, prior_posterior(model), X)
    distance = float((lp_q.exp() - lp_0.exp()).abs().max())
    return FitDiagnostics(bool(converged), bool(distance < TOL), distance, reset)


def warn(diag: FitDiagnostics, method: str, stacklevel: int) -> None:
    """A ``DegenerateFitWarning`` for a fit at the prior or one whose EP restarted latents from the prior (the
    iteration ceiling's ``ConvergenceWarning`` is the estimator's)."""
    if diag.reset:
        warnings.warn(f"{method}'s EP had to reset latent functions to the prior {diag.reset} time(s): its site "
                      "updates left a posterior that was not positive definite, so the fit may have stalled rather "
                      "than converged. Lower the damping (method_params={'damping': 0.5}) or the learning rate",
                      DegenerateFitWarning, stacklevel=stacklevel + 1)
    if diag.at_prior:
        warnings.warn(f"{method} ended at the prior: at every training row checked its class probabilities differ "
                      f"from the prior's by at most {diag.prior_distance:.2g}, so the data had no influence on the fit. "
                      "Usual causes: a length-scale far below the features' spread (init_lengthscale in kernel_params, "
                      "or unscaled features: standardise them), or labels unrelated to the features",
                      DegenerateFitWarning, stacklevel=stacklevel + 1)
