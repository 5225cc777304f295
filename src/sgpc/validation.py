"""Checks of the estimator's parameters and inputs, with messages that say what is wrong and how to fix it.

What this module does not do: convert names to objects (``registry``) or fit.
"""
from __future__ import annotations

import copy
import math
import os

import numpy as np
import torch
from sklearn.utils.validation import validate_data

from .likelihoods.additive import PREDICT_RULES
from .registry import (AUTO_FULL_BATCH, AUTO_MAX_ITER_FULL_BATCH, AUTO_MAX_ITER_MINIBATCH, AUTO_MINIBATCH,
                       KERNEL_CLASSES, KERNELS, LIKELIHOOD_CLASSES, LIKELIHOODS, METHODS, OPTION_GROUPS, config,
                       likelihood_key, likelihood_name, method_name, optimizer_of, resolve, spec)
from .sep import LOG_Z_KINDS
from .train import COMPILE_MODES

__all__ = ["check_params", "check_options", "capable", "DTYPES", "check_choice", "check_real", "check_flag", "unique_labels", "plain_value", "check_device", "check_finite",
           "check_predictions",
           "validated", "check_data_parallel_extractor", "check_sample_weight", "check_class_weight"]


DTYPES = {"float64": torch.float64, "float32": torch.float32}
USER_LIKELIHOODS = tuple(k for k in LIKELIHOODS if k != "hinge")     # "hinge" is bsvm's own
# the classes a likelihood= object may be (the hinge classes are bsvm's own)
USER_LIKELIHOOD_CLASSES = {name: entry for name, entry in LIKELIHOOD_CLASSES.items()
                           if entry[0] not in LIKELIHOODS["hinge"].classes}


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
    if y.dtype.kind in "biu":
        # integer codes: numpy's hashed unique, then each label's place among the sorted classes, the same
        # arrays as np.unique(..., return_inverse=True) without its O(N log N) sort of every row
        classes = np.unique(y)
        return classes, np.searchsorted(classes, y).reshape(y.shape)
    try:
        return np.unique(y, return_inverse=True)
    except TypeError:
        kinds = sorted({type(v).__name__ for v in y.ravel().tolist()})
        raise ValueError(f"{name} mixes label types ({', '.join(kinds)}); pass labels of one type, e.g. "
                         f"{name}.astype(str)") from None


def plain_value(name: str, value):
    """A parameter value as a plain Python value for the model file: NumPy scalars become numbers, paths
    and devices strings, a dict (``method_params``, ...) a dict of plain values with string keys, a kernel or
    likelihood object its ``registry.spec``; anything else that is not a number, string, boolean or None cannot
    be saved."""
    if name in ("kernel", "likelihood") and isinstance(value, torch.nn.Module):
        return spec(value)
    if name == "class_weight" and isinstance(value, dict):
        # its keys are labels, numbers as often as strings: [label, weight] pairs (``persist.current_params``)
        return [[plain_value("a class_weight label", k.item() if isinstance(k, np.generic) else k),
                 plain_value(f"class_weight[{k!r}]", v)] for k, v in value.items()]
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise TypeError(f"parameter {name}={value!r} cannot be saved (its keys must be strings, got {bad[0]!r})")
        return {k: plain_value(f"{name}[{k!r}]", v) for k, v in value.items()}
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
    raise TypeError(f"parameter {name}={value!r} cannot be saved (only numbers, strings, booleans, None and dicts "
                    f"of them){hint}")


