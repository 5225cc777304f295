"""Where a CPU minibatch step's time goes, by operator and input shape (torch.profiler), at a peer shape.

The step of ``vi_step.py`` (k-means Z, ℓ = √D, fused Adam, B = 200; ``--method`` any minibatch method): 5
warm-up steps, then --steps profiled; records ms per step (profiled) and the --top (operator, shapes) rows
by own CPU time, with calls per step. Used for the shares quoted in docs/results-scale.md, "Faster steps".

    OMP_NUM_THREADS=1 python benchmarks/perf/step_profile.py --set mnist --m 200 --method sep --name step_profile_mnist_sep
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import write
from peers_throughput import _data, _inducing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", default="mnist")
    ap.add_argument("--m", type=int, default=200)
    ap.add_argument("--method", default="vi")
    ap.add_argument("--shared", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--name", default="step_profile")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from sgpc.estimator import GPClassifier
    from sgpc import fitting
    X, y, _, _, C = _data(args.set)
    est = GPClassifier(tol=None, method=args.method, n_inducing=args.m, batch_size=200,
                       inducing_params={"shared": args.shared}, kernel_params={"shared_kernel": args.shared})
    D = X.shape[1]
    model = fitting.build_model(fitting.settings(est), D, C, _inducing(X, args.m), math.sqrt(D) * np.ones(D))
    engine = est._make_engine()
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    g = torch.Generator().manual_seed(0)
    box = {"state": engine.init(model, Xt, yt, g)}
    opt = torch.optim.Adam(engine.trainable(model, box["state"]), lr=0.01, fused=True)
    N = len(X)

    def step():
        idx = torch.randint(0, N, (200,), generator=g)
        xb, yb = Xt[idx], yt[idx]
        box["state"] = engine.update(model, box["state"], xb, yb, N, None)
        opt.zero_grad()
        engine.loss(model, box["state"], xb, yb, N).backward()
        opt.step()

    for _ in range(5):
        step()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(args.steps):
            step()
    ms = 1e3 * (time.perf_counter() - t0) / args.steps
    rows = sorted(prof.key_averages(group_by_input_shape=True), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in rows)
    top = [{"op": e.key, "shapes": str(e.input_shapes), "calls_per_step": e.count / args.steps,
            "share": e.self_cpu_time_total / total} for e in rows[:args.top]]
    print(f"{args.method} {args.set} M={args.m}: {ms:.1f} ms/step (profiled)")
    for r in top:
        print(f"  {100 * r['share']:5.1f}%  {r['calls_per_step']:5.1f}/step  {r['op']:28s} {r['shapes'][:70]}")
    write(args.name, {"config": vars(args), "ms_per_step_profiled": ms, "top": top})


if __name__ == "__main__":
    main()
