"""Metrics of probabilistic classifiers: error, NLL, Brier, ECE, reliability curves and uncertainty.

Every function takes NumPy arrays (or array-likes) and returns Python floats or NumPy arrays.

Conventions:

- Labels are class **indices** 0..C−1 (column positions of ``proba``), not the original class labels.
  ``class_indices(y, classes)`` turns labels into indices for a fitted model's ``classes_``.
  ``error_rate`` is the one exception: with ``classes`` it compares original labels.
- ``proba`` is [N,C]: one row per point, one column per class, entries in [0, 1], each row summing
  to 1 within 1e-6 (``ROW_SUM_TOL``). Anything else raises ValueError naming the offending row.

What this module deliberately does not do: fit anything, touch torch, or average over several runs
(means ± standard errors over splits belong to the benchmark scripts).
"""
from __future__ import annotations

import numpy as np
from scipy.special import entr

__all__ = ["ROW_SUM_TOL", "PROB_FLOOR", "class_indices", "error_rate", "nll", "brier", "ece",
           "reliability_curve", "predictive_entropy", "variation_ratio", "evaluate"]

ROW_SUM_TOL = 1e-6
PROB_FLOOR = float(np.finfo(np.float64).tiny)  # ≈ 2.2e-308, so −log p ≤ ≈ 708.4 (finite) when p = 0


