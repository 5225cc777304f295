"""Fuzzing every method on random small problems: no exception, no NaN, rows sum to one, row-independent predictions.

Problem i is drawn from its own seed (``--seed`` + i), so any failure is rerun with ``--only i``. The method cycles
through the registry; the rest is drawn: N 5–300 training rows, D 1–30, C 2–8 classes, class imbalance up to 50:1,
duplicated rows, constant columns, feature scales 1e-6–1e6, pure-noise labels, float32, minibatches (streamable
methods), learning rates up to 1, α down to 1e-3 (Power-EP family), the kernel. Each fit is short (a few
iterations): the checks are about what any fit must give, not about accuracy.

Checks per problem (each failure is recorded with its message):
  fit: no exception (a ValueError that names the input's fault is allowed only for inputs the library refuses);
  proba: finite and each row sums to one (1e-10 in float64, 1e-5 in float32);
  rows: predictions of held-out rows unchanged (1e-12 in float64, 1e-5 in float32) when the rows are permuted, split
      in two calls, or joined by extreme rows (1e8 … 1e300) — or the extreme rows are refused by an error naming them;
  seed (every 5th problem): a second fit with the same seed gives bitwise the same probabilities;
  saved (every 5th problem): save → load gives bitwise the same probabilities.

    python benchmarks/perf/fuzz.py [--problems 1000] [--seed 0] [--only I ...]
    python benchmarks/perf/fuzz.py --device cuda --problems 110 --out fuzz_gpu      # the same checks on a GPU

Writes results/<--out>.jsonl (default fuzz.jsonl; one line per problem) and prints the counts.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import ROOT, write

sys.path.insert(0, str(ROOT / "src"))
from sgpc import GPClassifier                                   # noqa: E402
from sgpc.registry import METHODS                               # noqa: E402

FULL_BATCH = ("gfitc", "rmgpc", "smgpc")
ALPHA = ("pep", "apep", "arpep", "rpapep")
STREAMABLE = ("vi", "sep", "apep", "arpep", "rpapep", "bsvm")
EXTREME = (1e8, -1e10, 1e30, -1e100, 1e154, 1e200, 1e300)


def draw(i: int, seed: int):
    """Problem i: (estimator options, X [N,D], y [N], X_test [T,D]) from the seed ``seed`` + i."""
    rng = np.random.default_rng(seed + i)
    methods = list(METHODS)
    method = methods[i % len(methods)]
    N, D, C = int(rng.integers(5, 301)), int(rng.integers(1, 31)), int(rng.integers(2, 9))
    C = min(C, N)
    scale = float(10.0 ** rng.uniform(-6, 6)) if rng.random() < 0.3 else 1.0
    X = rng.normal(size=(N, D)) * scale
    if rng.random() < 0.2 and D > 1:
        X[:, rng.integers(D)] = rng.normal()                                       # a constant column
    if rng.random() < 0.2:
        X[rng.integers(N, size=N // 4)] = X[rng.integers(N, size=N // 4)]           # duplicated rows
    weights = rng.uniform(1, 50, size=C) if rng.random() < 0.3 else np.ones(C)    # imbalance up to 50:1
    if rng.random() < 0.2:
        y = rng.choice(C, size=N, p=weights / weights.sum())                       # pure-noise labels
    else:
        y = np.argmax(X @ rng.normal(size=(D, C)) / max(scale, 1e-300) + np.log(weights)
                      + 0.5 * rng.normal(size=(N, C)), 1)
    y[:C] = np.arange(C)                                                           # every class present
    kernel = str(rng.choice(["rbf", "rbf", "matern12", "matern52", "linear", "matern52+rbf"]))
    opts = dict(method=method, kernel=kernel, n_inducing=int(rng.integers(2, 21)), random_state=int(rng.integers(1000)),
                max_iter=int(rng.integers(2, 11)), learning_rate=float(10.0 ** rng.uniform(-3, 0)),
                dtype="float32" if rng.random() < 0.2 else "float64")
    if method in FULL_BATCH:
        opts.update(optimizer="lbfgs", max_iter=int(rng.integers(1, 4)), learning_rate=1.0)
    elif method in STREAMABLE and rng.random() < 0.3 and N >= 10:
        opts["batch_size"] = int(rng.integers(5, N))
    if method in ALPHA:
        opts["method_params"] = {"alpha": float(10.0 ** rng.uniform(-3, 0))}
    X_test = rng.normal(size=(int(rng.integers(1, 40)), D)) * scale
    return opts, X, y, X_test


def check(i: int, seed: int, folder: str, device: str = "cpu") -> dict:
    """Fit problem i on ``device`` and run the checks; returns its record (config, sizes, failures, seconds)."""
    opts, X, y, X_test = draw(i, seed)
    if device != "cpu":
        opts["device"] = device
    f32 = opts["dtype"] == "float32"
    tol = 1e-5 if f32 else 1e-12
    failures, start = [], time.perf_counter()
    rec = {"problem": i, "options": opts, "N": len(X), "D": X.shape[1], "C": int(len(np.unique(y))),
           "T": len(X_test)}

    def fail(check_name, message):
        failures.append({"check": check_name, "message": str(message)[:500]})

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = GPClassifier(**opts).fit(X, y)
        rec.update(at_prior=bool(est.at_prior_), converged=bool(est.converged_))
        p = est.predict_proba(X_test)
        if not np.isfinite(p).all():
            fail("proba", "NaN or inf probability")
        elif np.abs(p.sum(1) - 1).max() > (1e-5 if f32 else 1e-10):
            fail("proba", f"rows sum to 1 ± {np.abs(p.sum(1) - 1).max():.3g}")
        rng = np.random.default_rng(seed + i + 10**6)
        perm = rng.permutation(len(X_test))
        diff = np.abs(est.predict_proba(X_test[perm]) - p[perm]).max()
        if diff > tol:
            fail("rows", f"permuted rows moved by {diff:.3g}")
        cut = int(rng.integers(0, len(X_test) + 1))
        if 0 < cut < len(X_test):
            diff = np.abs(np.vstack([est.predict_proba(X_test[:cut]), est.predict_proba(X_test[cut:])]) - p).max()
            if diff > tol:
                fail("rows", f"split rows moved by {diff:.3g}")
        far = rng.choice(EXTREME, size=(2, X.shape[1])) * rng.choice([0, 1], size=(2, X.shape[1]), p=[0.5, 0.5])
        far[:, 0] = rng.choice(EXTREME, size=2)
        try:
            q = est.predict_proba(np.vstack([X_test, far]))
            diff = np.abs(q[:len(X_test)] - p).max()
            if diff > tol or not np.isfinite(q).all():
                fail("rows", f"extreme rows moved the others by {diff:.3g} (finite: {np.isfinite(q).all()})")
        except ValueError as exc:
            named = re.search(r"first: (\d+)", str(exc))
            if named is None or int(named.group(1)) < len(X_test):
                fail("rows", f"extreme rows refused without naming them: {exc}")
        if i % 5 == 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                again = GPClassifier(**opts).fit(X, y)
            if not np.array_equal(again.predict_proba(X_test), p):
                fail("seed", f"same seed, probabilities differ by {np.abs(again.predict_proba(X_test) - p).max():.3g}")
            path = os.path.join(folder, f"m{i}.pt")
            est.save(path)
            loaded = GPClassifier.load(path, device=device)
            if not np.array_equal(loaded.predict_proba(X_test), p):
                fail("saved", "save -> load changed the probabilities")
            os.remove(path)
    except Exception as exc:                                   # noqa: BLE001 - every exception is a finding
        fail("fit", f"{type(exc).__name__}: {exc} | {traceback.format_exc(limit=3)[-300:]}")
    rec.update(failures=failures, seconds=time.perf_counter() - start)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", type=int, nargs="*", help="rerun these problem numbers")
    ap.add_argument("--device", default="cpu", help='where every fit and prediction runs ("cuda": the GPU batch check)')
    ap.add_argument("--out", default="fuzz", help="results/<out>.jsonl")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    problems = args.only if args.only else range(args.problems)
    runs, start = [], time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        for i in problems:
            rec = check(i, args.seed, folder, args.device)
            runs.append(rec)
            if rec["failures"]:
                print(f"problem {i} ({rec['options']['method']}): {rec['failures']}", flush=True)
            if len(runs) % 50 == 0:
                print(f"{len(runs)} problems, {sum(bool(r['failures']) for r in runs)} failing, "
                      f"{time.perf_counter() - start:.0f} s", flush=True)
            write(args.out, {"config": vars(args), "runs": runs})
    seconds = time.perf_counter() - start
    by_method = {m: sum(r["options"]["method"] == m for r in runs) for m in METHODS}
    print(f"fuzz: {len(runs)} problems ({by_method}), {sum(bool(r['failures']) for r in runs)} with failures, "
          f"{sum(len(r['failures']) for r in runs)} failures, {sum(r.get('at_prior', False) for r in runs)} fits at the "
          f"prior (warned), {seconds:.0f} s")


if __name__ == "__main__":
    main()
