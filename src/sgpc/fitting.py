"""Fitting a ``GPClassifier``: its checked, resolved parameters → model, engine state and training run.

``fit`` is what ``GPClassifier.fit`` does: in memory (``fit_arrays``) or streamed from a source
(``fit_stream``). Both build the model (``build_model``) or continue the previous fit (a warm start:
``continues``, ``carried_state``), run ``train.fit`` and set the fitted attributes (``finish``). ``restore``
rebuilds a fitted estimator from a model file's content (``persist.read_model``). An in-memory fit may weigh its
rows (``sample_weight``, ``class_weight``): ``weighting`` says which rows it trains on and with what weights, the
initialisation (k-means, length-scales) weighs them too, and the engine weighs their contributions.

The functions take the estimator, to read the previous fit and write the fitted attributes, and ``p``, its
parameters checked and with every group of options resolved (``settings``, ``registry.resolve``).

What this module does not do: maths (the engines, ``sparse``), the loop itself (``train``), or the file
format (``persist``).
"""
from __future__ import annotations

import copy
import os
import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets

from . import diagnostics, stream, weighting
from .hyperprior import LogNormalPrior
from .initialization import extractor_features, initial_lengthscales
from .persist import ModelFileError, check_model_payload, load_state
from .registry import (AUTO_FULL_BATCH, AUTO_MINIBATCH, LIKELIHOOD_OPTIONS, METHOD_OPTIONS, METHODS, describe,
                       likelihood_key, likelihood_name, make_engine, make_kernel, make_likelihood, resolve)
from .sparse import InducingPosterior, SparseGP, init_inducing, predict as predict_outputs
from .train import TrainSettings, fit as fit_loop, record_engine_events, refresh
from .validation import (DTYPES, capable, check_data_parallel_extractor, check_device, check_params,
                         check_sample_weight, unique_labels, validated, with_method)
from .warm_start import architecture, match_rows, row_keys

__all__ = ["settings", "build_model", "structure", "fit", "fit_arrays", "fit_stream", "restore", "as_tensor",
           "encode"]


def settings(est) -> dict:
    """The estimator's parameters, checked (``validation.check_params``), with their options resolved."""
    return check_params(est)


def as_tensor(p: dict, A) -> torch.Tensor:
    """An array as a tensor of the estimator's dtype and device."""
    A = np.asarray(A)
    if not A.flags.writeable or any(st < 0 for st in A.strides):
        A = A.copy()   # torch cannot wrap read-only memory (memory-mapped input) or reversed views (X[::-1])
    return torch.as_tensor(A, dtype=DTYPES[p["dtype"]], device=p["device"])


def encode(classes: np.ndarray, y, name: str = "y") -> np.ndarray:
    """Labels ``y`` as indices into ``classes``; a ValueError naming labels not seen in training."""
    y = np.asarray(y)
    unique_labels(y, name)
    idx = np.clip(np.searchsorted(classes, y), 0, len(classes) - 1)
    unknown = classes[idx] != y
    if unknown.any():
        raise ValueError(f"labels {np.unique(y[unknown])[:5].tolist()} were not seen in training; "
                         f"known classes: {classes.tolist()}")
    return idx


def copy_extractor(p: dict) -> torch.nn.Module | None:
    """A private copy of ``feature_extractor`` in the estimator's dtype/device (None without one)."""
    if p["feature_extractor"] is None:
        return None
    return copy.deepcopy(p["feature_extractor"]).to(device=p["device"], dtype=DTYPES[p["dtype"]])


def build_model(p: dict, D: int, C: int, Z: np.ndarray, lengthscale, extractor=None) -> SparseGP:
    """The model for D inputs (features) and C classes with inducing inputs Z [M,D] (copied to every latent
    function unless shared) and initial length-scales ``lengthscale``."""
    dtype = DTYPES[p["dtype"]]
    lik = make_likelihood(p, C)
    kern = make_kernel(p, D, lik.n_latent, lengthscale, dtype)
    Zt = torch.as_tensor(Z, dtype=dtype)
    if not (p["inducing_params"]["shared"] or METHODS[p["method"]].shared_inducing):
        Zt = Zt.expand(lik.n_latent, *Zt.shape).clone()
    model = SparseGP(kern, lik, Zt, learn_inducing=p["inducing_params"]["learn"], feature_extractor=extractor)
    return model.to(device=p["device"], dtype=dtype)


def structure(p: dict, with_device: bool = True) -> tuple:
    """The settings that define the fitted model's structure (not its initial values): a warm start
    continues only a model built with the same ones, so that the fitted model is what the settings
    say (and ``save`` writes settings that rebuild it). Initial values (latent_noise's value,
    init_lengthscale, inducing_params' init, ...) and the engine's settings (alpha, damping, learning rate)
    may change between warm-started fits. A checkpoint resumes only the same structure, on any device
    (``with_device=False``). Options that the method, likelihood or kernel does not take read as their
    defaults; a kernel or likelihood object reads as its class, constructor arguments and fixed values
    (``registry.describe``)."""
    m = {**METHOD_OPTIONS, **p["method_params"]}
    lik = {**LIKELIHOOD_OPTIONS, **p["likelihood_params"]}
    kern, ind = p["kernel_params"], p["inducing_params"]
    return (p["method"], describe(p["likelihood"]), describe(p["kernel"]), kern["latent_noise"] is None, bool(kern["shared_kernel"]),
            bool(ind["shared"]), bool(ind["learn"]), bool(lik["learn_epsilon"]),
            None if lik["learn_epsilon"] else float(lik["epsilon"]), p["dtype"],
            *((str(p["device"]),) if with_device else ()),
            lik["noise_variance"], bool(lik["learn_delta"]), None if lik["learn_delta"] else float(lik["delta"]),
            int(lik["n_samples_predict"]), lik["softmax_predict"],
            float(m["outlier_prior_a"]), float(m["outlier_prior_b"]), architecture(p["feature_extractor"]))


