"""Peak memory of training on flights-3m prefixes, streamed from Parquet vs loaded into memory.

For each N (default 1e5, 1e6, 2.99e6 = every training row) and method (sep, vi), a fresh Python
process fits a fixed number of minibatch steps and reports its peak resident set size (ru_maxrss):
  stream  — ``GPClassifier.fit`` on a standardised ``stream.ParquetSource`` (block-shuffled minibatches);
  memory  — the same Parquet file read into NumPy arrays first (the in-memory path), for contrast
            (first method only);
  predict — a short streamed fit on 1e5 rows, then ``predict_log_proba`` on the N-row file, streamed
            (its output [N, C] is the only part that grows with N).
Also the test error/NLL on the last 10 000 rows (after the fixed number of steps; not a converged fit).

Data: derived-feature Parquet files written once by ``scale_data.write_derived`` (row groups of 65 536).

    python benchmarks/perf/scale_memory.py                      # the full protocol
    python benchmarks/perf/scale_memory.py --sizes 100000 --iters 50 --methods vi
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))   # benchmarks/: _common
sys.path.insert(0, str(HERE.parents[1] / "src"))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0     # Linux: kB


def child(mode: str, method: str, n: int, args) -> dict:
    import numpy as np
    import torch
    torch.set_num_threads(1)
    from sgpc import stream
    from sgpc.estimator import GPClassifier
    import scale_data
    base = _rss_mb()
    paths = scale_data.write_derived(args.data_dir, [n])
    train, test = stream.ParquetSource(paths[n], "label"), stream.ParquetSource(paths["test"], "label")
    clf = GPClassifier(tol=None, method=method, n_inducing=args.M, batch_size=args.batch, max_iter=args.iters,
                       learning_rate=args.lr, random_state=0)
    t0 = time.perf_counter()
    if mode == "memory":
        import pyarrow.parquet as pq
        t = pq.read_table(paths[n])
        X = np.stack([t[c].to_numpy() for c in scale_data.NAMES], 1).astype(np.float64)
        y = t["label"].to_numpy(zero_copy_only=False)
        del t
        mean, std = X.mean(0), X.std(0)
        std = np.where(std > 0, std, 1.0)          # a prefix can hold one month only
        clf.fit((X - mean) / std, y)
    else:
        fit_n = n if mode == "stream" else min(n, 100_000)
        if fit_n != n:
            train = stream.ParquetSource(scale_data.write_derived(args.data_dir, [fit_n])[fit_n], "label")
        src, st = stream.standardized(train)
        mean, std = st.mean, st.std
        clf.fit(src)
    fit_s = time.perf_counter() - t0
    out = {"mode": mode, "method": method, "N": n, "rss_after_import_mb": base, "fit_seconds": fit_s,
           "ms_per_iter": 1e3 * clf.history_["time"][-1] / clf.n_iter_, "iterations": clf.n_iter_}
    if mode == "predict":
        t1 = time.perf_counter()
        lp = clf.predict_log_proba(stream.Standardized(stream.ParquetSource(paths[n], "label"), mean, std))
        out["predict_seconds"] = time.perf_counter() - t1
        out["predict_rows"] = int(lp.shape[0])
        out["output_mb"] = lp.nbytes / 2 ** 20
    lpt = clf.predict_log_proba(stream.Standardized(test, mean, std))
    yt = np.concatenate([b[1] for b in stream.iter_rows(test)])
    code = np.searchsorted(clf.classes_, yt)
    out["test_error"] = float(np.mean(lpt.argmax(1) != code))
    out["test_nll"] = float(-lpt[np.arange(len(code)), code].mean())
    out["peak_rss_mb"] = _rss_mb()
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 2_990_000])
    p.add_argument("--methods", nargs="+", default=["sep", "vi"])
    p.add_argument("--modes", nargs="+", default=["stream", "memory", "predict"])
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--M", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--data-dir", default=os.environ.get("SGPC_SCALE_DIR", "/tmp/sgpc_scale"))
    p.add_argument("--name", default="scale_memory", help="results/<name>.jsonl")
    p.add_argument("--child", nargs=3, metavar=("MODE", "METHOD", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], int(args.child[2]), args)))
        return
    import scale_data
    from _common import write
    scale_data.write_derived(args.data_dir, sorted(set(args.sizes) | {100_000}))
    runs = []
    for mode in args.modes:
        for method in args.methods if mode == "stream" else args.methods[:1]:
            for n in args.sizes:
                cmd = [sys.executable, __file__, "--child", mode, method, str(n), "--iters", str(args.iters),
                       "--batch", str(args.batch), "--M", str(args.M), "--lr", str(args.lr),
                       "--data-dir", args.data_dir]
                r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
                if r.returncode:
                    raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
                row = json.loads(r.stdout.strip().splitlines()[-1])
                row["loadavg"] = os.getloadavg()
                runs.append(row)
                print(json.dumps(row), flush=True)
                write(args.name, {"config": vars(args) | {"child": None}, "runs": runs})   # after every run


if __name__ == "__main__":
    main()
