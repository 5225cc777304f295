"""``GPClassifier``: the scikit-learn estimator, and the only place where a user's parameters become objects.

It validates inputs (``validation``: errors that say what is wrong and where), encodes labels, turns
``random_state`` into one ``torch.Generator``, builds kernel, likelihood and engine through ``registry``, runs
``train.fit``, and predicts through ``sparse.predict``. What a method can do (stream, carry per-row sites,
train a feature extractor, run only on the full batch) is read from its engine's declared capabilities.
It holds no maths.

Saved models (``save``/``load``) are plain dictionaries of tensors, numbers and strings in ``persist``'s model
file format: loading never executes code from the file.
"""
from __future__ import annotations

import copy
import os
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from . import diagnostics, stream
from .initialization import extractor_features, initial_lengthscales
from .persist import ModelFileError, check_model_payload, load_model, load_state, save_model, state_to_dict
from .registry import (KERNEL_OPTIONS, LIKELIHOOD_OPTIONS, METHOD_OPTIONS, METHODS, OPTION_GROUPS, make_engine,
                       make_kernel, make_likelihood, resolve)
from .sparse import InducingPosterior, SparseGP, init_inducing, predict as predict_outputs
from .train import TrainSettings, fit as fit_loop, record_engine_events, refresh
from .validation import (DTYPES, capable, check_data_parallel_extractor, check_device, check_finite, check_params,
                         check_predictions,
                         plain_value, unique_labels, validated)
from .warm_start import architecture, match_rows, row_keys

__all__ = ["GPClassifier", "ModelFileError"]

PREDICT_BLOCK = 1 << 16        # rows of an array predicted at a time (sparse.predict batches them further)


def _grouped_options(params: dict) -> dict:
    """A model file's parameters with the options that files written before ``method_params``,
    ``likelihood_params`` and ``kernel_params`` held as flat parameters (``alpha``, ``epsilon``, ...) moved into
    those dicts: the ones the method, likelihood and kernel take (such a file held every option)."""
    flat = {k: params.pop(k) for k in (*METHOD_OPTIONS, *LIKELIHOOD_OPTIONS, *KERNEL_OPTIONS) if k in params}
    if flat:
        for group, declared in OPTION_GROUPS.items():
            params[group] = {k: flat[k] for k in declared(params) if k in flat}
    return params


