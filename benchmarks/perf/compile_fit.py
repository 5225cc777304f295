"""GPClassifier(compile=...) end to end: the same minibatch fit eager and compiled, its time per step and its test
NLL/error, on the MNIST shape (M = 200 per-latent inducing points, B = 200, Adam 0.01) by default.

    python benchmarks/perf/compile_fit.py --device cuda --modes none reduce-overhead --methods vi sep

ms/step is the median over the fit's steps after the first --skip (the first step compiles); the compile time is
the first step's. Writes results/<--name>.jsonl.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import write
from peers_throughput import _data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", default="mnist")
    ap.add_argument("--methods", nargs="+", default=["vi"])
    ap.add_argument("--modes", nargs="+", default=["none", "reduce-overhead"], choices=["none", "default", "reduce-overhead"])
    ap.add_argument("--m", type=int, default=200)
    ap.add_argument("--b", type=int, default=200)
    ap.add_argument("--iters", type=int, default=600)
    ap.add_argument("--skip", type=int, default=20, help="steps left out of the median (compilation, warm-up)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--name", default="compile_fit")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from sgpc import GPClassifier
    X, y, Xt, yt, C = _data(args.set)
    runs = []
    for method in args.methods:
        for mode in args.modes:
            clf = GPClassifier(tol=None, method=method, n_inducing=args.m, batch_size=args.b, max_iter=args.iters,
                               random_state=0, device=args.device, dtype=args.dtype,
                               compile=None if mode == "none" else mode)
            t0 = time.perf_counter()
            clf.fit(X, y)
            fit_s = time.perf_counter() - t0
            t = np.asarray(clf.history_["time"])
            steps_ms = 1e3 * np.diff(t[args.skip:])
            logp = np.log(np.clip(clf.predict_proba(Xt), 1e-300, None))
            row = {"method": method, "compile": mode, "fit_s": fit_s, "first_step_s": float(t[0]),
                   "ms_per_step_median": float(statistics.median(steps_ms)),
                   "test_nll": float(-logp[np.arange(len(yt)), yt].mean()),
                   "test_error": float(np.mean(logp.argmax(1) != yt)),
                   "final_objective": float(clf.history_["objective"][-1])}
            print(row, flush=True)
            runs.append(row)
            write(args.name, {"config": vars(args), "runs": runs,     # after each fit: a cut-off run keeps its rows
                              "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else None})


if __name__ == "__main__":
    main()
