"""Predictive uncertainty from posterior samples, and an active-learning loop — for every method.

Any fitted ``GPClassifier`` has q(u) (``posterior_``) and so independent Gaussian marginals
q(f*_l) = N(m_l, v_l) at new inputs (``sparse.marginals``). From S seeded samples f^(s) ~ q(f*):

* per-sample class probabilities p_s(c) = p(c | f^(s)) / Σ_k p(k | f^(s)) (the likelihood's
  ``log_prob``; the normalisation is a no-op for a proper likelihood and turns the BSVM's hinge
  pseudo-likelihood into a distribution whose mode is argmax f, the SVM decision rule);
* per-sample labels ŷ_s = argmax_c p_s(c);
* variation ratio VR = 1 − F/S, F the frequency of the modal label (multiclass-bayesian-svm eq. 13):
  0 when every sample agrees, → (C−1)/C when the labels are uniform;
* predictive entropy H[p̄] of a predictive distribution p̄ (``metrics.predictive_entropy``);
* mutual information between y* and f* (BALD, Houlsby et al. 2011):
  I = H[(1/S) Σ_s p_s] − (1/S) Σ_s H[p_s].

``active_learning`` runs the pool-based loop of multiclass-bayesian-svm §4.3.1 (one labelled point
per class to start, one query per round, warm-started refits) and records test metrics per round.

What this module does not do: fit models (the estimator does), or define new likelihoods.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
from sklearn.base import clone
from sklearn.utils.validation import check_array, check_is_fitted

from .metrics import class_indices, nll, predictive_entropy
from .sparse import evaluating, marginals

__all__ = ["sample_latents", "sample_probabilities", "sample_labels", "variation_ratio", "mutual_information",
           "mean_softmax_entropy", "acquisition_scores", "active_learning", "ACQUISITIONS"]

ACQUISITIONS = ("variation_ratio", "entropy", "mean_entropy", "bald", "random")


def _inputs(estimator, X) -> torch.Tensor:
    check_is_fitted(estimator, "posterior_")
    X = check_array(X, dtype=np.float64, order="C")         # also copies reversed views, which torch rejects
    if X.shape[1] != estimator.n_features_in_:
        raise ValueError(f"X has {X.shape[1]} features, the estimator was fitted with {estimator.n_features_in_}")
    q = estimator.posterior_
    return torch.as_tensor(X, dtype=q.mean.dtype, device=q.mean.device)


@torch.no_grad()
def _marginals(estimator, X, batch_size: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    Xt = _inputs(estimator, X)
    with evaluating(estimator.model_):
        out = [marginals(estimator.model_, estimator.posterior_, Xt[i:i + batch_size])
               for i in range(0, Xt.shape[0], batch_size)]
    return torch.cat([m for m, _ in out], 0), torch.cat([v for _, v in out], 0)


@torch.no_grad()
def sample_latents(estimator, X, n_samples: int = 100, random_state: int = 0) -> torch.Tensor:
    """Seeded samples of the latent functions from the marginals q(f*) of a fitted ``GPClassifier``.

    Args:
        estimator: fitted ``GPClassifier`` (any method); X: [N,D]; n_samples: S; random_state: int seed.
    Returns:
        F [S,N,L] (a tensor in the model's dtype).
    """
    _count("n_samples", n_samples, 1)
    if not (isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool)):
        raise ValueError(f"random_state must be an integer seed (samples are drawn with a seeded torch generator), "
                         f"got {random_state!r}")
    mean, var = _marginals(estimator, X)
    gen = torch.Generator().manual_seed(int(random_state))
    eps = torch.randn(n_samples, *mean.shape, generator=gen, dtype=mean.dtype).to(mean.device)
    return mean + var.sqrt() * eps


@torch.no_grad()
def sample_probabilities(estimator, X, n_samples: int = 100, random_state: int = 0) -> np.ndarray:
    """Per-sample class distributions p_s(c) ∝ p(c | f^(s)): [S,N,C] (rows sum to one)."""
    F = sample_latents(estimator, X, n_samples, random_state)
    lik = estimator.model_.likelihood
    N = F.shape[1]
    logp = torch.stack([lik.log_prob(torch.full((N,), c, dtype=torch.long, device=F.device), F)
                        for c in range(lik.n_classes)], -1)                         # [S,N,C]
    return torch.softmax(logp, -1).cpu().numpy().astype(np.float64)


def sample_labels(estimator, X, n_samples: int = 100, random_state: int = 0) -> np.ndarray:
    """Per-sample predicted class indices argmax_c p(c | f^(s)): [S,N] (int)."""
    return sample_probabilities(estimator, X, n_samples, random_state).argmax(-1)


def _count(name: str, value, minimum: int) -> None:
    """ValueError unless ``value`` is an integer (not a bool) ≥ ``minimum``."""
    if not (isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value >= minimum):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def variation_ratio(labels, n_classes: int) -> np.ndarray:
    """VR = 1 − F/S per point (eq. 13): labels [S,N] class indices in [0, C). Returns [N] in [0, 1 − 1/C]."""
    _count("n_classes", n_classes, 1)
    labels = np.asarray(labels)
    if labels.ndim != 2 or labels.shape[0] == 0:
        raise ValueError(f"labels must be [S,N] sampled class indices with S >= 1, got shape {labels.shape}")
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        if not np.all(labels == np.round(labels)):
            raise ValueError("labels must be integer class indices")
        labels = labels.astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        raise ValueError(f"labels must be class indices in [0, {n_classes})")
    S, N = labels.shape
    counts = np.zeros((N, n_classes))
    np.add.at(counts, (np.broadcast_to(np.arange(N), labels.shape), labels), 1.0)
    return 1.0 - counts.max(1) / S


def mutual_information(sample_proba) -> np.ndarray:
    """BALD: H[mean_s p_s] − mean_s H[p_s] for per-sample distributions [S,N,C]. Returns [N] ≥ 0."""
    P = np.asarray(sample_proba, dtype=np.float64)
    if P.ndim != 3:
        raise ValueError(f"sample_proba must be [S,N,C], got shape {P.shape}")
    S, N, C = P.shape
    expected = predictive_entropy(P.reshape(S * N, C)).reshape(S, N).mean(0)
    return np.maximum(predictive_entropy(P.mean(0)) - expected, 0.0)


def mean_softmax_entropy(estimator, X) -> np.ndarray:
    """Entropy of softmax(E[f*]) — the point-estimate policy of §4.3.1 (no variances). [N].

    With one latent function (binary models) the logits are (0, E[f*]).
    """
    mean, _ = _marginals(estimator, X)
    if mean.shape[1] == 1:
        mean = torch.cat([torch.zeros_like(mean), mean], 1)
    return predictive_entropy(torch.softmax(mean, 1).cpu().numpy().astype(np.float64))


def acquisition_scores(estimator, X, acquisition: str = "variation_ratio", n_samples: int = 100,
                       random_state: int = 0) -> np.ndarray:
    """Score of each candidate row (higher = query first): [N].

    acquisition: "variation_ratio" (eq. 13 from S samples), "entropy" (of ``predict_proba``),
    "mean_entropy" (``mean_softmax_entropy``), "bald" (``mutual_information``), "random" (seeded uniform).
    """
    if acquisition == "variation_ratio":
        C = estimator.model_.likelihood.n_classes
        return variation_ratio(sample_labels(estimator, X, n_samples, random_state), C)
    if acquisition == "entropy":
        return predictive_entropy(estimator.predict_proba(X))
    if acquisition == "mean_entropy":
        return mean_softmax_entropy(estimator, X)
    if acquisition == "bald":
        return mutual_information(sample_probabilities(estimator, X, n_samples, random_state))
    if acquisition == "random":                 # checked as the others are: a fitted model, finite rows
        return np.random.default_rng(random_state).random(_inputs(estimator, X).shape[0])
    raise ValueError(f"unknown acquisition {acquisition!r}; valid: {', '.join(map(repr, ACQUISITIONS))}")


def active_learning(estimator, X_pool, y_pool, X_test, y_test, *, n_queries: int = 100,
                    acquisition: str = "variation_ratio", n_initial_per_class: int = 1, initial=None,
                    n_samples: int = 100, refit_max_iter: int | None = None, warm_start: bool = True,
                    random_state: int = 0) -> dict:
    """Pool-based active learning with warm-started refits (multiclass-bayesian-svm §4.3.1,
    alpha-divergence-multiclass-gpc §5.6).

    Start from ``n_initial_per_class`` uniformly chosen labelled rows per class of ``y_pool`` (or from
    the pool rows ``initial``); each round scores the unlabelled pool, labels its highest-scoring row
    and refits. The first fit uses the estimator's settings. Later fits continue from the previous
    hyper-parameters, inducing inputs and q (``warm_start=True``; EP-style methods carry their sites
    over, the new row's starting as in a cold fit) for ``refit_max_iter`` steps (default: the
    estimator's ``max_iter``); a refit that cannot continue (the model's inducing inputs are still fewer
    than ``n_inducing``, or a new class arrived) is redone from scratch with the estimator's own budget.
    With ``warm_start=False`` every round refits from scratch with the estimator's settings.

    Args:
        estimator: an unfitted ``GPClassifier`` (cloned, not modified).
        X_pool [P,D], y_pool [P]: the pool with its (hidden) labels. X_test, y_test: evaluation data.
        n_queries: rounds; acquisition: one of ``ACQUISITIONS``; n_samples: S for sampled scores.
        initial: pool row indices labelled at the start (distinct, covering at least 2 classes and every
            class of ``y_test``);
            None: ``n_initial_per_class`` per class.
        refit_max_iter: steps of each warm refit; warm_start: False refits every round from scratch.
        random_state: int seed of the initial rows, the sampled scores and random queries.
    Returns:
        dict with ``n_labelled``, ``error``, ``nll`` (test metrics, n_queries + 1 entries: before the
        first query and after each), ``queried`` (pool row indices, in order), ``acquisition``.
    """
    if acquisition not in ACQUISITIONS:
        raise ValueError(f"unknown acquisition {acquisition!r}; valid: {', '.join(map(repr, ACQUISITIONS))}")
    _count("n_queries", n_queries, 0)
    _count("n_initial_per_class", n_initial_per_class, 1)
    X_pool, X_test = check_array(X_pool, dtype=np.float64), check_array(X_test, dtype=np.float64)
    y_pool, y_test = np.asarray(y_pool), np.asarray(y_test)
    if len(y_pool) != len(X_pool) or len(y_test) != len(X_test):
        raise ValueError("X_pool/y_pool and X_test/y_test must have the same numbers of rows")
    classes = np.unique(y_pool)
    if initial is not None:
        initial = np.asarray(initial)
        if initial.ndim != 1 or not np.issubdtype(initial.dtype, np.integer) or len(np.unique(initial)) != len(initial) \
                or (len(initial) and (initial.min() < 0 or initial.max() >= len(X_pool))):
            raise ValueError(f"initial must be distinct pool row indices in [0, {len(X_pool)})")
        if len(np.unique(y_pool[initial])) < 2:
            raise ValueError("the initial rows must cover at least 2 classes")
    # the test NLL needs the model's probability of every test label from the first fit on
    covered = classes if initial is None else np.unique(y_pool[initial])
    missing = np.setdiff1d(np.unique(y_test), covered)
    if len(missing):
        raise ValueError(f"test labels {missing.tolist()} are not among the initial labelled rows' classes "
                         f"{covered.tolist()}: the test NLL would be undefined; start from rows of every test class")
    n_initial = n_initial_per_class * len(classes) if initial is None else len(initial)
    if n_queries < 0 or n_initial + n_queries > len(X_pool):
        raise ValueError(f"n_queries must be in [0, {len(X_pool) - n_initial}] for this pool, got {n_queries}")
    rng = np.random.default_rng(random_state)
    labelled = [] if initial is None else initial.tolist()
    for c in classes if initial is None else ():
        rows = np.flatnonzero(y_pool == c)
        if len(rows) < n_initial_per_class:
            raise ValueError(f"class {c!r} has {len(rows)} pool rows, fewer than n_initial_per_class={n_initial_per_class}")
        labelled.extend(rng.choice(rows, n_initial_per_class, replace=False).tolist())
    model = clone(estimator)
    history = {"acquisition": acquisition, "n_labelled": [], "error": [], "nll": [], "queried": []}

    def fit_and_record():
        with warnings.catch_warnings():
            # few labelled rows: n_inducing is clamped to their number (the estimator warns)
            warnings.filterwarnings("ignore", message="n_inducing=")
            model.fit(X_pool[labelled], y_pool[labelled])
            if warm_start and refit_max_iter is not None and history["n_labelled"] and not model.warm_started_:
                # the refit could not continue (e.g. fewer rows than n_inducing before, or a new class): it
                # started afresh, so give it the estimator's full budget rather than refit_max_iter steps
                model.set_params(warm_start=False, max_iter=estimator.max_iter, n_epochs=estimator.n_epochs)
                model.fit(X_pool[labelled], y_pool[labelled])
                model.set_params(warm_start=True, max_iter=refit_max_iter, n_epochs=None)
        proba = model.predict_proba(X_test)
        idx = class_indices(y_test, model.classes_)
        history["n_labelled"].append(len(labelled))
        history["error"].append(float(np.mean(model.predict(X_test) != y_test)))
        history["nll"].append(nll(idx, proba))

    fit_and_record()
    if warm_start:
        model.set_params(warm_start=True, max_iter=model.max_iter if refit_max_iter is None else refit_max_iter,
                         **({"n_epochs": None} if refit_max_iter is not None else {}))
    for r in range(n_queries):
        candidates = np.setdiff1d(np.arange(len(X_pool)), labelled)
        scores = acquisition_scores(model, X_pool[candidates], acquisition, n_samples,
                                    int(rng.integers(2 ** 31 - 1)))
        pick = int(candidates[np.argmax(scores)])
        labelled.append(pick)
        history["queried"].append(pick)
        fit_and_record()
    return history
