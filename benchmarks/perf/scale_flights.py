"""The airline experiment on flights-3m: test error and NLL vs wall-clock time for sep and vi (streamed
from Parquet) and multinomial logistic regression (scikit-learn, in memory); time per epoch; peak memory;
and the same fit with 2 data-parallel processes (short).

Data: ``scale_data.write_derived`` — features of ``datasets`` (month, day of month, day of week,
departure time, distance, origin and destination codes), 3 classes from the delay (late > 5 min,
early < −5 min, else on time), the first 2 990 000 rows for training and the last 10 000 as test;
features standardised with statistics from one streaming pass over the training file.
Each run is a fresh process (its peak RSS is the run's); the GP fits record test error/NLL every
--eval-every steps (evaluation time excluded from the training clock).

    python benchmarks/perf/scale_flights.py                          # --iters 20000 (≈ 7 epochs at B = 1024)
    python benchmarks/perf/scale_flights.py --iters 600 --eval-every 100 --nproc-iters 100
    python benchmarks/perf/scale_flights.py --methods vi:step vi:probit vi:logit vi:softmax vi --nproc-iters 0 \
        --skip-logreg --in-memory --name additive_flights        # additive-noise-gpc Fig. 3 protocol
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

N_TRAIN = 2_990_000


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _sources(args):
    import numpy as np
    from sgpc import stream
    import scale_data
    paths = scale_data.write_derived(args.data_dir, [N_TRAIN])
    train, st = stream.standardized(stream.ParquetSource(paths[N_TRAIN], "label"))
    test = stream.Standardized(stream.ParquetSource(paths["test"], "label"), st.mean, st.std)
    Xt, yt = map(np.concatenate, zip(*stream.iter_rows(test)))
    return train, Xt, yt, paths


def _gp(kind, args, iters, comm=None):
    import numpy as np
    from sgpc import stream
    from sgpc.estimator import GPClassifier
    train, Xt, yt, _ = _sources(args)
    method, _, likelihood = kind.partition(":")          # e.g. "vi:softmax" (additive-noise-gpc Fig. 3)
    clf = GPClassifier(tol=None, method=method, likelihood=likelihood or "robustmax", n_inducing=args.M,
                       batch_size=args.batch, max_iter=iters, learning_rate=args.lr, random_state=0)
    t0 = time.perf_counter()
    if args.in_memory:      # i.i.d. minibatches from arrays (the file is in time order; blocks are months)
        X, y = map(np.concatenate, zip(*stream.iter_rows(train)))
        clf.fit(X, y, X_val=Xt, y_val=yt, eval_every=args.eval_every, comm=comm)
    else:
        clf.fit(train, X_val=Xt, y_val=yt, eval_every=args.eval_every, comm=comm)
    h = clf.history_
    ms = 1e3 * h["time"][-1] / clf.n_iter_
    return {"method": kind, "iterations": clf.n_iter_, "ms_per_iter": ms,
            "epoch_seconds": ms / 1e3 * N_TRAIN / args.batch, "wall_seconds": time.perf_counter() - t0,
            "curve": h["validation"], "final_error": h["validation"][-1]["error"],
            "final_nll": h["validation"][-1]["nll"], "peak_rss_mb": _rss_mb(),
            "world_size": 1 if comm is None else comm.world_size}


def _gp_rank(comm, method, args, iters):
    import torch
    torch.set_num_threads(1)
    return _gp(method, args, iters, comm)


def _logreg(args):
    import numpy as np
    import pyarrow.parquet as pq
    from sklearn.linear_model import LogisticRegression
    import scale_data
    _, Xt, yt, paths = _sources(args)
    t = pq.read_table(paths[N_TRAIN])
    X = np.stack([t[c].to_numpy() for c in scale_data.NAMES], 1).astype(np.float64)
    y = t["label"].to_numpy(zero_copy_only=False)
    del t
    mean, std = X.mean(0), X.std(0)
    std = np.where(std > 0, std, 1.0)
    t0 = time.perf_counter()
    lr = LogisticRegression(max_iter=args.logreg_iter).fit((X - mean) / std, y)
    secs = time.perf_counter() - t0
    lp = lr.predict_log_proba(Xt)
    code = np.searchsorted(lr.classes_, yt)
    return {"method": "logistic-regression", "fit_seconds": secs, "iterations": int(np.max(lr.n_iter_)),
            "final_error": float(np.mean(lp.argmax(1) != code)),
            "final_nll": float(-lp[np.arange(len(code)), code].mean()), "peak_rss_mb": _rss_mb(),
            "class_frequencies": {str(c): float(np.mean(y == c)) for c in lr.classes_}}


def child(kind, args):
    import torch
    torch.set_num_threads(1)
    if kind == "logreg":
        return _logreg(args)
    if kind.startswith("dp-"):
        from sgpc import distributed
        rows = distributed.launch(_gp_rank, 2, kind[3:], args, args.nproc_iters)
        out = rows[0]
        out["peak_rss_mb_parent"] = _rss_mb()
        return out
    return _gp(kind, args, args.iters)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=20000)
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--nproc-iters", type=int, default=1000, help="steps of the 2-process runs (0: skip)")
    p.add_argument("--methods", nargs="+", default=["sep", "vi"],
                   help='method, or method:likelihood (e.g. vi:step vi:probit vi:logit vi:softmax)')
    p.add_argument("--skip-logreg", action="store_true", help="no logistic-regression baseline")
    p.add_argument("--in-memory", action="store_true",
                   help="read the (standardised) training file into arrays and fit with i.i.d. minibatches; by "
                        "default the fit streams block-shuffled minibatches, and the file is in time order")
    p.add_argument("--name", default="scale_flights", help="results/<name>.jsonl and .png")
    p.add_argument("--M", type=int, default=200)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--logreg-iter", type=int, default=300)
    p.add_argument("--data-dir", default=os.environ.get("SGPC_SCALE_DIR", "/tmp/sgpc_scale"))
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args)))
        return
    from _common import write
    kinds = ([] if args.skip_logreg else ["logreg"]) + [*args.methods] + ([f"dp-{m}" for m in args.methods] if args.nproc_iters else [])
    runs = []
    for kind in kinds:
        cmd = [sys.executable, __file__, "--child", kind] + [a for a in (argv if argv is not None else sys.argv[1:])]
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if r.returncode:
            raise RuntimeError(f"{kind} failed:\n{r.stderr[-3000:]}")
        row = json.loads(r.stdout.strip().splitlines()[-1])
        row["kind"], row["loadavg"] = kind, os.getloadavg()
        runs.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
    write(args.name, {"config": {k: v for k, v in vars(args).items() if k != "child"}, "runs": runs})
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    from _common import RESULTS
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for row in runs:
        if "curve" in row:
            t = [c["time"] for c in row["curve"]]
            for ax, key in zip(axes, ("error", "nll")):
                ax.plot(t, [c[key] for c in row["curve"]], "o-", ms=3, label=row["kind"])
        else:
            for ax, key in zip(axes, ("error", "nll")):
                ax.axhline(row[f"final_{key}"], color="k", ls="--", lw=0.8, label="logistic regression")
    for ax, key in zip(axes, ("test error", "test NLL")):
        ax.set_xlabel("training time (s)")
        ax.set_ylabel(key)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{args.name}.png", dpi=110)


if __name__ == "__main__":
    main()
