"""``GPClassifier``: the scikit-learn estimator, and the only place where strings become objects.

It validates inputs (with errors that say what is wrong and where), encodes labels, turns
``random_state`` into one ``torch.Generator``, builds kernel/likelihood/engine from their names,
runs ``train.fit``, and predicts through ``sparse.predict``. It holds no maths.

Saved models (``save``/``load``) are plain dictionaries of tensors, numbers and strings read back
with ``torch.load(weights_only=True)``: loading never executes code from the file.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import os
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from . import kernels as K
from .likelihoods import (AdditiveGaussian, BinaryAdditiveGaussian, BinaryHinge, BinarySoftmax, MulticlassHinge,
                          RobustMax, Softmax)
from .likelihoods.additive import NOISE_VARIANCE, PREDICT_RULES
from .sparse import InducingPosterior, SparseGP, init_inducing, predict as predict_outputs
from .train import (COMPILE_MODES, TrainSettings, atomic_save, digest, fit as fit_loop, file_error_detail,
                    record_engine_events, refresh, _state_to_dict, _load_state)
from .ep import EP
from .fitc_ep import GFITC
from .rmgpc import RMGPC
from .sep import APEP, LOG_Z_KINDS, SEP
from .vi import VI
from . import stream

__all__ = ["GPClassifier", "METHODS", "LIKELIHOODS", "KERNELS", "ModelFileError"]

METHODS = ("vi", "ep", "sep", "gfitc", "pep", "apep", "arpep", "rpapep", "bsvm", "rmgpc", "smgpc")
STREAM_METHODS = ("vi", "sep", "apep", "arpep", "rpapep")   # state independent of N: can stream / run data-parallel
FREE_GAUSSIAN_METHODS = ("vi", "arpep", "rpapep", "bsvm")   # q(u) a free Gaussian: hybrids
ROW_SITE_METHODS = ("ep", "pep", "gfitc", "rmgpc", "smgpc")  # one EP site per training row: warm starts match rows
LIKELIHOODS = ("robustmax", "step", "probit", "logit", "softmax")
ADDITIVE_LIKELIHOODS = ("step", "probit", "logit", "softmax")   # additive-noise-gpc: method="vi" ...
EP_BINARY_LIKELIHOODS = ("step", "probit", "logit")   # ... and binary EP/SEP/PEP with one-latent probit sites
KERNELS = ("rbf", "matern12", "matern32", "matern52", "linear", "matern52+rbf")
DTYPES = {"float64": torch.float64, "float32": torch.float32}
_FORMAT = "sgpc-model"
_VERSION = 1


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
    deviation = np.abs(H - H.mean(0)).max(0)                  # the largest distance from the mean, per feature
    constant = (std <= 1e-12 * np.abs(H).max(0)) | (deviation <= 1e-12)
    reach = deviation / 20.0
    ls = math.sqrt(D) * np.where(constant, 1.0, np.maximum(std, reach))
    tiny = np.flatnonzero(ls < 100.0 * K.LENGTHSCALE_FLOOR)
    if tiny.size:
        warnings.warn(f"feature(s) {tiny[:8].tolist()}{' ...' if tiny.size > 8 else ''} vary on scales near or below "
                      f"{100.0 * K.LENGTHSCALE_FLOOR:g} (length-scales stop at {K.LENGTHSCALE_FLOOR:g}): the kernel cannot "
                      "resolve them and the fit may stay at the prior; standardise X (sklearn.preprocessing.StandardScaler)",
                      UserWarning, stacklevel=3)
    return ls


def _architecture(extractor: torch.nn.Module | None) -> tuple | None:
    """A feature extractor's class and the names and shapes of its weights and buffers (None without one):
    what a warm start must find unchanged (a new or removed extractor was ignored by warm starts)."""
    if extractor is None:
        return None
    return (type(extractor).__qualname__,) + tuple((k, tuple(v.shape)) for k, v in extractor.state_dict().items())


def _features(extractor: torch.nn.Module, X: torch.Tensor, batch_size: int = 4096) -> np.ndarray:
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


class ModelFileError(ValueError):
    """A model file is missing, truncated, corrupt or not an sgpc model."""


def _choice(kind: str, value, valid) -> None:
    if value not in valid:
        raise ValueError(f"unknown {kind} {value!r}; valid: {', '.join(map(repr, valid))}")


def _real(name: str, value, *, low: float, high: float = math.inf, low_closed: bool = False,
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


def _flag(name: str, value) -> None:
    """ValueError unless ``value`` is True or False (the text "False" is true in Python: it switched on)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def _unique_labels(y: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
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


def _plain(name: str, value):
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


def _check_device(device) -> None:
    """A clear error for a device torch does not know or that this machine lacks (CUDA)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"unknown device {device!r} ({exc}); use 'cpu', 'cuda' or 'cuda:N'") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} needs CUDA, which this torch build or machine does not have; use 'cpu'")


def _check_finite(X: np.ndarray, name: str = "X", when: str = "fitting", first_row: int = 0) -> None:
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


def _validated(estimator, X, y=None, *, reset: bool, name: str = "X", when: str | None = None):
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
    _check_finite(out[0] if y is not None else out, name=name, when=when or ("fitting" if reset else "predicting"))
    return out


def _check_data_parallel_extractor(extractor) -> None:
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


class GPClassifier(ClassifierMixin, BaseEstimator):
    """Sparse Gaussian-process classifier with inducing points (multi-class and binary).

    Args:
        method: inference method: "vi" (Hensman et al. 2015; free Gaussian q, ELBO), "ep" (EP with
            rank-one sites on the pairwise step factors, scalable-ep §2.2), "sep" (stochastic EP, tied
            sites, memory independent of N, §2.3.1), "pep" (Power EP with rank-one sites on the
            robust-max likelihood, alpha paper §3.1), "apep" (tied factor optimised by gradient of
            the Power-EP energy, alpha §3.2), "arpep" (free Gaussian q, alpha eq. 9), "rpapep"
            (free Gaussian q with the prior as one more factor, alpha eq. 10),
            "gfitc" (EP in function space on the FITC prior with the exact step likelihood, warm-started
            and run for at most 20 sweeps, relative tolerance 1e-3, before each hyper-parameter step —
            ``state_.report()`` says whether the last run converged; full batch only, use optimizer="lbfgs").
            "bsvm" (Bayesian SVM, multiclass-bayesian-svm §3: the Crammer–Singer hinge pseudo-likelihood,
            ELBO eq. 12 with q(λ_n) at its optimum, inducing inputs shared by all classes; with 2 classes
            the binary Bayesian SVM of eq. 3 with one latent function; ``shared_inducing`` is ignored and
            ``likelihood`` must stay at its default; predict_proba = P(argmax f* = c)). The paper's one-vs-rest
            baseline is ``sklearn.multiclass.OneVsRestClassifier(GPClassifier(method="bsvm"))``: each
            2-class sub-problem is then the binary BSVM.
            "rmgpc" (robust multi-class GPC, Hernández-Lobato et al. 2011: step likelihood plus outlier
            indicators z_i ~ Bernoulli(ρ), ρ ~ Beta(outlier_prior_a, outlier_prior_b); EP in function space;
            predict_proba = (1 − E[ρ]) P(argmax) + E[ρ]/C; ``epsilon`` is ignored, it is set to E[ρ]) and
            "smgpc" (the same without indicators: step likelihood with latent Gaussian noise). Both are
            full batch (use optimizer="lbfgs"); with n_inducing >= the number of rows the GP is the full GP
            (FITC with Z = X, fixed: exact), otherwise FITC with n_inducing inducing points.
        alpha: the α of "pep", "apep", "arpep", "rpapep", in (0, 1] (1 = EP; → 0 approaches VI).
        likelihood: "robustmax" (step likelihood with label-noise ε; with 2 classes it keeps two latent
            functions — the pairwise C = 2 model, a valid binary model, used by every EP-family method),
            or the additive-noise likelihoods of Liu et al. (``method="vi"`` only): "step", "probit",
            "logit" (GPC-I/II/III: Gaussian noise of variance a = 0, 1, 2.897 on an internal robust step,
            analytic ELBO eqs. 8/18) and "softmax" (GPCsm, analytic bound eq. 25). With 2 classes these
            use their binary form with ONE latent function (eqs. 5, 8, 9; softmax: the logistic
            likelihood on f = f_1 − f_0). "step"/"probit"/"logit" also work with "ep", "sep" and "pep"
            for 2 classes: one site per point on the single latent function (probit sites mixed with δ).
        kernel: "rbf" (ARD squared exponential), "matern12", "matern32", "matern52", "linear", or
            "matern52+rbf" (sum; additive-noise-gpc Table V: the RBF term starts at 10× the Matérn
            length-scale, App. D's 0.1√D and √D when init_lengthscale = 0.1√D).
        n_inducing: M, inducing points per latent function (clamped to the number of rows).
        inducing_init: "kmeans" or "random" (a random subset of training rows).
        learn_inducing: optimise the inducing inputs.
        shared_inducing: one set of inducing inputs for all latent functions (else one per latent, as in the papers).
        shared_kernel: one set of kernel hyper-parameters for all latent functions.
        latent_noise: initial variance of the additive latent noise (papers' kernel); None removes the term.
        epsilon: robust-max label-noise probability; learn_epsilon: make it trainable.
        damping: initial EP/SEP damping (annealed by 0.99 per pass over the data, floor 0.05 or the
            damping itself when it is smaller).
        optimizer: "adam", "lbfgs" (full batch) or "adaptive" (the papers' batch rule: per-parameter
            rates ×1.02 while a gradient keeps its sign, ×0.5 when it flips; the rule has no bound, so
            a rate whose gradient keeps its sign grows as 1.02^t — PEP at α = 10⁻³ on satimage diverged
            at step ~1 200 of 2 000, docs/results-alpha.md; the papers ran it for 250–500 steps).
            learning_rate: step size.
        lr_decay: Adam's learning rate is multiplied by this factor per pass over the data (1 = constant).
        max_iter: optimiser steps; n_epochs: passes over the data (overrides max_iter when set).
        batch_size: minibatch size; None = full batch.
        random_state: int, RandomState or None; all randomness flows from it (``save`` needs an int or None).
        dtype: "float64" (default) or "float32". device: "cpu", "cuda", ...
        verbose: 0 silent, 1 progress bar and a summary.
        eval_every: steps between evaluations of the validation data passed to ``fit``.
        checkpoint_path, checkpoint_every: resumable checkpoints every K steps; ``fit(..., resume=True)`` continues.
        feature_extractor: optional ``torch.nn.Module`` mapping X [N,D] to features [N,D'] (hybrid model,
            multiclass-bayesian-svm §3.4; free-Gaussian methods "vi", "arpep", "rpapep", "bsvm"). ``fit``
            trains a copy jointly with the GP by backpropagation (the argument itself is not modified);
            inducing inputs live in feature space, initialised by k-means on the features of the initial
            extractor. ``save`` stores its weights; ``load(path, feature_extractor=module)`` needs a module
            of the same architecture to load them into. It is converted to ``dtype``. End it with
            ``nn.BatchNorm1d(D', affine=False)``: without a normalisation the features can leave the kernel's
            length-scales within a few steps, and with a per-row one (LayerNorm) the jointly trained
            extractor can still map every input to one point, which lowers the predictive variance faster
            than the GP mean can learn to discriminate (measured with the paper's MNIST CNN: 10% accuracy
            with LayerNorm, 95% with BatchNorm after 60 steps; docs/results-bsvm.md). The extractor is in
            training mode during ``fit`` and in eval mode for prediction.
        noise_variance: a of "step"/"probit"/"logit" (None = 0, 1, 2.897 respectively); a user-given
            a ≥ 0 replaces it (a = 0 is exact, not approximated). Only for these three likelihoods.
        delta: initial robustness δ of "step"/"probit"/"logit" (eqs. 5, 15), in (0, (C−1)/C);
            learn_delta: optimise δ with the hyper-parameters (default, §IV-B-1) or keep it fixed.
        n_samples_predict: points S of the "softmax" prediction (eq. 26); softmax_predict: "qmc"
            (scrambled Sobol points with a fixed seed, deterministic; default) or "mc" (seeded Monte
            Carlo, the paper's estimate). With 2 classes the softmax prediction is a 1-D Gauss–Hermite
            integral and these are unused.
        init_lengthscale: initial kernel length-scale (a number, all dimensions); None = √D × the
            standard deviation of each feature, floored so that no single feature isolates a row
            (``initial_lengthscales``). init_variance: initial kernel amplitude σ²
            (additive-noise-gpc App. D: 0.1√D and 5.0).
        warm_start: when the estimator was fitted before with the same classes (and features), ``fit``
            continues from the previous hyper-parameters, inducing inputs, feature extractor and q instead
            of re-initialising them (used by active learning). The site-based methods carry their
            sites over: ep/pep/gfitc/rmgpc/smgpc match each training row to an identical row (features
            and label) of the previous fit and keep its sites, a new row's start as in a cold fit and
            a dropped row's leave q; sep scales its tied site to the new slot counts; apep keeps its
            tied factor. Their damping clock restarts.
        outlier_prior_a, outlier_prior_b: a₀, b₀ of the Beta prior on the outlier fraction ρ of "rmgpc"
            (default Beta(1, 9): prior mean 0.1).
        sep_log_z: the estimate of log Z_q whose gradient "sep" follows: "local" (each factor's own site,
            recomputed from the SEP cavity; default) or "tied" (the cavity q/φ̃^{1/n} of the paper's
            wording, whose gradient is biased: ``sgpc.sep`` and docs/results.md).
        compile: None (default: eager) or a ``torch.compile`` mode for the training loss of a minibatch
            method (vi, sep, apep, arpep, rpapep): "default" or "reduce-overhead" (CUDA graphs). Meant for
            ``device="cuda"``, where a step is bound by kernel launches. In an MNIST-shaped fit (M = 200,
            B = 200) on an H100 a "vi" step took 3.5 ms instead of 7.8 with "reduce-overhead", and a "sep"
            step 46.9 ms instead of 18.6: use it for vi, not sep (arpep, rpapep and apep were not timed;
            SEP's compiled loss has since been cut from 15 graphs to 8, not yet timed on a GPU).
            On the CPU "default" gained 0–20% on satimage-shaped steps and nothing at the MNIST shape. The
            first step compiles (20–60 s); the site updates of sep/apep stay eager.

    Fitted attributes: classes_, n_features_in_, model_ (SparseGP), state_ (engine state),
    posterior_ (InducingPosterior), history_ (dict), n_iter_; for "rmgpc"/"smgpc" also outlier_proba_
    [N] (posterior probability that each training label is an outlier, σ(q_i); zeros for "smgpc").
    """

    def __init__(self, method: str = "vi", likelihood: str = "robustmax", kernel: str = "rbf",
                 n_inducing: int = 100, inducing_init: str = "kmeans", learn_inducing: bool = True,
                 shared_inducing: bool = False, shared_kernel: bool = False, latent_noise: float | None = 1e-3,
                 epsilon: float = 1e-3, learn_epsilon: bool = False, alpha: float = 0.5, damping: float = 0.5,
                 optimizer: str = "adam",
                 learning_rate: float = 0.01, lr_decay: float = 1.0, max_iter: int = 500, n_epochs: int | None = None,
                 batch_size: int | None = None, random_state=None, dtype: str = "float64",
                 device: str = "cpu", verbose: int = 0, eval_every: int = 50, checkpoint_path: str | None = None,
                 checkpoint_every: int = 0, feature_extractor: torch.nn.Module | None = None,
                 warm_start: bool = False, outlier_prior_a: float = 1.0, outlier_prior_b: float = 9.0,
                 noise_variance: float | None = None, delta: float = 1e-3, learn_delta: bool = True,
                 n_samples_predict: int = 1024, softmax_predict: str = "qmc", init_lengthscale: float | None = None,
                 init_variance: float = 1.0, sep_log_z: str = "local", compile: str | None = None):
        self.method = method
        self.likelihood = likelihood
        self.kernel = kernel
        self.n_inducing = n_inducing
        self.inducing_init = inducing_init
        self.learn_inducing = learn_inducing
        self.shared_inducing = shared_inducing
        self.shared_kernel = shared_kernel
        self.latent_noise = latent_noise
        self.epsilon = epsilon
        self.learn_epsilon = learn_epsilon
        self.alpha = alpha
        self.damping = damping
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.lr_decay = lr_decay
        self.max_iter = max_iter
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.random_state = random_state
        self.dtype = dtype
        self.device = device
        self.verbose = verbose
        self.eval_every = eval_every
        self.checkpoint_path = checkpoint_path
        self.checkpoint_every = checkpoint_every
        self.feature_extractor = feature_extractor
        self.warm_start = warm_start
        self.outlier_prior_a = outlier_prior_a
        self.outlier_prior_b = outlier_prior_b
        self.noise_variance = noise_variance
        self.delta = delta
        self.learn_delta = learn_delta
        self.n_samples_predict = n_samples_predict
        self.softmax_predict = softmax_predict
        self.init_lengthscale = init_lengthscale
        self.init_variance = init_variance
        self.sep_log_z = sep_log_z
        self.compile = compile

    # -- strings -> objects ------------------------------------------------------------------------
    def _check_options(self) -> None:
        _choice("method", self.method, METHODS)
        _choice("likelihood", self.likelihood, LIKELIHOODS)
        _choice("kernel", self.kernel, KERNELS)
        _choice("dtype", self.dtype, tuple(DTYPES))
        _choice("inducing_init", self.inducing_init, ("kmeans", "random"))
        _choice("sep_log_z", self.sep_log_z, LOG_Z_KINDS)
        _choice("compile", self.compile, COMPILE_MODES)
        if self.compile is not None and (self.method not in STREAM_METHODS or self.batch_size is None
                                         or self.feature_extractor is not None):
            raise ValueError(f"compile={self.compile!r} applies to the minibatch steps of "
                             f"{', '.join(map(repr, STREAM_METHODS))} without a feature extractor (set batch_size); "
                             f"got method={self.method!r}, batch_size={self.batch_size!r}"
                             f"{', a feature extractor' if self.feature_extractor is not None else ''}")
        if self.method in ("gfitc", "rmgpc", "smgpc") and self.batch_size is not None:
            raise ValueError(f"method={self.method!r} runs EP to convergence on the whole data set: use batch_size=None")
        if self.method in ("rmgpc", "smgpc"):
            if self.learn_epsilon:
                raise ValueError(f"method={self.method!r} sets epsilon to the posterior mean of rho: use learn_epsilon=False")
            for name in ("outlier_prior_a", "outlier_prior_b"):      # the Beta prior of ρ
                _real(name, getattr(self, name), low=0.0)
        _check_device(self.device)
        for name in ("learn_inducing", "shared_inducing", "shared_kernel", "learn_epsilon", "learn_delta", "warm_start"):
            _flag(name, getattr(self, name))
        _real("latent_noise", self.latent_noise, low=0.0, low_closed=True, none="no noise term")
        _real("alpha", self.alpha, low=0.0, high=1.0)
        _real("damping", self.damping, low=0.0, high=1.0)
        _real("epsilon", self.epsilon, low=0.0, high=1.0, high_closed=False)
        _real("learning_rate", self.learning_rate, low=0.0)
        _real("lr_decay", self.lr_decay, low=0.0, high=1.0)
        if not (isinstance(self.n_inducing, (int, np.integer)) and not isinstance(self.n_inducing, (bool, np.bool_))
                and self.n_inducing >= 1):
            raise ValueError(f"n_inducing must be a positive integer, got {self.n_inducing!r}")
        if self.feature_extractor is not None and not isinstance(self.feature_extractor, torch.nn.Module):
            raise ValueError(f"feature_extractor must be a torch.nn.Module or None, got {type(self.feature_extractor).__name__}")
        if self.feature_extractor is not None and self.method not in FREE_GAUSSIAN_METHODS:
            raise ValueError(f"feature_extractor needs a free-Gaussian method "
                             f"({', '.join(map(repr, FREE_GAUSSIAN_METHODS))}), got method={self.method!r}")
        self._check_additive_options()

    def _check_additive_options(self) -> None:
        if self.likelihood in ADDITIVE_LIKELIHOODS and self.method != "vi" and not (
                self.method in ("ep", "sep", "pep") and self.likelihood in EP_BINARY_LIKELIHOODS):
            raise ValueError(f"likelihood={self.likelihood!r} works with method='vi'"
                             f"{' and, for 2 classes, ep/sep/pep' if self.likelihood in EP_BINARY_LIKELIHOODS else ''}; "
                             f"got method={self.method!r} (EP-family methods use likelihood='robustmax')")
        if self.noise_variance is not None:
            if self.likelihood not in ("step", "probit", "logit"):
                raise ValueError(f"noise_variance applies to likelihood 'step', 'probit' or 'logit', "
                                 f"not {self.likelihood!r}")
            _real("noise_variance", self.noise_variance, low=0.0, low_closed=True)
        _real("delta", self.delta, low=0.0, high=1.0, high_closed=False)
        if not (isinstance(self.n_samples_predict, (int, np.integer)) and self.n_samples_predict >= 1):
            raise ValueError(f"n_samples_predict must be a positive integer, got {self.n_samples_predict!r}")
        _choice("softmax_predict", self.softmax_predict, PREDICT_RULES)
        _real("init_lengthscale", self.init_lengthscale, low=0.0, none="from the features' spread")
        _real("init_variance", self.init_variance, low=0.0)

    def _torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def _make_kernel(self, D: int, L: int, lengthscale) -> torch.nn.Module:
        if self.init_lengthscale is not None:
            lengthscale = float(self.init_lengthscale)
        kw = dict(shared=self.shared_kernel, lengthscale=lengthscale, noise=self.latent_noise,
                  variance=float(self.init_variance), dtype=self._torch_dtype())
        if self.kernel == "matern52+rbf":   # additive-noise-gpc Table V / App. D; one latent-noise term
            rbf_ls = None if lengthscale is None else 10.0 * torch.as_tensor(lengthscale, dtype=torch.float64)
            return K.Sum(K.Matern(D, L, nu=2.5, **kw), K.RBF(D, L, **{**kw, "lengthscale": rbf_ls, "noise": None}))
        if self.kernel == "rbf":
            return K.RBF(D, L, **kw)
        if self.kernel == "linear":
            return K.Linear(D, L, **kw)
        return K.Matern(D, L, nu={"matern12": 0.5, "matern32": 1.5, "matern52": 2.5}[self.kernel], **kw)

    def _make_likelihood(self, C: int) -> torch.nn.Module:
        if self.method == "bsvm":
            return BinaryHinge() if C == 2 else MulticlassHinge(C)
        if self.likelihood == "softmax":
            if C == 2:
                return BinarySoftmax()
            return Softmax(C, n_samples_predict=int(self.n_samples_predict), predict_rule=self.softmax_predict)
        if self.likelihood in NOISE_VARIANCE:
            a = NOISE_VARIANCE[self.likelihood] if self.noise_variance is None else float(self.noise_variance)
            if C == 2:
                return BinaryAdditiveGaussian(a, self.delta, learn_delta=self.learn_delta)
            return AdditiveGaussian(C, a, self.delta, learn_delta=self.learn_delta)
        return RobustMax(C, epsilon=self.epsilon, learn_epsilon=self.learn_epsilon)

    def _make_engine(self):
        # binary additive-noise likelihoods: one site per point on the single latent function (probit
        # sites, Φ(s f/√a) mixed with δ); robust-max keeps the pairwise step factors of scalable-ep eq. 6
        factor = "likelihood" if self.likelihood in EP_BINARY_LIKELIHOODS else "pairwise"
        if self.method == "ep":
            return EP(damping=self.damping, factor=factor)
        if self.method == "sep":
            return SEP(damping=self.damping, factor=factor, log_z=self.sep_log_z)
        if self.method == "gfitc":
            return GFITC(damping=self.damping)
        if self.method in ("rmgpc", "smgpc"):
            return RMGPC(damping=self.damping, outliers=self.method == "rmgpc",
                         prior_a=float(self.outlier_prior_a), prior_b=float(self.outlier_prior_b))
        if self.method == "pep":
            return EP(alpha=self.alpha, factor="likelihood", damping=self.damping)
        if self.method == "apep":
            return APEP(alpha=self.alpha)
        if self.method == "arpep":
            return VI(alpha=self.alpha)
        if self.method == "rpapep":
            return VI(alpha=self.alpha, objective="rpapep")
        return VI()

    def _train_settings(self) -> TrainSettings:
        return TrainSettings(optimizer=self.optimizer, learning_rate=self.learning_rate, lr_decay=self.lr_decay,
                             max_iter=self.max_iter,
                             n_epochs=self.n_epochs, batch_size=self.batch_size,
                             checkpoint_path=self.checkpoint_path, checkpoint_every=self.checkpoint_every,
                             eval_every=self.eval_every, progress=bool(self.verbose),
                             model_structure=repr(self._structure(with_device=False)), compile=self.compile)

    def _validator(self, engine, X_val, y_val):
        """None, or ``f(model, state) -> {"error", "nll"}`` on the validation rows (for the fit history)."""
        if X_val is None:
            return None
        try:
            Xv = self._tensor(self._validate_X(X_val, reset=False, name="X_val", when="fitting"))
        except ValueError as exc:        # scikit-learn's feature-count message names "X"
            if str(exc).startswith("X has"):
                raise ValueError("X_val" + str(exc)[1:]) from None
            raise
        yv = torch.as_tensor(self._encode(y_val, "y_val"), device=self.device)
        if yv.ndim != 1 or len(yv) != len(Xv):
            got = len(yv) if yv.ndim == 1 else tuple(yv.shape)
            raise ValueError(f"X_val has {len(Xv)} rows but y_val has {got} label(s); pass one label per validation row")

        def validate(model, state):
            lp, scores = predict_outputs(model, engine.posterior(model, state), Xv)
            return {"error": float((scores.argmax(1) != yv).double().mean()),
                    "nll": float(-lp.gather(1, yv[:, None]).mean())}
        return validate

    def _build(self, D: int, C: int, Z: np.ndarray, lengthscale, extractor=None) -> SparseGP:
        lik = self._make_likelihood(C)
        kern = self._make_kernel(D, lik.n_latent, lengthscale)
        Zt = torch.as_tensor(Z, dtype=self._torch_dtype())
        if not (self.shared_inducing or self.method == "bsvm"):   # bsvm: Z shared by all classes (§3.3)
            Zt = Zt.expand(lik.n_latent, *Zt.shape).clone()
        model = SparseGP(kern, lik, Zt, learn_inducing=self.learn_inducing, feature_extractor=extractor)
        return model.to(device=self.device, dtype=self._torch_dtype())

    # -- validation ----------------------------------------------------------------------------------
    def _validate_X(self, X, reset: bool, name: str = "X", when: str | None = None) -> np.ndarray:
        return _validated(self, X, reset=reset, name=name, when=when)

    def _copy_extractor(self) -> torch.nn.Module | None:
        """A private copy of ``feature_extractor`` in the estimator's dtype/device (None without one)."""
        if self.feature_extractor is None:
            return None
        return copy.deepcopy(self.feature_extractor).to(device=self.device, dtype=self._torch_dtype())

    def _structure(self, with_device: bool = True) -> tuple:
        """The settings that define the fitted model's structure (not its initial values): a warm start
        continues only a model built with the same ones, so that the fitted model is what the settings
        say (and ``save`` writes settings that rebuild it). Initial values (latent_noise's value,
        init_lengthscale, inducing_init, ...) and the engine's settings (alpha, damping, learning rate)
        may change between warm-started fits. A checkpoint resumes only the same structure, on any device
        (``with_device=False``)."""
        return (self.method, self.likelihood, self.kernel, self.latent_noise is None, bool(self.shared_kernel),
                bool(self.shared_inducing), bool(self.learn_inducing), bool(self.learn_epsilon),
                None if self.learn_epsilon else float(self.epsilon), self.dtype,
                *((str(self.device),) if with_device else ()),
                self.noise_variance, bool(self.learn_delta), None if self.learn_delta else float(self.delta),
                int(self.n_samples_predict), self.softmax_predict,
                float(self.outlier_prior_a), float(self.outlier_prior_b), _architecture(self.feature_extractor))

    def _warm(self, D: int, classes: np.ndarray, previous: np.ndarray | None, M: int, full_gp: bool = False) -> bool:
        """Whether ``fit`` continues from the previous fit (``warm_start`` and a compatible fitted model:
        the same structural settings (``_structure``: method, likelihood, kernel, sharing, dtype, ...), the
        same classes ``previous``, without a feature extractor the same number of features D, and as many
        inducing inputs as this fit uses, M — a model fitted on fewer rows than ``n_inducing`` has fewer;
        a full GP (rmgpc/smgpc with Z = X) continues only as a full GP)."""
        if not (self.warm_start and hasattr(self, "state_") and previous is not None
                and getattr(self, "_fitted_as_", None) == self._structure()
                and len(previous) == len(classes) and bool(np.all(previous == classes))):
            return False
        if getattr(self, "_full_gp_", False) != full_gp or (not full_gp and self.model_.n_inducing < M):
            return False
        return self.model_.feature_extractor is not None or self.model_.kernel.input_dim == D

    def _inducing_count(self, N: int, stacklevel: int) -> int:
        """M = n_inducing, or N (with a warning) when there are fewer rows."""
        M = int(self.n_inducing)
        if M > N:
            warnings.warn(f"n_inducing={M} is larger than the number of training rows ({N}); using {N}",
                          UserWarning, stacklevel=stacklevel + 1)
            M = N
        return M

    def _carried_state(self, engine, Xt: torch.Tensor, yt: torch.Tensor, keys: np.ndarray | None):
        """The previous fit's engine state carried over to the training set Xt, yt (a warm start).

        Per-row sites follow their rows: ``keys`` (``row_keys`` of the new rows) are matched against
        the previous fit's, each previous row used at most once; unmatched rows get −1 (a zero site)."""
        carry = getattr(engine, "carry", None)
        if carry is None:                  # a free Gaussian q: nothing depends on the training rows
            return self.state_
        keep = None
        if keys is not None:
            old = getattr(self, "_row_keys_", None)
            rows: dict[int, list[int]] = {}
            for i, k in enumerate(() if old is None else old.tolist()):
                rows.setdefault(k, []).append(i)
            keep_np = np.array([rows[k].pop(0) if rows.get(k) else -1 for k in keys.tolist()], dtype=np.int64)
            keep = torch.as_tensor(keep_np, device=self.device)
        return carry(self.model_, self.state_, Xt, yt, keep)

    def _tensor(self, A: np.ndarray) -> torch.Tensor:
        A = np.asarray(A)
        if not A.flags.writeable or any(st < 0 for st in A.strides):
            A = A.copy()   # torch cannot wrap read-only memory (memory-mapped input) or reversed views (X[::-1])
        return torch.as_tensor(A, dtype=self._torch_dtype(), device=self.device)

    # -- the estimator API ---------------------------------------------------------------------------
    def fit(self, X, y=None, *, X_val=None, y_val=None, resume: bool = False, comm=None):
        """Fit the classifier.

        Args:
            X: [N,D] numeric array-like; y: [N] labels (ints or strings), at least two classes.
                Out of core: X a ``stream`` source (``ParquetSource``, ``NpySource``, …) with y None,
                a .parquet path (y: the label column's name, default the last column) or an [N,D]
                .npy path (y: the labels' .npy path or array) — see ``_fit_stream``.
            X_val, y_val: optional validation data; its error and NLL go into ``history_``.
            resume: continue from ``checkpoint_path`` when that file exists.
            comm: a ``distributed.Communicator`` for data-parallel training (every rank calls fit
                with the same data and random_state; rank 0 writes checkpoints).
        Returns: self.

        A fit that raises (bad input found late, a diverged run, an interrupt) leaves a fitted
        estimator as it was: its fitted attributes are restored, so it still predicts as before.
        """
        kept = self._fitted_attributes()
        try:
            if self.feature_extractor is None:
                self._fit(X, y, X_val=X_val, y_val=y_val, resume=resume, comm=comm)
            else:
                # dropout draws from torch's global generator: seeded from random_state for this fit (a
                # second draw, not the minibatch generator's seed), and the caller's generator state is
                # given back
                seed = int(check_random_state(self.random_state).randint(0, 2 ** 31 - 1, size=2)[1])
                device = torch.device(self.device)
                with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
                    torch.manual_seed(seed)
                    self._fit(X, y, X_val=X_val, y_val=y_val, resume=resume, comm=comm)
        except BaseException:
            for name in [k for k in vars(self) if k.endswith("_") and k not in kept]:
                delattr(self, name)
            self.__dict__.update(kept)
            raise
        # what the fitted model was built with: ``save`` writes these, not parameters set since (a
        # set_params after the fit, or a later fit that failed, wrote settings that rebuild another model
        # or none)
        self._fitted_params_ = self.get_params(deep=False)
        return self

    def _fitted_attributes(self) -> dict:
        """The fitted attributes (names ending in "_"); with ``warm_start``, copies of the model and state
        that a continued fit trains in place."""
        kept = {k: v for k, v in vars(self).items() if k.endswith("_") and not k.startswith("__")}
        if self.warm_start:
            kept.update({k: copy.deepcopy(kept[k]) for k in ("model_", "state_") if k in kept})
        return kept

    def _fit(self, X, y=None, *, X_val=None, y_val=None, resume: bool = False, comm=None):
        """``fit`` without the restore on failure."""
        self._check_options()
        if (X_val is None) != (y_val is None):
            raise ValueError("pass X_val and y_val together (validation needs rows and their labels)")
        if comm is not None and comm.world_size > 1:
            _check_data_parallel_extractor(getattr(self, "feature_extractor", None))
        if isinstance(X, (str, os.PathLike)) or stream.is_source(X):
            return self._fit_stream(self._as_source(X, y), X_val=X_val, y_val=y_val, resume=resume, comm=comm)
        if y is None:
            raise ValueError("requires y to be passed, but the target y is None")
        X, y = _validated(self, X, y, reset=True)
        classes, y_enc = _unique_labels(y, "y")         # mixed label types: our message, not numpy's TypeError
        check_classification_targets(y)
        previous_classes = getattr(self, "classes_", None)
        self.classes_ = classes
        if len(self.classes_) < 2:
            raise ValueError(f"y has only one class ({self.classes_[0]!r}); a classifier needs at least 2 classes")
        if self.method in ("ep", "sep", "pep") and self.likelihood in EP_BINARY_LIKELIHOODS and len(self.classes_) != 2:
            raise ValueError(f"method={self.method!r} with likelihood={self.likelihood!r} is the binary model (one "
                             f"latent function, probit sites); y has {len(self.classes_)} classes: use "
                             "likelihood='robustmax' for more than 2")
        N, D = X.shape
        M = self._inducing_count(N, stacklevel=2)
        rng = check_random_state(self.random_state)
        seed = int(rng.randint(0, 2 ** 31 - 1))
        generator = torch.Generator().manual_seed(seed)
        engine = self._make_engine()
        Xt, yt = self._tensor(X), torch.as_tensor(y_enc, dtype=torch.long, device=self.device)
        full_gp = self.method in ("rmgpc", "smgpc") and M == N   # FITC with Z = X fixed is the full GP
        warm = self._warm(D, self.classes_, previous_classes, M, full_gp)
        keys = row_keys(X, y_enc) if self.method in ROW_SITE_METHODS else None
        if warm and full_gp:        # the full GP's inducing inputs are its training rows: Z follows X
            Zt = self._tensor(X)
            if self.model_.Z.ndim == 3:
                Zt = Zt.expand(self.model_.Z.shape[0], *Zt.shape).clone()
            self.model_.Z = torch.nn.Parameter(Zt, requires_grad=False)
        if not warm:
            extractor = self._copy_extractor()
            # a hybrid model's kernel acts on features: initialise Z and length-scales on h(X) of the initial h
            H = X if extractor is None else _features(extractor, Xt)
            # hybrid: the spread of the initial features says little about the trained ones (a random CNN maps
            # all images close together): scale by each feature's root mean square instead
            std = H.std(0) if extractor is None else np.sqrt(np.mean(H * H, 0))
            lengthscale = initial_lengthscales(H, std)
            Z = X.copy() if full_gp else init_inducing(H, M, self.inducing_init, seed=seed)
            self.model_ = self._build(H.shape[1], len(self.classes_), Z, lengthscale, extractor)
            if full_gp:
                self.model_.Z.requires_grad_(False)
        state = self._carried_state(engine, Xt, yt, keys) if warm else engine.init(self.model_, Xt, yt, generator)
        settings = self._train_settings()
        validate = self._validator(engine, X_val, y_val)
        if self.verbose:
            print(f"sgpc: {self.method} with {'hinge' if self.method == 'bsvm' else self.likelihood} likelihood, {len(self.classes_)} classes "
                  f"({self.model_.n_latent} latent functions"
                  f"{'; binary form' if self.model_.n_latent == 1 else ''}), N={N}, D={D}, M={M}")
        self.state_, history = fit_loop(self.model_, engine, state, Xt, yt, settings, generator=generator,
                                        validate=validate, resume=resume, comm=comm)
        # the loop ends on a hyper-parameter step: refresh the sites (a no-op for VI) before q is read
        self.state_ = refresh(self.model_, engine, self.state_, Xt, yt, comm=comm)
        record_engine_events(history, self.state_, len(history.iteration), reason="final refresh", final=True)
        self.posterior_ = engine.posterior(self.model_, self.state_)
        if self.method in ("rmgpc", "smgpc"):
            self.outlier_proba_ = engine.outlier_proba(self.state_).cpu().numpy().astype(np.float64)
        elif hasattr(self, "outlier_proba_"):        # an earlier rmgpc fit's, of other rows
            del self.outlier_proba_
        self.history_ = history.as_dict()
        self.n_iter_ = len(history.iteration)
        if keys is not None:
            self._row_keys_ = keys
        self._fitted_as_ = self._structure()     # what a warm start may continue
        self._full_gp_ = full_gp
        self.warm_started_ = bool(warm)
        return self

    @staticmethod
    def _as_source(X, y=None, *, labelled: bool = True):
        """A ``stream`` source from a source, a .parquet path or a .npy path (see ``fit``)."""
        if stream.is_source(X):
            if y is not None:
                raise ValueError("a stream source carries its labels: pass y=None")
            return X
        path = os.fspath(X)
        if path.endswith((".parquet", ".pq")):
            if y is None and labelled:
                import pyarrow.parquet as pq
                y = pq.ParquetFile(path).schema_arrow.names[-1]
            if y is not None and not isinstance(y, str):
                raise ValueError(f"for a Parquet file, y is the label column's name, got {type(y).__name__}")
            return stream.ParquetSource(path, target=y)
        if path.endswith(".npy"):
            if y is None and labelled:
                raise ValueError(f"{path}: pass the labels as y (a .npy path or an array)")
            return stream.NpySource(path, y)
        raise ValueError(f"{path}: streaming reads .parquet/.pq and .npy files; load other formats with "
                         "sgpc.datasets.load_file")

    def _fit_stream(self, source, *, X_val=None, y_val=None, resume: bool = False, comm=None):
        """Fit from a source without loading it (methods in ``STREAM_METHODS``, minibatches only).

        One streaming pass (``stream.statistics``) gives N, the classes and their counts (SEP's slot
        counts), the features' standard deviations (the length-scale initialisation, as for arrays)
        and a uniform sample of 20 000 rows for the k-means inducing initialisation. Features are used
        as the source gives them, as for arrays: standardise with ``stream.standardized(source)``.
        Minibatches are block-shuffled (``stream.Minibatches``). Unlike the in-memory fit, the sites
        are not refreshed by a final full-data update (that would be one more pass over the data).
        """
        if self.method not in STREAM_METHODS:
            why = "is not implemented for streaming" if self.method == "bsvm" else \
                "keeps per-point state and needs the data in memory"
            raise ValueError(f"method={self.method!r} {why}; streaming supports {', '.join(map(repr, STREAM_METHODS))}")
        if self.batch_size is None:
            raise ValueError("streaming from a file or source needs minibatches: set batch_size")
        if getattr(self, "feature_extractor", None) is not None:
            raise ValueError("streaming does not support a feature_extractor; fit it on arrays")
        rng = check_random_state(self.random_state)
        seed = int(rng.randint(0, 2 ** 31 - 1))
        generator = torch.Generator().manual_seed(seed)
        st = stream.statistics(source, sample_size=20000, seed=seed)
        if st.classes is None:
            raise ValueError("the source has no labels (target=None); fitting needs them")
        check_classification_targets(st.classes)     # continuous labels: sklearn's error, as for arrays
        if len(st.classes) < 2:
            raise ValueError(f"y has only one class ({st.classes[0]!r}); a classifier needs at least 2 classes")
        previous_classes = getattr(self, "classes_", None)
        N, D = st.n_rows, source.n_features
        M = self._inducing_count(N, stacklevel=3)
        warm = self._warm(D, st.classes, previous_classes, M)
        self.classes_, self.n_features_in_ = st.classes, source.n_features
        engine = self._make_engine()
        counts = torch.as_tensor(st.class_counts, dtype=self._torch_dtype(), device=self.device)
        if warm:      # continue the previous fit (vi/arpep/rpapep/apep: as it is; sep: tied site rescaled)
            state = self.state_
            if hasattr(engine, "counts_from_classes"):
                state = engine.rescale(state, engine.counts_from_classes(counts))
        else:
            Z = init_inducing(st.X_sample, min(M, len(st.X_sample)), self.inducing_init, seed=seed)
            # as for arrays, with the largest deviation taken over the uniform sample of rows
            self.model_ = self._build(D, len(self.classes_), Z, initial_lengthscales(st.X_sample, st.std))
            state = engine.init(self.model_, None, None, generator)
            if hasattr(engine, "counts_from_classes"):       # SEP's slot counts n_l from the class counts
                state = dataclasses.replace(state, counts=engine.counts_from_classes(counts))
        settings = self._train_settings()
        validate = self._validator(engine, X_val, y_val)
        if self.verbose:
            print(f"sgpc: {self.method} streamed, {len(self.classes_)} classes, N={N}, D={D}, M={M}")
        self.state_, history = fit_loop(self.model_, engine, state, stream.LabelEncoded(source, self.classes_), None,
                                        settings, generator=generator, validate=validate, resume=resume, comm=comm)
        self.posterior_ = engine.posterior(self.model_, self.state_)
        self.history_ = history.as_dict()
        self.n_iter_ = len(history.iteration)
        if hasattr(self, "outlier_proba_"):          # an earlier rmgpc fit's (streaming has no rmgpc)
            del self.outlier_proba_
        self._fitted_as_ = self._structure()
        self._full_gp_ = False
        self.warm_started_ = bool(warm)
        self._row_keys_ = None                      # what an earlier in-memory fit left describes other rows
        if hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        return self

    def _encode(self, y, name: str = "y") -> np.ndarray:
        y = np.asarray(y)
        _unique_labels(y, name)
        idx = np.searchsorted(self.classes_, y)
        idx = np.clip(idx, 0, len(self.classes_) - 1)
        unknown = self.classes_[idx] != y
        if unknown.any():
            raise ValueError(f"labels {np.unique(y[unknown])[:5].tolist()} were not seen in training; "
                             f"known classes: {self.classes_.tolist()}")
        return idx

    def _outputs(self, X, which: int) -> np.ndarray:
        """``sparse.predict``'s output ``which`` (0: log-probabilities, 1: decision scores), [N,C], over the
        rows of X (arrays, files, sources)."""
        check_is_fitted(self, "posterior_")
        if isinstance(X, (str, os.PathLike)) or stream.is_source(X):
            # streamed: one block of rows at a time; memory is the output [N,K] plus one block
            source = self._as_source(X, labelled=False)
            if source.n_features != self.n_features_in_:
                raise ValueError(f"the source has {source.n_features} feature columns, the model {self.n_features_in_}; "
                                 "for a file with a label column pass stream.ParquetSource(path, target=...)")
            out = np.empty((source.n_rows, len(self.classes_)))
            row = 0
            for Xb, _ in stream.iter_rows(source):
                _check_finite(Xb, when="predicting", first_row=row)
                out[row:row + len(Xb)] = predict_outputs(self.model_, self.posterior_, self._tensor(Xb))[which].cpu().numpy()
                row += len(Xb)
            return out
        X = self._validate_X(X, reset=False)
        return predict_outputs(self.model_, self.posterior_, self._tensor(X))[which].cpu().numpy().astype(np.float64)

    def predict_log_proba(self, X) -> np.ndarray:
        """log p(y = c | x) for each row and class (columns ordered as ``classes_``): [N,C]."""
        check_is_fitted(self, "posterior_")
        return self._outputs(X, 0)

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities [N,C]; rows sum to one."""
        return np.exp(self.predict_log_proba(X))

    def predict(self, X) -> np.ndarray:
        """Class label for each row: [N].

        The likelihood's decision rule (``Likelihood.decision_scores``): the most probable class, except
        for the multi-class ``bsvm``, which predicts with the SVM's rule, argmax_c of the posterior mean
        of f*_c — so there ``predict`` is not always the argmax of ``predict_proba``.
        """
        check_is_fitted(self, "posterior_")
        return self.classes_[np.argmax(self._outputs(X, 1), axis=1)]

    # -- persistence -----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted model to ``path`` (plain tensors and values; see ``load``).

        A feature extractor is stored as its weights only (inside the model's state dict): ``load``
        needs a module of the same architecture.
        """
        check_is_fitted(self, "posterior_")
        classes = self.classes_
        fitted_with = getattr(self, "_fitted_params_", None) or self.get_params(deep=False)
        params = {k: _plain(k, v) for k, v in fitted_with.items() if k != "feature_extractor"}
        payload = {
            "format": _FORMAT, "version": _VERSION,
            "params": params,
            "has_feature_extractor": self.model_.feature_extractor is not None,
            "classes": classes.tolist(), "classes_dtype": classes.dtype.str,
            "n_features_in": int(self.n_features_in_),
            "model": {k: v.detach().cpu() for k, v in self.model_.state_dict().items()},
            "state": _state_to_dict(self.state_),
            "posterior": {"mean": self.posterior_.mean.detach().cpu(), "chol": self.posterior_.chol.detach().cpu()},
            "history": self.history_, "n_iter": int(self.n_iter_),
            "warm_started": bool(getattr(self, "warm_started_", False)),
        }
        if hasattr(self, "feature_names_in_"):
            payload["feature_names_in"] = [str(c) for c in self.feature_names_in_]
        if getattr(self, "_full_gp_", False):   # Z = X held fixed: not a parameter setting, so say it
            payload["full_gp"] = True
        if getattr(self, "_row_keys_", None) is not None:    # what a warm start matches sites by
            payload["row_keys"] = torch.as_tensor(self._row_keys_.view(np.int64))
        payload["checksum"] = digest(payload)
        atomic_save(path, payload)

    @classmethod
    def load(cls, path: str | os.PathLike, feature_extractor: torch.nn.Module | None = None,
             device: str | None = None) -> "GPClassifier":
        """Read a model written by ``save``. Never executes code from the file (``weights_only=True``).

        Args:
            path: the file. feature_extractor: for a hybrid model, a module of the architecture it was
                fitted with (its weights are replaced by the saved ones; the argument is not modified).
            device: where the loaded model lives ("cpu", "cuda", ...). None: the device it was fitted
                on, or the CPU (with a warning) when that was a CUDA device and none is available here.
        """
        try:
            d = torch.load(os.fspath(path), map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise
        except Exception as exc:  # truncation and foreign formats raise many different exception types
            raise ModelFileError(f"{path} is not a readable sgpc model file ({file_error_detail(exc)})") from None
        if not isinstance(d, dict) or d.get("format") != _FORMAT:
            raise ModelFileError(f"{path} is not an sgpc model file")
        if d.get("version") != _VERSION:
            raise ModelFileError(f"{path} has model format version {d.get('version')}; this sgpc reads {_VERSION}")
        stored = d.pop("checksum", None)        # files written before checksums were added have none
        if stored is not None and stored != digest(d):
            raise ModelFileError(f"{path} was altered or corrupted after it was written (its checksum does not match "
                                 "its content); refit or restore the file from a copy")
        if bool(d.get("has_feature_extractor", False)) != (feature_extractor is not None):
            raise ValueError(f"{path} was saved " + ("with a feature extractor: pass a module of the same architecture, "
                             "GPClassifier.load(path, feature_extractor=module)" if d.get("has_feature_extractor")
                             else "without a feature extractor: call GPClassifier.load(path) without one"))
        params = d.get("params", {})
        if not isinstance(params, dict):
            raise ModelFileError(f"{path} is damaged: its parameters are a {type(params).__name__}, not a mapping")
        params = dict(params)
        if device is not None:
            _check_device(device)              # the argument's fault, not the file's
            params["device"] = device
        elif str(params.get("device", "cpu")).startswith("cuda") and not torch.cuda.is_available():
            warnings.warn(f"{path} was fitted on {params['device']!r}, which is not available here: loading on the CPU",
                          UserWarning, stacklevel=2)
            params["device"] = "cpu"
        try:
            est = cls(**params, feature_extractor=feature_extractor)
            est._check_options()
            est._fitted_params_ = est.get_params(deep=False)
            est.classes_ = np.asarray(d["classes"], dtype=np.dtype(d["classes_dtype"]))
            est.n_features_in_ = d["n_features_in"]
            if "feature_names_in" in d:
                est.feature_names_in_ = np.asarray(d["feature_names_in"], dtype=object)
            Zshape = d["model"]["Z"].shape
            D, C = Zshape[-1], len(est.classes_)   # the kernel's input dimension (features for a hybrid)
            Z = np.zeros(tuple(Zshape[-2:]))
            est.model_ = est._build(D, C, Z, lengthscale=None, extractor=est._copy_extractor())
            est.model_.load_state_dict({k: v.to(est.device) for k, v in d["model"].items()})
            est.model_.eval()
            engine = est._make_engine()
            state = engine.init(est.model_, None, None, torch.Generator())
            est.state_ = _load_state(state, d["state"])
            if est.method in ("rmgpc", "smgpc"):
                est.outlier_proba_ = engine.outlier_proba(est.state_).cpu().numpy().astype(np.float64)
            est.posterior_ = InducingPosterior(mean=d["posterior"]["mean"].to(est.device, est._torch_dtype()),
                                               chol=d["posterior"]["chol"].to(est.device, est._torch_dtype()))
            est.history_ = d["history"]
            est.n_iter_ = d["n_iter"]
            est.warm_started_ = bool(d.get("warm_started", False))      # files written before it existed lack it
            est._fitted_as_ = est._structure()
            est._full_gp_ = bool(d.get("full_gp", False))
            if est._full_gp_:
                est.model_.Z.requires_grad_(False)
            if "row_keys" in d:
                est._row_keys_ = d["row_keys"].numpy().astype(np.int64).view(np.uint64)
        except (KeyError, TypeError, RuntimeError, ValueError, AttributeError, IndexError) as exc:
            raise ModelFileError(f"{path} is damaged or from an incompatible sgpc: {type(exc).__name__}: {exc}") from None
        return est