def check_device(device) -> None:
    """A clear error for a device torch does not know or that this machine lacks (CUDA)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"unknown device {device!r} ({exc}); use 'cpu', 'cuda' or 'cuda:N'") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} needs CUDA, which this torch build or machine does not have; use 'cpu'")


def _rows(bad: np.ndarray, first_row: int) -> tuple[int, str]:
    """How many rows a boolean mask marks, and the first five of them numbered from ``first_row``."""
    rows = np.flatnonzero(bad) + first_row
    return len(rows), ", ".join(map(str, rows[:5])) + (", ..." if len(rows) > 5 else "")


def check_finite(X: np.ndarray, name: str = "X", when: str = "fitting", first_row: int = 0,
                 dtype: torch.dtype | None = None) -> None:
    """ValueError naming the rows (numbered from ``first_row``: a streamed block's offset) with NaN/inf, or,
    for a model of a narrower ``dtype`` (float32), with values that dtype cannot hold (they would become inf
    when the rows are cast)."""
    block = 1 << 16                     # rows at a time: the temporaries stay small whatever N
    bad = np.concatenate([~np.isfinite(X[a:a + block]).all(axis=1) for a in range(0, len(X), block)] or [[]])
    if bad.any():
        n, shown = _rows(bad, first_row)
        raise ValueError(f"{name} contains NaN or infinity in {n} row(s), first: {shown}; "
                         f"impute or drop them before {when}")
    if dtype is not None and dtype != torch.float64 and X.size:
        big = torch.finfo(dtype).max
        bad = np.concatenate([(np.abs(X[a:a + block]) > big).any(axis=1) for a in range(0, len(X), block)])
        if bad.any():
            n, shown = _rows(bad, first_row)
            raise ValueError(f"{name} has values beyond {str(dtype).replace('torch.', '')}'s range (|x| > {big:.3g}) "
                             f"in {n} row(s), first: {shown}; rescale the features, or use dtype='float64'")


def check_predictions(X: torch.Tensor, outputs: tuple[torch.Tensor, ...], dtype: torch.dtype,
                      first_row: int = 0) -> None:
    """ValueError naming the rows of X [N,D] whose predictions ``outputs`` ([N,C] each) hold NaN or +inf: rows
    that are finite but too large for the model to evaluate in ``dtype`` (a linear kernel's x·x overflows beyond
    |x|/ℓ ≈ 1e154 in float64), so that no NaN ever reaches a probability or a predicted label."""
    bad = torch.zeros(X.shape[0], dtype=torch.bool, device=X.device)
    for out in outputs:
        bad |= (torch.isnan(out) | (out == torch.inf)).any(-1)
    if bool(bad.any()):
        mask = bad.cpu().numpy()
        n, shown = _rows(mask, first_row)
        largest = float(X[bad].abs().max())
        raise ValueError(f"X has {n} row(s) too large for this model to evaluate in {str(dtype).replace('torch.', '')}, "
                         f"first: {shown} (largest |x| = {largest:.3g}; their kernel values overflow); rescale the "
                         "features as they were for fitting, or drop those rows")


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
    # the precision the rows will be evaluated in: the fitted one when predicting (dtype "auto" resolved), the
    # parameter when fitting ("auto" picks float64 for values float32 cannot hold: ``fitting.resolve_dtype``)
    dtype = getattr(estimator, "dtype", "float64")
    if not reset and (when or "predicting") == "predicting":
        dtype = getattr(estimator, "dtype_", dtype)
    check_finite(out[0] if y is not None else out, name=name, when=when or ("fitting" if reset else "predicting"),
                 dtype=DTYPES.get(dtype))
    return out


def check_sample_weight(sample_weight, n_rows: int) -> np.ndarray | None:
    """``fit``'s ``sample_weight`` as a float64 array [N] (None stays None), after a ValueError unless it holds
    one finite number ≥ 0 per row of X, not all 0. The argument is not modified."""
    if sample_weight is None:
        return None
    try:
        w = np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"sample_weight must hold numbers, one weight per row of X; got "
                         f"{type(sample_weight).__name__} {str(sample_weight)[:60]}") from None
    if w.ndim != 1:
        raise ValueError(f"sample_weight must be one-dimensional, one weight per row of X; got shape {w.shape}")
    if len(w) != n_rows:
        raise ValueError(f"sample_weight has {len(w)} rows, X has {n_rows}; pass one weight per row")
    if not np.isfinite(w).all():
        n, shown = _rows(~np.isfinite(w), 0)
        raise ValueError(f"sample_weight has NaN or infinity in {n} row(s), first: {shown}")
    if (w < 0).any():
        n, shown = _rows(w < 0, 0)
        raise ValueError(f"sample_weight must be >= 0; it is negative in {n} row(s), first: {shown}")
    if not (w > 0).any():
        raise ValueError("sample_weight is zero for every row: at least one row needs a positive weight")
    return w


def check_class_weight(class_weight) -> None:
    """A ValueError unless ``class_weight`` is None, "balanced" or a dict {label: weight} of finite weights ≥ 0
    (whether its labels are y's is checked when fitting, ``weighting.class_weights``)."""
    if class_weight is None or (isinstance(class_weight, str) and class_weight == "balanced"):
        return
    if not isinstance(class_weight, dict):
        raise ValueError(f"class_weight must be None, 'balanced' or a dict {{label: weight}}, got {class_weight!r}")
    for label, weight in class_weight.items():
        check_real(f"class_weight[{label!r}]", weight, low=0.0, low_closed=True)


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


def capable(flag: str) -> tuple[str, ...]:
    """The methods whose declared capabilities include ``flag``."""
    return tuple(name for name, m in METHODS.items() if getattr(m.capabilities, flag))


def _check_n_samples(name: str, value) -> None:
    if not (isinstance(value, (int, np.integer)) and value >= 1):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


# every option of method_params, likelihood_params and kernel_params (registry.*_OPTIONS) -> the check of its value
_OPTION_CHECKS = {
    "alpha": lambda n, v: check_real(n, v, low=0.0, high=1.0),
    "damping": lambda n, v: check_real(n, v, low=0.0, high=1.0),
    "sep_log_z": lambda n, v: check_choice(n, v, LOG_Z_KINDS),
    "outlier_prior_a": lambda n, v: check_real(n, v, low=0.0),           # the Beta prior of ρ
    "outlier_prior_b": lambda n, v: check_real(n, v, low=0.0),
    "natgrad_lr": lambda n, v: check_real(n, v, low=0.0, none="q(u) on the optimiser"),
    "ep_tol": lambda n, v: check_real(n, v, low=0.0),                    # the inner EP's relative site change
    "epsilon": lambda n, v: check_real(n, v, low=0.0, high=1.0, high_closed=False),
    "learn_epsilon": check_flag,
    "noise_variance": lambda n, v: check_real(n, v, low=0.0, low_closed=True, none="the likelihood's own"),
    "delta": lambda n, v: check_real(n, v, low=0.0, high=1.0, high_closed=False),
    "learn_delta": check_flag,
    "n_samples_predict": _check_n_samples,
    "softmax_predict": lambda n, v: check_choice(n, v, PREDICT_RULES),
    "latent_noise": lambda n, v: check_real(n, v, low=0.0, low_closed=True, none="no noise term"),
    "init_lengthscale": lambda n, v: check_real(n, v, low=0.0, none="from the features' spread"),
    "init_variance": lambda n, v: check_real(n, v, low=0.0),
    "shared_kernel": check_flag,
    "prior_scale": lambda n, v: check_real(n, v, low=0.0, none="no prior on the hyper-parameters (ML-II)"),
    "init": lambda n, v: check_choice(n, v, ("kmeans", "random")),
    "learn": check_flag,
    "shared": check_flag,
    "learning_rate": lambda n, v: check_real(n, v, low=0.0, none="the fit's learning_rate"),
    "lr_decay": lambda n, v: check_real(n, v, low=0.0, high=1.0),
}
# groups whose keys read as themselves in messages ("epsilon must be ..."); the others' keys are named with their
# group ("inducing_params['init']")
_BARE_KEYS = ("method_params", "likelihood_params", "kernel_params")


def check_options(params: dict) -> dict:
    """The estimator's parameters ``params`` with their options resolved (``registry.resolve``), after a
    ValueError for a group of options (``method_params``, ..., ``optimizer_params``) that is not a dict or None,
    holds a key that the chosen method, likelihood, kernel, ... does not take, or a value out of range."""
    method = params["method"]
    own = METHODS[method].own_likelihood
    owner = {"method_params": f"method={method!r}",
             "likelihood_params": f"likelihood={likelihood_name(params)!r}"
             + (f" (method={method!r} always uses it)" if own else ""),
             "kernel_params": f"kernel={params['kernel']!r}", "inducing_params": "the inducing inputs",
             "optimizer_params": f"optimizer={optimizer_of(params)!r}"}
    for group, declared in OPTION_GROUPS.items():
        given = params[group]
        if given is None:
            continue
        if not isinstance(given, dict):
            raise ValueError(f"{group} must be a dict of options or None, got {type(given).__name__}")
        valid = tuple(declared(params))
        for key in given:
            if key not in valid:
                raise ValueError(f"unknown {group} key {key!r} for {owner[group]}; valid: "
                                 f"{', '.join(map(repr, valid)) or 'none'}")
    resolved = resolve(params)
    for group in OPTION_GROUPS:
        for name, value in resolved[group].items():
            _OPTION_CHECKS[name](name if group in _BARE_KEYS else f"{group}[{name!r}]", value)
    return resolved


def check_params(est) -> dict:
    """A ValueError that says what is wrong with any of a ``GPClassifier``'s parameters, and how to fix it;
    else the parameters with their options resolved (``registry.resolve``)."""
    check_choice("method", est.method, ("auto", *METHODS))
    if est.method == "auto":
        # checked as the method it is until a fit chooses by the data's size (``registry.method_entry``,
        # ``fitting.resolve_method``): its options, likelihood and kernel must suit it; a fit checks its choice again
        return check_params(with_method(est, method_name(est.get_params(deep=False))))
    _check_name_or_object("likelihood", est.likelihood, USER_LIKELIHOODS, USER_LIKELIHOOD_CLASSES, "sgpc.likelihoods",
                          est.likelihood_params)
    _check_name_or_object("kernel", est.kernel, tuple(KERNELS), KERNEL_CLASSES, "sgpc.kernels", est.kernel_params)
    if METHODS[est.method].own_likelihood and not isinstance(est.likelihood, str):
        raise ValueError(f"method={est.method!r} always uses its own {METHODS[est.method].own_likelihood} likelihood: "
                         "leave likelihood at its default")
    check_choice("dtype", est.dtype, ("auto", *DTYPES))
    check_choice("compile", est.compile, COMPILE_MODES)
    caps = METHODS[est.method].capabilities
    streamable = capable("streamable")
    if not (est.batch_size is None or (isinstance(est.batch_size, str) and est.batch_size == "auto")
            or (isinstance(est.batch_size, (int, np.integer)) and not isinstance(est.batch_size, (bool, np.bool_))
                and est.batch_size >= 1)):
        raise ValueError(f"batch_size must be a positive integer, None (the full batch) or 'auto' (minibatches of "
                         f"1024 rows once rows × classes × inducing points × (inducing points + features) reach "
                         f"1e9, or the classes 17 for method 'auto' or 'sep'), got {est.batch_size!r}")
    if est.compile is not None and (not caps.streamable or est.batch_size in (None, "auto")
                                     or est.feature_extractor is not None):
        raise ValueError(f"compile={est.compile!r} applies to the minibatch steps of "
                         f"{', '.join(map(repr, streamable))} without a feature extractor (set batch_size); "
                         f"got method={est.method!r}, batch_size={est.batch_size!r}"
                         f"{', a feature extractor' if est.feature_extractor is not None else ''}")
    if caps.full_batch_only and est.batch_size not in (None, "auto"):
        raise ValueError(f"method={est.method!r} runs EP to convergence on the whole data set: use batch_size=None")
    _check_likelihood_choice(est)
    options = check_options(est.get_params(deep=False))
    learned = options["likelihood_params"] if isinstance(est.likelihood, str) else config(est.likelihood)
    if est.method in ("rmgpc", "smgpc") and learned["learn_epsilon"]:    # the outlier model
        raise ValueError(f"method={est.method!r} sets epsilon to the posterior mean of rho: leave "
                         "likelihood_params['learn_epsilon'] False")
    fitted_by = (AUTO_FULL_BATCH, AUTO_MINIBATCH) if est.method == "auto" else (est.method,)
    if learned.get("learn_epsilon") and not any(METHODS[m].epsilon_in_objective for m in fitted_by):
        raise ValueError(f"method={est.method!r} fits the pairwise step factors of scalable-ep eq. 6, whose objective "
                         "does not contain epsilon: learn_epsilon=True would leave it where it starts. Set "
                         "likelihood_params['epsilon'] to the value to predict with, or learn it with a method whose "
                         "objective has it (method='pep' with method_params={'alpha': 1.0} is EP on the robust-max "
                         "likelihood; 'vi')")
    check_device(est.device)
    check_flag("warm_start", est.warm_start)
    check_real("learning_rate", est.learning_rate, low=0.0, none="the method's default")
    if not (isinstance(est.max_iter, str) and est.max_iter == "auto") and (
            isinstance(est.max_iter, (bool, np.bool_)) or not isinstance(est.max_iter, (int, np.integer))
            or est.max_iter < 0):
        raise ValueError(f"max_iter must be a non-negative integer or 'auto' ({AUTO_MAX_ITER_FULL_BATCH} steps on the "
                         f"full batch, {AUTO_MAX_ITER_MINIBATCH} with minibatches), got {est.max_iter!r}")
    if not (isinstance(est.tol, str) and est.tol == "auto"):
        check_real("tol", est.tol, low=0.0, low_closed=True, none="run to max_iter")
    if isinstance(est.n_iter_no_change, (bool, np.bool_)) or not isinstance(est.n_iter_no_change,
                                                                            (int, np.integer)) \
            or est.n_iter_no_change < 1:
        raise ValueError(f"n_iter_no_change must be a positive integer, got {est.n_iter_no_change!r}")
    check_flag("early_stopping", est.early_stopping)
    check_class_weight(est.class_weight)
    check_real("validation_fraction", est.validation_fraction, low=0.0, high=1.0, high_closed=False)
    inducing = options["inducing_params"]
    # with batch_size "auto" the fit decides whether Z learns (sep's minibatches do, ep's full batch does not):
    # only a fixed Z that was asked for is refused here
    fixed = not inducing["learn"] and ("learn" in (est.inducing_params or {}) or est.batch_size != "auto")
    if inducing["learning_rate"] is not None and (est.optimizer == "lbfgs" or fixed):
        raise ValueError("inducing_params['learning_rate'] is the step size of trained inducing inputs under "
                         "optimizer='adam', 'rprop' or 'adaptive'; got "
                         + ("optimizer='lbfgs' (one line search moves every parameter)" if est.optimizer == "lbfgs"
                            else "inducing inputs that stay fixed (inducing_params['learn'] is False"
                            + ("" if "learn" in (est.inducing_params or {}) else f", the full-batch default of "
                               f"method={est.method!r}") + ")") + ": drop it, or change that")
    natgrad_lr = options["method_params"].get("natgrad_lr")
    if natgrad_lr is not None and not (caps.free_gaussian and est.optimizer != "lbfgs"):
        raise ValueError(f"natgrad_lr applies to the free-Gaussian methods "
                         f"({', '.join(map(repr, capable('free_gaussian')))}) with optimizer='adam' or "
                         f"'adaptive'; got method={est.method!r}, optimizer={est.optimizer!r}")
    if not (isinstance(est.n_inducing, str) and est.n_inducing == "auto") and \
            not (isinstance(est.n_inducing, (int, np.integer)) and not isinstance(est.n_inducing, (bool, np.bool_))
            and est.n_inducing >= 1):
        raise ValueError(f"n_inducing must be a positive integer or 'auto', got {est.n_inducing!r}")
    if est.feature_extractor is not None and not isinstance(est.feature_extractor, torch.nn.Module):
        raise ValueError(f"feature_extractor must be a torch.nn.Module or None, got {type(est.feature_extractor).__name__}")
    if est.feature_extractor is not None and not caps.free_gaussian:
        raise ValueError(f"feature_extractor needs a free-Gaussian method "
                         f"({', '.join(map(repr, capable('free_gaussian')))}), got method={est.method!r}")
    return options


def with_method(est, method: str):
    """A shallow copy of the estimator ``est`` whose method is ``method`` (the parameters checked and resolved
    for an "auto" estimator once its method is chosen)."""
    view = copy.copy(est)
    view.method = method
    return view


def _check_name_or_object(kind: str, value, names: tuple, classes: dict, module: str, options) -> None:
    """``kernel=`` / ``likelihood=``: one of ``names``, or an object of one of ``classes`` (name -> (class, ...),
    of ``module``) whose options are its own (``options``, the ``kernel_params``/``likelihood_params``, must then
    be None)."""
    if isinstance(value, str):
        check_choice(kind, value, names)
        return
    if type(value) not in [cls for cls, _ in classes.values()]:
        raise ValueError(f"{kind} must be a name ({', '.join(map(repr, names))}) or an object of a class of {module} "
                         f"({', '.join(classes)}), got {type(value).__name__}")
    if options is not None:
        raise ValueError(f"{kind}_params configure a {kind} given by name; a {kind} object carries its own settings: "
                         f"pass {kind}_params=None (got {options!r})")


def _check_likelihood_choice(est) -> None:
    """The method's rule for which likelihoods it accepts."""
    method = METHODS[est.method]
    key = likelihood_key(est.likelihood)
    binary = key in method.binary_likelihoods
    if key not in method.likelihoods and not binary:
        ep_binary = tuple(m for m, e in METHODS.items() if key in e.binary_likelihoods)
        raise ValueError(f"likelihood={est.likelihood!r} works with method='vi'"
                         f"{' and, for 2 classes, ' + '/'.join(ep_binary) if ep_binary else ''}; "
                         f"got method={est.method!r} (EP-family methods use likelihood='robustmax'): pass "
                         "method='vi' with it")
