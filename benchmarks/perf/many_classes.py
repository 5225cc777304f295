"""Tables with many classes: the batch rule at 1 000-4 000 rows, where its class threshold lies, and labels that do
not depend on the features.

Every fit is ``GPClassifier(random_state=0)`` with defaults unless an arm says otherwise, on split 0 of
``suite.py``'s protocol (stratified 80/20, features standardised on the training part), timed from ``fit`` to its
return (the end-of-fit check included); the test NLL and error are on the split's test rows.

Parts (``--parts``):

- ``rule``: ``fitting.AUTO_MINIBATCH_CLASSES`` (minibatches, so ``sep``, from 17 classes) and
  ``train.MINIBATCH_MIN_CHECK_STEPS`` (stopping windows of at least 8 steps) against the rule before them
  (arm ``before``: the threshold out of reach, windows of one pass however short; ``minibatch-pass-windows``: the
  minibatches with those windows), on chess-krvk (18 classes) and
  letter (26) at 1 250, 2 500 and 5 000 rows, vowel (11, unchanged) and 50 classes unrelated to 4 features (200
  training rows). Also ``sep`` given on the full batch against its minibatch of all rows at 1 000 rows.
- ``threshold``: the full batch (``ep``) against minibatches (``sep``, 8-step windows) where the rule does not send
  a table: the k most frequent classes of letter and chess-krvk (k = 10, 12, 14, 16; 2 500 rows), the suite's sets
  of 2-11 classes up to ~10 000 training rows, and a synthetic table of 18 ordered classes (bands of one of 3
  features, with noise), where the rule does send it.
- ``no-signal``: labels i mod C on 4 standard-normal features (2 000 test rows): logistic regression, the
  default, and ``ep``, ``vi`` with softmax and ``gfitc`` where they are cheap enough; at 5 classes also ``ep``
  with early stopping, with 20 inducing points, and ``sep`` on the full batch. These fits also record the
  training rows' NLL and the final objective per row (``history_["objective"]``, the engine's log Z or bound).

    python benchmarks/perf/many_classes.py [--parts rule,threshold,no-signal] [--threads 2]

Writes results/many-classes.jsonl (one line per fit).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))            # benchmarks/: _common
sys.path.insert(0, str(Path(__file__).resolve().parent))                # benchmarks/perf: suite
from _common import write  # noqa: E402

PARTS = ("rule", "threshold", "no-signal")
RULE_CASES = (("chess-krvk", 1250), ("chess-krvk", 2500), ("chess-krvk", 5000), ("letter", 1250), ("letter", 2500),
              ("letter", 5000), ("vowel", None))
SUITE_FEW_CLASSES = ("vowel", "digits", "wine-quality-white", "waveform", "wall-following", "page-blocks",
                     "optdigits", "satimage", "thyroid", "twonorm", "mushroom", "nursery")
NO_SIGNAL = ((400, 2, ("default",)),
             (1000, 5, ("default", "ep", "vi-softmax", "gfitc", "ep-early-stopping", "ep-m20", "sep-full-batch")),
             (1000, 20, ("default", "ep", "vi-softmax", "gfitc")), (2000, 50, ("default",)))


def _no_signal(N: int, C: int, n_test: int = 2000):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N + n_test, 4))
    y = np.arange(N + n_test) % C
    return X[:N], X[N:], y[:N], y[N:]


def _ordered(N: int, C: int = 18, n_test: int = 2000):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N + n_test, 3))
    y = np.floor((X[:, 0] + 3) * 3 + 0.5 * rng.normal(size=N + n_test)).clip(0, C - 1).astype(int)
    return X[:N], X[N:], y[:N], y[N:]


def _top_classes(data, k: int, rows: int):
    """The suite set ``data`` restricted to its k most frequent classes, subsampled (stratified) to ``rows``."""
    from sklearn.model_selection import train_test_split
    keep = np.isin(data.y, np.argsort(-np.bincount(data.y))[:k])
    X, y = data.X[keep], data.y[keep]
    rows_kept = np.sort(train_test_split(np.arange(len(y)), train_size=rows, stratify=y, random_state=0)[0])
    return dataclasses.replace(data, X=X[rows_kept], y=np.unique(y[rows_kept], return_inverse=True)[1])


def _scores(classes, proba, y_test):
    """Test NLL (probabilities clipped at 1e-15; a class unseen in training counts as 1e-15) and error."""
    col = {c: j for j, c in enumerate(classes)}
    p_true = np.array([proba[i, col[t]] if t in col else 0.0 for i, t in enumerate(y_test)])
    pred = np.asarray(classes)[proba.argmax(1)]
    return float(-np.mean(np.log(np.clip(p_true, 1e-15, 1)))), float(np.mean(pred != y_test))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import torch
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    import suite
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sgpc import GPClassifier, fitting, train
    warnings.simplefilter("ignore", ConvergenceWarning)
    now = (fitting.AUTO_MINIBATCH_CLASSES, train.MINIBATCH_MIN_CHECK_STEPS)
    rules = {"before": (10**9, 1), "now": now, "full": (10**9, now[1]), "minibatch": (2, now[1]),
             "minibatch-pass-windows": (2, 1)}
    runs = []

    def fit(part, case, data, arm, train_scores=False, **kw):
        Xtr, Xte, ytr, yte = data
        fitting.AUTO_MINIBATCH_CLASSES, train.MINIBATCH_MIN_CHECK_STEPS = rules.get(arm, now)
        t0 = time.perf_counter()
        if arm == "logreg":
            est = LogisticRegression(max_iter=3000).fit(Xtr, ytr)
        else:
            est = GPClassifier(random_state=0, **kw).fit(Xtr, ytr)
        seconds = time.perf_counter() - t0
        fitting.AUTO_MINIBATCH_CLASSES, train.MINIBATCH_MIN_CHECK_STEPS = now
        nll, err = _scores(est.classes_, est.predict_proba(Xte), yte)
        gp = arm != "logreg"
        run = {"part": part, "case": case, "arm": arm, "n_train": len(ytr), "n_test": len(yte),
               "n_classes": len(est.classes_), "method": est.method_ if gp else "logreg",
               "batch_size": est.batch_size_ if gp else None, "fit_time": seconds,
               "n_iter": int(est.n_iter_ if gp else np.max(est.n_iter_)),
               "converged": bool(est.converged_) if gp else None, "test_nll": nll, "error": err}
        if train_scores:
            run["train_nll"] = _scores(est.classes_, est.predict_proba(Xtr), ytr)[0]
            if gp and not kw.get("early_stopping"):      # early stopping trains on part of the rows
                run["objective_per_row"] = float(est.history_["objective"][-1]) / len(ytr)
        runs.append(run)
        print(f"{part} {case} {arm}: {run['method']}, batch {run['batch_size']}, {seconds:.1f} s, "
              f"{run['n_iter']} iterations, converged {run['converged']}, test NLL {nll:.4f}, error {err:.4f}",
              flush=True)
        write("many-classes", {"config": {"threads": args.threads}, "runs": runs})

    parts = args.parts.split(",")
    if "rule" in parts:
        for name, rows in RULE_CASES:
            data = suite.split(suite.load_set(name, rows), 0)
            case = f"{name}@{rows}" if rows else name
            for arm in ("before", "now") if name == "vowel" else ("before", "minibatch-pass-windows", "now"):
                fit("rule", case, data, arm)
            if name != "vowel" and rows == 1250:
                fit("rule", case, data, "sep-full-batch", method="sep", batch_size=None)
        for arm in ("before", "now"):
            fit("rule", "no-signal-50@200", _no_signal(200, 50), arm)
    if "threshold" in parts:
        for name in ("letter", "chess-krvk"):
            data = suite.load_set(name, None)
            for k in (10, 12, 14, 16):
                split = suite.split(_top_classes(data, k, 2500), 0)
                for arm in ("full", "minibatch"):
                    fit("threshold", f"{name}-top{k}@2500", split, arm)
        for name in SUITE_FEW_CLASSES:
            split = suite.split(suite.load_set(name, 20000), 0)
            for arm in ("full", "minibatch"):
                fit("threshold", name, split, arm)
        for N in (600, 2000):
            for arm in ("full", "now"):
                fit("threshold", f"ordered-18@{N}", _ordered(N), arm)
    if "no-signal" in parts:
        for N, C, columns in NO_SIGNAL:
            data = _no_signal(N, C)
            fit("no-signal", f"{C}@{N}", data, "logreg", train_scores=True)
            for column in columns:
                kw = {"default": {}, "ep": {"method": "ep"}, "gfitc": {"method": "gfitc"},
                      "vi-softmax": {"method": "vi", "likelihood": "softmax"},
                      "ep-early-stopping": {"method": "ep", "early_stopping": True},
                      "ep-m20": {"method": "ep", "n_inducing": 20},
                      "sep-full-batch": {"method": "sep", "batch_size": None}}[column]
                fit("no-signal", f"{C}@{N}", data, column, train_scores=True, **kw)


if __name__ == "__main__":
    main()
