"""Probe of Power EP at α → 0 on MNIST subsets (issue 4; docs/results-alpha.md, "MNIST: Power EP at α → 0").

PEP on the first --rows training rows of ``train_test("mnist", seed=0)`` (standardised pixels), tested on the
first 2 000 test rows: M = 50, B = 200, --iters Adam steps, float64, one fit per (α, learning rate, seed).
A learning rate of 1e-9 holds the hyper-parameters (and Z) practically fixed, so the sites alone move.
--pd-margins sets ``sgpc.sites.PD_MARGIN_POWER`` (the fraction of the positive-definite edge a capped site step of
Power EP at α < 1 may use; at commit 8ae1961 it was ``PD_MARGIN``, then used by every α)
for each fit in turn; the default is the library's value.

    python alpha_mnist_small_alpha_probe.py --alphas 0.001 0.5 --lrs 0.01 1e-9 --seeds 0 1 2
    python alpha_mnist_small_alpha_probe.py --alphas 0.001 --lrs 1e-9 --seeds 2 3 4 --pd-margins 0.5 0.1

Writes results/<--out>.json: test error and NLL of every fit, and the kernel variances at the end.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from _common import write
import sgpc.sites
from sgpc import GPClassifier
from sgpc.datasets import train_test


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--alphas", nargs="+", type=float, default=[0.001, 0.5])
    ap.add_argument("--lrs", nargs="+", type=float, default=[0.01, 1e-9])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--iters", type=int, default=250)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pd-margins", nargs="+", type=float, default=[sgpc.sites.PD_MARGIN_POWER])
    ap.add_argument("--out", default="alpha_mnist_small_alpha_probe")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    Xtr, Xte, ytr, yte = train_test("mnist", seed=0)
    X, y, Xt, yt = Xtr[:args.rows], ytr[:args.rows], Xte[:2000], yte[:2000]
    runs = []
    for margin, alpha, lr, seed in ((m, a, r, s) for m in args.pd_margins for a in args.alphas
                                    for r in args.lrs for s in args.seeds):
        sgpc.sites.PD_MARGIN_POWER = margin
        t0 = time.perf_counter()
        est = GPClassifier(method="pep", alpha=alpha, n_inducing=50, batch_size=200, max_iter=args.iters,
                           learning_rate=lr, random_state=seed, dtype="float64").fit(X, y)
        p = est.predict_proba(Xt)
        idx = np.searchsorted(est.classes_, yt)
        row = {"pd_margin": margin, "alpha": alpha, "learning_rate": lr, "seed": seed,
               "error": float(np.mean(p.argmax(1) != idx)), "nll": float(-np.mean(np.log(p[np.arange(len(yt)), idx]))),
               "kernel_variance_mean": float(est.model_.kernel.variance.detach().mean()),
               "redamped": int(est.history_["events"][-1]["redamped"]) if est.history_["events"] else 0,
               "time_s": time.perf_counter() - t0}
        runs.append(row)
        print(row, flush=True)
        write(args.out, {"config": vars(args), "runs": runs})
    print("wrote", write(args.out, {"config": vars(args), "runs": runs}))


if __name__ == "__main__":
    main()
