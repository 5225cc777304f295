"""Alpha-divergence paper, Figure 1 and Tables C.3/C.4: test NLL of PEP, APEP, ARPEP, RPAPEP over α on the 8 UCI sets.

Protocol of §5.1: the scalable-EP splits (sgpc.datasets.train_test), M = 5/10/20% of N (random
training points), 500 iterations: PEP with the adaptive rate of App. A, APEP/ARPEP/RPAPEP with L-BFGS.
α → 0 is run as α = 1e-3. For each set, fraction and split the α values are ranked by test NLL within
each method; the average rank per α is the paper's Figure 1.

    python benchmarks/paper/alpha_uci.py [--methods pep apep arpep rpapep] [--alphas 0.001 0.1 ... 1]
                                   [--fractions 0.1] [--splits 5] [--first-split 0] [--iters 500] [--device cuda]
    python benchmarks/paper/alpha_uci.py --merge results/a.jsonl results/b.jsonl --out alpha_uci_merged [--alphas ...]

Writes results/alpha_uci.jsonl (every run, and average ranks per method and α).
"""
from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
import torch
from scipy.stats import rankdata

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import RESULTS, pool_runs, write
from scalable_ep_uci import SETS, run
from sgpc.datasets import DataNotFoundError

OPT = {"pep": ("adaptive", 0.1), "apep": ("lbfgs", 1.0), "arpep": ("lbfgs", 1.0), "rpapep": ("lbfgs", 1.0)}


def ranks(rows):
    """Average rank of each α within each method (rank 1 = lowest NLL), over sets × fractions × splits."""
    groups = defaultdict(list)
    for r in rows:
        groups[(r["method"], r["set"], r["fraction"], r["seed"])].append(r)
    acc = defaultdict(list)
    for (method, *_), rs in groups.items():
        if not all(np.isfinite(r["nll"]) for r in rs):     # a failed fit: rankdata would make every rank NaN
            continue
        rk = rankdata([r["nll"] for r in rs])
        for r, k in zip(rs, rk):
            acc[(method, r["alpha"])].append(float(k))
    return [{"method": m, "alpha": a, "mean_rank": float(np.mean(v)), "n": len(v)} for (m, a), v in sorted(acc.items())]


def method_ranks(rows):
    """The paper's colour in Figure 1: at each α, the average rank of each method (rank 1 = lowest NLL among
    the methods on the same set, fraction and split), over groups where every method ran at that α."""
    groups = defaultdict(list)
    for r in rows:
        groups[(r["alpha"], r["set"], r["fraction"], r["seed"])].append(r)
    n_methods = len({r["method"] for r in rows})
    acc = defaultdict(list)
    for (alpha, *_), rs in groups.items():
        if len(rs) == n_methods and all(np.isfinite(r["nll"]) for r in rs):
            for r, k in zip(rs, rankdata([r["nll"] for r in rs])):
                acc[(r["method"], alpha)].append(float(k))
    return [{"method": m, "alpha": a, "mean_rank": float(np.mean(v)), "n": len(v)} for (m, a), v in sorted(acc.items())]


