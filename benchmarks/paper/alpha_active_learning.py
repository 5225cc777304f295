"""Alpha-divergence paper §5.6, Figs. 6–7: active learning on waveform for several α per method.

Protocol (paper): 1 000 waveform rows, 100 for the initial training set, 400 as the pool ("validation
set") and 500 for testing; 100 rows are added one at a time, either the pool row of highest predictive
entropy or one drawn at random; test error after each addition; averages over repetitions (paper 100).
The paper fits with L-BFGS, 250 iterations first and 25 per refit reusing the previous solution, and for
PEP 50/5 iterations alternating site updates with L-BFGS. Here every method refits warm-started
(``warm_start``): APEP/ARPEP/RPAPEP with --initial-iters then --refit-iters L-BFGS steps; PEP keeps each
row's site (the new row's starts at zero) and runs --pep-iters (50, 5) iterations of site updates
alternating with steps of the adaptive rate of App. A. M = --inducing random training rows; features
standardised with the initial 100 rows' statistics; α → 0 is run as α = 1e-3. Repetition r permutes
the 1 000 rows with seed r. (Before 2026-11-24 PEP and APEP refit from scratch for --cold-iters
iterations each round: ``--cold`` repeats that.)

    python benchmarks/paper/alpha_active_learning.py --methods arpep rpapep --alphas 0.001 0.5 1 --repeats 5
    python benchmarks/paper/alpha_active_learning.py --methods arpep --repeats 2 --first-repeat 5 --out more
    python benchmarks/paper/alpha_active_learning.py --merge results/a.jsonl results/more.jsonl --out pooled

Writes results/<--out>.jsonl: the error curves of every (method, α, policy, repetition), their means,
and the mean error reduction from the initial error (Fig. 7). ``--first-repeat`` adds repetitions to
an earlier run; ``--merge`` pools the runs of several files (a later file's run replaces an earlier one
of the same method, α, policy and repetition), each run tagged with its file and that file's commit.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import pool_runs, write
from sgpc import GPClassifier
from sgpc.datasets import load
from sgpc.uncertainty import active_learning

OPT = {"pep": ("adaptive", 0.1), "apep": ("lbfgs", 1.0), "arpep": ("lbfgs", 1.0), "rpapep": ("lbfgs", 1.0)}
POLICIES = {"entropy": "entropy", "random": "random"}


def split(X, y, seed: int):
    """(initial 100, pool 400, test 500) rows of a seeded permutation of 1 000 rows, standardised on the initial rows."""
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(X))[:1000]
    X, y = X[idx], y[idx]
    mu, sd = X[:100].mean(0), X[:100].std(0)
    X = (X - mu) / np.where(sd > 0, sd, 1.0)
    return X[:500], y[:500], X[500:], y[500:]          # pool = initial 100 + 400 candidates; test 500


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=["arpep", "rpapep"], choices=sorted(OPT))
    ap.add_argument("--alphas", nargs="+", type=float, default=[0.001, 0.5, 1.0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--first-repeat", type=int, default=0, help="seed of the first repetition (to add repetitions)")
    ap.add_argument("--merge", nargs="+", default=[], metavar="JSON",
                    help="only pool the runs of these result files and summarise them")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--inducing", type=int, default=20)
    ap.add_argument("--initial-iters", type=int, default=250)
    ap.add_argument("--refit-iters", type=int, default=25)
    ap.add_argument("--pep-iters", type=int, nargs=2, default=[50, 5], metavar=("FIRST", "REFIT"),
                    help="PEP's iterations for the first fit and each warm refit (the paper's 50/5)")
    ap.add_argument("--cold", action="store_true",
                    help="PEP and APEP refit from scratch for --cold-iters each round (the protocol before warm starts)")
    ap.add_argument("--cold-iters", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="alpha_active_learning")
    args = ap.parse_args()
    if args.merge:
        return merge(args.merge, args.out)
    torch.set_num_threads(args.threads)
    d = load("waveform")
    X, y = np.asarray(d.X, dtype=np.float64), np.asarray(d.y)
    runs = []
    for rep in range(args.first_repeat, args.first_repeat + args.repeats):
        Xp, yp, Xt, yt = split(X, y, rep)
        for method in args.methods:
            for alpha in args.alphas:
                opt, lr = OPT[method]
                first, refit = args.pep_iters if method == "pep" else (args.initial_iters, args.refit_iters)
                cold = args.cold and method in ("pep", "apep")
                if cold:
                    first = refit = args.cold_iters
                est = GPClassifier(tol=None, method=method, method_params={"alpha": alpha}, n_inducing=args.inducing, inducing_params={"init": "random"},
                                   optimizer=opt, learning_rate=lr, max_iter=first, random_state=rep)
                for policy, acquisition in POLICIES.items():
                    t0 = time.perf_counter()
                    h = active_learning(est, Xp, yp, Xt, yt, n_queries=args.queries, acquisition=acquisition,
                                        initial=np.arange(100), refit_max_iter=refit, random_state=rep,
                                        warm_start=not cold)
                    runs.append({"method": method, "alpha": alpha, "policy": policy, "repeat": rep,
                                 "error": h["error"], "nll": h["nll"], "time_s": time.perf_counter() - t0})
                    print(f"rep {rep} {method:6s} α={alpha:<5g} {policy:7s} error {h['error'][0]:.3f} -> "
                          f"{h['error'][-1]:.3f} (mean {np.mean(h['error']):.3f}) t={runs[-1]['time_s']:.0f}s", flush=True)
                write(args.out, {"config": vars(args), **results(runs)})
    path = write(args.out, {"config": vars(args), **results(runs)})
    report(runs)
    print("wrote", path)


def merge(paths: list[str], out: str):
    """Pool the runs of several result files; a later file's run replaces an earlier one of the same
    (method, α, policy, repetition)."""
    def cell(r):
        return r["method"], r["alpha"], r["policy"], r["repeat"]
    runs = sorted(pool_runs(paths, cell), key=cell)
    report(runs)


def results(runs: list[dict]) -> dict:
    """A result file's payload: the runs, their summary and the paired entropy − random comparison."""
    return {"runs": runs, "summary": summarise(runs), "entropy_minus_random": paired(runs)}