def train_settings(p: dict, run: dict) -> TrainSettings:
    """The fit loop's settings from the parameters and ``run``, the per-run arguments of ``fit`` (eval_every,
    checkpoint_path, checkpoint_every)."""
    return TrainSettings(optimizer=p["optimizer"], learning_rate=p["learning_rate"],
                         lr_decay=p["optimizer_params"]["lr_decay"],
                         inducing_learning_rate=p["inducing_params"]["learning_rate"],
                         max_iter=p["max_iter"], n_epochs=p["n_epochs"],
                         batch_size=p["batch_size"], checkpoint_path=run["checkpoint_path"],
                         checkpoint_every=run["checkpoint_every"], eval_every=run["eval_every"],
                         progress=bool(p["verbose"]),
                         # the hyper-parameter prior is part of the objective a checkpoint's fit was maximising
                         model_structure=repr((structure(p, with_device=False), p["kernel_params"]["prior_scale"])),
                         compile=p["compile"], tol=p["tol"], n_iter_no_change=p["n_iter_no_change"])


def validator(est, p: dict, engine, X_val, y_val):
    """None, or ``f(model, state) -> {"error", "nll"}`` on the validation rows (for the fit history)."""
    if X_val is None:
        return None
    try:
        Xv = as_tensor(p, validated(est, X_val, reset=False, name="X_val", when="fitting"))
    except ValueError as exc:        # scikit-learn's feature-count message names "X"
        if str(exc).startswith("X has"):
            raise ValueError("X_val" + str(exc)[1:]) from None
        raise
    yv = torch.as_tensor(encode(est.classes_, y_val, "y_val"), device=p["device"])
    if yv.ndim != 1 or len(yv) != len(Xv):
        got = len(yv) if yv.ndim == 1 else tuple(yv.shape)
        raise ValueError(f"X_val has {len(Xv)} rows but y_val has {got} label(s); pass one label per validation row")

    def validate(model, state):
        lp, scores = predict_outputs(model, engine.posterior(model, state), Xv)
        return {"error": float((scores.argmax(1) != yv).double().mean()),
                "nll": float(-lp.gather(1, yv[:, None]).mean())}
    return validate


def continues(est, p: dict, D: int, classes: np.ndarray, previous: np.ndarray | None, M: int,
              full_gp: bool = False) -> bool:
    """Whether ``fit`` continues from the previous fit (``warm_start`` and a compatible fitted model:
    the same structural settings (``structure``: method, likelihood, kernel, sharing, dtype, ...), the
    same classes ``previous``, without a feature extractor the same number of features D, and as many
    inducing inputs as this fit uses, M — a model fitted on fewer rows than ``n_inducing`` has fewer;
    a full GP (rmgpc/smgpc with Z = X) continues only as a full GP)."""
    if not (p["warm_start"] and hasattr(est, "state_") and previous is not None
            and getattr(est, "_fitted_as_", None) == structure(p)
            and len(previous) == len(classes) and bool(np.all(previous == classes))):
        return False
    if getattr(est, "_full_gp_", False) != full_gp or (not full_gp and est.model_.n_inducing < M):
        return False
    return est.model_.feature_extractor is not None or est.model_.kernel.input_dim == D


# n_inducing="auto": M = N // AUTO_INDUCING[0], clipped to AUTO_INDUCING[1:] (and to N). On the suite's sets of
# up to 1 000 rows, M = 30 fitted as well as M = 100 below ~400 training rows and worse above (docs/suite.md).
AUTO_INDUCING = (8, 30, 100)


# dtype="auto": float32 for the methods marked ``Method.auto_float32`` when rows × classes × inducing points reach
# AUTO_FLOAT32_WORK, else float64. The [L,N,M] products of a step dominate its time from about there: a full-batch
# `ep` fit at 1 000–2 000 rows and M = 100 took 1.4–1.5× less time in float32, with the same test NLL to ±0.002
# (docs/design-notes.md, 'dtype="auto"'); below, a step is dominated by per-operation overheads and float32 saves
# nothing. Minibatch `sep` took 1.2–1.6× less time in float32 on letter, connect-4 and chess-krvk, in the same steps
# and to the same test NLL ('Minibatch `sep` in float32'); full-batch `sep` 1.2–1.8× less at 2 000 rows, to the same
# test NLL ('`method="sep"` chosen explicitly'), and `pep`/`apep` 1.1–1.6× less, NLL within 0.0015 ('The α family in
# float32'). The other methods keep float64 until the suite has measured them in float32.
AUTO_FLOAT32_WORK = 400_000


