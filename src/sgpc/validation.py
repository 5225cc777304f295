"""Checks of the estimator's parameters and inputs, with messages that say what is wrong and how to fix it.

What this module does not do: convert names to objects (``registry``) or fit.
"""
from __future__ import annotations

import math
import os

import numpy as np
import torch
from sklearn.utils.validation import validate_data

__all__ = ["check_choice", "check_real", "check_flag", "unique_labels", "plain_value", "check_device", "check_finite",
           "validated", "check_data_parallel_extractor"]


def check_choice(kind: str, value, valid) -> None:
    if value not in valid:
        raise ValueError(f"unknown {kind} {value!r}; valid: {', '.join(map(repr, valid))}")


def check_real(name: str, value, *, low: float, high: float = math.inf, low_closed: bool = False,
          high_closed: bool = True, none: str | None = None) -> None:
    """ValueError unless ``value`` is a finite real number (not a bool, not text) in the interval from
    ``low`` to ``high`` (open or closed ends); ``none``: what None means, when None is allowed."""
    if value is None and none is not None:
        return
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)) \
        and math.isfinite(value) and (value >= low if low_closed else value > low) \
        and (value <= high if high_closed else value < high)
    if not ok:
        interval = f"{'[' if low_closed else '('}{low:g}, {'∞)' if high == math.inf else f'{high:g}' + (']' if high_closed else ')')}"
        raise ValueError(f"{name} must be a finite number in {interval}" + (f" or None ({none})" if none else "")
                         + f", got {value!r}")


def check_flag(name: str, value) -> None:
    """ValueError unless ``value`` is True or False (the text "False" is true in Python: it switched on)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def unique_labels(y: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(y, return_inverse=True)``, with a ValueError for labels that cannot be ordered or saved:
    mixed types (a bare "'<' not supported" TypeError) and dates/times (fitted, then a model file that
    would not load)."""
    y = np.asarray(y)
    if y.dtype.kind in "mM":
        raise ValueError(f"{name} holds {y.dtype} labels, which a saved model cannot hold; pass them as strings "
                         "(y.astype(str)) or integer codes")
    try:
        return np.unique(y, return_inverse=True)
    except TypeError:
        kinds = sorted({type(v).__name__ for v in y.ravel().tolist()})
        raise ValueError(f"{name} mixes label types ({', '.join(kinds)}); pass labels of one type, e.g. "
                         f"{name}.astype(str)") from None


def plain_value(name: str, value):
    """A parameter value as a plain Python value for the model file: NumPy scalars become numbers, paths
    and devices strings; anything else that is not a number, string, boolean or None cannot be saved."""
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, (os.PathLike, torch.device)):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    hint = "; pass an integer random_state (or None)" if name == "random_state" else ""
    raise TypeError(f"parameter {name}={value!r} cannot be saved (only numbers, strings, booleans, None){hint}")


def check_device(device) -> None:
    """A clear error for a device torch does not know or that this machine lacks (CUDA)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"unknown device {device!r} ({exc}); use 'cpu', 'cuda' or 'cuda:N'") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} needs CUDA, which this torch build or machine does not have; use 'cpu'")


def check_finite(X: np.ndarray, name: str = "X", when: str = "fitting", first_row: int = 0) -> None:
    """ValueError naming the rows (numbered from ``first_row``: a streamed block's offset) with NaN/inf."""
    bad = ~np.isfinite(X).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad) + first_row
        shown = ", ".join(map(str, rows[:5])) + (", ..." if len(rows) > 5 else "")
        raise ValueError(f"{name} contains NaN or infinity in {len(rows)} row(s), first: {shown}; "
                         f"impute or drop them before {when}")


def _non_numeric_columns(X) -> list:
    """Columns of a 2-D array-like that do not convert to float (names for data frames, indices otherwise)."""
    if hasattr(X, "columns"):
        cols = list(X.columns)
        arr = [np.asarray(X[c], dtype=object) for c in cols]
    else:
        A = np.asarray(X, dtype=object)
        if A.ndim != 2:
            return []
        cols, arr = list(range(A.shape[1])), [A[:, j] for j in range(A.shape[1])]
    bad = []
    for c, col in zip(cols, arr):
        try:
            col.astype(np.float64)
        except (TypeError, ValueError):
            bad.append(c)
    return bad


def validated(estimator, X, y=None, *, reset: bool, name: str = "X", when: str | None = None):
    """scikit-learn validation with our messages: non-numeric columns named, NaN/inf rows named (``name``
    and ``when`` for the messages: the validation rows are checked as "X_val" while "fitting")."""
    try:
        if y is None:
            out = validate_data(estimator, X, reset=reset, dtype=np.float64, ensure_all_finite=False)
        else:
            out = validate_data(estimator, X, y, reset=reset, dtype=np.float64, ensure_all_finite=False)
    except (TypeError, ValueError) as exc:
        if "Complex data not supported" in str(exc):     # scikit-learn's message dumps the whole array
            raise ValueError(f"Complex data not supported: {name} is complex; pass real features (e.g. the real "
                             "and imaginary parts as columns)") from None
        bad = _non_numeric_columns(X) if not hasattr(X, "tocsr") else []
        if bad:
            raise type(exc)(f"X has non-numeric columns {bad[:10]} ({exc}); encode them as numbers "
                            "(e.g. sklearn.preprocessing.OrdinalEncoder / OneHotEncoder)") from None
        raise
    check_finite(out[0] if y is not None else out, name=name, when=when or ("fitting" if reset else "predicting"))
    return out


def check_data_parallel_extractor(extractor) -> None:
    """Refuse a feature extractor whose forward pass depends on the rows it is given as a batch.

    Each rank sees its shard of the minibatch and only gradients are summed, so batch normalisation would
    normalise with shard statistics (and each rank's running statistics would drift apart), and dropout
    would draw other masks than a single process: the fit would not be the single-process fit on the
    same global minibatches, which is what data-parallel training promises."""
    if extractor is None:
        return
    bad = sorted({type(m).__name__ for m in extractor.modules()
                  if isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.modules.dropout._DropoutNd))})
    if bad:
        raise ValueError(f"data-parallel training cannot reproduce the single-process fit with {', '.join(bad)} in "
                         "the feature_extractor (each process would use its own shard's batch statistics or dropout "
                         "masks): fit such a model in one process")
