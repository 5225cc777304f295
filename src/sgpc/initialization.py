"""Initial hyper-parameters from the data: length-scales from the features' spread, features of an initial
neural feature extractor (what the inducing inputs and length-scales of a hybrid model start from).

What this module does not do: choose inducing inputs (``sparse.init_inducing``) or build the model.
"""
from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import torch

from . import kernels as K

__all__ = ["initial_lengthscales", "extractor_features"]


def initial_lengthscales(H: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Initial ARD length-scales ℓ_d = √D · max(s_d, max_i |h_id − mean_d| / 20) for features H [N,D], spreads s [D].

    Scaling each ℓ_d with its feature's spread makes the start independent of the features' units. The
    floor matters for inputs like pixels: a pixel lit in a handful of images has a tiny spread, and
    ℓ_d ∝ s_d alone would put those images (and test images sharing the pixel) many length-scales away
    from everything through that one feature — on raw digits the fit then stays at the prior (90% test
    error). With the floor no feature moves a row more than 20 scaled units from the mean. It never binds
    for a Gaussian-like feature (its largest deviation is ~5 s_d even at 10⁶ rows), so standardised data
    keep ℓ = √D. A column that is constant up to rounding (relative to its own magnitude: features in
    small units are not constant) gets ℓ = √D (not ≈ 0). Length-scales cannot go below the kernels'
    floor (1e-6): features whose ℓ would start within 100× of it get a warning — a fit on them stays at
    the prior — advising standardisation.
    """
    D = H.shape[1]
    # constant up to rounding: relative to the column's own size, and in absolute terms for a column that
    # is rounding noise around 0 (a constant column after standardisation: std 3e-17, max 4e-16)
    # the largest distance from the mean, per feature, from the extremes: no [N,D] temporary (rounding is monotone,
    # so max_i fl(h_i − μ) = fl(max_i h_i − μ): the same values as max |H − μ|, bit for bit)
    top, bottom, mean = H.max(0), H.min(0), H.mean(0)
    deviation = np.maximum(top - mean, mean - bottom)
    constant = (std <= 1e-12 * np.maximum(np.abs(top), np.abs(bottom))) | (deviation <= 1e-12)
    reach = deviation / 20.0
    ls = math.sqrt(D) * np.where(constant, 1.0, np.maximum(std, reach))
    tiny = np.flatnonzero(ls < 100.0 * K.LENGTHSCALE_FLOOR)
    if tiny.size:
        warnings.warn(f"feature(s) {tiny[:8].tolist()}{' ...' if tiny.size > 8 else ''} vary on scales near or below "
                      f"{100.0 * K.LENGTHSCALE_FLOOR:g} (length-scales stop at {K.LENGTHSCALE_FLOOR:g}): the kernel cannot "
                      "resolve them and the fit may stay at the prior; standardise X (sklearn.preprocessing.StandardScaler)",
                      UserWarning, stacklevel=3)
    return ls


def extractor_features(extractor: torch.nn.Module, X: torch.Tensor, batch_size: int = 4096) -> np.ndarray:
    """h(X) [N,D'] of the initial extractor as float64 numpy, in batches without gradients.

    Evaluated as in training (batch statistics for batch normalisation, whose running statistics are
    still at their defaults) on a copy, so the extractor's buffers are not touched.
    """
    extractor = copy.deepcopy(extractor).train()
    # blocks of nearly equal size (not 4096 and a remainder: a last block of one row fails in batch
    # normalisation, and a short one is normalised with the statistics of a few rows)
    n_blocks = max(1, -(-X.shape[0] // batch_size))
    with torch.no_grad():
        out = [extractor(block) for block in torch.tensor_split(X, n_blocks)]
    H = torch.cat(out, 0)
    if H.ndim != 2 or H.shape[0] != X.shape[0]:
        raise ValueError(f"feature_extractor must map [N,D] inputs to [N,D'] features, got {tuple(H.shape)} "
                         f"for {X.shape[0]} rows")
    return H.detach().cpu().double().numpy()
