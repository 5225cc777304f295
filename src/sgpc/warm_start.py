"""Warm starts: which rows of a new training set were rows of the previous fit, and whether a fit may continue.

A site-based method with one site per training row (ep, pep, gfitc, rmgpc, smgpc) carries each row's site over
to the same row in the next fit (``Engine.carry``). Rows are matched by a 64-bit key of their features and label
(``row_keys``), so a refit on a grown, shrunk or reordered training set keeps every site whose row is still
there; ``match_rows`` pairs each new row with an unused old row of the same key.

What this module does not do: move the sites (the engines' ``carry``) or decide the estimator's structure.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["row_keys", "match_rows", "architecture"]

_KEY_MULTIPLIERS = np.random.default_rng(20261124).integers(1, 2 ** 62, size=4096, dtype=np.uint64) * 2 + 1


def row_keys(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """A 64-bit key of each row of X [N,D] (float64) with its label y [N] (int): equal rows get equal keys.

    Σ_d bits(x_d)·m_d + y·m_D mod 2⁶⁴ with fixed odd multipliers m (cycled past 4 096 features): two
    rows that differ in one feature's bits never collide, and distinct rows collide with probability
    about 2⁻⁶⁴ otherwise. What a warm start matches per-row sites by (``GPClassifier.warm_start``).
    """
    bits = np.ascontiguousarray(X, dtype=np.float64).view(np.uint64)
    m = np.resize(_KEY_MULTIPLIERS, bits.shape[1] + 1)
    keys = np.asarray(y).astype(np.uint64) * m[-1]
    with np.errstate(over="ignore"):
        for i in range(0, len(bits), 4096):                 # blocks bound the [rows, D] product's memory
            keys[i:i + 4096] += (bits[i:i + 4096] * m[:-1]).sum(1, dtype=np.uint64)
    return keys



def match_rows(old_keys: np.ndarray | None, new_keys: np.ndarray) -> np.ndarray:
    """For each new row, the index of an old row with the same key (each old row used at most once, in order),
    or −1: [N'] int64."""
    rows: dict[int, list[int]] = {}
    for i, k in enumerate(() if old_keys is None else old_keys.tolist()):
        rows.setdefault(k, []).append(i)
    return np.array([rows[k].pop(0) if rows.get(k) else -1 for k in new_keys.tolist()], dtype=np.int64)


def architecture(extractor: torch.nn.Module | None) -> tuple | None:
    """A feature extractor's class and the names and shapes of its weights and buffers (None without one):
    what a warm start must find unchanged (a new or removed extractor was ignored by warm starts)."""
    if extractor is None:
        return None
    return (type(extractor).__qualname__,) + tuple((k, tuple(v.shape)) for k, v in extractor.state_dict().items())
