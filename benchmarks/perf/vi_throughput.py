"""Time per iteration of the VI step (forward + backward + Adam step).

Grid: M in {50, 100, 200, 400}, C = 10, B = 200, D in {16, 784}, float64 and float32, plus the two
settings the issue quotes for GPyTorch/GPflow (satimage-shaped: M=100, C=6, D=36; MNIST-shaped:
M=200, C=10, D=784). Inputs are random (timing does not depend on the values). Each cell runs
`--warmup` untimed steps, then `--steps` timed steps; the median step time is reported.

    python benchmarks/perf/vi_throughput.py [--steps 30] [--threads 2] [--quick]

Writes results/vi_throughput.jsonl and results/vi_throughput.png.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import write
from sgpc import kernels as K
from sgpc.likelihoods import RobustMax
from sgpc.sparse import SparseGP
from sgpc.vi import VI


def time_cell(M, C, D, B, dtype, shared_inducing, steps, warmup, seed=0):
    g = torch.Generator().manual_seed(seed)
    N = max(4 * B, M)
    X = torch.randn(N, D, generator=g, dtype=dtype)
    y = torch.randint(0, C, (N,), generator=g)
    Z = X[:M].clone() if shared_inducing else X[:M].clone().expand(C, M, D).clone()
    model = SparseGP(K.RBF(D, C, noise=1e-3, dtype=dtype), RobustMax(C), Z).to(dtype)
    engine = VI()
    state = engine.init(model, X, y, g)
    opt = torch.optim.Adam(engine.trainable(model, state), lr=1e-3)
    times = []
    for step in range(warmup + steps):
        idx = torch.randint(0, N, (B,), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = engine.loss(model, state, X[idx], y[idx], N) / N
        loss.backward()
        opt.step()
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="M in {50, 100} only")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    Ms = (50, 100) if args.quick else (50, 100, 200, 400)
    cells = [(M, 10, D, 200, dt, sh) for D in (16, 784) for M in Ms for dt in ("float64", "float32")
             for sh in (False, True)]
    cells += [(100, 6, 36, 200, dt, sh) for dt in ("float64", "float32") for sh in (False, True)]
    cells += [(200, 10, 784, 200, dt, sh) for dt in ("float64", "float32") for sh in (False, True)]
    for M, C, D, B, dt, shared in cells:
        med, best = time_cell(M, C, D, B, getattr(torch, dt), shared, args.steps, args.warmup)
        row = dict(M=M, C=C, D=D, B=B, dtype=dt, shared_inducing=shared, ms_per_iter=1e3 * med, ms_best=1e3 * best)
        rows.append(row)
        print(f"M={M:4d} C={C:2d} D={D:4d} B={B} {dt:7s} {'shared Z' if shared else 'per-latent Z'}: "
              f"{1e3 * med:8.2f} ms/iter (best {1e3 * best:.2f})", flush=True)
    reference = {"note": "numbers quoted in issue 2 for this 2-core machine (not re-measured here)",
                 "gpytorch_1.15.2_svgp_softmax": {"satimage_M100_C6_D36_B200_ms": 13, "mnist_M200_C10_D784_B200_ms": 110},
                 "gpflow_2.11.2_svgp_robustmax": {"satimage_M100_C6_D36_B200_ms": 13, "mnist_M200_C10_D784_B200_ms": 110}}
    path = write("vi_throughput", {"config": vars(args), "rows": rows, "reference": reference})
    print("wrote", path)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for D in (16, 784):
            for dt in ("float64", "float32"):
                pts = [(r["M"], r["ms_per_iter"]) for r in rows
                       if r["D"] == D and r["dtype"] == dt and r["C"] == 10 and not r["shared_inducing"]
                       and r["M"] in Ms]
                pts = sorted(set(pts))
                ax.loglog(*zip(*pts), marker="o", label=f"D={D} {dt}")
        ax.set_xlabel("M (inducing points per latent)")
        ax.set_ylabel("ms / iteration (C=10, B=200)")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(path.with_suffix(".png"), dpi=80)
    except ImportError:
        print("matplotlib not installed: figure skipped (pip install sgpc[plot])")


if __name__ == "__main__":
    main()
