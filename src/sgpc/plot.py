"""Plots of fitted classifiers, as scikit-learn ``Display`` objects: reliability, decision boundary, history, outliers.

* ``ReliabilityDisplay``: top-label reliability diagram of a multi-class (or binary) classifier, with its
  expected calibration error (``from_estimator`` / ``from_predictions``).
* ``BoundaryDisplay``: for 2-D inputs, predictive uncertainty as shading, the decision boundaries, the
  training points and the inducing inputs of a ``GPClassifier``.
* ``plot_history``: training objective, validation NLL and wall time from a fitted estimator's ``history_``.
* ``OutlierDisplay``: the posterior probability that each training label is an outlier (``method="rmgpc"``).

Every display follows scikit-learn's convention: the constructor stores the numbers, ``plot(ax=None)``
draws them (on a new figure when ``ax`` is None) and sets ``ax_`` and ``figure_``; the class methods compute
the numbers and plot. The metrics come from ``sgpc.metrics`` (ECE and the reliability curve have one home).

matplotlib is optional (``pip install 'sgpc[plot]'``); it is imported when a plot is drawn. What this
module deliberately does not do: choose styles globally, save files, or compute anything the metrics
module already does.
"""
from __future__ import annotations

import numpy as np

from . import metrics

__all__ = ["ReliabilityDisplay", "BoundaryDisplay", "HistoryDisplay", "OutlierDisplay", "plot_history"]

UNCERTAINTIES = ("entropy", "variation_ratio")


