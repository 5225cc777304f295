"""Real-data benchmark suite (issue 40, DESIGN §8): ``GPClassifier()`` against logistic regression,
gradient boosting, scikit-learn's GPC and the GPyTorch / GPflow SVGP recipes, on every classification
set that `sgpc.datasets` loads.

Protocol (one record per set, split and column):

- Sets: every name in ``sgpc.datasets.available()`` that loads, except the names in `SKIPPED_SETS`
  (aliases and relabelled duplicates, each with its reason). The source's own train/test files are
  concatenated; labels become indices 0..C-1 of the sorted distinct labels. A set with more than
  ``--max-rows`` rows (default 70 000) is replaced by a stratified subsample of that many rows (seed 0,
  the same for every split), and the record says so. Categorical columns are one-hot encoded by the
  loader (``categorical="onehot"``), except in `ORDINAL_SETS` (hundreds of airport codes), which keep
  integer codes.
- Splits: ``--splits`` (default 5) stratified 80/20 splits, seeds 0..splits-1; the seed is also the
  estimator's ``random_state``. Features standardised with the training part's mean and deviation.
- Columns: the literal table `COLUMNS`, plus sgpc configurations given with ``--sgpc``, plus those of
  `ON_REQUEST` when ``--columns`` names them (``sgpc-kernel-cv``: the kernel chosen by 3-fold cross-validation,
  `KernelSearch`; its records carry ``best_params``).
- Metrics on the test part: NLL = mean -log p(y|x) with p clipped at 1e-15; error; top-label ECE with
  15 equal-width bins (`sgpc.metrics.ece`); wall-clock time of ``fit`` and of ``predict_proba``;
  ``n_iter_`` and ``converged_`` where the estimator has them. One process, ``--threads`` threads for
  torch and for OpenMP/BLAS (threadpoolctl).

Output: one JSON line per fit appended to ``--out``. A rerun skips every (set, split, column) already
there with status "ok", "skipped" or "timeout"; "error" and "unavailable" (data or library absent)
are tried again. ``--report`` reads the file and writes the Markdown summary (docs/suite.md between
the markers named by the file's stem, `markers`; or stdout with ``--report -``). ``--also`` adds the columns
of other results files to a report, and ``--report-splits K`` keeps splits 0..K-1 only: columns run on one split
(the peers) and columns run on five then compare on the same split.

    python benchmarks/perf/suite.py                                # the full suite, all columns
    python benchmarks/perf/suite.py --sgpc "sep=method=sep" --columns sgpc-default,sep,logreg
    python benchmarks/perf/suite.py --report                       # docs/suite.md from results/suite.jsonl

What it deliberately does not do: choose defaults (it measures them), install the peers, or run in
parallel (timings are single-process so that they compare).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if (ROOT / "src" / "sgpc").is_dir():       # the checkout this script belongs to, not another install
    sys.path.insert(0, str(ROOT / "src"))

DEFAULT_OUT = ROOT / "results" / "suite.jsonl"
DEFAULT_DOC = ROOT / "docs" / "suite.md"
MARK_BEGIN, MARK_END = "<!-- suite-report:begin -->", "<!-- suite-report:end -->"

TEST_FRACTION = 0.2
MAX_ROWS = 70_000
SUBSAMPLE_SEED = 0
PROB_CLIP = 1e-15
ECE_BINS = 15
SKLEARN_GPC_MAX_TRAIN = 2_000
# Issue 40's fit-time targets for GPClassifier(): (training rows, seconds); between anchors the budget
# is interpolated on log-log axes, below the first it is the first's, above the last there is none.
TIME_TARGETS = ((300, 2.0), (2_000, 10.0), (20_000, 60.0))
NLL_SLACK = 0.02       # NLL within 2% of logistic regression's passes
ERROR_SLACK = 0.02     # error at most 2 points above the best column's passes

# The peers' SVGP recipes: M inducing points, Adam, a fixed budget of epochs (at least PEER_MIN_STEPS
# steps on small sets, where PEER_EPOCHS epochs would be a handful of steps).
PEER_M, PEER_LR, PEER_BATCH, PEER_EPOCHS, PEER_MIN_STEPS = 100, 0.01, 256, 20, 1_000

SKIPPED_SETS = {
    "statlog-landsat": "alias of satimage",
    "shuttle": "alias of statlog-shuttle",
    "wine-sklearn": "the same 178 rows as wine (scikit-learn's copy)",
    "connect-4-binary": "connect-4 relabelled loss vs draw-or-win; connect-4 (3 classes) is in the suite",
}
ORDINAL_SETS = {
    "flights-3m": "origin/destination airport codes kept as integer codes (hundreds of levels)",
    "nycflights13": "carrier/origin/dest codes kept as integer codes (over a hundred airports)",
}


# ------------------------------------------------------------------------------------------------
# Columns: one literal table of named configurations


@dataclass(frozen=True)
class Column:
    """A named estimator configuration.

    Attributes:
        family: "sgpc", "baseline" or "peer"; the report checks the targets of every "sgpc" column.
        make: (kwargs, seed) -> an unfitted estimator with fit(X, y) and predict_proba(X).
        kwargs: the configuration, recorded with every fit (and compared when a run resumes).
        max_train: fits with more training rows are recorded as skipped; None = no limit.
        requires: module that must be importable, else the column is recorded as unavailable.
    """

    family: str
    make: Callable
    kwargs: dict = field(default_factory=dict)
    max_train: int | None = None
    requires: str | None = None


def _sgpc(kwargs, seed):
    from sgpc import GPClassifier
    return GPClassifier(random_state=seed, **kwargs)


def _logreg(kwargs, seed):
    from sklearn.linear_model import LogisticRegression
    return LogisticRegression(max_iter=1000, **kwargs)


def _hgb(kwargs, seed):
    from sklearn.ensemble import HistGradientBoostingClassifier
    return HistGradientBoostingClassifier(random_state=seed, **kwargs)


def _sklearn_gpc(kwargs, seed):
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF
    return GaussianProcessClassifier(1.0 * RBF(1.0), random_state=seed, **kwargs)


class KernelSearch:
    """``GPClassifier`` with its kernel chosen by scikit-learn's ``GridSearchCV`` on the training rows: each of
    ``kernels`` scored by ``cv``-fold stratified log loss (folds shuffled with the split's seed), the best refitted on
    all rows. ``estimator``: further GPClassifier keywords. What a user can run in place of a kernel default
    (docs/choosing.rst, decision 10); ``best_params_`` names the chosen kernel."""

    def __init__(self, seed=0, kernels=("rbf", "matern32", "linear"), cv=3, estimator=None):
        self.seed, self.kernels, self.cv, self.estimator = seed, list(kernels), cv, dict(estimator or {})

    def fit(self, X, y):
        from sklearn.model_selection import GridSearchCV, StratifiedKFold
        from sgpc import GPClassifier
        self.search_ = GridSearchCV(GPClassifier(random_state=self.seed, **self.estimator), {"kernel": self.kernels},
                                    scoring="neg_log_loss", error_score="raise",
                                    cv=StratifiedKFold(self.cv, shuffle=True, random_state=self.seed)).fit(X, y)
        best = self.search_.best_estimator_
        self.classes_, self.best_params_ = best.classes_, self.search_.best_params_
        self.n_iter_, self.converged_ = best.n_iter_, best.converged_
        return self

    def predict_proba(self, X):
        return self.search_.predict_proba(X)


def _kernel_search(kwargs, seed):
    return KernelSearch(seed=seed, **kwargs)


def _gpytorch_svgp(kwargs, seed):
    return GPyTorchSVGP(seed=seed, **kwargs)


def _gpflow_svgp(kwargs, seed):
    return GPflowSVGP(seed=seed, **kwargs)


_PEER_BUDGET = dict(n_inducing=PEER_M, learning_rate=PEER_LR, batch_size=PEER_BATCH, epochs=PEER_EPOCHS,
                    min_steps=PEER_MIN_STEPS)
COLUMNS = {
    "sgpc-default": Column("sgpc", _sgpc),
    "logreg": Column("baseline", _logreg),
    "hgb": Column("baseline", _hgb),
    "sklearn-gpc": Column("baseline", _sklearn_gpc, max_train=SKLEARN_GPC_MAX_TRAIN),
    "gpytorch-svgp": Column("peer", _gpytorch_svgp, dict(_PEER_BUDGET), requires="gpytorch"),
    "gpflow-svgp": Column("peer", _gpflow_svgp, dict(_PEER_BUDGET), requires="gpflow"),
}
# Columns run only when --columns names them (not part of "all"): the kernel search takes about seven default fits'
# time (ten fits, nine of them on two thirds of the rows).
ON_REQUEST = {
    "sgpc-kernel-cv": Column("sgpc", _kernel_search, {"kernels": ["rbf", "matern32", "linear"], "cv": 3}),
}


def parse_value(text: str):
    """A keyword value from the command line: a Python literal (30, 0.01, None, True, 'x') or a bare string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_sgpc_spec(spec: str) -> tuple[str, Column]:
    """``"name=kw1=v1,kw2=v2"`` -> (name, an sgpc Column with those GPClassifier keywords).

    ``"name="`` or ``"name"`` alone is GPClassifier() with defaults under another name. A dotted keyword sets one
    entry of a dict parameter: ``"ng=method_params.natgrad_lr=0.1"`` is ``method_params={"natgrad_lr": 0.1}``.
    """
    name, _, rest = spec.partition("=")
    name = name.strip()
    if not name:
        raise ValueError(f"--sgpc {spec!r}: give it a name, as in 'sep=method=sep'")
    kwargs = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--sgpc {spec!r}: {item!r} is not keyword=value")
        outer, dot, inner = key.strip().partition(".")
        if dot:
            kwargs.setdefault(outer, {})[inner] = parse_value(value.strip())
        else:
            kwargs[outer] = parse_value(value.strip())
    return name, Column("sgpc", _sgpc, kwargs)


# ------------------------------------------------------------------------------------------------
# The peers' SVGP recipes (imported lazily; neither library is a dependency of sgpc)


class GPyTorchSVGP:
    """GPyTorch's multi-class SVGP recipe: one independent GP per class (batch of C ApproximateGPs
    under IndependentMultitaskVariationalStrategy, Cholesky variational distribution, learned inducing
    inputs), constant mean, scaled RBF kernel, SoftmaxLikelihood without mixing weights, VariationalELBO,
    Adam on minibatches; torch's default float32, as in the tutorials. Z starts at random training rows."""

    def __init__(self, seed=0, n_inducing=PEER_M, learning_rate=PEER_LR, batch_size=PEER_BATCH,
                 epochs=PEER_EPOCHS, min_steps=PEER_MIN_STEPS):
        self.seed, self.n_inducing, self.learning_rate = seed, n_inducing, learning_rate
        self.batch_size, self.epochs, self.min_steps = batch_size, epochs, min_steps

    def fit(self, X, y):
        import gpytorch
        import torch

        gen = torch.Generator().manual_seed(self.seed)
        self.classes_ = np.unique(y)
        C = len(self.classes_)
        X = torch.as_tensor(X, dtype=torch.float32)
        y = torch.as_tensor(np.searchsorted(self.classes_, y), dtype=torch.long)
        Z = X[torch.randperm(len(X), generator=gen)[: self.n_inducing]]
        batch = torch.Size([C])

        class Model(gpytorch.models.ApproximateGP):
            def __init__(self):
                dist = gpytorch.variational.CholeskyVariationalDistribution(len(Z), batch_shape=batch)
                strategy = gpytorch.variational.IndependentMultitaskVariationalStrategy(
                    gpytorch.variational.VariationalStrategy(self, Z.expand(C, *Z.shape).clone(), dist,
                                                             learn_inducing_locations=True),
                    num_tasks=C)
                super().__init__(strategy)
                self.mean_module = gpytorch.means.ConstantMean(batch_shape=batch)
                self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(batch_shape=batch),
                                                                 batch_shape=batch)

            def forward(self, x):
                return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

        self.model_ = Model()
        self.likelihood_ = gpytorch.likelihoods.SoftmaxLikelihood(num_features=C, num_classes=C,
                                                                  mixing_weights=False)
        self.model_.train()
        self.likelihood_.train()
        elbo = gpytorch.mlls.VariationalELBO(self.likelihood_, self.model_, num_data=len(y))
        opt = torch.optim.Adam([*self.model_.parameters(), *self.likelihood_.parameters()], lr=self.learning_rate)
        B = min(self.batch_size, len(y))
        per_epoch = math.ceil(len(y) / B)
        steps = max(self.epochs * per_epoch, self.min_steps)
        done = 0
        while done < steps:
            order = torch.randperm(len(y), generator=gen)
            for start in range(0, len(y), B):
                idx = order[start:start + B]
                opt.zero_grad()
                loss = -elbo(self.model_(X[idx]), y[idx])
                loss.backward()
                opt.step()
                done += 1
                if done == steps:
                    break
        self.n_iter_ = steps
        return self

    def predict_proba(self, X):
        import gpytorch
        import torch

        self.model_.eval()
        self.likelihood_.eval()
        X = torch.as_tensor(X, dtype=torch.float32)
        out = []
        with torch.no_grad(), gpytorch.settings.num_likelihood_samples(256):
            for start in range(0, len(X), 4096):
                out.append(self.likelihood_(self.model_(X[start:start + 4096])).probs.mean(0))
        return torch.cat(out).double().numpy()


