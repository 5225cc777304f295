"""The airline experiment on the feature-faithful stand-in nycflights13 (2013, ~337k usable rows).

Features of ``sgpc.datasets.load("nycflights13")``: month, day, day of week, departure and arrival time,
air time, distance, plane age (2013 − year built, from the planes table), carrier, origin and
destination codes; 3 classes from the arrival delay (late > 5 min, early < −5 min, else on time).
Split: ``datasets.train_test("nycflights13", seed=0)`` — a stratified random 10% test set, features
standardised with the training statistics (the data set has no time-ordered test protocol in the
papers). Methods: sep and vi (M = 200, minibatch 1024, Adam 0.01, in memory) for a fixed number of
steps with the test error/NLL every --eval-every steps (evaluation excluded from the clock), and
multinomial logistic regression (scikit-learn, L-BFGS) as in the papers.

    python benchmarks/perf/scale_nycflights.py --iters 2000 --eval-every 250

Writes results/scale_nycflights.jsonl.
"""
from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import write
from sgpc import GPClassifier
from sgpc.datasets import train_test


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--methods", nargs="+", default=["sep", "vi"])
    ap.add_argument("--M", type=int, default=200)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    Xtr, Xte, ytr, yte = train_test("nycflights13", seed=0)
    classes, counts = np.unique(ytr, return_counts=True)
    print(f"nycflights13: {len(ytr)} train / {len(yte)} test rows, D = {Xtr.shape[1]}, classes "
          f"{dict(zip(classes.tolist(), (counts / counts.sum()).round(3).tolist()))}", flush=True)
    runs = []
    from sklearn.linear_model import LogisticRegression
    t0 = time.perf_counter()
    lr = LogisticRegression(max_iter=300).fit(Xtr, ytr)
    lp = lr.predict_log_proba(Xte)
    code = np.searchsorted(lr.classes_, yte)
    runs.append({"method": "logistic-regression", "fit_seconds": time.perf_counter() - t0,
                 "final_error": float(np.mean(lr.classes_[lp.argmax(1)] != yte)),
                 "final_nll": float(-lp[np.arange(len(code)), code].mean())})
    print(runs[-1], flush=True)
    for method in args.methods:
        clf = GPClassifier(tol=None, method=method, n_inducing=args.M, batch_size=args.batch, max_iter=args.iters,
                           learning_rate=args.lr, random_state=0)
        t0 = time.perf_counter()
        clf.fit(Xtr, ytr, X_val=Xte, y_val=yte, eval_every=args.eval_every)
        h = clf.history_
        runs.append({"method": method, "iterations": clf.n_iter_, "train_seconds": h["time"][-1],
                     "wall_seconds": time.perf_counter() - t0, "ms_per_iter": 1e3 * h["time"][-1] / clf.n_iter_,
                     "curve": h["validation"], "final_error": h["validation"][-1]["error"],
                     "final_nll": h["validation"][-1]["nll"], "peak_rss_mb": _rss_mb()})
        print({k: v for k, v in runs[-1].items() if k != "curve"}, flush=True)
    print("wrote", write("scale_nycflights", {"config": vars(args), "n_train": len(ytr), "n_test": len(yte),
                                               "class_frequencies_train": dict(zip(classes.tolist(),
                                                                                   (counts / counts.sum()).tolist())),
                                               "runs": runs}))


if __name__ == "__main__":
    main()