# -- validation ----------------------------------------------------------------------------------
def _check_proba(proba) -> np.ndarray:
    """proba as float64 [N,C], or ValueError saying what is wrong."""
    p = np.asarray(proba, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError(f"proba must be a 2-D array [N, C] (one row per point, one column per class); "
                         f"got shape {p.shape}")
    if p.shape[1] < 1:
        raise ValueError("proba has no columns; it needs one column per class")
    if not np.isfinite(p).all():
        row = int(np.flatnonzero(~np.isfinite(p).all(axis=1))[0])
        raise ValueError(f"proba contains NaN or infinity (first in row {row})")
    if (p < -ROW_SUM_TOL).any() or (p > 1 + ROW_SUM_TOL).any():
        row = int(np.flatnonzero(((p < -ROW_SUM_TOL) | (p > 1 + ROW_SUM_TOL)).any(axis=1))[0])
        raise ValueError(f"proba has entries outside [0, 1] (first in row {row}: {p[row].tolist()})")
    sums = p.sum(axis=1)
    bad = np.abs(sums - 1.0) > ROW_SUM_TOL
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(f"rows of proba must sum to 1 within {ROW_SUM_TOL:g}; {int(bad.sum())} row(s) do not "
                         f"(first: row {row} sums to {sums[row]:.10g}). Pass probabilities, not scores or "
                         "log-probabilities")
    return p


def _check_indices(y_true_idx, n_rows: int, n_classes: int, name: str = "y_true_idx") -> np.ndarray:
    """y as int64 [N] with values in 0..C−1, or ValueError (``name``: the argument, for the message)."""
    y = np.asarray(y_true_idx)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D [N]; got shape {y.shape}")
    if len(y) != n_rows:
        raise ValueError(f"{name} has {len(y)} entries but proba has {n_rows} rows")
    if y.dtype.kind not in "iub":
        if y.dtype.kind != "f" or not np.all(y == np.round(y)):
            raise ValueError(f"{name} must hold integer class indices 0..{n_classes - 1} (dtype {y.dtype}); "
                             "convert labels with metrics.class_indices(y, model.classes_)")
    y = y.astype(np.int64)
    if len(y) and (y.min() < 0 or y.max() >= n_classes):
        raise ValueError(f"{name} must be class indices in 0..{n_classes - 1} (proba has {n_classes} "
                         f"columns); got values from {y.min()} to {y.max()}")
    return y


def _nonempty(p: np.ndarray) -> None:
    if len(p) == 0:
        raise ValueError("proba has no rows; a metric needs at least one point")


# -- labels ----------------------------------------------------------------------------------------
def class_indices(y, classes) -> np.ndarray:
    """Positions of the labels ``y`` in ``classes`` (e.g. a fitted model's ``classes_``).

    Args:
        y: [N] labels. classes: [C] the known labels (any order).
    Returns:
        [N] int64 indices i with ``classes[i] == y``.
    Raises:
        ValueError: a label that is not in ``classes`` (the message lists them).
    """
    y = np.asarray(y)
    classes = np.asarray(classes)
    if y.ndim != 1:
        raise ValueError(f"labels must be 1-D [N]; got shape {y.shape}")
    lookup = {c: i for i, c in enumerate(classes.tolist())}
    idx = np.fromiter((lookup.get(v, -1) for v in y.tolist()), dtype=np.int64, count=len(y))
    if (idx < 0).any():
        unknown = sorted({str(v) for v in y[idx < 0].tolist()})
        raise ValueError(f"labels {unknown[:5]} are not among the model's classes {classes.tolist()}")
    return idx


# -- metrics ----------------------------------------------------------------------------------------
def error_rate(y_true, proba_or_pred, classes=None) -> float:
    """Fraction of misclassified points: mean_i 1[ŷ_i ≠ y_i].

    Args:
        y_true: [N] class indices; or labels when ``classes`` is given.
        proba_or_pred: [N,C] probabilities (ŷ = argmax, ties to the first column) or [N] predictions
            (indices, or labels when ``classes`` is given).
        classes: [C] labels of the columns of ``proba``; None when labels are indices.
    Returns:
        error in [0, 1].
    """
    y = np.asarray(y_true)
    pred = np.asarray(proba_or_pred)
    if pred.ndim == 2:
        p = _check_proba(pred)
        pred = np.argmax(p, axis=1)
        if classes is None:
            y = _check_indices(y, len(p), p.shape[1])
        else:
            classes = np.asarray(classes)
            if classes.shape != (p.shape[1],):
                raise ValueError(f"classes must name the {p.shape[1]} columns of the probabilities, got shape "
                                 f"{classes.shape}")
            pred = classes[pred]
    elif pred.ndim != 1:
        raise ValueError(f"proba_or_pred must be [N, C] probabilities or [N] predictions; got shape {pred.shape}")
    if y.ndim != 1 or len(y) != len(pred):
        raise ValueError(f"y_true has shape {y.shape} but there are {len(pred)} predictions")
    if len(y) == 0:
        raise ValueError("no points; the error rate needs at least one")
    return float(np.mean(pred != y))


def nll(y_true_idx, proba) -> float:
    """Mean negative log predictive probability of the true class: −(1/N) Σ_i log p_i,y_i.

    p is floored at ``PROB_FLOOR`` first, so a zero probability gives a large finite value (≈ 708.4)
    instead of infinity.

    Args:
        y_true_idx: [N] class indices. proba: [N,C].
    Returns:
        NLL ≥ 0 (nats).
    """
    p = _check_proba(proba)
    _nonempty(p)
    y = _check_indices(y_true_idx, len(p), p.shape[1])
    p_true = p[np.arange(len(y)), y]
    return float(-np.mean(np.log(np.maximum(p_true, PROB_FLOOR))))


def brier(y_true_idx, proba) -> float:
    """Multi-class Brier score: (1/N) Σ_i Σ_c (p_ic − 1[c = y_i])² (Brier 1950).

    0 for certain and correct predictions, 2 for certain and wrong ones.

    Args:
        y_true_idx: [N] class indices. proba: [N,C].
    Returns:
        Brier score in [0, 2].
    """
    p = _check_proba(proba)
    _nonempty(p)
    y = _check_indices(y_true_idx, len(p), p.shape[1])
    onehot = np.zeros_like(p)
    onehot[np.arange(len(y)), y] = 1.0
    return float(np.mean(np.sum((p - onehot) ** 2, axis=1)))


def reliability_curve(y_true_idx, proba, n_bins: int = 15) -> dict:
    """Confidence (max probability) against accuracy in equal-width bins (Guo et al. 2017).

    Bins over the confidence conf_i = max_c p_ic are (0, 1/n], (1/n, 2/n], …, ((n−1)/n, 1]:
    right-closed, so a confidence exactly on an edge k/n falls in the bin below it.

    Args:
        y_true_idx: [N] class indices. proba: [N,C]. n_bins: n ≥ 1.
    Returns:
        dict with ``bin_edges`` [n+1] (0, 1/n, …, 1), ``confidence`` [n] (mean confidence in the
        bin), ``accuracy`` [n] (fraction of the bin's points whose argmax is the true class) — both
        NaN for empty bins — and ``count`` [n] (int64 points per bin).
    """
    p = _check_proba(proba)
    _nonempty(p)
    y = _check_indices(y_true_idx, len(p), p.shape[1])
    if not (isinstance(n_bins, (int, np.integer)) and not isinstance(n_bins, (bool, np.bool_)) and n_bins >= 1):
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    # k/n correctly rounded: linspace leaves some edges one ulp below k/n (n = 6: 5/6), which moved a
    # confidence of exactly k/n into the bin above
    edges = np.arange(n_bins + 1) / n_bins
    conf = p.max(axis=1)
    correct = (p.argmax(axis=1) == y).astype(np.float64)
    # right=True: bin b holds edges[b] < conf <= edges[b+1]; conf = 0 (impossible for proba) goes to bin 0
    b = np.digitize(conf, edges[1:-1], right=True)
    count = np.bincount(b, minlength=n_bins).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        confidence = np.bincount(b, weights=conf, minlength=n_bins) / count
        accuracy = np.bincount(b, weights=correct, minlength=n_bins) / count
    return {"bin_edges": edges, "confidence": confidence, "accuracy": accuracy, "count": count}


def ece(y_true_idx, proba, n_bins: int = 15) -> float:
    """Expected calibration error: Σ_b (n_b / N) |acc_b − conf_b| over equal-width confidence bins.

    The bins are those of ``reliability_curve`` ((0, 1/n], …, ((n−1)/n, 1]); empty bins add nothing.

    Args:
        y_true_idx: [N] class indices. proba: [N,C]. n_bins: n.
    Returns:
        ECE in [0, 1].
    """
    curve = reliability_curve(y_true_idx, proba, n_bins)
    used = curve["count"] > 0
    weights = curve["count"][used] / curve["count"].sum()
    return float(np.sum(weights * np.abs(curve["accuracy"][used] - curve["confidence"][used])))


def predictive_entropy(proba) -> np.ndarray:
    """Entropy of each predictive distribution: H_i = −Σ_c p_ic log p_ic (natural log, 0·log 0 = 0).

    Args:
        proba: [N,C].
    Returns:
        [N] entropies in [0, log C].
    """
    p = _check_proba(proba)
    return entr(np.clip(p, 0.0, 1.0)).sum(axis=1)


def variation_ratio(proba) -> np.ndarray:
    """Variation ratio of each predictive distribution: 1 − max_c p_ic (Freeman 1965).

    Args:
        proba: [N,C].
    Returns:
        [N] values in [0, 1 − 1/C].
    """
    p = _check_proba(proba)
    return 1.0 - p.max(axis=1)


def evaluate(y_true_idx, proba, n_bins: int = 15, pred_idx=None) -> dict:
    """The standard summary of a probabilistic classifier on labelled data.

    Args:
        y_true_idx: [N] class indices. proba: [N,C]. n_bins: bins of the ECE.
        pred_idx: [N] predicted class indices for the error when the classifier's decision rule is not
            argmax proba (the multi-class ``bsvm``); None: argmax proba.
    Returns:
        dict of floats: ``error``, ``nll``, ``brier``, ``ece``.
    """
    p = _check_proba(proba)
    if pred_idx is not None:     # labels passed here instead of indices gave an error of 1.0, silently
        pred_idx = _check_indices(pred_idx, len(p), p.shape[1], name="pred_idx")
    return {"error": error_rate(y_true_idx, p if pred_idx is None else pred_idx), "nll": nll(y_true_idx, p),
            "brier": brier(y_true_idx, p), "ece": ece(y_true_idx, p, n_bins)}
