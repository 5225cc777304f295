"""The function-space EP engines with their defaults at 1 000 rows x 5 classes (issue 40's targets).

Targets: ``GPClassifier(method=m)`` for m in gfitc, rmgpc, smgpc fits 1 000 training rows x 5 classes in at most
30 s on this 2-core machine, and rmgpc is at least as accurate as ``vi`` when 20% of the training labels are
flipped.

Protocol: for each seed, ``sklearn.datasets.make_classification`` draws 3 000 rows (10 features, 6 informative and
2 redundant, 5 classes, one cluster per class, class_sep 1.0, random_state=seed); the first 1 000 are the training
rows, the other 2 000 the test rows; features standardised on the training rows. ``--noise`` fractions of the
training labels are resampled uniformly from the classes (``rmgpc_label_noise.corrupt``, seed 11 + seed); the test
labels stay clean. Each method is fitted with its defaults (``random_state=seed``); the fit time is the wall-clock
time of ``fit`` with ``--threads`` torch threads, one process, nothing else should run.

    python benchmarks/perf/full_batch_ep.py                     # seeds 0-2, noise 0 and 0.2, gfitc/rmgpc/smgpc/vi
    python benchmarks/perf/full_batch_ep.py --seeds 0 --methods rmgpc --noise 0.2

Results: one line per fit in results/full_batch_ep.jsonl (``_common.write``).
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))
sys.path.insert(0, str(HERE.parent))                 # benchmarks/: _common
sys.path.insert(0, str(HERE.parent / "paper"))       # rmgpc_label_noise.corrupt
from _common import write                            # noqa: E402
from rmgpc_label_noise import corrupt                # noqa: E402

from sgpc import GPClassifier                        # noqa: E402
from sgpc.metrics import evaluate                    # noqa: E402

N_TRAIN, N_TOTAL, N_FEATURES, N_CLASSES = 1000, 3000, 10, 5


def problem(seed: int):
    """(X_train, X_test, y_train, y_test) of the protocol, features standardised on the training rows."""
    from sklearn.datasets import make_classification
    from sklearn.preprocessing import StandardScaler
    X, y = make_classification(n_samples=N_TOTAL, n_features=N_FEATURES, n_informative=6, n_redundant=2,
                               n_classes=N_CLASSES, n_clusters_per_class=1, class_sep=1.0, random_state=seed)
    scaler = StandardScaler().fit(X[:N_TRAIN])
    return scaler.transform(X[:N_TRAIN]), scaler.transform(X[N_TRAIN:]), y[:N_TRAIN], y[N_TRAIN:]


def run(method: str, noise: float, seed: int) -> dict:
    Xtr, Xte, ytr, yte = problem(seed)
    yn = corrupt(ytr, noise, 11 + seed)
    est = GPClassifier(method=method, random_state=seed)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(Xtr, yn)
    seconds = time.perf_counter() - start
    m = evaluate(yte, est.predict_proba(Xte))
    return {"method": method, "noise": noise, "seed": seed, "n_train": N_TRAIN, "n_classes": N_CLASSES,
            "n_inducing": int(est.model_.Z.shape[-2]), "fit_s": seconds, "n_iter": int(est.n_iter_),
            "converged": bool(est.converged_), "error": m["error"], "nll": m["nll"],
            "warnings": sorted({type(w.message).__name__ for w in caught})}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--noise", nargs="+", type=float, default=[0.0, 0.2])
    ap.add_argument("--methods", nargs="+", default=["gfitc", "rmgpc", "smgpc", "vi"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--name", default="full_batch_ep", help="results/<name>.jsonl")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for seed in args.seeds:
        for noise in args.noise:
            for method in args.methods:
                r = run(method, noise, seed)
                rows.append(r)
                print(f"seed {seed} noise {noise:.1f} {method:6s} fit {r['fit_s']:6.1f} s ({r['n_iter']} it, "
                      f"converged {r['converged']}) error {r['error']:.4f} nll {r['nll']:.4f}", flush=True)
                write(args.name, {"config": vars(args), "rows": rows})
    for method in args.methods:
        for noise in args.noise:
            rs = [r for r in rows if r["method"] == method and r["noise"] == noise]
            times = [r["fit_s"] for r in rs]
            print(f"{method:6s} noise {noise:.1f}: fit {min(times):.1f}-{max(times):.1f} s, "
                  f"mean error {np.mean([r['error'] for r in rs]):.4f}, mean NLL {np.mean([r['nll'] for r in rs]):.4f}")


if __name__ == "__main__":
    main()
