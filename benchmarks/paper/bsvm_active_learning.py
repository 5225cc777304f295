"""Bayesian-SVM paper §4.3.1 / Fig. 5: active learning with the multi-class Bayesian SVM — the Bayesian
query policy (maximum variation ratio, eq. 13, from posterior samples) vs maximum entropy of
softmax(mean prediction) (point estimate only).

Protocol (paper): one labelled row per class drawn uniformly, then --queries queries (paper 100), one
per round; the same bsvm model for both policies; M = 4 inducing points. Here: stratified 90/10 split
(seed = run index), standardised; the pool is the training part subsampled to --max-pool rows and the
test part to --max-test; the first fit runs --initial-iters Adam steps, each refit continues from the
previous fit (warm start) for --refit-iters steps. The paper uses its 68 PMLB sets (unavailable
offline) and reports the mean rank per query and the curve of the largest set (poker).

    python benchmarks/paper/bsvm_active_learning.py                                              # reduced run
    python benchmarks/paper/bsvm_active_learning.py --queries 100 --runs 5 --sets <all sets of bsvm_uci.py>

Writes results/<--out>.jsonl: test error after each query for each set, run and policy, the mean rank
per query (1 = lower error, ties averaged) and the curve of the largest set.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scipy.stats import rankdata

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import write
from sgpc import GPClassifier
from sgpc.datasets import SplitProtocol, train_test
from sgpc.uncertainty import active_learning

POLICIES = ("variation_ratio", "mean_entropy")


def _subsample(X, y, n, rng):
    if not n or len(X) <= n:
        return X, y
    idx = rng.choice(len(X), n, replace=False)
    return X[idx], y[idx]


def summarise(runs: list[dict]) -> dict:
    """Mean rank per query over sets × runs (rank 1 = lower test error) and the largest set's curve."""
    pairs = {}
    for r in runs:
        pairs.setdefault((r["set"], r["seed"]), {})[r["policy"]] = np.asarray(r["error"])
    ranks = {p: [] for p in POLICIES}
    for errs in pairs.values():
        if len(errs) < len(POLICIES):
            continue
        E = np.stack([errs[p] for p in POLICIES])                       # [policies, queries + 1]
        R = np.apply_along_axis(rankdata, 0, E)
        for i, p in enumerate(POLICIES):
            ranks[p].append(R[i])
    if not ranks[POLICIES[0]]:
        return {}
    mean_rank = {p: np.mean(ranks[p], 0).tolist() for p in POLICIES}
    # the largest set: most training rows before the pool cap (the paper's curve is for its largest set)
    largest = max(runs, key=lambda r: r.get("n_available", r["pool"]))["set"]
    curve = {p: np.mean([r["error"] for r in runs if r["set"] == largest and r["policy"] == p], 0).tolist()
             for p in POLICIES}
    summary = {p: {"mean_rank_over_all_queries": float(np.mean(mean_rank[p])),
                   "mean_rank_last_query": float(mean_rank[p][-1]),
                   "mean_error_last_query": float(np.mean([r["error"][-1] for r in runs if r["policy"] == p])),
                   "n_set_runs": len(ranks[p])}
               for p in POLICIES}
    return {"mean_rank_per_query": mean_rank, "largest_set": largest, "largest_set_curve": curve, "summary": summary}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=["wine", "new-thyroid", "vehicle", "waveform", "satimage", "pendigits"])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--inducing", type=int, default=4)
    ap.add_argument("--samples", type=int, default=100, help="posterior samples S for the variation ratio")
    ap.add_argument("--initial-iters", type=int, default=200)
    ap.add_argument("--refit-iters", type=int, default=25)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--max-pool", type=int, default=2000)
    ap.add_argument("--max-test", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bsvm_active_learning")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    runs = []
    for name in args.sets:
        for seed in range(args.runs):
            Xp, Xt, yp, yt = train_test(name, seed, protocol=SplitProtocol(0.1))
            n_available = len(Xp)
            rng = np.random.default_rng(seed)
            Xp, yp = _subsample(Xp, yp, args.max_pool, rng)
            Xt, yt = _subsample(Xt, yt, args.max_test, rng)
            est = GPClassifier(tol=None, method="bsvm", n_inducing=args.inducing, max_iter=args.initial_iters,
                               learning_rate=args.lr, random_state=seed)
            for policy in POLICIES:
                t0 = time.perf_counter()
                h = active_learning(est, Xp, yp, Xt, yt, n_queries=args.queries, acquisition=policy,
                                    n_samples=args.samples, refit_max_iter=args.refit_iters, random_state=seed)
                runs.append({"set": name, "seed": seed, "policy": policy, "pool": len(Xp), "n_available": n_available,
                             "error": h["error"], "n_labelled": h["n_labelled"], "time_s": time.perf_counter() - t0})
                print(f"{name:12s} run {seed} {policy:16s} error start {h['error'][0]:.3f} "
                      f"after {args.queries} queries {h['error'][-1]:.3f} "
                      f"(mean over queries {np.mean(h['error']):.3f}) t={runs[-1]['time_s']:.0f}s", flush=True)
            path = write(args.out, {"config": vars(args), "runs": runs, **summarise(runs)})
    for p, s in summarise(runs)["summary"].items():
        print(p, s)
    print("wrote", path)


def add_sizes(path: str) -> None:
    """Add ``n_available`` to the runs of a result written before it was recorded, and re-summarise."""
    import json
    from pathlib import Path
    d = json.loads(Path(path).read_text())
    for r in d["runs"]:
        if "n_available" not in r:
            r["n_available"] = len(train_test(r["set"], r["seed"], protocol=SplitProtocol(0.1))[0])
    d.update(summarise(d["runs"]))
    Path(path).write_text(json.dumps(d, indent=2))


if __name__ == "__main__":
    main()