def figure(alpha_ranks, across, path) -> None:
    """Figure 1: per method, the mean rank of each α (line), each point coloured by the method's mean rank
    among the methods at that α (blue = better, red = worse)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from _common import shrink_png
    methods = sorted({r["method"] for r in alpha_ranks})
    colour = {(r["method"], r["alpha"]): r["mean_rank"] for r in across}
    fig, axes = plt.subplots(1, len(methods), figsize=(3.2 * len(methods), 2.8), sharey=True)
    for ax, m in zip(np.atleast_1d(axes), methods):
        rs = sorted((r for r in alpha_ranks if r["method"] == m), key=lambda r: r["alpha"])
        a, k = [r["alpha"] for r in rs], [r["mean_rank"] for r in rs]
        ax.plot(a, k, color="0.6", zorder=1)
        sc = ax.scatter(a, k, c=[colour.get((m, x), np.nan) for x in a], cmap="coolwarm", s=40, zorder=2,
                        vmin=min(colour.values()), vmax=max(colour.values()), edgecolors="0.3", linewidths=0.5)
        ax.set_title(m.upper())
        ax.set_xlabel("α")
    np.atleast_1d(axes)[0].set_ylabel("mean rank of α (test NLL)")
    fig.colorbar(sc, ax=axes, label="mean rank among methods")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    shrink_png(path, colors=160)           # the colour bar is data: 32 colours left 7 shades of it


def table(rows) -> str:
    """Markdown table of test NLL, mean over splits, per set × method (rows) and α (columns); the lowest
    NLL of each row in bold, and the number of splits."""
    alphas = sorted({r["alpha"] for r in rows})
    cells = defaultdict(list)
    for r in rows:
        cells[(r["set"], r["method"], r["alpha"])].append(r["nll"])
    lines = ["| set | method | splits | " + " | ".join(f"α = {a:g}" for a in alphas) + " |",
             "|---|---|---|" + "---|" * len(alphas)]
    for name, method in sorted({(r["set"], r["method"]) for r in rows}):
        vals = [np.mean(cells[(name, method, a)]) if cells[(name, method, a)] else None for a in alphas]
        best = min(v for v in vals if v is not None)
        txt = ["—" if v is None else (f"**{v:.3f}**" if v == best else f"{v:.3f}") for v in vals]
        n = max(len(cells[(name, method, a)]) for a in alphas)
        lines.append(f"| {name} | {method} | {n} | " + " | ".join(txt) + " |")
    return "\n".join(lines)


def merge(paths, out, keep_alphas=None):
    """Pool the runs of several result files (a later file's run replaces an earlier one of the same cell);
    with ``keep_alphas``, only the runs at those α. Each run is tagged with its file and that file's commit;
    groups ranked from runs of different commits, and groups left out as incomplete, are listed."""
    rows = pool_runs(paths, key=lambda r: (r["set"], r["method"], r["alpha"], r["fraction"], r["seed"]),
                     keep=None if keep_alphas is None else
                     lambda r: any(abs(r["alpha"] - a) < 1e-12 for a in keep_alphas))
    # rank only complete groups: every α of the method on that set, fraction and split
    alphas = defaultdict(set)
    for r in rows:
        alphas[r["method"]].add(r["alpha"])
    groups = defaultdict(list)
    for r in rows:
        groups[(r["method"], r["set"], r["fraction"], r["seed"])].append(r)
    complete = [r for k, rs in groups.items() if len(rs) == len(alphas[k[0]]) for r in rs]
    for k, rs in sorted(groups.items()):
        if len(rs) != len(alphas[k[0]]):
            print(f"left out, incomplete: {k[0]} {k[1]} M={k[2]:g} split {k[3]} ({len(rs)} of {len(alphas[k[0]])} α)")
        elif len({r["meta"]["commit"] for r in rs}) > 1:
            print(f"mixed commits: {k[0]} {k[1]} M={k[2]:g} split {k[3]}: " + ", ".join(sorted(
                {str(r["meta"]["commit"])[:7] for r in rs})))
    fractions = sorted({r["fraction"] for r in complete})
    by_fraction = {f"{f:g}": ranks([r for r in complete if r["fraction"] == f]) for f in fractions}
    across = method_ranks(complete)
    path = RESULTS / f"{out}.png"
    figure(ranks(complete), across, path)
    for f in fractions:
        print(f"\nM = {f:g} N\n" + table([r for r in complete if r["fraction"] == f]))
    for f, rk in [("all", ranks(complete))] + list(by_fraction.items()):
        for r in rk:
            print(f"M={f:4s} {r['method']:6s} alpha={r['alpha']:<5g} mean rank {r['mean_rank']:.2f} (n={r['n']})")
    for r in across:
        print(f"among methods at alpha={r['alpha']:<5g} {r['method']:6s} mean rank {r['mean_rank']:.2f} (n={r['n']})")
    print(f"{len(rows)} runs, {len(complete)} in complete groups; wrote", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=SETS)
    ap.add_argument("--methods", nargs="+", default=["pep", "apep", "arpep", "rpapep"])
    ap.add_argument("--alphas", nargs="+", type=float, default=None,
                    help="α values to fit (default: the paper's 10⁻³, 0.1, …, 1); with --merge, keep only these")
    ap.add_argument("--fractions", nargs="+", type=float, default=[0.05, 0.1, 0.2])
    ap.add_argument("--splits", type=int, default=5)
    ap.add_argument("--first-split", type=int, default=0, help="seed of the first split (to add splits to a cell)")
    ap.add_argument("--merge", nargs="+", default=[], metavar="JSON",
                    help="only merge these result files (runs of several invocations) and print the ranks")
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="torch device of the fits, e.g. cuda")
    ap.add_argument("--out", default="alpha_uci")
    args = ap.parse_args()
    if args.merge:
        return merge(args.merge, args.out, args.alphas)
    if args.alphas is None:
        args.alphas = [1e-3, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    torch.set_num_threads(args.threads)
    rows = []
    try:
        for name in args.sets:
            for f in args.fractions:
                for seed in range(args.first_split, args.first_split + args.splits):
                    for method in args.methods:
                        for a in args.alphas:
                            try:
                                r = run(name, method, f, seed, args.iters, optimizer=OPT[method], method_params={"alpha": a},
                                        **({} if args.device == "cpu" else {"device": args.device}))
                            except (ArithmeticError, RuntimeError, ValueError) as exc:
                                # one failed fit is a row (left out of the ranks), not the end of the sweep
                                r = {"set": name, "method": method, "alpha": a, "fraction": f, "seed": seed,
                                     "M": -1, "error": float("nan"), "nll": float("nan"), "time_s": float("nan"),
                                     "failed": f"{type(exc).__name__}: {exc}"[:300]}
                            rows.append(r)
                            print(f"{name:12s} {method:6s} alpha={a:<5g} M={r['M']:4d} seed={seed} "
                                  f"err={r['error']:.3f} nll={r['nll']:.3f} t={r['time_s']:.1f}s", flush=True)
                            # after every fit: a sweep stopped part-way keeps what it finished
                            write(args.out, {"config": vars(args), "runs": rows, "ranks": ranks(rows)})
    except DataNotFoundError as exc:
        raise SystemExit(str(exc))
    path = write(args.out, {"config": vars(args), "runs": rows, "ranks": ranks(rows)})
    for r in ranks(rows):
        print(f"{r['method']:6s} alpha={r['alpha']:<5g} mean rank {r['mean_rank']:.2f} (n={r['n']})")
    print("wrote", path)


if __name__ == "__main__":
    main()