class GPflowSVGP:
    """GPflow's multi-class classification notebook: SVGP with a squared-exponential kernel plus a fixed
    White(0.01) term, the MultiClass (robust-max) likelihood, whitened q(u) with a diagonal covariance,
    one set of inducing inputs shared by the C latent GPs and kept fixed (as in the notebook), here M
    random training rows; Adam on minibatches (the notebook uses L-BFGS on the full data) with the
    training step compiled by tf.function; GPflow's default float64."""

    def __init__(self, seed=0, n_inducing=PEER_M, learning_rate=PEER_LR, batch_size=PEER_BATCH,
                 epochs=PEER_EPOCHS, min_steps=PEER_MIN_STEPS):
        self.seed, self.n_inducing, self.learning_rate = seed, n_inducing, learning_rate
        self.batch_size, self.epochs, self.min_steps = batch_size, epochs, min_steps

    def fit(self, X, y):
        import gpflow
        import tensorflow as tf

        rng = np.random.default_rng(self.seed)
        tf.random.set_seed(self.seed)
        self.classes_ = np.unique(y)
        C = len(self.classes_)
        X = np.asarray(X, dtype=np.float64)
        Y = np.searchsorted(self.classes_, y).astype(np.float64)[:, None]
        Z = X[rng.permutation(len(X))[: self.n_inducing]].copy()
        kernel = gpflow.kernels.SquaredExponential() + gpflow.kernels.White(variance=0.01)
        gpflow.set_trainable(kernel.kernels[1].variance, False)
        likelihood = gpflow.likelihoods.MultiClass(C)
        self.model_ = gpflow.models.SVGP(kernel=kernel, likelihood=likelihood, inducing_variable=Z,
                                         num_latent_gps=C, whiten=True, q_diag=True, num_data=len(X))
        gpflow.set_trainable(self.model_.inducing_variable, False)
        B = min(self.batch_size, len(X))
        per_epoch = math.ceil(len(X) / B)
        steps = max(self.epochs * per_epoch, self.min_steps)
        data = tf.data.Dataset.from_tensor_slices((X, Y)).repeat().shuffle(len(X), seed=self.seed).batch(B)
        loss = self.model_.training_loss_closure(iter(data), compile=False)
        opt = tf.optimizers.Adam(self.learning_rate)
        variables = self.model_.trainable_variables

        @tf.function
        def step():   # tape + apply_gradients: works with Keras 2 and 3 optimizers alike
            with tf.GradientTape() as tape:
                value = loss()
            opt.apply_gradients(zip(tape.gradient(value, variables), variables))

        for _ in range(steps):
            step()
        self.n_iter_ = steps
        return self

    def predict_proba(self, X):
        X = np.asarray(X, dtype=np.float64)
        C = len(self.classes_)
        out = []
        for start in range(0, len(X), 4096):
            rows = X[start:start + 4096]
            # p(y = c | x) for every c: predict_y's mean is that vector under MultiClass
            mean, _ = self.model_.predict_y(rows)
            out.append(np.asarray(mean)[:, :C])
        return np.concatenate(out)


