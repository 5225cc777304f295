"""Scalable-EP paper, Figure 4 (and App. I Figure 6): test NLL and error vs training time on satimage.

GFITC, SEP and VI (EP optional), batch training as in §4.1, M in {4, 20, 100}; the held-out split is
evaluated every --eval-every iterations (evaluation time excluded from the clock). The paper averages
100 repetitions; --splits sets ours.

    python benchmarks/paper/scalable_ep_satimage_time.py [--splits 1] [--iters 250] [--methods gfitc sep vi]

Writes results/scalable_ep_satimage_time.jsonl and results/scalable_ep_satimage_time.png.
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import torch

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import RESULTS, paper_fit, write
from sgpc import GPClassifier
from sgpc.datasets import train_test

OPTIMIZER = {"ep": ("adaptive", 0.1), "sep": ("adaptive", 0.1), "vi": ("lbfgs", 1.0), "gfitc": ("lbfgs", 1.0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=["gfitc", "sep", "vi"])
    ap.add_argument("--ms", nargs="+", type=int, default=[4, 20, 100])
    ap.add_argument("--splits", type=int, default=1)
    ap.add_argument("--iters", type=int, default=250)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    curves = []
    for seed in range(args.splits):
        Xtr, Xte, ytr, yte = train_test("satimage", seed=seed)
        for M in args.ms:
            for method in args.methods:
                opt, lr = OPTIMIZER[method]
                clf = GPClassifier(tol=None, method=method, n_inducing=M, **paper_fit(method), optimizer=opt,
                                   learning_rate=lr, max_iter=args.iters,
                                   random_state=seed)
                clf.fit(Xtr, ytr, X_val=Xte, y_val=yte, eval_every=args.eval_every)
                v = clf.history_["validation"]
                curves.append({"method": method, "M": M, "seed": seed, "time": [r["time"] for r in v],
                               "nll": [r["nll"] for r in v], "error": [r["error"] for r in v]})
                print(f"M={M:3d} {method:5s} seed={seed}: final nll {v[-1]['nll']:.3f} err {v[-1]['error']:.3f} "
                      f"after {v[-1]['time']:.1f}s", flush=True)
    path = write("scalable_ep_satimage_time", {"config": vars(args), "curves": curves})
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, len(args.ms), figsize=(3.2 * len(args.ms), 3), sharey=True)
        for ax, M in zip(np.atleast_1d(axes), args.ms):
            for method in dict.fromkeys(c["method"] for c in curves):
                cs = [c for c in curves if c["M"] == M and c["method"] == method]
                if not cs:
                    continue
                ax.plot(np.mean([c["time"] for c in cs], 0), np.mean([c["nll"] for c in cs], 0), label=method.upper())
            ax.set_xscale("log")
            ax.set_title(f"satimage, M = {M}")
            ax.set_xlabel("training time (s)")
        np.atleast_1d(axes)[0].set_ylabel("test NLL")
        np.atleast_1d(axes)[0].legend()
        fig.tight_layout()
        fig.savefig(path.with_suffix(".png"), dpi=70)
    except ImportError:
        print("matplotlib not installed: figure skipped")
    print("wrote", path)


if __name__ == "__main__":
    main()