def report(runs: list[dict]):
    for row in summarise(runs):
        print(row["method"], row["alpha"], row["policy"], f"error {row['error_start']:.3f} -> {row['error_end']:.3f}",
              f"reduction {row['reduction_end']:.3f} (n={row['n']})")
    for row in paired(runs):
        print(row["method"], row["alpha"], f"final error entropy − random {row['mean']:+.4f} ± {row['se']:.4f} (se, "
              f"n={row['n']}), entropy lower in {row['entropy_lower']}, higher in {row['entropy_higher']}")


def paired(runs: list[dict]) -> list[dict]:
    """Final error of entropy minus random selection per (method, α), paired on the repetitions both
    policies ran (the same initial set, pool and test rows): mean, standard error and the counts of
    repetitions where entropy ended lower / higher."""
    final = {(r["method"], r["alpha"], r["policy"], r["repeat"]): r["error"][-1] for r in runs}
    out = []
    for m, a in sorted({(r["method"], r["alpha"]) for r in runs}):
        reps = sorted(k[3] for k in final if k[:3] == (m, a, "entropy") and (m, a, "random", k[3]) in final)
        if not reps:
            continue
        d = np.array([final[(m, a, "entropy", k)] - final[(m, a, "random", k)] for k in reps])
        se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
        out.append({"method": m, "alpha": a, "n": len(d), "repeats": reps, "mean": float(d.mean()), "se": se,
                    "entropy_lower": int((d < 0).sum()), "entropy_higher": int((d > 0).sum())})
    return out


def summarise(runs: list[dict]) -> list[dict]:
    """Mean error curve, start/end error and error reduction (Fig. 7) per (method, α, policy), with the
    repetitions each cell holds ("repeats"): cells of a stopped run can hold different ones, and means over
    different repetitions are not comparable (compare on the shared ones)."""
    cells, reps = {}, {}
    for r in runs:
        cells.setdefault((r["method"], r["alpha"], r["policy"]), []).append(np.asarray(r["error"]))
        reps.setdefault((r["method"], r["alpha"], r["policy"]), []).append(r.get("repeat"))
    out = []
    for (m, a, p), curves in sorted(cells.items()):
        E = np.stack(curves)
        mean = E.mean(0)
        out.append({"method": m, "alpha": a, "policy": p, "n": len(curves), "repeats": reps[(m, a, p)],
                    "mean_error": mean.tolist(),
                    "error_start": float(mean[0]), "error_end": float(mean[-1]),
                    "reduction_end": float((E[:, 0] - E[:, -1]).mean())})
    return out


if __name__ == "__main__":
    main()
