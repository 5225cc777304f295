"""``GPClassifier``: the scikit-learn estimator, and the only place where a user's parameters become objects.

It stores its parameters (scikit-learn's contract), and fits, predicts, saves and loads through the modules that
do the work: ``validation`` checks parameters and inputs (errors that say what is wrong and where), ``fitting``
turns the checked parameters into kernel, likelihood, engine and training run (through ``registry``) and sets the
fitted attributes, ``sparse.predict`` predicts, and ``persist`` writes and reads the model file. What a method
can do (stream, carry per-row sites, train a feature extractor, run only on the full batch) is read from its
engine's declared capabilities. It holds no maths.

Saved models (``save``/``load``) are plain dictionaries of tensors, numbers and strings in ``persist``'s model
file format: loading never executes code from the file.
"""
from __future__ import annotations

import copy
import os

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from . import fitting, stream
from .persist import ModelFileError, check_plain, model_payload, read_model, save_model
from .registry import make_engine
from .sparse import predict as predict_outputs
from .validation import DTYPES, check_finite, check_predictions, plain_value, validated, with_method

__all__ = ["GPClassifier", "ModelFileError"]

PREDICT_BLOCK = 1 << 16        # rows of an array predicted at a time (sparse.predict batches them further)


class GPClassifier(ClassifierMixin, BaseEstimator):
    """Sparse Gaussian-process classifier with inducing points (multi-class and binary).

    Args:
        method: "auto" (default): "ep" in a full-batch fit, "sep" with minibatches (``batch_size`` below; the
            fitted ``method_`` says which; docs/design-notes.md, 'method="auto"'); or an inference method, one of
            ``registry.METHODS`` (the README's method table): "vi", "ep", "sep",
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
            ep_tol ("gfitc", "rmgpc", "smgpc"; 1e-2): the inner EP run before each hyper-parameter step stops
            when no site parameter changed by more than this (relative to 1 + |value|) in a sweep, or after 20
            sweeps; the fit converges only once an inner run has (the papers' protocol: 1e-3).
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
            "robustmax": epsilon (1e-3), the label-noise probability in (0, 1); learn_epsilon (the method's,
            ``registry.Method.learn_epsilon``: True for "vi", False for the others): make it
            trainable (not with "ep", "sep", "gfitc": they fit step factors without ε, which enters their
            predictions only; nor "rmgpc"/"smgpc", where ε = E[ρ]).
            "step"/"probit"/"logit": noise_variance (None), a (None = 0, 1, 2.897 respectively; a = 0 is
            exact); delta (1e-3), the initial robustness δ (eqs. 5, 15) in (0, (C−1)/C); learn_delta (True):
            optimise δ with the hyper-parameters (§IV-B-1) or keep it fixed.
            "softmax": n_samples_predict (1024), the points S of the prediction (eq. 26); softmax_predict ("qmc"):
            "qmc" (scrambled Sobol points with a fixed seed, deterministic) or "mc" (seeded Monte Carlo, the
            paper's).
            ``likelihood`` may also be an object of ``sgpc.likelihoods`` (``registry.LIKELIHOOD_CLASSES``, the
            hinge classes excepted) built for the data's classes, e.g. ``RobustMax(C, epsilon=0.01)``: a copy of
            it is the initial likelihood (the argument is never modified); the method's likelihood rules apply to
            its class, and likelihood_params must be None.
        kernel: "rbf" (ARD squared exponential), "matern12", "matern32", "matern52", "linear", or
            "matern52+rbf" (sum; the RBF term starts at 10× the Matérn length-scale, additive-noise-gpc App. D),
            "rbf+linear" (sum of an RBF and an ARD linear term from the same initial length-scales).
            Or, as scikit-learn's ``kernel=``, an object of ``sgpc.kernels`` (``registry.KERNEL_CLASSES``: RBF,
            Matern, Linear, Sum) built for D inputs (the features, or the feature extractor's outputs) and L latent
            functions, e.g. ``kernels.RBF(D, C, lengthscale=2.0, noise=1e-3)``: a copy of it is the initial kernel
            (the argument is never modified), kernel_params must be None.
        kernel_params: the kernel's options (None: all defaults; every kernel takes these, ``registry.KERNEL_OPTIONS``):
            latent_noise (1e-3): initial variance of the additive latent noise (papers' kernel); None removes the
            term. init_lengthscale (None): initial length-scale (a number, all dimensions); None = √D × the
            standard deviation of each feature, floored so that no single feature isolates a row
            (``initialization.initial_lengthscales``). init_variance (1.0): initial kernel amplitude σ².
            shared_kernel (False): one set of kernel hyper-parameters for all latent functions. prior_scale (the
            method's, ``registry.Method.prior_scale``: 2.0 for "ep", "gfitc", "rmgpc", "smgpc" and a full-batch
            "sep" fit, or "vi" fit with robust-max or step (``registry.Method.full_batch_fit``), None for the
            others): s of a log-normal prior on every length-scale and amplitude, centred on their initial values
            (``hyperprior``); the fit maximises log Z + log p(ξ). None: no prior (ML-II, as in the papers).
        n_inducing: M, inducing points per latent function (clamped to the number of rows); "auto": one per 8
            training rows, at least 30 and at most 100 (``fitting.AUTO_INDUCING``; docs/suite.md).
        inducing_params: the inducing inputs' options (None: all defaults; ``registry.INDUCING_OPTIONS``):
            init ("kmeans"): "kmeans" or "random" (a random subset of training rows); learn (the method's
            default, ``registry.Method.learn_inducing``: False for "ep", "gfitc", "rmgpc", "smgpc" and a full-batch
            "sep" fit, or "vi" fit with robust-max or step, True for the others): optimise them; shared (False): one set
            for all latent functions (else one per latent, as in the papers); learning_rate (None: the fit's
            ``learning_rate``; 0.05 in the "sep" minibatches of batch_size="auto" unless learning_rate is given): their
            own step size when they learn (not with L-BFGS), decayed as the others'.
        optimizer: "adam", "lbfgs" (full batch), "rprop" (full batch: torch's Rprop, a step of its own size per
            parameter along the gradient's sign, ×1.2 while the sign holds, ×0.5 when it flips, at most 1) or
            "adaptive" (the papers' batch rule: per-parameter rates ×1.02 while a gradient keeps its sign, ×0.5
            when it flips; unbounded, so meant for the papers' few hundred steps). None: the method's
            (``registry.Method.optimizer``: "rprop" for "gfitc", "rmgpc", "smgpc" and a full-batch "ep" fit;
            "adam" for the others and for minibatches). learning_rate: step size (Rprop: the initial one); None:
            the method's default (``registry.Method.learning_rate``: 0.05 for "ep", "gfitc", "rmgpc", "smgpc" and a
            full-batch "vi" fit with robust-max or step, 0.1 for a full-batch "sep" fit, 0.01 for the others), and in
            the minibatches that batch_size="auto" chooses 0.1 for "sep", its inducing inputs at 0.05, and 0.05 for
            the other methods (``fitting.auto_minibatch_rates``).
        optimizer_params: the optimizer's options (None: all defaults; ``registry.OPTIMIZER_OPTIONS``):
            lr_decay (1.0): Adam's learning rate is multiplied by this factor per pass over the data (1 = constant).
        max_iter: the ceiling on optimiser steps; "auto" (default): 500 on the full batch, 2000 with minibatches
            (``registry.max_iter_of``). n_epochs: passes over the data (overrides max_iter when set).
        batch_size: minibatch size; None = full batch; "auto" (default): minibatches of 1 024 rows, with Adam at
            0.1 and the inducing inputs at 0.05 for "sep" (the default's method there) and 0.05 for the others unless
            learning_rate is given (``fitting.auto_minibatch_rates``), when a full-batch iteration's work
            N·C·M·(M + D) (rows, classes, inducing points, features) reaches 10⁹ (``fitting.AUTO_MINIBATCH_WORK``: a
            full-batch fit there took about a minute to converge) or, for "auto" and "sep", the classes 17
            (``fitting.AUTO_MINIBATCH_CLASSES``), and the method takes minibatches, else the full batch
            (docs/design-notes.md); a streamed fit always uses minibatches. The fitted ``batch_size_`` says which.
            A hybrid model (``feature_extractor``) keeps the full batch unless given one.
        random_state: int, RandomState or None; all randomness flows from it (``save`` needs an int or None).
        dtype: "auto" (default), "float64" or "float32". "auto": for methods "ep", "sep" (so for the default),
            "pep" and "apep", float32 when rows × classes × inducing points reach 400 000
            (``fitting.AUTO_FLOAT32_WORK``; there a step's [L,N,M] products dominate, and float32 took 1.4–1.5× less
            time for full-batch "ep", 1.2–1.6× less for minibatch "sep", 1.2–1.8× less for full-batch "sep" and
            1.1–1.6× less for "pep" and "apep" with the same test NLL, docs/design-notes.md), float64 otherwise,
            for the other methods (not measured in float32, or slower in it), for inputs beyond 1e18 in magnitude,
            and for streamed fits; ``dtype_`` says which. Moment matching runs in float64 either way. device:
            "cpu", "cuda", ...
        verbose: 0 silent, 1 progress bar and a summary.
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
        tol, n_iter_no_change: the fit stops once it has converged, and an inner EP run (gfitc, rmgpc) converged:
            on the full batch, after n_iter_no_change consecutive steps whose objective per datum moved by at most
            tol; with minibatches, once the least-squares line through the mean objective of the last
            n_iter_no_change windows (a pass over the data, within 8 and 50 steps) has a slope within tol
            per pass plus two of its standard errors — no trend the minibatches' noise cannot explain
            (``train.Convergence``); with early_stopping, after n_iter_no_change checks without an improvement on
            the best held-out log-likelihood per row by more than tol. max_iter / n_epochs are then a ceiling, and
            reaching it first gives a ``ConvergenceWarning``. tol=None runs to the ceiling. ``converged_`` says
            which. tol="auto" (default): the method's (``registry.Method.tol``) in a full-batch fit, 1e-4 with
            minibatches: 3e-4 for "ep" (and "gfitc", "rmgpc", "smgpc", a full-batch "sep" fit and a full-batch
            "vi" fit with robust-max or step, which fit as it does) — on the suite's sets
            its test NLL was better than at 1e-4 (the hyper-parameters' objective keeps rising slowly after the test
            NLL has settled) in about 70% of the iterations — 1e-4 for the rest.
        early_stopping, validation_fraction: hold out a stratified validation_fraction of the rows and stop on
            their log-likelihood instead of the training objective (in-memory fits).
        compile: None (default: eager) or a ``torch.compile`` mode for the training loss of a minibatch method
            that streams ("default" or "reduce-overhead", CUDA graphs): meant for ``device="cuda"``, where a step
            is bound by kernel launches; the first step compiles.
        class_weight: None (every class weighs 1), "balanced" or a dict {label: weight ≥ 0} (labels it omits
            weigh 1): each training row's weight is multiplied by its class's, as ``fit``'s ``sample_weight``
            (the two multiply, as in scikit-learn). "balanced" is scikit-learn's n_samples / (n_classes ·
            bincount(y)), with the rows' sample weights summed per class in place of the counts when given.

    Fitted attributes: classes_, n_features_in_, model_ (SparseGP), state_ (engine state),
    posterior_ (InducingPosterior), history_ (dict), n_iter_, converged_, stalled_, at_prior_ and prior_distance_
    (``diagnostics``: a fit that stalled, or whose predictions are the prior's), warm_started_, dtype_ (the precision
    fitted in: "float64" or "float32", "auto" resolved); for "rmgpc"/"smgpc" also
    outlier_proba_ [N] (posterior probability that each training label is an outlier; zeros for "smgpc"; NaN for a row
    of weight 0, left out of the fit); after
    ``load``, metadata_ (the ``metadata`` passed to ``save``, {} without).
    """

    def __init__(self, method: str = "auto", likelihood="robustmax", kernel="rbf",
                 method_params: dict | None = None, likelihood_params: dict | None = None,
                 kernel_params: dict | None = None, n_inducing: int | str = "auto", inducing_params: dict | None = None,
                 optimizer: str | None = None, optimizer_params: dict | None = None, learning_rate: float | None = None,
                 max_iter: int | str = "auto", n_epochs: int | None = None, batch_size: int | str | None = "auto", random_state=None,
                 dtype: str = "auto", device: str = "cpu", verbose: int = 0,
                 feature_extractor: torch.nn.Module | None = None, warm_start: bool = False,
                 compile: str | None = None, tol: float | str | None = "auto", n_iter_no_change: int = 10,
                 early_stopping: bool = False, validation_fraction: float = 0.1, class_weight=None):
        self.method = method
        self.likelihood = likelihood
        self.kernel = kernel
        self.method_params = method_params
        self.likelihood_params = likelihood_params
        self.kernel_params = kernel_params
        self.n_inducing = n_inducing
        self.inducing_params = inducing_params
        self.optimizer = optimizer
        self.optimizer_params = optimizer_params
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.random_state = random_state
        self.dtype = dtype
        self.device = device
        self.verbose = verbose
        self.feature_extractor = feature_extractor
        self.warm_start = warm_start
        self.compile = compile
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.class_weight = class_weight

    def _make_engine(self):
        """The engine that the (checked) parameters make: of the method a fit chose, once fitted."""
        chosen = getattr(self, "method_", None)
        return make_engine(fitting.settings(self if chosen is None else with_method(self, chosen)))

    def _tensor(self, A) -> torch.Tensor:
        return fitting.as_tensor({"dtype": self.dtype_, "device": self.device}, A)

    # -- the estimator API ---------------------------------------------------------------------------
    def fit(self, X, y=None, *, sample_weight=None, X_val=None, y_val=None, eval_every: int = 50,
            checkpoint_path: str | None = None, checkpoint_every: int = 0, resume: bool = False, comm=None):
        """Fit the classifier.

        Args:
            X: [N,D] numeric array-like; y: [N] labels (ints or strings), at least two classes.
                Out of core: X a ``stream`` source (``ParquetSource``, ``NpySource``, …) with y None,
                a .parquet path (y: the label column's name, default the last column) or an [N,D]
                .npy path (y: the labels' .npy path or array) — see ``fitting.fit_stream``.
            sample_weight: [N] weights ≥ 0 (not all 0), or None (each row weighs 1); multiplied by
                ``class_weight``'s. Row i's contribution to the objective is multiplied by its weight: for integer
                weights the fit is that of the data with row i repeated w_i times (from the same initial inducing
                inputs and hyper-parameters, which the weights also shape: weighted k-means and spreads). Rows of
                weight 0 are left out (and with them a class that has no other row). The methods that weigh rows
                (``registry.METHODS[m].capabilities.weighted``): "vi", "arpep", "rpapep", "bsvm" (each row's term
                of the objective × w_i), "ep", "pep" (each row's sites to the power w_i, its factor terms of
                eqs. 57–61 × w_i; its cavity removes one copy's site, or the whole row when w_i < α: ``sites``),
                "sep" and "apep" (a row counts as w_i rows of the tied factor); "gfitc",
                "rmgpc" and "smgpc" take weights of 0 and 1 only (rows left out), and refuse others. In-memory
                fits only (a streamed X refuses it). A checkpoint resumes only a fit with the same weights.
            X_val, y_val: optional validation data; its error and NLL go into ``history_`` every
                ``eval_every`` steps.
            checkpoint_path, checkpoint_every: write a resumable checkpoint to checkpoint_path every K steps
                (0: never). resume: continue from ``checkpoint_path`` when that file exists.
            comm: a ``distributed.Communicator`` for data-parallel training (every rank calls fit
                with the same data and random_state; rank 0 writes checkpoints).
        Returns: self.

        A fit that raises (bad input found late, a diverged run, an interrupt) leaves a fitted
        estimator as it was: its fitted attributes are restored, so it still predicts as before.
        """
        kept = self._fitted_attributes()
        run = dict(X_val=X_val, y_val=y_val, eval_every=eval_every, checkpoint_path=checkpoint_path,
                   checkpoint_every=checkpoint_every, resume=resume, comm=comm, sample_weight=sample_weight)
        try:
            if self.feature_extractor is None:
                fitting.fit(self, X, y, **run)
            else:
                # dropout draws from torch's global generator: seeded from random_state for this fit (a
                # second draw, not the minibatch generator's seed), and the caller's generator state is
                # given back
                seed = int(check_random_state(self.random_state).randint(0, 2 ** 31 - 1, size=2)[1])
                device = torch.device(self.device)
                with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
                    torch.manual_seed(seed)
                    fitting.fit(self, X, y, **run)
        except BaseException:
            for name in [k for k in vars(self) if k.endswith("_") and k not in kept]:
                delattr(self, name)
            self.__dict__.update(kept)
            raise
        # what the fitted model was built with: ``save`` writes these, not parameters set since (a
        # set_params after the fit, or a later fit that failed, wrote settings that rebuild another model
        # or none)
        self._fitted_params_ = {k: copy.deepcopy(v) if k in ("kernel", "likelihood") else v   # objects as they were
                                for k, v in self.get_params(deep=False).items()}
        return self

    def _fitted_attributes(self) -> dict:
        """The fitted attributes (names ending in "_"); with ``warm_start``, copies of the model and state
        that a continued fit trains in place."""
        kept = {k: v for k, v in vars(self).items() if k.endswith("_") and not k.startswith("__")}
        if self.warm_start:
            kept.update({k: copy.deepcopy(kept[k]) for k in ("model_", "state_") if k in kept})
        return kept

    def _outputs(self, X, which: int) -> np.ndarray:
        """``sparse.predict``'s output ``which`` (0: log-probabilities, 1: decision scores), [N,C], over the
        rows of X (arrays, files, sources)."""
        check_is_fitted(self, "posterior_")
        if isinstance(X, (str, os.PathLike)) or stream.is_source(X):
            # streamed: one block of rows at a time; memory is the output [N,K] plus one block
            source = stream.as_source(X, labelled=False)
            if source.n_features != self.n_features_in_:
                raise ValueError(f"the source has {source.n_features} feature columns, the model "
                                 f"{self.n_features_in_}; for a file with a label column pass "
                                 "stream.ParquetSource(path, target=...)")
            out = np.empty((source.n_rows, len(self.classes_)))
            row = 0
            for Xb, _ in stream.iter_rows(source):
                check_finite(Xb, when="predicting", first_row=row, dtype=DTYPES[self.dtype_])
                out[row:row + len(Xb)] = self._predicted(Xb, which, row)
                row += len(Xb)
            return out
        X = validated(self, X, reset=False)
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
        check_predictions(Xt, outputs, DTYPES[self.dtype_], first_row)
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
    def save(self, path: str | os.PathLike, *, metadata: dict | None = None) -> None:
        """Write the fitted model to ``path`` (plain tensors and values; see ``load``).

        A feature extractor is stored as its weights only (inside the model's state dict): ``load``
        needs a module of the same architecture.

        Args:
            path: the file. metadata: plain values (dicts with string keys, lists, strings, numbers, booleans,
                None) stored with the model and given back by ``load`` as ``metadata_``; ``sgpc fit`` keeps
                the preprocessing of its data there (``cli``).
        """
        check_is_fitted(self, "posterior_")
        check_plain(metadata, "metadata")
        fitted_with = getattr(self, "_fitted_params_", None) or self.get_params(deep=False)
        params = {k: plain_value(k, v) for k, v in fitted_with.items() if k != "feature_extractor"}
        payload = model_payload(self, params)
        if metadata:
            payload["metadata"] = metadata
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
        d = read_model(path)
        if bool(d.get("has_feature_extractor", False)) != (feature_extractor is not None):
            raise ValueError(f"{path} was saved " + ("with a feature extractor: pass a module of the same architecture, "
                             "GPClassifier.load(path, feature_extractor=module)" if d.get("has_feature_extractor")
                             else "without a feature extractor: call GPClassifier.load(path) without one"))
        params = fitting.load_device(path, d["params"], device)
        try:
            est = cls(**params, feature_extractor=feature_extractor)
            fitting.restore(est, d, path)
        except ModelFileError:
            raise
        except (KeyError, TypeError, RuntimeError, ValueError, AttributeError, IndexError) as exc:
            raise ModelFileError(f"{path} is damaged or from an incompatible sgpc: {type(exc).__name__}: {exc}") from None
        return est
