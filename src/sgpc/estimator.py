"""``GPClassifier``: the scikit-learn estimator, and the only place where strings become objects.

It validates inputs (with errors that say what is wrong and where), encodes labels, turns
``random_state`` into one ``torch.Generator``, builds kernel/likelihood/engine from their names,
runs ``train.fit``, and predicts through ``sparse.predict_log_proba``. It holds no maths.

Saved models (``save``/``load``) are plain dictionaries of tensors, numbers and strings read back
with ``torch.load(weights_only=True)``: loading never executes code from the file.
"""
from __future__ import annotations

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
from .likelihoods import RobustMax
from .sparse import InducingPosterior, SparseGP, init_inducing, predict_log_proba
from .train import TrainSettings, fit as fit_loop, _state_to_dict, _load_state
from .ep import EP
from .fitc_ep import GFITC
from .sep import APEP, SEP
from .vi import VI

__all__ = ["GPClassifier", "METHODS", "RESERVED_METHODS", "LIKELIHOODS", "KERNELS", "ModelFileError"]

METHODS = ("vi", "ep", "sep", "gfitc", "pep", "apep", "arpep", "rpapep")
RESERVED_METHODS = ("bsvm", "rmgpc")
LIKELIHOODS = ("robustmax",)
KERNELS = ("rbf", "matern12", "matern32", "matern52", "linear")
DTYPES = {"float64": torch.float64, "float32": torch.float32}
_FORMAT = "sgpc-model"
_VERSION = 1


class ModelFileError(ValueError):
    """A model file is missing, truncated, corrupt or not an sgpc model."""


def _choice(kind: str, value, valid) -> None:
    if value not in valid:
        raise ValueError(f"unknown {kind} {value!r}; valid: {', '.join(map(repr, valid))}")


def _check_finite(X: np.ndarray, name: str = "X") -> None:
    bad = ~np.isfinite(X).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)
        shown = ", ".join(map(str, rows[:5])) + (", ..." if len(rows) > 5 else "")
        raise ValueError(f"{name} contains NaN or infinity in {len(rows)} row(s), first: {shown}; "
                         "impute or drop them before fitting")


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


def _validated(estimator, X, y=None, *, reset: bool):
    """scikit-learn validation with our messages: non-numeric columns named, NaN/inf rows named."""
    try:
        if y is None:
            out = validate_data(estimator, X, reset=reset, dtype=np.float64, ensure_all_finite=False)
        else:
            out = validate_data(estimator, X, y, reset=reset, dtype=np.float64, ensure_all_finite=False)
    except (TypeError, ValueError) as exc:
        bad = _non_numeric_columns(X) if not hasattr(X, "tocsr") else []
        if bad:
            raise type(exc)(f"X has non-numeric columns {bad[:10]} ({exc}); encode them as numbers "
                            "(e.g. sklearn.preprocessing.OrdinalEncoder / OneHotEncoder)") from None
        raise
    _check_finite(out[0] if y is not None else out)
    return out


