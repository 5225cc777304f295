"""Row weights of an in-memory fit: ``class_weight`` expanded to the rows, combined with ``sample_weight``, and
the rows of weight 0 left out.

A fit with weights w [N] maximises the objective in which row i's contribution is multiplied by w_i: for integer
weights, the objective of the data with row i repeated w_i times, and without the rows of weight 0. How a method
weighs a row is its engine's business (``engine``: row weights; the methods whose capabilities declare
``weighted``). What every method shares is here, in ``row_weights``:

* ``class_weight`` (None, "balanced" or {label: weight}) gives each row its class's weight, multiplied with its
  sample weight, as scikit-learn does. "balanced" is scikit-learn's n_samples / (n_classes · bincount(y)), with
  the sample weights summed per class in place of the counts (as ``sklearn.utils.class_weight.compute_class_weight``
  does given sample weights), so that the classes weigh the same in total.
* Rows of weight 0 contribute nothing to any method's objective: they are left out of the fit, exactly, and so
  are the classes left without rows (a fit needs at least two).
* When every remaining weight is 1 the fit is the unweighted one, which every method runs.

What this module does not do: check ``sample_weight`` and ``class_weight`` (``validation``), or weigh anything in
an objective (the engines).
"""
from __future__ import annotations

import numpy as np

__all__ = ["class_weights", "row_weights"]


def class_weights(class_weight, classes: np.ndarray, y_enc: np.ndarray, sample_weight: np.ndarray | None
                  ) -> np.ndarray | None:
    """The weight of each class [C] under ``class_weight`` (None: None) for the labels ``y_enc`` [N] (indices
    into ``classes``) with sample weights [N] (None: 1 each); a ValueError for a dict whose labels y lacks.

    "balanced": W / (C' · W_c), W_c = Σ_{i: y_i = c} w_i, W = Σ_c W_c, over the C' classes with W_c > 0 (a class of
    weight 0 gets 0: its rows have no weight to scale). A dict: the weight of each label it names, 1 for the others.
    """
    if class_weight is None:
        return None
    if isinstance(class_weight, str):          # "balanced" (``validation.check_class_weight``)
        totals = np.bincount(y_enc, weights=sample_weight, minlength=len(classes)).astype(np.float64)
        present = totals > 0
        out = np.zeros(len(classes))
        out[present] = totals.sum() / (present.sum() * totals[present])
        return out
    known = {c: i for i, c in enumerate(classes.tolist())}
    unknown = [k for k in class_weight if k not in known]
    if unknown:
        raise ValueError(f"class_weight names labels that y does not have: {unknown[:5]}; y's labels: "
                         f"{classes.tolist()[:20]}")
    out = np.ones(len(classes))
    for label, weight in class_weight.items():
        out[known[label]] = float(weight)
    return out


def row_weights(class_weight, classes: np.ndarray, y_enc: np.ndarray, sample_weight: np.ndarray | None
                ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The rows a fit trains on and their weights: (rows, w). ``rows``: a boolean mask [N] of the rows of positive
    weight, or None when that is every row; ``w``: the weights of those rows (sample weight × class weight), or
    None when each is 1 (the unweighted fit). ``sample_weight`` [N] is checked (``validation.check_sample_weight``)
    or None; labels ``y_enc`` [N] index ``classes``."""
    per_class = class_weights(class_weight, classes, y_enc, sample_weight)
    if per_class is None and sample_weight is None:
        return None, None
    w = np.ones(len(y_enc)) if sample_weight is None else sample_weight
    if per_class is not None:
        w = w * per_class[y_enc]
    if not (w > 0).any():
        raise ValueError("sample_weight × class_weight is zero for every row: at least one row needs a positive "
                         "weight")
    rows = None if bool((w > 0).all()) else w > 0
    if rows is not None:
        w = w[rows]
    return rows, None if bool((w == 1.0).all()) else w