# ------------------------------------------------------------------------------------------------
# Data


@dataclass(frozen=True)
class SuiteSet:
    """One data set as the suite uses it: X [N, D] float64, y [N] indices 0..C-1, and what was done."""

    name: str
    X: np.ndarray
    y: np.ndarray
    classes: tuple
    n_source: int
    notes: tuple[str, ...]
    categorical: str


def set_names(spec: str) -> list[str]:
    """The sets named by ``--sets``: "all" = every loadable name minus `SKIPPED_SETS`, else a comma list."""
    from sgpc import datasets
    if spec.strip() == "all":
        return [n for n in datasets.available() if n not in SKIPPED_SETS]
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in datasets.available()]
    if unknown:
        raise ValueError(f"unknown data sets {unknown}; available: {', '.join(datasets.available())}")
    return names


def load_set(name: str, max_rows: int | None) -> SuiteSet:
    """Load, concatenate the source's train/test files, encode labels, subsample to max_rows (stratified)."""
    from sgpc import datasets
    from sklearn.model_selection import train_test_split

    categorical = "ordinal" if name in ORDINAL_SETS else "onehot"
    ds = datasets.load(name, categorical=categorical)
    notes = [ORDINAL_SETS[name]] if name in ORDINAL_SETS else []
    X, y = ds.X, ds.y
    if ds.X_test is not None:
        X, y = np.vstack([X, ds.X_test]), np.concatenate([y, ds.y_test])
        notes.append(f"source train/test files concatenated ({len(ds.X)} + {len(ds.X_test)})")
    classes, y = np.unique(y, return_inverse=True)
    n_source = len(y)
    if max_rows is not None and len(y) > max_rows:
        keep, _ = train_test_split(np.arange(len(y)), train_size=max_rows, stratify=y, random_state=SUBSAMPLE_SEED)
        keep = np.sort(keep)
        X, y = X[keep], y[keep]
        notes.append(f"stratified subsample of {max_rows} of {n_source} rows (seed {SUBSAMPLE_SEED})")
    counts = np.bincount(y, minlength=len(classes))
    rare = np.flatnonzero(counts < 2)
    if len(rare):   # a stratified split needs 2 rows of every class
        kept = ~np.isin(y, rare)
        notes.append(f"classes {[str(classes[c]) for c in rare]} with < 2 rows dropped")
        X, y = X[kept], y[kept]
        classes, y = np.unique(classes[y], return_inverse=True)
    return SuiteSet(name, X, y.astype(np.int64), tuple(str(c) for c in classes), n_source, tuple(notes), categorical)