# the largest |x| "auto" fits in float32: the kernels square scaled inputs, which must stay finite
AUTO_FLOAT32_MAX_ABS = 1e18


# batch_size="auto": minibatches of AUTO_BATCH_SIZE rows when a full-batch iteration's work N·C·M·(M + D)
# (rows, classes, inducing points, features: the [L,N,M] × [M,M] products and the kernel) reaches
# AUTO_MINIBATCH_WORK and the method takes minibatches, else the full batch; a streamed fit always takes
# minibatches. Full-batch `ep` fits took 38–68 s per 10⁹ of that work to converge (adult 31 s at 0.83·10⁹,
# pendigits 53 s at 1.02·10⁹, connect-4 93 s at 1.36·10⁹, letter over 240 s at 4.8·10⁹), while a minibatch
# step's cost does not grow with N (docs/design-notes.md, 'batch_size="auto"'). Those minibatches take Adam at
# AUTO_MINIBATCH_LEARNING_RATE unless learning_rate is given: 1 024 rows at 0.03 reached a lower test NLL sooner than
# 256 rows at 0.01 on connect-4 and chess-krvk, and stopped on their own (docs/design-notes.md, 'Larger minibatches');
# 0.05 then gave a lower test NLL than 0.03 on each of the suite's five minibatch sets, in about the same time
# (MNIST 16% longer), over 5 splits ('Adam at 0.05 in the minibatches'). Since then a `sep` fit there (the default's
# method with minibatches) gives the kernel's hyper-parameters 0.1 and its inducing inputs 0.05
# (``registry.Method.minibatch_rates``) unless a rate is given: over 5 splits of the five minibatch sets the fits took 0.83× the time at a lower test NLL on
# 19 of 25 fits, chess-krvk's 1.5% higher; `vi` at those rates fitted pendigits 32% worse, so the other methods keep
# 0.05 (docs/design-notes.md, 'Adam at 0.1 in the minibatches, the inducing inputs at 0.05').
AUTO_MINIBATCH_WORK = 1e9
# ... and, for method "auto" or `sep`, at any work from AUTO_MINIBATCH_CLASSES classes: on chess-krvk (17-18 classes)
# and letter (26) at 1 000-2 000 rows the full batch took 9.4-26.7 s (57-150 iterations), minibatches (one of all
# rows up to 1 024 rows) 10.8-20.2 s at a test NLL 6-17% lower (chess-krvk at 4 000 rows: 64.5 s against 17.2 s, 6%
# lower; benchmarks/perf/many_classes.py). Fewer classes: subsets of those two sets fitted better in minibatches at 10-16 classes too, but the suite's
# sets of 2-11 classes better on the full batch, 8 of 12 (docs/design-notes.md, 'Many classes at 1 000-4 000 rows').
AUTO_MINIBATCH_CLASSES = 17
AUTO_BATCH_SIZE = 1024
AUTO_MINIBATCH_LEARNING_RATE = 0.05


def auto_minibatch_rates(method: str) -> tuple[float, float | None]:
    """The learning rate of ``method``'s minibatches under batch_size="auto", and its inducing inputs' own rate when
    they learn (None: they follow the first): ``registry.Method.minibatch_rates``, else
    ``AUTO_MINIBATCH_LEARNING_RATE``."""
    rates = METHODS[method].minibatch_rates
    return (AUTO_MINIBATCH_LEARNING_RATE, None) if rates is None else rates


