"""Alpha-divergence paper §5.3 / Figure 3 (and D.9): satimage test NLL and error vs training time for each α.

PEP, APEP, ARPEP, RPAPEP at α ∈ {→0, 0.3, 0.5, 0.8, 1} and VI (VB) for reference, M ∈ {4, 20, 100},
batch training as in §5.1 (PEP: the adaptive rate; the others L-BFGS); the held-out split is evaluated
every --eval-every iterations (evaluation time excluded from the clock). The paper averages 100
repetitions; --splits sets ours. α → 0 is run as α = 1e-3.

    python benchmarks/paper/alpha_satimage_time.py [--ms 20] [--iters 150] [--splits 1]
    python benchmarks/paper/alpha_satimage_time.py --first-split 1 --out alpha_satimage_time_s1     # another split
    python benchmarks/paper/alpha_satimage_time.py --merge results/alpha_satimage_time.jsonl \
        results/alpha_satimage_time_s1.jsonl --out alpha_satimage_time_merged              # pooled figure

Writes results/<--out>.jsonl and .png (rows: M, columns: method; curves averaged over splits).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib

import numpy as np
import torch

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import RESULTS, read, write
from alpha_uci import OPT
from sgpc import GPClassifier
from sgpc.datasets import train_test


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=["pep", "apep", "arpep", "rpapep"])
    ap.add_argument("--alphas", nargs="+", type=float, default=[1e-3, 0.3, 0.5, 0.8, 1.0])
    ap.add_argument("--ms", nargs="+", type=int, default=[4, 20, 100])
    ap.add_argument("--splits", type=int, default=1)
    ap.add_argument("--iters", type=int, default=250)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--first-split", type=int, default=0, help="seed of the first split (to add splits)")
    ap.add_argument("--out", default="alpha_satimage_time")
    ap.add_argument("--replot", action="store_true", help="redraw the figure from results/<--out>.jsonl")
    ap.add_argument("--merge", nargs="+", default=[], metavar="JSON",
                    help="pool the curves of these result files (runs of several invocations) into --out, "
                         "print the mean final NLL per cell and redraw the figure")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    curves = []
    if args.replot or args.merge:
        curves, args.splits = [c for e in (args.merge or [args.out]) for c in read(e)], 0
        for key in ("methods", "alphas", "ms"):
            setattr(args, key, curves[0]["config"][key])
        if args.merge:
            args.replot = False
            summarise(curves)
    jobs = [(m, a) for m in args.methods for a in args.alphas] + [("vi", None)]
    for seed in range(args.first_split, args.first_split + args.splits):
        Xtr, Xte, ytr, yte = train_test("satimage", seed=seed)
        for M in args.ms:
            for method, a in jobs:
                opt, lr = OPT.get(method, ("lbfgs", 1.0))
                extra = {} if a is None else {"method_params": {"alpha": a}}
                clf = GPClassifier(tol=None, method=method, n_inducing=M, inducing_params={"init": "random"}, optimizer=opt,
                                   learning_rate=lr, max_iter=args.iters,
                                   random_state=seed, **extra)
                clf.fit(Xtr, ytr, X_val=Xte, y_val=yte, eval_every=args.eval_every)
                v = clf.history_["validation"]
                curves.append({"method": method, "alpha": a, "M": M, "seed": seed, "time": [r["time"] for r in v],
                               "nll": [r["nll"] for r in v], "error": [r["error"] for r in v],
                               "load": os.getloadavg()[0]})
                print(f"M={M:3d} {method:6s} alpha={a} seed={seed}: final nll {v[-1]['nll']:.3f} "
                      f"err {v[-1]['error']:.3f} after {v[-1]['time']:.1f}s", flush=True)
            write(args.out, {"config": vars(args), "curves": curves})
    path = RESULTS / f"{args.out}.jsonl" if args.replot else write(args.out, {"config": vars(args), "curves": curves})
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
        fig, axes = plt.subplots(len(args.ms), len(args.methods), figsize=(2.8 * len(args.methods), 2.4 * len(args.ms)),
                                 squeeze=False, sharey="row")
        cmap = plt.get_cmap("viridis")
        for i, M in enumerate(args.ms):
            vi = [c for c in curves if c["M"] == M and c["method"] == "vi"]
            for j, method in enumerate(args.methods):
                ax = axes[i, j]
                for k, a in enumerate(args.alphas):
                    cs = [c for c in curves if c["M"] == M and c["method"] == method and c["alpha"] == a]
                    ax.plot(np.mean([c["time"] for c in cs], 0), np.mean([c["nll"] for c in cs], 0),
                            color=cmap(k / max(1, len(args.alphas) - 1)), label=f"α={a:g}")
                if vi:
                    ax.plot(np.mean([c["time"] for c in vi], 0), np.mean([c["nll"] for c in vi], 0), "k--", label="VB")
                ax.set_xscale("log")
                ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())    # unlabelled minor ticks
                ax.set_title(f"{method.upper()}, M = {M}", fontsize=9)
                if i == len(args.ms) - 1:
                    ax.set_xlabel("training time (s)")
            axes[i, 0].set_ylabel("test NLL")
        axes[0, 0].legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(path.with_suffix(".png"), dpi=60)
    except ImportError:
        print("matplotlib not installed: figure skipped")
    print("wrote", path)


def summarise(curves: list[dict]) -> None:
    """Mean final test NLL (± standard error, number of splits) per (M, method, α)."""
    cells = {}
    for c in curves:
        cells.setdefault((c["M"], c["method"], c["alpha"]), []).append(c["nll"][-1])
    for (M, method, a), v in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0)):
        se = np.std(v, ddof=1) / np.sqrt(len(v)) if len(v) > 1 else float("nan")
        print(f"M={M:3d} {method:6s} alpha={a}: final nll {np.mean(v):.3f} ± {se:.3f} (n={len(v)})")


if __name__ == "__main__":
    main()