def split(data: SuiteSet, seed: int):
    """Stratified 80/20 split with this seed; features standardised on the training part."""
    from sklearn.model_selection import StratifiedShuffleSplit
    from sklearn.preprocessing import StandardScaler

    train, test = next(StratifiedShuffleSplit(1, test_size=TEST_FRACTION, random_state=seed).split(data.X, data.y))
    scaler = StandardScaler().fit(data.X[train])
    return scaler.transform(data.X[train]), scaler.transform(data.X[test]), data.y[train], data.y[test]


# ------------------------------------------------------------------------------------------------
# Metrics


def evaluate(y_idx: np.ndarray, proba: np.ndarray) -> dict:
    """Test NLL, error and top-label ECE of probabilities [N, C] for labels [N] (indices 0..C-1).

    NLL = -(1/N) sum_i log max(p_i,y_i, 1e-15); error = mean 1[argmax_c p_ic != y_i]; ECE = sum_b (n_b/N)
    |acc_b - conf_b| over 15 equal-width bins of the top probability (`sgpc.metrics.ece`, bins
    (0, 1/15], ..., (14/15, 1]). Rows are renormalised first (a peer's Monte Carlo average may miss 1 by
    rounding).
    """
    from sgpc import metrics

    p = np.clip(np.asarray(proba, dtype=np.float64), 0.0, None)
    p = p / p.sum(axis=1, keepdims=True)
    y = np.asarray(y_idx, dtype=np.int64)
    p_true = p[np.arange(len(y)), y]
    return {"nll": float(-np.mean(np.log(np.clip(p_true, PROB_CLIP, 1.0)))),
            "error": float(np.mean(p.argmax(axis=1) != y)),
            "ece": metrics.ece(y, p, ECE_BINS)}


def full_proba(proba: np.ndarray, fitted_classes, n_classes: int) -> np.ndarray:
    """[N, C] probabilities over all the set's classes from an estimator that saw only some of them."""
    out = np.zeros((len(proba), n_classes))
    out[:, np.asarray(fitted_classes, dtype=np.int64)] = proba
    return out


# ------------------------------------------------------------------------------------------------
# Running