def auto_inducing(N: int) -> int:
    """M of n_inducing="auto" for N rows (``AUTO_INDUCING``)."""
    per, low, high = AUTO_INDUCING
    return min(N, max(low, min(high, N // per)))


def resolve_dtype(est, p: dict, N: int, C: int, max_abs: float | None) -> dict:
    """``p`` with dtype "auto" resolved for N rows and C classes (``AUTO_FLOAT32_WORK``; ``p``'s batch size already
    resolved); float64 for the methods not marked ``Method.auto_float32``, for inputs
    whose largest magnitude ``max_abs`` float32 could not square (``AUTO_FLOAT32_MAX_ABS``) and for a streamed fit
    (``max_abs`` None: its rows are not all seen before the model is built). A warm start that continues an "auto"
    fit keeps that fit's precision."""
    if p["dtype"] != "auto":
        return p
    if p["warm_start"] and hasattr(est, "state_") and getattr(est, "dtype_", None) in DTYPES:
        return {**p, "dtype": est.dtype_}
    if not METHODS[p["method"]].auto_float32 or max_abs is None or not max_abs <= AUTO_FLOAT32_MAX_ABS:
        return {**p, "dtype": "float64"}
    M = auto_inducing(N) if p["n_inducing"] == "auto" else min(N, int(p["n_inducing"]))
    return {**p, "dtype": "float32" if N * C * M >= AUTO_FLOAT32_WORK else "float64"}


def _large(p: dict, N: int, D: int, C: int, method: str) -> bool:
    """Whether a full-batch iteration's work N·C·M·(M + D) reaches ``AUTO_MINIBATCH_WORK``, or the classes
    ``AUTO_MINIBATCH_CLASSES`` when ``method`` (the estimator's) is "auto" or its minibatch method (the one measured
    there)."""
    M = auto_inducing(N) if p["n_inducing"] == "auto" else min(N, int(p["n_inducing"]))
    many_classes = C >= AUTO_MINIBATCH_CLASSES and method in ("auto", AUTO_MINIBATCH)
    return many_classes or N * C * M * (M + D) >= AUTO_MINIBATCH_WORK


def resolve_method(est, p: dict, N: int, D: int, C: int, streamed: bool = False):
    """For method "auto": the estimator seen as the method it chooses for N rows of D features and C classes, and
    its parameters ``p`` checked and resolved for that method; else ``est`` and ``p`` as they are.

    "auto" is ``AUTO_FULL_BATCH`` ("ep") in a full-batch fit and ``AUTO_MINIBATCH`` ("sep") with minibatches: a
    given batch size, a streamed fit, or batch_size "auto" on a problem past ``AUTO_MINIBATCH_WORK``. With 256-row
    minibatches `sep` fitted every set of the suite that takes them better than `ep` (docs/design-notes.md,
    'method="auto"')."""
    if est.method != "auto":
        return est, p
    minibatch = streamed or p["batch_size"] not in (None, "auto") \
        or (p["batch_size"] == "auto" and p["feature_extractor"] is None and _large(p, N, D, C, est.method))
    view = with_method(est, AUTO_MINIBATCH if minibatch else AUTO_FULL_BATCH)
    return view, settings(view)


def resolve_batch_size(est, p: dict, N: int, D: int, C: int, streamed: bool = False) -> dict:
    """``p`` with batch_size "auto" resolved for N rows of D features and C classes (``AUTO_MINIBATCH_WORK``):
    ``with_batch_size``.
    ``est``: the estimator, seen as its chosen method (``resolve_method``)."""
    if p["batch_size"] != "auto":
        return p
    # a hybrid model (feature extractor) keeps the full batch unless its batch size is given, as before "auto"
    minibatch = streamed or (not METHODS[p["method"]].capabilities.full_batch_only
                             and p["feature_extractor"] is None and _large(p, N, D, C, est.method))
    return with_batch_size(est, p, min(AUTO_BATCH_SIZE, N) if minibatch else None)


def with_batch_size(est, p: dict, batch_size: int | None) -> dict:
    """``p`` (of batch_size "auto") with the batch size "auto" chose, ``batch_size`` (None: the full batch), and with
    the settings that depend on it derived again by ``registry.resolve``, unless given: the learning rate
    and the inducing inputs' own rate (``auto_minibatch_rates`` in minibatches, unless a learning rate is given),
    optimizer, tol, max_iter, and the method's hyper-parameter
    prior, whether it learns the inducing inputs and ε (``registry.fit_default``).
    ``est``: the estimator, seen as its chosen method (``resolve_method``)."""
    given = {**est.get_params(deep=False), "batch_size": batch_size}
    fresh = resolve(given)    # the defaults for this batch size, what was given on top
    auto_rate, auto_inducing_rate = auto_minibatch_rates(p["method"])
    rate = auto_rate if batch_size is not None and given["learning_rate"] is None else fresh["learning_rate"]
    likelihood = {**p["likelihood_params"],
                  **{k: v for k, v in fresh["likelihood_params"].items() if k == "learn_epsilon"}}
    inducing = {**p["inducing_params"], "learn": fresh["inducing_params"]["learn"]}
    if batch_size is not None and given["learning_rate"] is None and inducing["learning_rate"] is None \
            and inducing["learn"]:
        inducing["learning_rate"] = auto_inducing_rate
    if inducing["learning_rate"] is not None and not inducing["learn"]:
        # a rate given for the minibatch fits "auto" makes on large data; this one keeps Z where k-means put it
        warnings.warn(f"inducing_params['learning_rate'] does nothing in this fit: batch_size='auto' chose the full "
                      f"batch, where method={p['method']!r} keeps the inducing inputs fixed; set "
                      "inducing_params['learn'] True to train them", UserWarning, stacklevel=4)
        inducing["learning_rate"] = None
    return {**p, "batch_size": batch_size, "learning_rate": rate, "optimizer": fresh["optimizer"],
            "tol": fresh["tol"], "max_iter": fresh["max_iter"], "likelihood_params": likelihood,
            "kernel_params": {**p["kernel_params"], "prior_scale": fresh["kernel_params"]["prior_scale"]},
            "inducing_params": inducing}


def inducing_count(p: dict, N: int, stacklevel: int) -> int:
    """M = n_inducing, or N (with a warning) when there are fewer rows; "auto": ``AUTO_INDUCING``."""
    if p["n_inducing"] == "auto":
        return auto_inducing(N)
    M = int(p["n_inducing"])
    if M > N:
        warnings.warn(f"n_inducing={M} is larger than the number of training rows ({N}); using {N}",
                      UserWarning, stacklevel=stacklevel + 1)
        M = N
    return M


def carried_state(est, engine, Xt: torch.Tensor, yt: torch.Tensor, keys: np.ndarray | None,
                  wt: torch.Tensor | None = None):
    """The previous fit's engine state carried over to the training set Xt, yt with row weights wt (None: 1
    each; a warm start): per-row sites follow their rows, matched by ``keys`` (``warm_start.row_keys`` of the
    new rows)."""
    keep = None
    if keys is not None:
        keep = torch.as_tensor(match_rows(getattr(est, "_row_keys_", None), keys), device=Xt.device)
    return engine.carry(est.model_, est.state_, Xt, yt, keep, weight=wt)


def fit(est, X, y, *, X_val, y_val, resume: bool, comm, sample_weight=None, **run):
    """``GPClassifier.fit`` without the restore on failure: arrays (``fit_arrays``) or a source (``fit_stream``);
    ``run``: the per-run arguments (eval_every, checkpoint_path, checkpoint_every)."""
    p = settings(est)
    if (X_val is None) != (y_val is None):
        raise ValueError("pass X_val and y_val together (validation needs rows and their labels)")
    if comm is not None and comm.world_size > 1:
        check_data_parallel_extractor(p["feature_extractor"])
    if isinstance(X, (str, os.PathLike)) or stream.is_source(X):
        if sample_weight is not None or p["class_weight"] is not None:
            raise ValueError("a streamed fit (X a file or a stream source) takes no sample_weight or class_weight: "
                             "weighing rows needs them in memory; fit on arrays to weigh them")
        return fit_stream(est, p, stream.as_source(X, y), X_val=X_val, y_val=y_val, resume=resume, comm=comm, run=run)
    if y is None:
        raise ValueError("requires y to be passed, but the target y is None")
    return fit_arrays(est, p, X, y, X_val=X_val, y_val=y_val, resume=resume, comm=comm, run=run,
                      sample_weight=sample_weight)


def fit_arrays(est, p: dict, X, y, *, X_val, y_val, resume: bool, comm, run: dict, sample_weight=None):
    """Fit on in-memory arrays X [N,D], y [N], rows weighted by ``sample_weight`` [N] (None: 1 each) and the
    ``class_weight`` parameter (``weighting``)."""
    X, y = validated(est, X, y, reset=True)
    classes, y_enc = unique_labels(y, "y")         # mixed label types: our message, not numpy's TypeError
    if y.dtype.kind not in "biu":                  # 1-D integer labels are classes to scikit-learn: no second pass
        check_classification_targets(y)
    rows, w = weighting.row_weights(p["class_weight"], classes, y_enc, check_sample_weight(sample_weight, len(X)))
    n_given = len(X)
    if rows is not None:                           # rows of weight 0 are left out, with the classes they leave
        X, y_enc = X[rows], y_enc[rows]
        present, y_enc = np.unique(y_enc, return_inverse=True)
        classes = classes[present]
    previous_classes = getattr(est, "classes_", None)
    est.classes_ = classes
    if len(classes) < 2:
        among = " among the rows of positive weight" if rows is not None else ""
        raise ValueError(f"y has only one class ({classes[0]!r}){among}; a classifier needs at least 2 classes")
    chosen, p = resolve_method(est, p, X.shape[0], X.shape[1], len(classes))
    method = METHODS[p["method"]]
    if w is not None and not method.capabilities.weighted:
        raise ValueError(f"method={p['method']!r} cannot weigh rows (EP in function space: a row repeated w times is "
                         "w latent values, not one site to the power w); with it, sample_weight and class_weight may "
                         "only leave rows out (weights 0 and 1). Methods that weigh rows: "
                         f"{', '.join(map(repr, capable('weighted')))}")
    if likelihood_key(p["likelihood"]) not in method.likelihoods and len(classes) != 2:   # a binary-only likelihood
        raise ValueError(f"method={p['method']!r} with likelihood={p['likelihood']!r} is the binary model (one "
                         f"latent function, probit sites); y has {len(classes)} classes: use "
                         "likelihood='robustmax' for more than 2, or method='vi' for this likelihood's multi-class "
                         "model")
    p = resolve_batch_size(chosen, p, X.shape[0], X.shape[1], len(classes))
    p = resolve_dtype(est, p, len(X), len(classes), float(max(X.max(), -X.min())) if X.size else 0.0)
    rng = check_random_state(p["random_state"])
    seed = int(rng.randint(0, 2 ** 31 - 1))
    generator = torch.Generator().manual_seed(seed)
    monitor = None
    if p["early_stopping"]:
        X, y_enc, w, monitor = held_out(p, X, y_enc, int(rng.randint(0, 2 ** 31 - 1)), w)
    N, D = X.shape
    M = inducing_count(p, N, stacklevel=4)
    engine = make_engine(p)
    Xt, yt = as_tensor(p, X), torch.as_tensor(y_enc, dtype=torch.long, device=p["device"])
    wt = None if w is None else as_tensor(p, w)
    full_gp = method.full_gp_at_n and M == N   # FITC with Z = X fixed is the full GP
    warm = continues(est, p, D, classes, previous_classes, M, full_gp)
    keys = row_keys(X, y_enc) if method.capabilities.per_row_state else None
    if warm and full_gp:        # the full GP's inducing inputs are its training rows: Z follows X
        Zt = as_tensor(p, X)
        if est.model_.Z.ndim == 3:
            Zt = Zt.expand(est.model_.Z.shape[0], *Zt.shape).clone()
        est.model_.Z = torch.nn.Parameter(Zt, requires_grad=False)
    if not warm:
        extractor = copy_extractor(p)
        # a hybrid model's kernel acts on features: initialise Z and length-scales on h(X) of the initial h
        H = X if extractor is None else extractor_features(extractor, Xt)
        # hybrid: the spread of the initial features says little about the trained ones (a random CNN maps
        # all images close together): scale by each feature's root mean square instead. Weighted rows: the
        # spread of the data they stand for.
        if w is None:
            std = H.std(0) if extractor is None else np.sqrt(np.mean(H * H, 0))
        else:
            centre = np.average(H, axis=0, weights=w) if extractor is None else 0.0
            std = np.sqrt(np.average((H - centre) ** 2, axis=0, weights=w))
        lengthscale = initial_lengthscales(H, std)
        Z = X.copy() if full_gp else init_inducing(H, M, p["inducing_params"]["init"], seed=seed, sample_weight=w)
        est.model_ = build_model(p, H.shape[1], len(classes), Z, lengthscale, extractor)
        if full_gp:
            est.model_.Z.requires_grad_(False)
    state = carried_state(est, engine, Xt, yt, keys, wt) if warm else engine.init(est.model_, Xt, yt, generator, wt)
    loop = train_settings(p, run)
    validate = validator(est, p, engine, X_val, y_val)
    if p["verbose"]:
        print(f"sgpc: {p['method']} with {likelihood_name(p)} likelihood, {len(classes)} classes "
              f"({est.model_.n_latent} latent functions"
              f"{'; binary form' if est.model_.n_latent == 1 else ''}), N={N}, D={D}, M={M}, "
              + ("full batch" if p["batch_size"] is None else f"minibatches of {p['batch_size']}")
              + f", {p['dtype']}")
    est.state_, history = fit_loop(est.model_, engine, state, Xt, yt, loop, generator=generator,
                                   validate=validate, resume=resume, comm=comm,
                                   monitor=None if monitor is None else monitor(engine), prior=hyperprior(p, est.model_),
                                   sample_weight=wt)
    # the loop ends on a hyper-parameter step: refresh the sites (a no-op for VI) before q is read
    if p["verbose"] and p["batch_size"] is not None and engine.capabilities.increment:
        # one pass over every row after the last step: about 30 s on 3 million rows (docs/results/scale.md)
        print(f"sgpc: refreshing the sites on all {N} rows (one pass, after the last step)")
    est.state_ = refresh(est.model_, engine, est.state_, Xt, yt, comm=comm)
    record_engine_events(history, engine, est.state_, len(history.iteration), reason="final refresh", final=True)
    finish(est, p, engine, history, warm, full_gp, X_check=Xt)
    if rows is not None and METHODS[p["method"]].outlier_model and not p["early_stopping"]:
        # one per row given, NaN for those of weight 0 (with early stopping: one per row fitted, as without weights)
        proba = np.full(n_given, np.nan)
        proba[rows] = est.outlier_proba_
        est.outlier_proba_ = proba
    if keys is not None:
        est._row_keys_ = keys
    return est


def hyperprior(p: dict, model) -> LogNormalPrior | None:
    """The prior on the kernel's hyper-parameters (``kernel_params["prior_scale"]``), centred on the values the
    fit starts from: the initial ones, or a warm start's carried ones (a resumed fit's model is the one its
    first part started from, so it gets the same prior)."""
    scale = p["kernel_params"]["prior_scale"]
    return None if scale is None else LogNormalPrior.around(model.kernel, scale)


def held_out(p: dict, X: np.ndarray, y_enc: np.ndarray, seed: int, w: np.ndarray | None = None):
    """``early_stopping``: the training rows, their labels and weights (None: 1 each), and a factory of the
    stopping rule's monitor (the mean log-likelihood of a stratified ``validation_fraction`` of the rows, held
    out from training; weighted by their weights)."""
    from sklearn.model_selection import train_test_split
    arrays = (X, y_enc) if w is None else (X, y_enc, w)
    try:
        split = train_test_split(*arrays, test_size=p["validation_fraction"], stratify=y_enc, random_state=seed)
    except ValueError as exc:
        raise ValueError(f"early_stopping holds out validation_fraction={p['validation_fraction']!r} of the "
                         f"{len(y_enc)} rows, stratified by class: {exc}; use more rows, a larger "
                         "validation_fraction, or early_stopping=False") from None
    X_fit, X_out, y_fit, y_out = split[:4]
    w_fit, w_out = (None, None) if w is None else split[4:]
    Xo, yo = as_tensor(p, X_out), torch.as_tensor(y_out, dtype=torch.long, device=p["device"])
    wo = None if w_out is None else as_tensor(p, w_out / w_out.sum())

    def monitor(engine):
        def held_out_log_likelihood(model, state) -> float:
            lp, _ = predict_outputs(model, engine.posterior(model, state), Xo)
            ll = lp.gather(1, yo[:, None])[:, 0]
            return float(ll.mean() if wo is None else (wo * ll).sum())
        return held_out_log_likelihood
    return X_fit, y_fit, w_fit, monitor


def finish(est, p: dict, engine, history, warm: bool, full_gp: bool, X_check: torch.Tensor) -> None:
    """The fitted attributes that every fit sets from its engine state and history, the warning of a
    fit that stopped at its ceiling before the stopping rule was met, and ``diagnostics`` on training rows
    ``X_check`` (a fit at the prior: ``at_prior_``, ``prior_distance_``, a ``DegenerateFitWarning``)."""
    est.posterior_ = engine.posterior(est.model_, est.state_)
    est.__dict__.pop("outlier_proba_", None)          # an earlier rmgpc fit's, of other rows
    if METHODS[p["method"]].outlier_model:
        est.outlier_proba_ = engine.outlier_proba(est.state_).cpu().numpy().astype(np.float64)
    est.history_ = history.as_dict()
    est.n_iter_ = len(history.iteration)
    est.dtype_ = p["dtype"]            # "auto" resolved (``resolve_dtype``)
    est.batch_size_ = p["batch_size"]  # "auto" resolved (``resolve_batch_size``)
    est.method_ = p["method"]          # "auto" resolved (``resolve_method``)
    est._fitted_as_ = structure(p)     # what a warm start may continue
    est._full_gp_ = full_gp
    est.warm_started_ = bool(warm)
    found = diagnostics.diagnose(est.model_, est.posterior_, X_check, history.converged, engine.counters(est.state_))
    est.converged_, est.at_prior_, est.prior_distance_ = found.converged, found.at_prior, found.prior_distance
    est.stalled_ = found.stalled
    diagnostics.warn(found, p["method"], stacklevel=5)
    if p["tol"] is not None and not est.converged_:
        if p["early_stopping"]:
            why = (f"its held-out log-likelihood still improved by more than tol={p['tol']:g} (per row) within the "
                   f"last {p['n_iter_no_change']} checks")
        elif p["batch_size"] is None:
            why = (f"its objective still moved by more than tol={p['tol']:g} (per datum) within the last "
                   f"{p['n_iter_no_change']} checks")
        else:
            why = (f"the mean objective of its last {p['n_iter_no_change']} windows of steps still had a trend beyond "
                   f"tol={p['tol']:g} (per datum and pass) and the minibatches' noise")
        warnings.warn(f"{p['method']} stopped after {est.n_iter_} iterations (max_iter / n_epochs) before it "
                      f"converged: {why}; raise max_iter (or n_epochs) or learning_rate, or set tol",
                      ConvergenceWarning, stacklevel=5)


def fit_stream(est, p: dict, source, *, X_val, y_val, resume: bool, comm, run: dict):
    """Fit from a source without loading it (streamable methods, minibatches only).

    One streaming pass (``stream.statistics``) gives N, the classes and their counts (SEP's slot
    counts), the features' standard deviations (the length-scale initialisation, as for arrays)
    and a uniform sample of 20 000 rows for the k-means inducing initialisation (which clusters at most
    ``sparse.kmeans_rows`` of them, as for arrays). Features are used
    as the source gives them, as for arrays: standardise with ``stream.standardized(source)``.
    Minibatches are block-shuffled (``stream.Minibatches``). Unlike the in-memory fit, the sites
    are not refreshed by a final full-data update (that would be one more pass over the data).
    """
    chosen, p = resolve_method(est, p, 0, 0, 0, streamed=True)   # a stream takes minibatches: "auto" is sep
    caps = METHODS[p["method"]].capabilities
    if not caps.streamable:
        why = "keeps per-point state and needs the data in memory" if caps.per_row_state or \
            caps.full_batch_only else "is not implemented for streaming"
        raise ValueError(f"method={p['method']!r} {why}; streaming supports "
                         f"{', '.join(map(repr, capable('streamable')))}")
    if p["batch_size"] is None:
        raise ValueError("streaming from a file or source needs minibatches: set batch_size (or leave it 'auto')")
    if p["early_stopping"]:
        raise ValueError("early_stopping holds out rows of in-memory data; a streamed fit stops on its training "
                         "objective (tol, n_iter_no_change): set early_stopping=False")
    if p["feature_extractor"] is not None:
        raise ValueError("streaming does not support a feature_extractor; fit it on arrays")
    rng = check_random_state(p["random_state"])
    seed = int(rng.randint(0, 2 ** 31 - 1))
    generator = torch.Generator().manual_seed(seed)
    st = stream.statistics(source, sample_size=20000, seed=seed)
    if st.classes is None:
        raise ValueError("the source has no labels (target=None); fitting needs them")
    check_classification_targets(st.classes)     # continuous labels: sklearn's error, as for arrays
    if len(st.classes) < 2:
        raise ValueError(f"y has only one class ({st.classes[0]!r}); a classifier needs at least 2 classes")
    previous_classes = getattr(est, "classes_", None)
    N, D = st.n_rows, source.n_features
    p = resolve_batch_size(chosen, p, N, D, len(st.classes), streamed=True)
    p = resolve_dtype(est, p, N, len(st.classes), None)
    M = inducing_count(p, N, stacklevel=4)
    warm = continues(est, p, D, st.classes, previous_classes, M)
    est.classes_, est.n_features_in_ = st.classes, source.n_features
    engine = make_engine(p)
    counts = torch.as_tensor(st.class_counts, dtype=DTYPES[p["dtype"]], device=p["device"])
    if warm:      # continue the previous fit (vi/arpep/rpapep/apep: as it is; sep: tied site rescaled below)
        state = est.state_
    else:
        Z = init_inducing(st.X_sample, min(M, len(st.X_sample)), p["inducing_params"]["init"], seed=seed)
        # as for arrays, with the largest deviation taken over the uniform sample of rows
        est.model_ = build_model(p, D, len(est.classes_), Z, initial_lengthscales(st.X_sample, st.std))
        state = engine.init(est.model_, None, None, generator)
    if caps.rescalable:           # SEP's slot counts n_l from the class counts
        state = engine.rescale(state, engine.counts_from_classes(counts))
    loop = train_settings(p, run)
    validate = validator(est, p, engine, X_val, y_val)
    if p["verbose"]:
        print(f"sgpc: {p['method']} streamed, {len(est.classes_)} classes, N={N}, D={D}, M={M}")
    est.state_, history = fit_loop(est.model_, engine, state, stream.LabelEncoded(source, est.classes_), None,
                                   loop, generator=generator, validate=validate, resume=resume, comm=comm,
                                   prior=hyperprior(p, est.model_))
    finish(est, p, engine, history, warm, full_gp=False, X_check=as_tensor(p, st.X_sample))
    est._row_keys_ = None                      # what an earlier in-memory fit left describes other rows
    est.__dict__.pop("feature_names_in_", None)
    return est


def restore(est, d: dict, path="the model file") -> None:
    """Set the fitted attributes of ``est`` (constructed with the file's parameters) from a model file's
    content ``d`` (``persist.read_model``)."""
    p = settings(est)
    if est.method == "auto":              # the method the fit chose (``model_payload``)
        name = d.get("method")
        if name not in METHODS:
            raise ModelFileError(f"{path} is damaged: it was fitted with method='auto' but does not say which "
                                 f"method that chose ({name!r}; expected one of {sorted(METHODS)})")
        p = settings(with_method(est, name))
    if p["batch_size"] == "auto" and "batch_size" in d:    # the batch size it chose (older files lack it)
        p = with_batch_size(with_method(est, p["method"]), p, d["batch_size"])
        est.batch_size_ = p["batch_size"]
    if p["dtype"] == "auto":              # the precision the model was fitted in (``model_payload``)
        name = d.get("dtype")
        if name not in DTYPES:
            raise ModelFileError(f"{path} is damaged: it was fitted with dtype='auto' but does not say which "
                                 f"precision that chose ({name!r}; expected one of {sorted(DTYPES)})")
        p = {**p, "dtype": name}
    est._fitted_params_ = est.get_params(deep=False)
    est.classes_ = np.asarray(d["classes"], dtype=np.dtype(d["classes_dtype"]))
    est.n_features_in_ = d["n_features_in"]
    if "feature_names_in" in d:
        est.feature_names_in_ = np.asarray(d["feature_names_in"], dtype=object)
    Zshape = d["model"]["Z"].shape
    D, C = Zshape[-1], len(est.classes_)   # the kernel's input dimension (features for a hybrid)
    Z = np.zeros(tuple(Zshape[-2:]))
    est.model_ = build_model(p, D, C, Z, lengthscale=None, extractor=copy_extractor(p))
    engine = make_engine(p)
    state = engine.init(est.model_, None, None, torch.Generator())
    check_model_payload(path, d, est.model_, state)
    est.model_.load_state_dict({k: v.to(p["device"]) for k, v in d["model"].items()})
    est.model_.eval()
    est.state_ = load_state(state, d["state"])
    if METHODS[p["method"]].outlier_model:
        est.outlier_proba_ = engine.outlier_proba(est.state_).cpu().numpy().astype(np.float64)
    dtype = DTYPES[p["dtype"]]
    est.posterior_ = InducingPosterior(mean=d["posterior"]["mean"].to(p["device"], dtype),
                                       chol=d["posterior"]["chol"].to(p["device"], dtype))
    est.history_ = d["history"]
    est.n_iter_ = d["n_iter"]
    est.warm_started_ = bool(d.get("warm_started", False))      # files written before it existed lack it
    est.metadata_ = dict(d.get("metadata") or {})
    est.converged_ = bool(est.history_.get("converged", False))
    found = d.get("diagnostics", {})                             # files written before it existed lack it
    est.at_prior_, est.prior_distance_ = bool(found.get("at_prior", False)), float(found.get("prior_distance", float("nan")))
    est.stalled_ = bool(found.get("stalled", False))
    est.dtype_ = p["dtype"]
    est.method_ = p["method"]
    est._fitted_as_ = structure(p)
    est._full_gp_ = bool(d.get("full_gp", False))
    if est._full_gp_:
        est.model_.Z.requires_grad_(False)
    if "row_keys" in d:
        est._row_keys_ = d["row_keys"].numpy().astype(np.int64).view(np.uint64)


def load_device(path, params: dict, device: str | None) -> dict:
    """The file's parameters ``params`` with the device to load on: ``device``, or the one it was fitted on — the
    CPU (with a warning) when that was a CUDA device and none is available here."""
    params = dict(params)
    if device is not None:
        check_device(device)              # the argument's fault, not the file's
        params["device"] = device
    elif str(params.get("device", "cpu")).startswith("cuda") and not torch.cuda.is_available():
        warnings.warn(f"{path} was fitted on {params['device']!r}, which is not available here: loading on the CPU",
                      UserWarning, stacklevel=3)
        params["device"] = "cpu"
    return params