class GPClassifier(ClassifierMixin, BaseEstimator):
    """Sparse Gaussian-process classifier with inducing points (multi-class and binary).

    Args:
        method: inference method: "vi" (Hensman et al. 2015; free Gaussian q, ELBO), "ep" (EP with
            rank-one sites on the pairwise step factors, scalable-ep §2.2), "sep" (stochastic EP, tied
            sites, memory independent of N, §2.3.1), "pep" (Power EP with rank-one sites on the
            robust-max likelihood, alpha paper §3.1), "apep" (tied factor optimised by gradient of
            the Power-EP energy, alpha §3.2), "arpep" (free Gaussian q, alpha eq. 9), "rpapep"
            (free Gaussian q with the prior as one more factor, alpha eq. 10),
            "gfitc" (EP in function space on the FITC prior with the exact step likelihood, run to
            convergence before each hyper-parameter step; full batch only, use optimizer="lbfgs").
            Reserved for later releases: "bsvm", "rmgpc".
        alpha: the α of "pep", "apep", "arpep", "rpapep", in (0, 1] (1 = EP; → 0 approaches VI).
        likelihood: "robustmax" (step likelihood with label-noise ε).
        kernel: "rbf" (ARD squared exponential), "matern12", "matern32", "matern52", "linear".
        n_inducing: M, inducing points per latent function (clamped to the number of rows).
        inducing_init: "kmeans" or "random" (a random subset of training rows).
        learn_inducing: optimise the inducing inputs.
        shared_inducing: one set of inducing inputs for all latent functions (else one per latent, as in the papers).
        shared_kernel: one set of kernel hyper-parameters for all latent functions.
        latent_noise: initial variance of the additive latent noise (papers' kernel); None removes the term.
        epsilon: robust-max label-noise probability; learn_epsilon: make it trainable.
        damping: initial EP/SEP damping (annealed by 0.99 per update, floor 0.05).
        optimizer: "adam", "lbfgs" (full batch) or "adaptive" (the papers' batch rule: per-parameter
            rates ×1.02 while a gradient keeps its sign, ×0.5 when it flips). learning_rate: step size.
        max_iter: optimiser steps; n_epochs: passes over the data (overrides max_iter when set).
        batch_size: minibatch size; None = full batch.
        random_state: int, RandomState or None; all randomness flows from it.
        dtype: "float64" (default) or "float32". device: "cpu", "cuda", ...
        verbose: 0 silent, 1 progress bar and a summary.
        eval_every: steps between evaluations of the validation data passed to ``fit``.
        checkpoint_path, checkpoint_every: resumable checkpoints every K steps; ``fit(..., resume=True)`` continues.

    Fitted attributes: classes_, n_features_in_, model_ (SparseGP), state_ (engine state),
    posterior_ (InducingPosterior), history_ (dict), n_iter_.
    """

    def __init__(self, method: str = "vi", likelihood: str = "robustmax", kernel: str = "rbf",
                 n_inducing: int = 100, inducing_init: str = "kmeans", learn_inducing: bool = True,
                 shared_inducing: bool = False, shared_kernel: bool = False, latent_noise: float | None = 1e-3,
                 epsilon: float = 1e-3, learn_epsilon: bool = False, alpha: float = 0.5, damping: float = 0.5,
                 optimizer: str = "adam",
                 learning_rate: float = 0.01, max_iter: int = 500, n_epochs: int | None = None,
                 batch_size: int | None = None, random_state=None, dtype: str = "float64",
                 device: str = "cpu", verbose: int = 0, eval_every: int = 50, checkpoint_path: str | None = None,
                 checkpoint_every: int = 0):
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

    # -- strings -> objects ------------------------------------------------------------------------
    def _check_options(self) -> None:
        if self.method in RESERVED_METHODS:
            raise NotImplementedError(f"method={self.method!r} is not yet implemented; available now: "
                                      f"{', '.join(map(repr, METHODS))}")
        _choice("method", self.method, METHODS + RESERVED_METHODS)
        _choice("likelihood", self.likelihood, LIKELIHOODS)
        _choice("kernel", self.kernel, KERNELS)
        _choice("dtype", self.dtype, tuple(DTYPES))
        _choice("inducing_init", self.inducing_init, ("kmeans", "random"))
        if self.method == "gfitc" and self.batch_size is not None:
            raise ValueError("method='gfitc' runs EP to convergence on the whole data set: use batch_size=None")
        if not (isinstance(self.n_inducing, (int, np.integer)) and self.n_inducing >= 1):
            raise ValueError(f"n_inducing must be a positive integer, got {self.n_inducing!r}")

    def _torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def _make_kernel(self, D: int, L: int, lengthscale) -> torch.nn.Module:
        kw = dict(shared=self.shared_kernel, lengthscale=lengthscale, noise=self.latent_noise,
                  dtype=self._torch_dtype())
        if self.kernel == "rbf":
            return K.RBF(D, L, **kw)
        if self.kernel == "linear":
            return K.Linear(D, L, **kw)
        return K.Matern(D, L, nu={"matern12": 0.5, "matern32": 1.5, "matern52": 2.5}[self.kernel], **kw)

    def _make_likelihood(self, C: int) -> torch.nn.Module:
        return RobustMax(C, epsilon=self.epsilon, learn_epsilon=self.learn_epsilon)

    def _make_engine(self):
        if self.method == "ep":
            return EP(damping=self.damping)
        if self.method == "sep":
            return SEP(damping=self.damping)
        if self.method == "gfitc":
            return GFITC(damping=self.damping)
        if self.method == "pep":
            return EP(alpha=self.alpha, factor="likelihood", damping=self.damping)
        if self.method == "apep":
            return APEP(alpha=self.alpha)
        if self.method == "arpep":
            return VI(alpha=self.alpha)
        if self.method == "rpapep":
            return VI(alpha=self.alpha, objective="rpapep")
        return VI()

    def _build(self, D: int, C: int, Z: np.ndarray, lengthscale) -> SparseGP:
        lik = self._make_likelihood(C)
        kern = self._make_kernel(D, lik.n_latent, lengthscale)
        Zt = torch.as_tensor(Z, dtype=self._torch_dtype())
        if not self.shared_inducing:
            Zt = Zt.expand(lik.n_latent, *Zt.shape).clone()
        model = SparseGP(kern, lik, Zt, learn_inducing=self.learn_inducing)
        return model.to(device=self.device, dtype=self._torch_dtype())

    # -- validation ----------------------------------------------------------------------------------
    def _validate_X(self, X, reset: bool) -> np.ndarray:
        return _validated(self, X, reset=reset)

    def _tensor(self, A: np.ndarray) -> torch.Tensor:
        A = np.asarray(A)
        if not A.flags.writeable:   # torch cannot wrap read-only memory (e.g. memory-mapped input)
            A = A.copy()
        return torch.as_tensor(A, dtype=self._torch_dtype(), device=self.device)

    # -- the estimator API ---------------------------------------------------------------------------
    def fit(self, X, y, *, X_val=None, y_val=None, resume: bool = False):
        """Fit the classifier.

        Args:
            X: [N,D] numeric array-like; y: [N] labels (ints or strings), at least two classes.
            X_val, y_val: optional validation data; its error and NLL go into ``history_``.
            resume: continue from ``checkpoint_path`` when that file exists.
        Returns: self.
        """
        self._check_options()
        if y is None:
            raise ValueError("requires y to be passed, but the target y is None")
        X, y = _validated(self, X, y, reset=True)
        check_classification_targets(y)
        self.classes_, y_enc = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"y has only one class ({self.classes_[0]!r}); a classifier needs at least 2 classes")
        N, D = X.shape
        M = int(self.n_inducing)
        if M > N:
            warnings.warn(f"n_inducing={M} is larger than the number of training rows ({N}); using {N}",
                          UserWarning, stacklevel=2)
            M = N
        rng = check_random_state(self.random_state)
        seed = int(rng.randint(0, 2 ** 31 - 1))
        generator = torch.Generator().manual_seed(seed)
        std = X.std(0)
        lengthscale = math.sqrt(D) * np.where(std > 0, std, 1.0)
        Z = init_inducing(X, M, self.inducing_init, seed=seed)
        self.model_ = self._build(D, len(self.classes_), Z, lengthscale)
        engine = self._make_engine()
        Xt, yt = self._tensor(X), torch.as_tensor(y_enc, dtype=torch.long, device=self.device)
        state = engine.init(self.model_, Xt, yt, generator)
        settings = TrainSettings(optimizer=self.optimizer, learning_rate=self.learning_rate, max_iter=self.max_iter,
                                 n_epochs=self.n_epochs, batch_size=self.batch_size,
                                 checkpoint_path=self.checkpoint_path, checkpoint_every=self.checkpoint_every,
                                 eval_every=self.eval_every, progress=bool(self.verbose))
        validate = None
        if X_val is not None:
            Xv = self._tensor(self._validate_X(X_val, reset=False))
            yv = torch.as_tensor(self._encode(y_val), device=self.device)

            def validate(model, st):
                lp = predict_log_proba(model, engine.posterior(model, st), Xv)
                return {"error": float((lp.argmax(1) != yv).double().mean()),
                        "nll": float(-lp.gather(1, yv[:, None]).mean())}
        if self.verbose:
            print(f"sgpc: {self.method} with {self.likelihood} likelihood, {len(self.classes_)} classes "
                  f"({self.model_.n_latent} latent functions), N={N}, D={D}, M={M}")
        self.state_, history = fit_loop(self.model_, engine, state, Xt, yt, settings, generator=generator,
                                        validate=validate, resume=resume)
        # the loop ends on a hyper-parameter step: refresh the sites (a no-op for VI) before q is read
        self.state_ = engine.update(self.model_, self.state_, Xt, yt, N, torch.arange(N, device=Xt.device))
        self.posterior_ = engine.posterior(self.model_, self.state_)
        self.history_ = history.as_dict()
        self.n_iter_ = len(history.iteration)
        return self

    def _encode(self, y) -> np.ndarray:
        y = np.asarray(y)
        idx = np.searchsorted(self.classes_, y)
        idx = np.clip(idx, 0, len(self.classes_) - 1)
        unknown = self.classes_[idx] != y
        if unknown.any():
            raise ValueError(f"labels {np.unique(y[unknown])[:5].tolist()} were not seen in training; "
                             f"known classes: {self.classes_.tolist()}")
        return idx

    def predict_log_proba(self, X) -> np.ndarray:
        """log p(y = c | x) for each row and class (columns ordered as ``classes_``): [N,C]."""
        check_is_fitted(self, "posterior_")
        X = self._validate_X(X, reset=False)
        lp = predict_log_proba(self.model_, self.posterior_, self._tensor(X))
        return lp.cpu().numpy().astype(np.float64)

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities [N,C]; rows sum to one."""
        return np.exp(self.predict_log_proba(X))

    def predict(self, X) -> np.ndarray:
        """Most probable class label for each row: [N]."""
        check_is_fitted(self, "posterior_")
        return self.classes_[np.argmax(self.predict_log_proba(X), axis=1)]

    # -- persistence -----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted model to ``path`` (plain tensors and values; see ``load``)."""
        check_is_fitted(self, "posterior_")
        classes = self.classes_
        payload = {
            "format": _FORMAT, "version": _VERSION,
            "params": {k: v for k, v in self.get_params().items()},
            "classes": classes.tolist(), "classes_dtype": classes.dtype.str,
            "n_features_in": int(self.n_features_in_),
            "model": {k: v.detach().cpu() for k, v in self.model_.state_dict().items()},
            "state": _state_to_dict(self.state_),
            "posterior": {"mean": self.posterior_.mean.detach().cpu(), "chol": self.posterior_.chol.detach().cpu()},
            "history": self.history_, "n_iter": int(self.n_iter_),
        }
        if hasattr(self, "feature_names_in_"):
            payload["feature_names_in"] = [str(c) for c in self.feature_names_in_]
        for k, v in payload["params"].items():
            if not (v is None or isinstance(v, (bool, int, float, str))):
                raise TypeError(f"parameter {k}={v!r} cannot be saved (only numbers, strings, booleans, None); "
                                "pass an integer random_state")
        tmp = os.fspath(path) + ".tmp"
        torch.save(payload, tmp)
        os.replace(tmp, os.fspath(path))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "GPClassifier":
        """Read a model written by ``save``. Never executes code from the file (``weights_only=True``)."""
        try:
            d = torch.load(os.fspath(path), map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise
        except Exception as exc:  # truncation and foreign formats raise many different exception types
            raise ModelFileError(f"{path} is not a readable sgpc model file ({type(exc).__name__}: {exc})") from None
        if not isinstance(d, dict) or d.get("format") != _FORMAT:
            raise ModelFileError(f"{path} is not an sgpc model file")
        if d.get("version") != _VERSION:
            raise ModelFileError(f"{path} has model format version {d.get('version')}; this sgpc reads {_VERSION}")
        try:
            est = cls(**d["params"])
            est._check_options()
            est.classes_ = np.asarray(d["classes"], dtype=np.dtype(d["classes_dtype"]))
            est.n_features_in_ = d["n_features_in"]
            if "feature_names_in" in d:
                est.feature_names_in_ = np.asarray(d["feature_names_in"], dtype=object)
            Zshape = d["model"]["Z"].shape
            D, C = est.n_features_in_, len(est.classes_)
            Z = np.zeros(tuple(Zshape[-2:]))
            est.model_ = est._build(D, C, Z, lengthscale=None)
            est.model_.load_state_dict({k: v.to(est.device) for k, v in d["model"].items()})
            engine = est._make_engine()
            state = engine.init(est.model_, None, None, torch.Generator())
            est.state_ = _load_state(state, d["state"])
            est.posterior_ = InducingPosterior(mean=d["posterior"]["mean"].to(est.device, est._torch_dtype()),
                                               chol=d["posterior"]["chol"].to(est.device, est._torch_dtype()))
            est.history_ = d["history"]
            est.n_iter_ = d["n_iter"]
        except (KeyError, TypeError, RuntimeError, ValueError) as exc:
            raise ModelFileError(f"{path} is damaged or from an incompatible sgpc: {type(exc).__name__}: {exc}") from None
        return est