class FitTimeout(Exception):
    """A fit ran past --timeout-per-fit."""


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Raise FitTimeout in the main thread after ``seconds`` (SIGALRM; checked between Python bytecodes)."""
    if not seconds:
        yield
        return

    def _alarm(signum, frame):
        raise FitTimeout(f"fit ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _git(*args) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def metadata(threads: int) -> dict:
    """Commit (and whether the tree differs from it), library versions, machine and thread count."""
    versions = {"python": platform.python_version()}
    for pkg in ("sgpc", "torch", "numpy", "scipy", "scikit-learn", "gpytorch", "gpflow", "tensorflow"):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    cpu = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "")
    return {"commit": _git("rev-parse", "HEAD") or "unknown",
            "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
            "versions": versions, "machine": platform.machine(), "cpu_model": cpu, "cpu_count": os.cpu_count(),
            "threads": threads, "started": time.strftime("%Y-%m-%d %H:%M:%S")}


def read_records(path: Path) -> list[dict]:
    """Every complete JSON line of a results file ([] when it does not exist); a torn last line is ignored."""
    if not Path(path).is_file():
        return []
    out = []
    with open(path) as fh:
        for line in fh:
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
    return out


def report_records(out: Path, also: list[Path] = (), splits: int | None = None) -> list[dict]:
    """The fits a report counts: those of ``out``, and of each file of ``also`` in the columns ``out`` does not
    have (a column is one file's), restricted to splits 0..splits-1 when given."""
    records = read_records(out)
    for path in also:
        if not Path(path).is_file():
            raise FileNotFoundError(f"--also {path}: no such results file")
        have = {r["column"] for r in records}
        records += [r for r in read_records(path) if r["column"] not in have]
    return records if splits is None else [r for r in records if r["split"] < splits]


FINAL_STATUSES = ("ok", "skipped", "timeout")   # rerunning these would give the same answer


def completed(records: list[dict]) -> set[tuple[str, int, str]]:
    """(set, split, column) keys a resumed run skips: those whose latest record has a final status."""
    latest = {(r["set"], r["split"], r["column"]): r["status"] for r in records}
    return {k for k, status in latest.items() if status in FINAL_STATUSES}


def check_configs(records: list[dict], columns: dict[str, Column]) -> None:
    """ValueError when a column name already in the file was recorded with another configuration."""
    for r in records:
        col = columns.get(r["column"])
        if col is not None and r.get("config") != json.loads(json.dumps(_config(col))):   # as stored: tuples are lists
            raise ValueError(f"column {r['column']!r} is in the results file with config {r.get('config')}, "
                             f"now {_config(col)}: use another name or another --out")


def _config(col: Column) -> dict:
    return {"family": col.family, "kwargs": col.kwargs, "max_train": col.max_train}


def _jsonable(value):
    """n_iter_/converged_ as JSON: arrays (LogisticRegression's n_iter_ per class) become their maximum."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        value = value.max() if value.size else None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return int(value) if isinstance(value, (int, np.integer)) else float(value)


def run_fit(data: SuiteSet, seed: int, name: str, col: Column, threads: int, timeout: float | None,
            parts=None) -> dict:
    """Fit one column on one split; the record (status "ok", "skipped", "unavailable", "timeout" or "error")."""
    import torch
    from threadpoolctl import threadpool_limits

    Xtr, Xte, ytr, yte = parts if parts is not None else split(data, seed)
    record = {"set": data.name, "split": seed, "column": name, "config": _config(col),
              "N": len(data.y), "N_train": len(ytr), "N_test": len(yte), "D": data.X.shape[1],
              "C": len(data.classes), "N_source": data.n_source, "set_notes": list(data.notes),
              "categorical": data.categorical, "status": "ok", "reason": None}
    if col.requires and importlib.util.find_spec(col.requires) is None:
        return {**record, "status": "unavailable", "reason": f"{col.requires} not installed"}
    if col.max_train is not None and len(ytr) > col.max_train:
        return {**record, "status": "skipped", "reason": f"{len(ytr)} training rows > {col.max_train}"}
    torch.set_num_threads(threads)
    est = col.make(col.kwargs, seed)
    try:
        with threadpool_limits(limits=threads), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with time_limit(timeout):
                t0 = time.perf_counter()
                est.fit(Xtr, ytr)
                fit_time = time.perf_counter() - t0
            t0 = time.perf_counter()
            proba = est.predict_proba(Xte)
            predict_time = time.perf_counter() - t0
    except FitTimeout as err:
        return {**record, "status": "timeout", "reason": str(err), "fit_time": timeout}
    except Exception as err:  # a failing fit is a result; the suite goes on
        tail = traceback.format_exc().strip().splitlines()[-3:]
        return {**record, "status": "error", "reason": f"{type(err).__name__}: {err}"[:500], "traceback": tail}
    metrics = evaluate(yte, full_proba(proba, est.classes_, len(data.classes)))
    seen = sorted({f"{w.category.__name__}: {str(w.message)[:160]}" for w in caught})
    return {**record, **metrics, "fit_time": fit_time, "predict_time": predict_time,
            "n_iter": _jsonable(getattr(est, "n_iter_", None)),
            "converged": _jsonable(getattr(est, "converged_", None)), "warnings": seen[:5],
            **({"best_params": dict(est.best_params_)} if hasattr(est, "best_params_") else {})}


def run_suite(sets: list[str], columns: dict[str, Column], n_splits: int, max_rows: int | None, out: Path,
              threads: int = 1, timeout: float | None = None, log=print) -> int:
    """Run every missing (set, split, column), appending records to ``out``; the number of fits written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    records = read_records(out)
    check_configs(records, columns)
    done = completed(records)
    meta = metadata(threads)
    written = 0
    for name in sets:
        todo = [(s, c) for s in range(n_splits) for c in columns if (name, s, c) not in done]
        if not todo:
            continue
        try:
            t0 = time.perf_counter()
            data = load_set(name, max_rows)
            log(f"{name}: N={len(data.y)} D={data.X.shape[1]} C={len(data.classes)} "
                f"(loaded in {time.perf_counter() - t0:.1f} s)")
        except Exception as err:  # data absent (DataNotFoundError), pyarrow absent, ...
            log(f"{name}: not loaded: {type(err).__name__}: {err}")
            rows = [{"set": name, "split": s, "column": c, "config": _config(columns[c]), "status": "unavailable",
                     "reason": f"data set not loaded: {type(err).__name__}: {err}"[:500], "meta": meta}
                    for s, c in todo]
            _append(out, rows)
            written += len(rows)
            continue
        for seed in sorted({s for s, _ in todo}):
            parts = split(data, seed)
            for col_name in [c for s, c in todo if s == seed]:
                rec = run_fit(data, seed, col_name, columns[col_name], threads, timeout, parts)
                _append(out, [{**rec, "meta": meta}])
                written += 1
                shown = (f"nll={rec['nll']:.4f} err={rec['error']:.4f} ece={rec['ece']:.4f} fit={rec['fit_time']:.2f}s"
                         if rec["status"] == "ok" else f"{rec['status']}: {rec['reason']}")
                log(f"  {name} split {seed} {col_name}: {shown}")
    return written


def _append(path: Path, rows: list[dict]) -> None:
    with open(path, "a") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
        fh.flush()


# ------------------------------------------------------------------------------------------------
# Report


def cell_means(records: list[dict], metric: str) -> dict[str, dict[str, float]]:
    """{set: {column: mean over its "ok" splits of metric}}; the latest record of a key wins."""
    latest = {(r["set"], r["split"], r["column"]): r for r in records}
    acc: dict[str, dict[str, list]] = {}
    for (s, _, c), r in latest.items():
        if r["status"] == "ok":
            acc.setdefault(s, {}).setdefault(c, []).append(r[metric])
    return {s: {c: float(np.mean(v)) for c, v in cols.items()} for s, cols in acc.items()}


def mean_ranks(table: dict[str, dict[str, float]], columns: list[str] | None = None) -> dict[str, tuple[float, int]]:
    """Mean rank of each column over sets (1 = lowest value; ties share the average of their ranks).

    Each set ranks the columns it has a value for (restricted to ``columns`` when given; a set is then
    used only when it has all of them). Returns {column: (mean rank, number of sets ranked)}.
    """
    from scipy.stats import rankdata

    ranks: dict[str, list[float]] = {}
    for row in table.values():
        names = [c for c in row if columns is None or c in columns]
        if columns is not None and len(names) < len(columns):
            continue
        if not names:
            continue
        for c, r in zip(names, rankdata([row[c] for c in names], method="average")):
            ranks.setdefault(c, []).append(float(r))
    return {c: (float(np.mean(v)), len(v)) for c, v in ranks.items()}


def time_budget(n_train: int) -> float | None:
    """Issue 40's fit-time target in seconds for this many training rows (None above the last anchor)."""
    rows, secs = zip(*TIME_TARGETS)
    if n_train > rows[-1]:
        return None
    return float(np.exp(np.interp(np.log(max(n_train, rows[0])), np.log(rows), np.log(secs))))


def target_check(nll: dict[str, float], error: dict[str, float], fit_time: dict[str, float], column: str,
                 n_train: int) -> dict[str, bool | None]:
    """Issue 40's targets for one column on one set (None when a needed value is missing).

    nll: test NLL <= logreg's, or within 2% of it. error: at most 2 points above the lowest error of
    all columns. time: mean fit time <= `time_budget(n_train)`.
    """
    out: dict[str, bool | None] = {"nll": None, "error": None, "time": None}
    if column in nll and "logreg" in nll:
        out["nll"] = bool(nll[column] <= nll["logreg"] * (1 + NLL_SLACK))
    if column in error and error:
        out["error"] = bool(error[column] <= min(error.values()) + ERROR_SLACK + 1e-12)
    budget = time_budget(n_train)
    if column in fit_time and budget is not None:
        out["time"] = bool(fit_time[column] <= budget)
    return out


def _fmt(x, digits=3):
    return "" if x is None else f"{x:.{digits}f}"


def _mark(ok):
    return "—" if ok is None else ("✓" if ok else "✗")


def report(records: list[dict]) -> str:
    """The Markdown summary of a results file: per-set means, mean NLL ranks, fit-time ratios, targets."""
    if not records:
        return "No results yet.\n"
    latest = {(r["set"], r["split"], r["column"]): r for r in records}
    cols = list(dict.fromkeys([c for c in COLUMNS] + [r["column"] for r in latest.values()]))
    cols = [c for c in cols if any(r["column"] == c for r in latest.values())]
    family = {r["column"]: r.get("config", {}).get("family") for r in latest.values()}
    info = {}
    for r in latest.values():
        if "N_train" in r:
            info[r["set"]] = r
    sets = sorted({r["set"] for r in latest.values()}, key=lambda s: (info.get(s, {}).get("N", 0), s))
    means = {m: cell_means(records, m) for m in ("nll", "error", "ece", "fit_time")}
    n_ok = {}
    status = {}
    for (s, _, c), r in latest.items():
        n_ok[(s, c)] = n_ok.get((s, c), 0) + (r["status"] == "ok")
        status.setdefault((s, c), set()).add(r["status"])
    n_splits = max(r["split"] for r in latest.values()) + 1
    lines = [f"Means over {n_splits} stratified 80/20 splits (fewer where a cell says so: `(k)`); "
             "`skip`: by design (see notes), `n/a`: library or data absent, `err`/`timeout`: failed.", ""]

    def cell(s, c, metric, digits):
        if c in means[metric].get(s, {}):
            k = n_ok[(s, c)]
            return _fmt(means[metric][s][c], digits) + ("" if k == n_splits else f" ({k})")
        st = status.get((s, c), set())
        return ("skip" if "skipped" in st else "n/a" if "unavailable" in st else "timeout" if "timeout" in st
                else "err" if "error" in st else "")

    for metric, title, digits in (("nll", "Test NLL", 3), ("error", "Test error", 3), ("ece", "Top-label ECE (15 bins)", 3),
                                  ("fit_time", "Fit time (s)", 2)):
        lines += [f"### {title}", "", "| set | N | D | C | " + " | ".join(cols) + " |",
                  "|---|---:|---:|---:|" + "---:|" * len(cols)]
        for s in sets:
            i = info.get(s, {})
            row = [cell(s, c, metric, digits) for c in cols]
            if metric == "nll" and means["nll"].get(s):
                best = min(means["nll"][s].values())
                row = [f"**{v}**" if c in means["nll"][s] and means["nll"][s][c] == best else v
                       for c, v in zip(cols, row)]
            lines.append(f"| {s} | {i.get('N', '')} | {i.get('D', '')} | {i.get('C', '')} | " + " | ".join(row) + " |")
        lines.append("")

    ran = [c for c in cols if any(c in row for row in means["nll"].values())]
    every = mean_ranks(means["nll"], ran)
    anyset = mean_ranks(means["nll"])
    # the issue's columns: the default against what people use instead, without our own candidate configurations
    issue = [c for c in ran if c == "sgpc-default" or family.get(c) in ("baseline", "peer")]
    among = mean_ranks({s: {c: v for c, v in row.items() if c in issue} for s, row in means["nll"].items()})
    n_common = max((n for _, n in every.values()), default=0)
    lines += ["### Mean NLL rank (1 = best; ties share the mean rank)", "",
              "| | " + " | ".join(ran) + " |", "|---|" + "---:|" * len(ran) + "",
              f"| the {n_common} sets where every column ran | "
              + " | ".join(_fmt(every[c][0], 2) if c in every else "" for c in ran) + " |",
              "| every set, among the columns that ran on it (sets) | "
              + " | ".join(f"{anyset[c][0]:.2f} ({anyset[c][1]})" for c in ran) + " |"]
    if len(issue) < len(ran):
        lines.append("| every set, among the default, baselines and peers that ran on it (sets) | "
                     + " | ".join(f"{among[c][0]:.2f} ({among[c][1]})" if c in among else "" for c in ran) + " |")
    lines.append("")

    ours = "sgpc-default"
    if ours in ran:
        ratios = []
        for c in ran:
            if c == ours:
                continue
            logs = [math.log(t[ours] / t[c]) for t in means["fit_time"].values() if ours in t and c in t and t[c] > 0]
            ratios.append(f"| {c} | {math.exp(np.mean(logs)):.2f} | {len(logs)} |" if logs else f"| {c} | | 0 |")
        lines += [f"### Fit time of {ours} / fit time of each column (geometric mean over sets)", "",
                  "| column | ratio | sets |", "|---|---:|---:|", *ratios, ""]

    ours_cols = [c for c in ran if family.get(c) == "sgpc"]
    if ours_cols:
        anchors = ", ".join(f"{n} rows: {t:g} s" for n, t in TIME_TARGETS)
        lines += ["### Targets (issue 40)", "",
                  f"NLL: at most logreg's × {1 + NLL_SLACK:g}; error: at most the best column's + "
                  f"{100 * ERROR_SLACK:g} points; time: fit within the budget for its training rows "
                  f"(log-log interpolation of {anchors}; none above {TIME_TARGETS[-1][0]} rows). "
                  "Each cell: NLL / error / time.", "",
                  "| set | N_train | budget (s) | " + " | ".join(ours_cols) + " |",
                  "|---|---:|---:|" + "---|" * len(ours_cols)]
        passed = {c: [0, 0] for c in ours_cols}
        for s in sets:
            n_train = info.get(s, {}).get("N_train", 0)
            marks = []
            for c in ours_cols:
                chk = target_check(means["nll"].get(s, {}), means["error"].get(s, {}), means["fit_time"].get(s, {}),
                                   c, n_train)
                marks.append(" / ".join(_mark(chk[k]) for k in ("nll", "error", "time")))
                if chk["nll"] is not None and chk["error"] is not None:
                    passed[c][0] += chk["nll"] and chk["error"]
                    passed[c][1] += 1
            lines.append(f"| {s} | {n_train} | {_fmt(time_budget(n_train), 1)} | " + " | ".join(marks) + " |")
        lines += ["", "Sets passing both the NLL and the error target: "
                  + "; ".join(f"{c} {p}/{n}" for c, (p, n) in passed.items()), ""]

    notes = sorted({f"{s}: {n}" for s in sets for n in info.get(s, {}).get("set_notes", [])})
    reasons = sorted({f"{r['column']}: {r['reason']}" for r in latest.values() if r["status"] in ("skipped", "unavailable")
                      and r.get("reason") and "training rows" not in r["reason"]})
    big = sorted({r["set"] for r in latest.values() if r["status"] == "skipped" and "training rows" in (r.get("reason") or "")})
    configs = {c: next(r["config"] for r in latest.values() if r["column"] == c) for c in cols}
    lines += ["### Notes", ""]
    lines += [f"- {c}: {cfg.get('family')} {json.dumps(cfg.get('kwargs'))}" for c, cfg in configs.items()]
    lines += [f"- sklearn-gpc skipped (more than {SKLEARN_GPC_MAX_TRAIN} training rows) on: {', '.join(big)}"] if big else []
    lines += [f"- {x}" for x in reasons] + [f"- {x}" for x in notes]
    commits = sorted({r.get("meta", {}).get("commit", "?")[:10] for r in latest.values()})
    cpus = sorted({r.get("meta", {}).get("cpu_model", "?") for r in latest.values()})
    threads = sorted({str(r.get("meta", {}).get("threads", "?")) for r in latest.values()})
    lines += [f"- commits: {', '.join(commits)}; CPU: {'; '.join(cpus)}; threads: {', '.join(threads)}", ""]
    return "\n".join(lines)


def markers(out: Path, splits: int | None = None) -> tuple[str, str]:
    """The markers between which the report of results file ``out`` goes: ``MARK_BEGIN``/``MARK_END`` for
    results/suite.jsonl, else ones named by the file's stem, so that one page can show several runs; a report
    of its first ``splits`` splits only has its own (``<stem>-splits<K>``)."""
    stem = Path(out).stem
    if splits is not None:
        stem = f"{stem}-splits{splits}"
    elif stem == DEFAULT_OUT.stem:
        return MARK_BEGIN, MARK_END
    return f"<!-- suite-report:{stem}:begin -->", f"<!-- suite-report:{stem}:end -->"


def write_report(text: str, path: Path, marks: tuple[str, str] = (MARK_BEGIN, MARK_END)) -> None:
    """Put the report between the markers ``marks`` of ``path`` (created, or the markers appended, when
    missing)."""
    path = Path(path)
    begin, end = marks
    body = path.read_text() if path.is_file() else "# Real-data benchmark suite\n\n"
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if begin in body and end in body:
        head, rest = body.split(begin, 1)
        body = head + block + rest.split(end, 1)[1]
    else:
        body = body.rstrip() + "\n\n" + block + "\n"
    path.write_text(body)


# ------------------------------------------------------------------------------------------------
# Command line


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sets", default="all", help='comma list of data set names, or "all" (default)')
    p.add_argument("--max-rows", type=int, default=MAX_ROWS,
                   help=f"stratified subsample of larger sets to this many rows (default {MAX_ROWS}; 0 = no cap)")
    p.add_argument("--splits", type=int, default=5, help="stratified 80/20 splits, seeds 0..splits-1 (default 5)")
    p.add_argument("--columns", default="all",
                   help=f'comma list of columns (default "all": {", ".join(COLUMNS)} and every --sgpc)')
    p.add_argument("--sgpc", action="append", default=[], metavar="NAME=KW=V,KW=V",
                   help='an extra GPClassifier configuration, e.g. "sep=method=sep"; repeatable')
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON lines file (default results/suite.jsonl)")
    p.add_argument("--report", nargs="?", const=str(DEFAULT_DOC), default=None, metavar="PATH",
                   help="write the Markdown report from --out instead of running (default docs/suite.md, between "
                        "markers named by --out's stem; - = stdout)")
    p.add_argument("--also", type=Path, action="append", default=[], metavar="PATH",
                   help="with --report: add another results file's fits (a column of --out replaces the same "
                        "column's fits there); repeatable")
    p.add_argument("--report-splits", type=int, default=None, metavar="K",
                   help="with --report: only splits 0..K-1, so that columns run on fewer splits compare on the same "
                        "ones (the markers are then named <stem>-splitsK)")
    p.add_argument("--threads", type=int, default=1, help="torch and OpenMP/BLAS threads (default 1)")
    p.add_argument("--timeout-per-fit", type=float, default=None, help="seconds; a longer fit is recorded as timeout")
    return p.parse_args(argv)


def select_columns(spec: str, extra: list[str]) -> dict[str, Column]:
    """The columns named by --columns from `COLUMNS`, `ON_REQUEST` and the --sgpc configurations ("all": every
    column of `COLUMNS` and --sgpc)."""
    table = dict(COLUMNS)
    for s in extra:
        name, col = parse_sgpc_spec(s)
        if name in COLUMNS or name in ON_REQUEST:
            raise ValueError(f"--sgpc name {name!r} is a built-in column; choose another")
        table[name] = col
    if spec.strip() == "all":
        return table
    table.update(ON_REQUEST)
    names = [c.strip() for c in spec.split(",") if c.strip()]
    unknown = [c for c in names if c not in table]
    if unknown:
        raise ValueError(f"unknown columns {unknown}; known: {', '.join(table)}")
    return {c: table[c] for c in names}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report is not None:
        text = report(report_records(args.out, args.also, args.report_splits))
        if args.report == "-":
            print(text)
        else:
            write_report(text, Path(args.report), markers(args.out, args.report_splits))
            print(f"wrote {args.report}")
        return 0
    columns = select_columns(args.columns, args.sgpc)
    n = run_suite(set_names(args.sets), columns, args.splits, args.max_rows or None, args.out, args.threads,
                  args.timeout_per_fit)
    print(f"{n} records appended to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