class GPClassifier(ClassifierMixin, BaseEstimator):
    """Sparse Gaussian-process classifier with inducing points (multi-class and binary).

    Args:
        method: inference method, one of ``registry.METHODS`` (the README's method table): "vi", "ep", "sep",
            "gfitc", "pep", "apep", "arpep", "rpapep", "bsvm", "rmgpc", "smgpc". "gfitc", "rmgpc" and "smgpc"
            run EP in function space on the whole data (full batch; use optimizer="lbfgs"); with n_inducing
            >= the number of rows "rmgpc"/"smgpc" are the full GP (FITC with Z = X, fixed: exact). "bsvm" uses
            its own hinge pseudo-likelihood and inducing inputs shared by all classes (``likelihood`` must stay
            at its default); its ``predict`` is argmax_c of the posterior mean of f*_c. "rmgpc" sets ε to E[ρ],
            and predict_proba = (1 − E[ρ]) P(argmax) + E[ρ]/C.
        method_params: the method's options (None: all defaults; a key the method does not take is an error;
            ``registry.METHODS[method].options`` lists them with their defaults):
            alpha ("pep", "apep", "arpep", "rpapep"; 0.5): the α in (0, 1] (1 = EP; → 0 approaches VI).
            damping ("ep", "sep", "gfitc", "pep", "rmgpc", "smgpc"; 0.5): initial EP/SEP damping (annealed by
            0.99 per pass over the data, floor 0.05 or the damping itself when it is smaller).
            sep_log_z ("sep"; "local"): the estimate of log Z_q whose gradient "sep" follows: "local" (each
            factor's own site, recomputed from the SEP cavity) or "tied" (the paper's wording; biased,
            ``sgpc.sep``).
            outlier_prior_a, outlier_prior_b ("rmgpc", "smgpc"; 1.0, 9.0): a₀, b₀ of the Beta prior on the outlier
            fraction ρ (Beta(1, 9): prior mean 0.1).
            natgrad_lr ("vi", "arpep", "rpapep", "bsvm"; None): None: the free Gaussian q(u) is optimised with
            the hyper-parameters; γ > 0: q(u) takes natural-gradient steps of size γ (Salimbeni et al. 2018) from
            the same backward pass, and the optimiser (optimizer="adam" or "adaptive") moves the
            hyper-parameters only.
        likelihood: "robustmax" (step likelihood with label-noise ε; with 2 classes it keeps two latent
            functions, the pairwise C = 2 model), or the additive-noise likelihoods (``method="vi"``): "step",
            "probit", "logit" (GPC-I/II/III, analytic ELBO eqs. 8/18) and "softmax" (GPCsm, bound eq. 25); with 2
            classes these use one latent function. "step"/"probit"/"logit" also work with "ep", "sep" and "pep"
            for 2 classes (one probit site per point).
        likelihood_params: the likelihood's options (None: all defaults; a key the likelihood does not take is an
            error; ``registry.LIKELIHOODS[likelihood].options``; bsvm's hinge takes none):
            "robustmax": epsilon (1e-3), the label-noise probability in (0, 1); learn_epsilon (False): make it
            trainable.
            "step"/"probit"/"logit": noise_variance (None), a (None = 0, 1, 2.897 respectively; a = 0 is
            exact); delta (1e-3), the initial robustness δ (eqs. 5, 15) in (0, (C−1)/C); learn_delta (True):
            optimise δ with the hyper-parameters (§IV-B-1) or keep it fixed.
            "softmax": n_samples_predict (1024), the points S of the prediction (eq. 26); softmax_predict ("qmc"):
            "qmc" (scrambled Sobol points with a fixed seed, deterministic) or "mc" (seeded Monte Carlo, the
            paper's).
        kernel: "rbf" (ARD squared exponential), "matern12", "matern32", "matern52", "linear", or
            "matern52+rbf" (sum; the RBF term starts at 10× the Matérn length-scale, additive-noise-gpc App. D).
        kernel_params: the kernel's options (None: all defaults; every kernel takes these, ``registry.KERNEL_OPTIONS``):
            latent_noise (1e-3): initial variance of the additive latent noise (papers' kernel); None removes the
            term. init_lengthscale (None): initial length-scale (a number, all dimensions); None = √D × the
            standard deviation of each feature, floored so that no single feature isolates a row
            (``initialization.initial_lengthscales``). init_variance (1.0): initial kernel amplitude σ².
            shared_kernel (False): one set of kernel hyper-parameters for all latent functions.
        n_inducing: M, inducing points per latent function (clamped to the number of rows).
        inducing_init: "kmeans" or "random" (a random subset of training rows).
        learn_inducing: optimise the inducing inputs.
        shared_inducing: one set of inducing inputs for all latent functions (else one per latent, as in the papers).
        optimizer: "adam", "lbfgs" (full batch) or "adaptive" (the papers' batch rule: per-parameter rates ×1.02
            while a gradient keeps its sign, ×0.5 when it flips; unbounded, so meant for the papers' few hundred
            steps). learning_rate: step size.
        lr_decay: Adam's learning rate is multiplied by this factor per pass over the data (1 = constant).
        max_iter: optimiser steps; n_epochs: passes over the data (overrides max_iter when set).
        batch_size: minibatch size; None = full batch.
        random_state: int, RandomState or None; all randomness flows from it (``save`` needs an int or None).
        dtype: "float64" (default) or "float32". device: "cpu", "cuda", ...
        verbose: 0 silent, 1 progress bar and a summary.
        eval_every: steps between evaluations of the validation data passed to ``fit``.
        checkpoint_path, checkpoint_every: resumable checkpoints every K steps; ``fit(..., resume=True)`` continues.
        feature_extractor: optional ``torch.nn.Module`` mapping X [N,D] to features [N,D'] (hybrid model,
            multiclass-bayesian-svm §3.4; free-Gaussian methods). ``fit`` trains a copy jointly with the GP (the
            argument is not modified); inducing inputs live in feature space, initialised by k-means on the
            features of the initial extractor. ``save`` stores its weights; ``load(path, feature_extractor=
            module)`` needs a module of the same architecture. End it with ``nn.BatchNorm1d(D', affine=False)``
            (docs: a per-row normalisation can collapse the features). Training mode during ``fit``, eval mode
            for prediction.
        warm_start: when the estimator was fitted before with the same classes (and features), ``fit``
            continues from the previous hyper-parameters, inducing inputs, feature extractor and q (used by
            active learning). Methods with per-row sites match each training row to an identical row (features
            and label) of the previous fit and keep its sites; sep scales its tied site to the new slot counts;
            apep keeps its tied factor. Their damping clock restarts. ``warm_started_`` says what happened.
        tol, n_iter_no_change: the fit stops once its objective per datum (or, with early_stopping, the
            held-out log-likelihood per row) has not improved on its best by more than tol for n_iter_no_change
            consecutive checks — every step of a full-batch fit, every pass over the data with minibatches —
            and an inner EP run (gfitc, rmgpc) converged; max_iter / n_epochs are then a ceiling, and reaching
            it first gives a ``ConvergenceWarning``. tol=None runs to the ceiling. ``converged_`` says which.
        early_stopping, validation_fraction: hold out a stratified validation_fraction of the rows and stop on
            their log-likelihood instead of the training objective (in-memory fits).
        compile: None (default: eager) or a ``torch.compile`` mode for the training loss of a minibatch method
            that streams ("default" or "reduce-overhead", CUDA graphs): meant for ``device="cuda"``, where a step
            is bound by kernel launches; the first step compiles.

    Fitted attributes: classes_, n_features_in_, model_ (SparseGP), state_ (engine state),
    posterior_ (InducingPosterior), history_ (dict), n_iter_, converged_, stalled_, at_prior_ and prior_distance_
    (``diagnostics``: a fit that stalled, or whose predictions are the prior's), warm_started_; for "rmgpc"/"smgpc" also
    outlier_proba_ [N] (posterior probability that each training label is an outlier; zeros for "smgpc").
    """

    def __init__(self, method: str = "vi", likelihood: str = "robustmax", kernel: str = "rbf",
                 method_params: dict | None = None, likelihood_params: dict | None = None,
                 kernel_params: dict | None = None,
                 n_inducing: int = 100, inducing_init: str = "kmeans", learn_inducing: bool = True,
                 shared_inducing: bool = False, optimizer: str = "adam",
                 learning_rate: float = 0.01, lr_decay: float = 1.0, max_iter: int = 500, n_epochs: int | None = None,
                 batch_size: int | None = None, random_state=None, dtype: str = "float64",
                 device: str = "cpu", verbose: int = 0, eval_every: int = 50, checkpoint_path: str | None = None,
                 checkpoint_every: int = 0, feature_extractor: torch.nn.Module | None = None,
                 warm_start: bool = False, compile: str | None = None,
                 tol: float | None = 1e-4, n_iter_no_change: int = 10, early_stopping: bool = False,
                 validation_fraction: float = 0.1):
        self.method = method
        self.likelihood = likelihood
        self.kernel = kernel
        self.method_params = method_params
        self.likelihood_params = likelihood_params
        self.kernel_params = kernel_params
        self.n_inducing = n_inducing
        self.inducing_init = inducing_init
        self.learn_inducing = learn_inducing
        self.shared_inducing = shared_inducing
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
        self.compile = compile
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction

    # -- parameters -> objects -----------------------------------------------------------------------
    @property
    def _method(self):
        """The registry entry of ``method`` (after ``_check_options``)."""
        return METHODS[self.method]

    def _check_options(self) -> None:
        check_params(self)

    def _torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def _params(self) -> dict:
        """The parameters with ``method_params``, ``likelihood_params`` and ``kernel_params`` resolved: the
        options the method, likelihood and kernel take, defaults updated by the dicts (``registry.resolve``)."""
        return resolve(self.get_params(deep=False))

    def _make_engine(self):
        return make_engine(self._params())

    def _train_settings(self) -> TrainSettings:
        return TrainSettings(optimizer=self.optimizer, learning_rate=self.learning_rate, lr_decay=self.lr_decay,
                             max_iter=self.max_iter,
                             n_epochs=self.n_epochs, batch_size=self.batch_size,
                             checkpoint_path=self.checkpoint_path, checkpoint_every=self.checkpoint_every,
                             eval_every=self.eval_every, progress=bool(self.verbose),
                             model_structure=repr(self._structure(with_device=False)), compile=self.compile,
                             tol=self.tol, n_iter_no_change=self.n_iter_no_change)

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
        params = self._params()
        lik = make_likelihood(params, C)
        kern = make_kernel(params, D, lik.n_latent, lengthscale, self._torch_dtype())
        Zt = torch.as_tensor(Z, dtype=self._torch_dtype())
        if not (self.shared_inducing or self._method.shared_inducing):
            Zt = Zt.expand(lik.n_latent, *Zt.shape).clone()
        model = SparseGP(kern, lik, Zt, learn_inducing=self.learn_inducing, feature_extractor=extractor)
        return model.to(device=self.device, dtype=self._torch_dtype())

    # -- validation ----------------------------------------------------------------------------------
    def _validate_X(self, X, reset: bool, name: str = "X", when: str | None = None) -> np.ndarray:
        return validated(self, X, reset=reset, name=name, when=when)

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
        (``with_device=False``). Options that the method, likelihood or kernel does not take read as their
        defaults."""
        resolved = self._params()
        m = {**METHOD_OPTIONS, **resolved["method_params"]}
        lik = {**LIKELIHOOD_OPTIONS, **resolved["likelihood_params"]}
        kern = resolved["kernel_params"]
        return (self.method, self.likelihood, self.kernel, kern["latent_noise"] is None, bool(kern["shared_kernel"]),
                bool(self.shared_inducing), bool(self.learn_inducing), bool(lik["learn_epsilon"]),
                None if lik["learn_epsilon"] else float(lik["epsilon"]), self.dtype,
                *((str(self.device),) if with_device else ()),
                lik["noise_variance"], bool(lik["learn_delta"]), None if lik["learn_delta"] else float(lik["delta"]),
                int(lik["n_samples_predict"]), lik["softmax_predict"],
                float(m["outlier_prior_a"]), float(m["outlier_prior_b"]), architecture(self.feature_extractor))

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
        """The previous fit's engine state carried over to the training set Xt, yt (a warm start): per-row
        sites follow their rows, matched by ``keys`` (``warm_start.row_keys`` of the new rows)."""
        keep = None
        if keys is not None:
            keep = torch.as_tensor(match_rows(getattr(self, "_row_keys_", None), keys), device=self.device)
        return engine.carry(self.model_, self.state_, Xt, yt, keep)

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
            check_data_parallel_extractor(getattr(self, "feature_extractor", None))
        if isinstance(X, (str, os.PathLike)) or stream.is_source(X):
            return self._fit_stream(stream.as_source(X, y), X_val=X_val, y_val=y_val, resume=resume, comm=comm)
        if y is None:
            raise ValueError("requires y to be passed, but the target y is None")
        X, y = validated(self, X, y, reset=True)
        classes, y_enc = unique_labels(y, "y")         # mixed label types: our message, not numpy's TypeError
        check_classification_targets(y)
        previous_classes = getattr(self, "classes_", None)
        self.classes_ = classes
        if len(self.classes_) < 2:
            raise ValueError(f"y has only one class ({self.classes_[0]!r}); a classifier needs at least 2 classes")
        if self.likelihood not in self._method.likelihoods and len(self.classes_) != 2:   # a binary-only likelihood
            raise ValueError(f"method={self.method!r} with likelihood={self.likelihood!r} is the binary model (one "
                             f"latent function, probit sites); y has {len(self.classes_)} classes: use "
                             "likelihood='robustmax' for more than 2")
        rng = check_random_state(self.random_state)
        seed = int(rng.randint(0, 2 ** 31 - 1))
        generator = torch.Generator().manual_seed(seed)
        monitor = None
        if self.early_stopping:
            X, y_enc, monitor = self._held_out(X, y_enc, int(rng.randint(0, 2 ** 31 - 1)))
        N, D = X.shape
        M = self._inducing_count(N, stacklevel=2)
        engine = self._make_engine()
        Xt, yt = self._tensor(X), torch.as_tensor(y_enc, dtype=torch.long, device=self.device)
        full_gp = self._method.full_gp_at_n and M == N   # FITC with Z = X fixed is the full GP
        warm = self._warm(D, self.classes_, previous_classes, M, full_gp)
        keys = row_keys(X, y_enc) if self._method.capabilities.per_row_state else None
        if warm and full_gp:        # the full GP's inducing inputs are its training rows: Z follows X
            Zt = self._tensor(X)
            if self.model_.Z.ndim == 3:
                Zt = Zt.expand(self.model_.Z.shape[0], *Zt.shape).clone()
            self.model_.Z = torch.nn.Parameter(Zt, requires_grad=False)
        if not warm:
            extractor = self._copy_extractor()
            # a hybrid model's kernel acts on features: initialise Z and length-scales on h(X) of the initial h
            H = X if extractor is None else extractor_features(extractor, Xt)
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
            print(f"sgpc: {self.method} with {self._method.own_likelihood or self.likelihood} likelihood, {len(self.classes_)} classes "
                  f"({self.model_.n_latent} latent functions"
                  f"{'; binary form' if self.model_.n_latent == 1 else ''}), N={N}, D={D}, M={M}")
        self.state_, history = fit_loop(self.model_, engine, state, Xt, yt, settings, generator=generator,
                                        validate=validate, resume=resume, comm=comm,
                                        monitor=None if monitor is None else monitor(engine))
        # the loop ends on a hyper-parameter step: refresh the sites (a no-op for VI) before q is read
        self.state_ = refresh(self.model_, engine, self.state_, Xt, yt, comm=comm)
        record_engine_events(history, engine, self.state_, len(history.iteration), reason="final refresh", final=True)
        self._finish(engine, history, warm, full_gp, X_check=Xt)
        if keys is not None:
            self._row_keys_ = keys
        return self

    def _held_out(self, X: np.ndarray, y_enc: np.ndarray, seed: int):
        """``early_stopping``: the training rows, their labels, and a factory of the stopping rule's monitor
        (−NLL of a stratified ``validation_fraction`` of the rows, held out from training)."""
        from sklearn.model_selection import train_test_split
        try:
            X_fit, X_out, y_fit, y_out = train_test_split(X, y_enc, test_size=self.validation_fraction,
                                                          stratify=y_enc, random_state=seed)
        except ValueError as exc:
            raise ValueError(f"early_stopping holds out validation_fraction={self.validation_fraction!r} of the "
                             f"{len(y_enc)} rows, stratified by class: {exc}; use more rows, a larger "
                             "validation_fraction, or early_stopping=False") from None
        Xo, yo = self._tensor(X_out), torch.as_tensor(y_out, dtype=torch.long, device=self.device)

        def monitor(engine):
            def held_out_log_likelihood(model, state) -> float:
                lp, _ = predict_outputs(model, engine.posterior(model, state), Xo)
                return float(lp.gather(1, yo[:, None]).mean())
            return held_out_log_likelihood
        return X_fit, y_fit, monitor

    def _finish(self, engine, history, warm: bool, full_gp: bool, X_check: torch.Tensor) -> None:
        """The fitted attributes that every fit sets from its engine state and history, the warning of a
        fit that stopped at its ceiling before the stopping rule was met, and ``diagnostics`` on training rows
        ``X_check`` (a fit at the prior: ``at_prior_``, ``prior_distance_``, a ``DegenerateFitWarning``)."""
        self.posterior_ = engine.posterior(self.model_, self.state_)
        self.__dict__.pop("outlier_proba_", None)          # an earlier rmgpc fit's, of other rows
        if self._method.outlier_model:
            self.outlier_proba_ = engine.outlier_proba(self.state_).cpu().numpy().astype(np.float64)
        self.history_ = history.as_dict()
        self.n_iter_ = len(history.iteration)
        self._fitted_as_ = self._structure()     # what a warm start may continue
        self._full_gp_ = full_gp
        self.warm_started_ = bool(warm)
        found = diagnostics.diagnose(self.model_, self.posterior_, X_check, history.converged, engine.counters(self.state_))
        self.converged_, self.at_prior_, self.prior_distance_ = found.converged, found.at_prior, found.prior_distance
        self.stalled_ = found.stalled
        diagnostics.warn(found, self.method, stacklevel=4)
        if self.tol is not None and not self.converged_:
            what = "held-out log-likelihood" if self.early_stopping else "objective"
            warnings.warn(f"{self.method} stopped after {self.n_iter_} iterations (max_iter / n_epochs) before it "
                          f"converged: its {what} still {'improved' if self.early_stopping else 'moved'} by more than tol={self.tol:g} (per datum) within the last "
                          f"{self.n_iter_no_change} checks; raise max_iter (or n_epochs) or learning_rate, or set tol",
                          ConvergenceWarning, stacklevel=4)

    def _fit_stream(self, source, *, X_val=None, y_val=None, resume: bool = False, comm=None):
        """Fit from a source without loading it (streamable methods, minibatches only).

        One streaming pass (``stream.statistics``) gives N, the classes and their counts (SEP's slot
        counts), the features' standard deviations (the length-scale initialisation, as for arrays)
        and a uniform sample of 20 000 rows for the k-means inducing initialisation. Features are used
        as the source gives them, as for arrays: standardise with ``stream.standardized(source)``.
        Minibatches are block-shuffled (``stream.Minibatches``). Unlike the in-memory fit, the sites
        are not refreshed by a final full-data update (that would be one more pass over the data).
        """
        caps = self._method.capabilities
        if not caps.streamable:
            why = "keeps per-point state and needs the data in memory" if caps.per_row_state or \
                caps.full_batch_only else "is not implemented for streaming"
            raise ValueError(f"method={self.method!r} {why}; streaming supports "
                             f"{', '.join(map(repr, capable('streamable')))}")
        if self.batch_size is None:
            raise ValueError("streaming from a file or source needs minibatches: set batch_size")
        if self.early_stopping:
            raise ValueError("early_stopping holds out rows of in-memory data; a streamed fit stops on its training "
                             "objective (tol, n_iter_no_change): set early_stopping=False")
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
        if warm:      # continue the previous fit (vi/arpep/rpapep/apep: as it is; sep: tied site rescaled below)
            state = self.state_
        else:
            Z = init_inducing(st.X_sample, min(M, len(st.X_sample)), self.inducing_init, seed=seed)
            # as for arrays, with the largest deviation taken over the uniform sample of rows
            self.model_ = self._build(D, len(self.classes_), Z, initial_lengthscales(st.X_sample, st.std))
            state = engine.init(self.model_, None, None, generator)
        if caps.rescalable:           # SEP's slot counts n_l from the class counts
            state = engine.rescale(state, engine.counts_from_classes(counts))
        settings = self._train_settings()
        validate = self._validator(engine, X_val, y_val)
        if self.verbose:
            print(f"sgpc: {self.method} streamed, {len(self.classes_)} classes, N={N}, D={D}, M={M}")
        self.state_, history = fit_loop(self.model_, engine, state, stream.LabelEncoded(source, self.classes_), None,
                                        settings, generator=generator, validate=validate, resume=resume, comm=comm)
        self._finish(engine, history, warm, full_gp=False, X_check=self._tensor(st.X_sample))
        self._row_keys_ = None                      # what an earlier in-memory fit left describes other rows
        self.__dict__.pop("feature_names_in_", None)
        return self

    def _encode(self, y, name: str = "y") -> np.ndarray:
        y = np.asarray(y)
        unique_labels(y, name)
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
            source = stream.as_source(X, labelled=False)
            if source.n_features != self.n_features_in_:
                raise ValueError(f"the source has {source.n_features} feature columns, the model {self.n_features_in_}; "
                                 "for a file with a label column pass stream.ParquetSource(path, target=...)")
            out = np.empty((source.n_rows, len(self.classes_)))
            row = 0
            for Xb, _ in stream.iter_rows(source):
                check_finite(Xb, when="predicting", first_row=row, dtype=self._torch_dtype())
                out[row:row + len(Xb)] = self._predicted(Xb, which, row)
                row += len(Xb)
            return out
        X = self._validate_X(X, reset=False)
        # in blocks of rows: memory is the output [N,C] plus one block's tensors, whatever N
        out = np.empty((X.shape[0], len(self.classes_)))
        for start in range(0, X.shape[0], PREDICT_BLOCK):
            out[start:start + PREDICT_BLOCK] = self._predicted(X[start:start + PREDICT_BLOCK], which, start)
        return out

    def _predicted(self, X: np.ndarray, which: int, first_row: int) -> np.ndarray:
        """Output ``which`` of ``sparse.predict`` for validated rows X (the first numbered ``first_row``), after
        ``check_predictions``."""
        Xt = self._tensor(X)
        outputs = predict_outputs(self.model_, self.posterior_, Xt)
        check_predictions(Xt, outputs, self._torch_dtype(), first_row)
        return outputs[which].cpu().numpy().astype(np.float64)

    def predict_log_proba(self, X) -> np.ndarray:
        """log p(y = c | x) for each row and class (columns ordered as ``classes_``): [N,C]."""
        check_is_fitted(self, "posterior_")
        return self._outputs(X, 0)

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities [N,C]; rows sum to one."""
        out = self.predict_log_proba(X)
        return np.exp(out, out=out)

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
        params = {k: plain_value(k, v) for k, v in fitted_with.items() if k != "feature_extractor"}
        payload = {
            "params": params,
            "has_feature_extractor": self.model_.feature_extractor is not None,
            "classes": classes.tolist(), "classes_dtype": classes.dtype.str,
            "n_features_in": int(self.n_features_in_),
            "model": {k: v.detach().cpu() for k, v in self.model_.state_dict().items()},
            "state": state_to_dict(self.state_),
            "posterior": {"mean": self.posterior_.mean.detach().cpu(), "chol": self.posterior_.chol.detach().cpu()},
            "history": self.history_, "n_iter": int(self.n_iter_),
            "warm_started": bool(getattr(self, "warm_started_", False)),
            "diagnostics": {"at_prior": bool(getattr(self, "at_prior_", False)),
                            "stalled": bool(getattr(self, "stalled_", False)),
                            "prior_distance": float(getattr(self, "prior_distance_", float("nan")))},
        }
        if hasattr(self, "feature_names_in_"):
            payload["feature_names_in"] = [str(c) for c in self.feature_names_in_]
        if getattr(self, "_full_gp_", False):   # Z = X held fixed: not a parameter setting, so say it
            payload["full_gp"] = True
        if getattr(self, "_row_keys_", None) is not None:    # what a warm start matches sites by
            payload["row_keys"] = torch.as_tensor(self._row_keys_.view(np.int64))
        save_model(path, payload)

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
        d = load_model(path)
        if bool(d.get("has_feature_extractor", False)) != (feature_extractor is not None):
            raise ValueError(f"{path} was saved " + ("with a feature extractor: pass a module of the same architecture, "
                             "GPClassifier.load(path, feature_extractor=module)" if d.get("has_feature_extractor")
                             else "without a feature extractor: call GPClassifier.load(path) without one"))
        params = d.get("params", {})
        if not isinstance(params, dict):
            raise ModelFileError(f"{path} is damaged: its parameters are a {type(params).__name__}, not a mapping")
        params = dict(params)
        if device is not None:
            check_device(device)              # the argument's fault, not the file's
            params["device"] = device
        elif str(params.get("device", "cpu")).startswith("cuda") and not torch.cuda.is_available():
            warnings.warn(f"{path} was fitted on {params['device']!r}, which is not available here: loading on the CPU",
                          UserWarning, stacklevel=2)
            params["device"] = "cpu"
        try:
            est = cls(**_grouped_options(params), feature_extractor=feature_extractor)
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
            engine = est._make_engine()
            state = engine.init(est.model_, None, None, torch.Generator())
            check_model_payload(path, d, est.model_, state)
            est.model_.load_state_dict({k: v.to(est.device) for k, v in d["model"].items()})
            est.model_.eval()
            est.state_ = load_state(state, d["state"])
            if est._method.outlier_model:
                est.outlier_proba_ = engine.outlier_proba(est.state_).cpu().numpy().astype(np.float64)
            est.posterior_ = InducingPosterior(mean=d["posterior"]["mean"].to(est.device, est._torch_dtype()),
                                               chol=d["posterior"]["chol"].to(est.device, est._torch_dtype()))
            est.history_ = d["history"]
            est.n_iter_ = d["n_iter"]
            est.warm_started_ = bool(d.get("warm_started", False))      # files written before it existed lack it
            est.converged_ = bool(est.history_.get("converged", False))
            found = d.get("diagnostics", {})                             # files written before it existed lack it
            est.at_prior_, est.prior_distance_ = bool(found.get("at_prior", False)), float(found.get("prior_distance", float("nan")))
            est.stalled_ = bool(found.get("stalled", False))
            est._fitted_as_ = est._structure()
            est._full_gp_ = bool(d.get("full_gp", False))
            if est._full_gp_:
                est.model_.Z.requires_grad_(False)
            if "row_keys" in d:
                est._row_keys_ = d["row_keys"].numpy().astype(np.int64).view(np.uint64)
        except ModelFileError:
            raise
        except (KeyError, TypeError, RuntimeError, ValueError, AttributeError, IndexError) as exc:
            raise ModelFileError(f"{path} is damaged or from an incompatible sgpc: {type(exc).__name__}: {exc}") from None
        return est