def _pyplot():
    """matplotlib.pyplot, or ImportError naming the extra that installs it."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("sgpc.plot needs matplotlib, which is not installed: pip install 'sgpc[plot]' "
                          "(or pip install matplotlib)") from exc
    return plt


def _decision_boundary_display(**kwargs):
    """scikit-learn's ``DecisionBoundaryDisplay`` from its keyword arguments; ``n_classes`` (scikit-learn ≥ 1.7: the
    colours of a multi-class response) is left out where the installed version does not take it (1.6: one colour
    map, which ``BoundaryDisplay`` sets anyway)."""
    import inspect
    from sklearn.inspection import DecisionBoundaryDisplay
    if "n_classes" not in inspect.signature(DecisionBoundaryDisplay).parameters:
        kwargs.pop("n_classes", None)
    return DecisionBoundaryDisplay(**kwargs)


def _axes(ax):
    """ax, or the axes of a new figure."""
    if ax is None:
        _, ax = _pyplot().subplots()
    else:
        _pyplot()
    return ax


def _fitted_gp(estimator, attribute: str = "posterior_"):
    """The fitted ``GPClassifier`` (or ValueError)."""
    from sklearn.utils.validation import check_is_fitted

    from .estimator import GPClassifier
    if not isinstance(estimator, GPClassifier):
        raise TypeError(f"expected a fitted sgpc.GPClassifier, got {type(estimator).__name__}")
    check_is_fitted(estimator, attribute)
    return estimator


# -- reliability -----------------------------------------------------------------------------------
class ReliabilityDisplay:
    """Top-label reliability diagram: accuracy against confidence (max probability) in equal-width bins.

    Bar b has height acc_b, the fraction of the bin's points whose most probable class is the true one,
    over the bin (conf in ((b−1)/n, b/n]); a marker sits at (conf_b, acc_b), the bin's mean confidence.
    A calibrated classifier has acc_b ≈ conf_b. The expected calibration error
    ECE = Σ_b (n_b / N) |acc_b − conf_b| (Guo et al. 2017) goes into the legend (``metrics.ece``).

    Args:
        accuracy, confidence: [n_bins] per-bin accuracy and mean confidence (NaN for empty bins).
        count: [n_bins] points per bin. bin_edges: [n_bins + 1]. ece: the expected calibration error.
        estimator_name: name in the legend (None: none).

    Attributes (after ``plot``): ``bars_`` (the BarContainer, one bar per non-empty bin), ``line_``
    (the markers at mean confidence), ``ax_``, ``figure_``.
    """

    def __init__(self, *, accuracy, confidence, count, bin_edges, ece: float, estimator_name: str | None = None):
        self.accuracy = np.asarray(accuracy, dtype=np.float64)
        self.confidence = np.asarray(confidence, dtype=np.float64)
        self.count = np.asarray(count)
        self.bin_edges = np.asarray(bin_edges, dtype=np.float64)
        self.ece = float(ece)
        self.estimator_name = estimator_name

    def plot(self, ax=None, *, name: str | None = None, ref_line: bool = True, **kwargs) -> "ReliabilityDisplay":
        """Draw the diagram on ``ax`` (None: a new figure); ``kwargs`` go to ``ax.bar``. Returns self."""
        ax = _axes(ax)
        name = self.estimator_name if name is None else name
        used = self.count > 0
        width = np.diff(self.bin_edges)
        label = f"ECE = {self.ece:.3f}" if name is None else f"{name} (ECE = {self.ece:.3f})"
        style = {"alpha": 0.7, "edgecolor": "black", "label": label, **kwargs}
        self.bars_ = ax.bar(self.bin_edges[:-1][used], self.accuracy[used], width=width[used], align="edge", **style)
        self.line_, = ax.plot(self.confidence[used], self.accuracy[used], "o", color="black", markersize=4,
                              label="accuracy at the bin's mean confidence")
        if ref_line:
            ax.plot([0, 1], [0, 1], "k--", linewidth=1, label="perfectly calibrated")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("confidence (top-label probability)")
        ax.set_ylabel("accuracy")
        ax.legend(loc="upper left", fontsize="small")
        self.ax_, self.figure_ = ax, ax.figure
        return self

    @classmethod
    def from_predictions(cls, y_true, y_prob, *, classes=None, n_bins: int = 15, name: str | None = None,
                         ax=None, ref_line: bool = True, **kwargs) -> "ReliabilityDisplay":
        """Reliability diagram of predicted probabilities.

        Args:
            y_true: [N] true labels: class indices 0..C−1, or labels named in ``classes``.
            y_prob: [N,C] probabilities (rows sum to one), or [N] probabilities of class 1 of a binary problem.
            classes: [C] the labels of ``y_prob``'s columns (a model's ``classes_``); None: ``y_true`` holds indices.
            n_bins: equal-width confidence bins. name: legend name. ax, ref_line, kwargs: as ``plot``.
        """
        p = np.asarray(y_prob, dtype=np.float64)
        if p.ndim == 1:
            p = np.stack([1.0 - p, p], axis=1)
        y = np.asarray(y_true) if classes is None else metrics.class_indices(y_true, classes)
        curve = metrics.reliability_curve(y, p, n_bins)
        disp = cls(accuracy=curve["accuracy"], confidence=curve["confidence"], count=curve["count"],
                   bin_edges=curve["bin_edges"], ece=metrics.ece(y, p, n_bins), estimator_name=name)
        return disp.plot(ax=ax, ref_line=ref_line, **kwargs)

    @classmethod
    def from_estimator(cls, estimator, X, y, *, n_bins: int = 15, name: str | None = None, ax=None,
                       ref_line: bool = True, **kwargs) -> "ReliabilityDisplay":
        """Reliability diagram of ``estimator.predict_proba(X)`` against labels ``y``.

        Args:
            estimator: any fitted classifier with ``predict_proba`` and ``classes_`` (a pipeline too).
            X: [N,D]; y: [N] labels. n_bins, name, ax, ref_line, kwargs: as ``from_predictions``
            (name None: the estimator's class name).
        """
        proba = estimator.predict_proba(X)
        name = type(estimator).__name__ if name is None else name
        return cls.from_predictions(y, proba, classes=estimator.classes_, n_bins=n_bins, name=name, ax=ax,
                                    ref_line=ref_line, **kwargs)


# -- decision boundary and uncertainty (2-D inputs) -----------------------------------------------------
class BoundaryDisplay:
    """Predictive uncertainty over a 2-D input grid, the decision boundaries, data and inducing inputs.

    The shading is the uncertainty of p(y* | x*) at each grid point — predictive entropy
    H = −Σ_c p_c log p_c (``metrics.predictive_entropy``) or the variation ratio 1 − max_c p_c
    (``metrics.variation_ratio``) — drawn with scikit-learn's ``DecisionBoundaryDisplay``, as are the
    boundaries between the regions where each class is the most probable.

    Args:
        xx0, xx1: [G1,G0] grid coordinates (``np.meshgrid``). proba: [G1,G0,C] predictive probabilities on
        the grid. uncertainty: "entropy" or "variation_ratio". inducing: [K,2] inducing inputs to mark, or None;
        inducing_latent: [K] the latent function (class) each belongs to, or None when shared by all.
        X, y: [N,2] points to draw and their class indices [N] (None: no points). classes: [C] class names.
        xlabel, ylabel: axis labels.

    Attributes (after ``plot``): ``uncertainty_`` [G1,G0] the shaded values, ``surface_`` (their contour
    set), ``boundary_`` (the boundary contour set), ``scatter_`` (data points or None), ``inducing_``
    (the inducing markers or None), ``colorbar_``, ``ax_``, ``figure_``.
    """

    def __init__(self, *, xx0, xx1, proba, uncertainty: str = "entropy", inducing=None, inducing_latent=None,
                 X=None, y=None, classes=None, xlabel: str = "x0", ylabel: str = "x1"):
        if uncertainty not in UNCERTAINTIES:
            raise ValueError(f"uncertainty must be one of {UNCERTAINTIES}, got {uncertainty!r}")
        self.xx0, self.xx1 = np.asarray(xx0), np.asarray(xx1)
        self.proba = np.asarray(proba, dtype=np.float64)
        self.uncertainty = uncertainty
        self.inducing = None if inducing is None else np.asarray(inducing)
        self.inducing_latent = None if inducing_latent is None else np.asarray(inducing_latent)
        self.X = None if X is None else np.asarray(X)
        self.y = None if y is None else np.asarray(y)
        self.classes = np.arange(self.proba.shape[-1]) if classes is None else np.asarray(classes)
        self.xlabel, self.ylabel = xlabel, ylabel

    def plot(self, ax=None, *, cmap: str = "Greys", alpha: float = 0.8, colorbar: bool = True) -> "BoundaryDisplay":
        """Draw on ``ax`` (None: a new figure). Returns self."""
        ax = _axes(ax)
        plt = _pyplot()
        C = self.proba.shape[-1]
        flat = self.proba.reshape(-1, C)
        score = metrics.predictive_entropy(flat) if self.uncertainty == "entropy" else metrics.variation_ratio(flat)
        self.uncertainty_ = score.reshape(self.xx0.shape)
        top = np.log(C) if self.uncertainty == "entropy" else 1.0 - 1.0 / C
        shade = _decision_boundary_display(xx0=self.xx0, xx1=self.xx1, n_classes=2, response=self.uncertainty_,
                                           xlabel=self.xlabel, ylabel=self.ylabel)
        shade.plot(ax=ax, plot_method="contourf", cmap=cmap, alpha=alpha, levels=np.linspace(0.0, top, 11))
        self.surface_ = shade.surface_
        label = "predictive entropy (nats)" if self.uncertainty == "entropy" else "variation ratio 1 − max p"
        self.colorbar_ = ax.figure.colorbar(self.surface_, ax=ax, label=label) if colorbar else None
        # the boundaries: where the most probable class changes (levels between consecutive indices)
        regions = _decision_boundary_display(xx0=self.xx0, xx1=self.xx1, n_classes=max(C, 2),
                                             response=self.proba.argmax(axis=-1))
        # (scikit-learn draws multi-class boundaries in black and rejects colours; two classes need them)
        black = {"colors": "black"} if C == 2 else {}
        regions.plot(ax=ax, plot_method="contour", levels=np.arange(C - 1) + 0.5, linewidths=1.5, **black)
        self.boundary_ = regions.surface_
        colours = plt.get_cmap("tab10")
        self.scatter_ = None
        if self.X is not None:
            self.scatter_ = ax.scatter(self.X[:, 0], self.X[:, 1], c=[colours(int(k) % 10) for k in self.y],
                                       s=14, edgecolors="white", linewidths=0.4, zorder=3)
            for k, name in enumerate(self.classes):        # legend entries, one per class
                ax.scatter([], [], color=colours(k % 10), s=14, label=f"class {name}")
        self.inducing_ = None
        if self.inducing is not None:
            edge = "black" if self.inducing_latent is None else [colours(int(k) % 10) for k in self.inducing_latent]
            self.inducing_ = ax.scatter(self.inducing[:, 0], self.inducing[:, 1], marker="D", s=40,
                                        facecolors="none", edgecolors=edge, linewidths=1.8, zorder=4)
            # the legend's marker in black: one set per latent function is drawn in its class's colour
            ax.scatter([], [], marker="D", s=40, facecolors="none", edgecolors="black", linewidths=1.8,
                       label="inducing inputs")
        if self.X is not None or self.inducing is not None:
            ax.legend(loc="upper right", fontsize="small", framealpha=0.9)
        ax.set_xlabel(self.xlabel)
        ax.set_ylabel(self.ylabel)
        self.ax_, self.figure_ = ax, ax.figure
        return self

    @classmethod
    def from_estimator(cls, estimator, X, y=None, *, uncertainty: str = "entropy", grid_resolution: int = 100,
                       eps: float = 0.5, show_inducing: bool = True, xlabel: str = "x0", ylabel: str = "x1",
                       ax=None, **kwargs) -> "BoundaryDisplay":
        """Compute the display of a classifier on 2-D inputs and plot it.

        Args:
            estimator: a fitted classifier with ``predict_proba`` and ``classes_``. The inducing inputs are
                marked for a ``GPClassifier`` without a feature extractor (its ``model_.Z``: [M,2] shared or
                [L,M,2], one set per latent function, coloured by the class of the latent function).
            X: [N,2] the inputs that set the grid's extent (and are drawn when ``y`` is given); y: [N] labels.
            uncertainty: "entropy" or "variation_ratio". grid_resolution: points per axis. eps: margin
            around X's range. show_inducing: mark the inducing inputs. ax, kwargs: as ``plot``.
        """
        from .estimator import GPClassifier
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != 2:
            raise ValueError(f"BoundaryDisplay needs 2-D inputs [N, 2]; got shape {X.shape}")
        lo, hi = X.min(axis=0) - eps, X.max(axis=0) + eps
        xx0, xx1 = np.meshgrid(np.linspace(lo[0], hi[0], grid_resolution), np.linspace(lo[1], hi[1], grid_resolution))
        grid = np.column_stack([xx0.ravel(), xx1.ravel()])
        proba = np.asarray(estimator.predict_proba(grid)).reshape(*xx0.shape, -1)
        inducing = latent = None
        if show_inducing and isinstance(estimator, GPClassifier) and estimator.feature_extractor is None:
            Z = _fitted_gp(estimator).model_.Z.detach().cpu().numpy()
            if Z.ndim == 3:                                   # [L,M,2]: colour each set by its latent function
                latent = np.repeat(np.arange(Z.shape[0]), Z.shape[1]) if Z.shape[0] > 1 else None
                Z = Z.reshape(-1, 2)
            inducing = Z
        y_idx = None if y is None else metrics.class_indices(y, estimator.classes_)
        disp = cls(xx0=xx0, xx1=xx1, proba=proba, uncertainty=uncertainty, inducing=inducing,
                   inducing_latent=latent, X=None if y is None else X, y=y_idx, classes=estimator.classes_,
                   xlabel=xlabel, ylabel=ylabel)
        return disp.plot(ax=ax, **kwargs)


# -- training history --------------------------------------------------------------------------------
class HistoryDisplay:
    """Training objective against iteration, and validation NLL against training time.

    Args:
        iteration, objective, time: [T] from ``history_`` (objective: the engine's −loss, the quantity the
            fit maximises; time: training wall time in seconds since the start, validation excluded).
        validation: the ``history_["validation"]`` rows ({"iteration", "time", "nll", "error"}), or [].

    Attributes (after ``plot``): ``axes_`` [2], ``objective_line_``, ``validation_line_`` (None without
    validation rows), ``figure_``.
    """

    def __init__(self, *, iteration, objective, time, validation=()):
        self.iteration = np.asarray(iteration)
        self.objective = np.asarray(objective, dtype=np.float64)
        self.time = np.asarray(time, dtype=np.float64)
        self.validation = list(validation)

    def plot(self, axes=None) -> "HistoryDisplay":
        """Draw on two axes (None: a new figure with two side by side). Returns self."""
        plt = _pyplot()
        if axes is None:
            _, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
        left, right = axes
        self.objective_line_, = left.plot(self.iteration, self.objective, color="C0")
        left.set_xlabel("iteration")
        left.set_ylabel("training objective")
        left.set_title("objective (higher is better)")
        self.validation_line_ = None
        if self.validation:
            t = [r["time"] for r in self.validation]
            self.validation_line_, = right.plot(t, [r["nll"] for r in self.validation], "o-", color="C1")
            right.set_ylabel("validation NLL")
            right.set_title("validation NLL against training time")
        else:                  # no validation data was passed to fit: the objective against time instead
            right.plot(self.time, self.objective, color="C0")
            right.set_ylabel("training objective")
            right.set_title("objective against training time")
        right.set_xlabel("training time (s)")
        self.axes_, self.figure_ = np.asarray(axes), left.figure
        return self


def plot_history(estimator, axes=None) -> HistoryDisplay:
    """Plot a fitted ``GPClassifier``'s ``history_``: objective per iteration; validation NLL (when ``fit``
    had ``X_val``/``y_val``, else the objective) against training time. ``axes``: two axes or None."""
    h = _fitted_gp(estimator, "history_").history_
    return HistoryDisplay(iteration=h["iteration"], objective=h["objective"], time=h["time"],
                          validation=h["validation"]).plot(axes)


# -- outlier probabilities (rmgpc) --------------------------------------------------------------------
class OutlierDisplay:
    """Posterior probability that each training label is an outlier, sorted from most to least likely.

    RMGPC (robust-multiclass-gpc supplement) gives each labelled point an indicator z_i (the label was
    produced at random) with q(z_i = 1) = ``outlier_proba_``; the expected outlier fraction E[ρ] is drawn as a
    dashed line when given.

    Args:
        outlier_proba: [N] probabilities. flipped: [N] bool, rows whose labels are known to be corrupted
            (highlighted), or None. expected_rho: E[ρ] or None.

    Attributes (after ``plot``): ``order`` [N] the rows by decreasing probability, ``bars_``, ``ax_``, ``figure_``.
    """

    def __init__(self, *, outlier_proba, flipped=None, expected_rho: float | None = None):
        self.outlier_proba = np.asarray(outlier_proba, dtype=np.float64)
        self.flipped = None if flipped is None else np.asarray(flipped, dtype=bool)
        if self.flipped is not None and self.flipped.shape != self.outlier_proba.shape:
            raise ValueError(f"flipped must have one entry per training row ({self.outlier_proba.shape[0]}), "
                             f"got shape {self.flipped.shape}")
        self.expected_rho = expected_rho

    def plot(self, ax=None) -> "OutlierDisplay":
        """Draw on ``ax`` (None: a new figure). Returns self."""
        ax = _axes(ax)
        self.order = np.argsort(-self.outlier_proba, kind="stable")
        p = self.outlier_proba[self.order]
        rank = np.arange(len(p))
        from matplotlib.patches import Patch
        handles = []
        if self.flipped is None:
            colours = ["C0"] * len(p)
        else:
            colours = np.where(self.flipped[self.order], "C3", "C0").tolist()
            handles = [Patch(color="C3", label="label corrupted"), Patch(color="C0", label="label clean")]
        self.bars_ = ax.bar(rank, p, width=1.0, color=colours)
        if self.expected_rho is not None:
            handles.append(ax.axhline(self.expected_rho, color="black", linestyle="--", linewidth=1,
                                      label=f"E[ρ] = {self.expected_rho:.3f}"))
        ax.set_xlim(-0.5, len(p) - 0.5)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("training rows, by decreasing outlier probability")
        ax.set_ylabel("P(label is an outlier)")
        if handles:
            ax.legend(handles=handles, loc="upper right")
        self.ax_, self.figure_ = ax, ax.figure
        return self

    @classmethod
    def from_estimator(cls, estimator, *, flipped=None, ax=None) -> "OutlierDisplay":
        """The display of a ``GPClassifier`` fitted with ``method="rmgpc"`` (``outlier_proba_``, and E[ρ],
        the ε of its robust-max likelihood)."""
        est = _fitted_gp(estimator)
        method = getattr(est, "method_", est.method)
        if method not in ("rmgpc", "smgpc"):
            raise ValueError(f"outlier probabilities need method='rmgpc'; this estimator was fitted with "
                             f"method={method!r}")
        rho = float(est.model_.likelihood.epsilon) if method == "rmgpc" else None
        return cls(outlier_proba=est.outlier_proba_, flipped=flipped, expected_rho=rho).plot(ax=ax)
