"""Prediction time with many classes: one quadrature grid per row against panels per (row, class) pair.

``predict_proba`` of a robust-max model integrates P(f_c largest) (scalable-ep eq. 68) for every class. A
(row, class) pair whose class variance is more than 4 times another's, or whose P is in the tail, needs
composite panels (``sgpc.quadrature``); with C classes a pair's panels cost ~7·C nodes × C factors, so a row
whose pairs all need them cost ~7·C³. A row with at least ``quadrature._ROW_GRID_MIN_PAIRS`` such pairs now
integrates them on one grid (``quadrature._prob_largest_row_grid``), ~26·C² per row.

For each case the default ``GPClassifier`` is fitted twice, with panels per pair only (``_ROW_GRID_MIN_PAIRS`` set
out of reach) and with the row grid: the fit's time includes its end-of-fit check (``diagnostics.diagnose``: two
predictions on up to 512 training rows), and training itself does not use the grid, so the two fits must end at the
same posterior (``same_fit``). Then, in the same process and alternating, the test rows' ``predict_proba`` and the
end-of-fit check are timed under each rule, ``--repeats`` times each; medians are reported, with the largest
difference between the two tables of probabilities.

Cases: vowel (11 classes), chess-krvk (18) and letter (26) from ``../shared/datasets`` at ``--max-rows`` rows
(split 0 of ``suite.py``'s protocol), and a synthetic table of 50 classes (labels unrelated to 4 Gaussian
features: 200 training rows, 2 000 test rows; every class overlaps every other).

    python benchmarks/perf/predict_classes.py [--max-rows 5000] [--threads 2] [--repeats 3]

Writes results/predict-classes.jsonl.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))            # benchmarks/: _common
sys.path.insert(0, str(Path(__file__).resolve().parent))                # benchmarks/perf: suite
from _common import write  # noqa: E402

CASES = ("vowel", "chess-krvk", "letter", "synthetic-50")


def _data(name: str, max_rows: int):
    if name == "synthetic-50":
        rng = np.random.default_rng(0)
        X = rng.normal(size=(2200, 4))
        y = np.arange(2200) % 50
        return X[:200], X[200:], y[:200], y[200:]
    import suite
    return suite.split(suite.load_set(name, max_rows), 0)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--max-rows", type=int, default=5000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    import torch
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from sgpc import GPClassifier, diagnostics, quadrature

    runs = []
    for name in args.cases.split(","):
        Xtr, Xte, ytr, yte = _data(name, args.max_rows)
        grid_min = quadrature._ROW_GRID_MIN_PAIRS
        fits, fit_time = {}, {}
        for rule in ("pairs", "grid"):
            quadrature._ROW_GRID_MIN_PAIRS = grid_min if rule == "grid" else 10**9
            t0 = time.perf_counter()
            fits[rule] = GPClassifier(random_state=0).fit(Xtr, ytr)
            fit_time[rule] = time.perf_counter() - t0
        quadrature._ROW_GRID_MIN_PAIRS = grid_min
        est = fits["grid"]
        same_fit = (fits["pairs"].n_iter_ == est.n_iter_
                    and torch.equal(fits["pairs"].posterior_.mean, est.posterior_.mean)
                    and torch.equal(fits["pairs"].posterior_.chol, est.posterior_.chol))
        X_check = torch.as_tensor(Xtr, dtype=est.model_.chol_Kuu().dtype)
        times = {"grid": {"predict": [], "check": []}, "pairs": {"predict": [], "check": []}}
        tables = {}
        for _ in range(args.repeats):
            for rule in ("grid", "pairs"):
                quadrature._ROW_GRID_MIN_PAIRS = grid_min if rule == "grid" else 10**9
                t0 = time.perf_counter()
                tables[rule] = est.predict_proba(Xte)
                times[rule]["predict"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                diagnostics.diagnose(est.model_, est.posterior_, X_check, True, {})
                times[rule]["check"].append(time.perf_counter() - t0)
        quadrature._ROW_GRID_MIN_PAIRS = grid_min
        med = {rule: {k: statistics.median(v) for k, v in t.items()} for rule, t in times.items()}
        p = tables["grid"]
        nll = float(-np.mean(np.log(np.clip(p[np.arange(len(yte)), np.searchsorted(est.classes_, yte)], 1e-15, 1))))
        run = {"case": name, "n_train": len(ytr), "n_test": len(yte), "n_classes": len(est.classes_),
               "method": est.method_, "dtype": est.dtype_, "fit_pairs": fit_time["pairs"],
               "fit_grid": fit_time["grid"], "same_fit": bool(same_fit), "n_iter": est.n_iter_,
               "converged": bool(est.converged_),
               "predict_grid": med["grid"]["predict"], "predict_pairs": med["pairs"]["predict"],
               "check_grid": med["grid"]["check"], "check_pairs": med["pairs"]["check"],
               "max_abs_diff": float(np.abs(tables["grid"] - tables["pairs"]).max()), "test_nll": nll,
               "repeats": args.repeats, "threads": args.threads}
        runs.append(run)
        print(f"{name}: {len(ytr)} train / {len(yte)} test rows, C = {run['n_classes']}: predict "
              f"{run['predict_pairs']:.2f} s → {run['predict_grid']:.2f} s, end-of-fit check "
              f"{run['check_pairs']:.2f} s → {run['check_grid']:.2f} s, max |Δp| {run['max_abs_diff']:.1e}; "
              f"fit {run['fit_pairs']:.1f} s → {run['fit_grid']:.1f} s, same fit: {run['same_fit']}, "
              f"{run['n_iter']} iterations, converged: {run['converged']}", flush=True)
        write("predict-classes", {"config": {"max_rows": args.max_rows, "threads": args.threads}, "runs": runs})


if __name__ == "__main__":
    main()
