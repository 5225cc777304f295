"""Roofline-style view of one VI step: measured time vs counted floating-point work at the measured matmul rate.

For M = 50 … 800 (C latent GPs, each with its own M inducing inputs; minibatch B; D features), one
training step (forward + backward + Adam) of ``vi.VI`` is timed (median of --steps after --warmup).
Its floating-point work is counted from the algorithm (forward; the backward pass of each dense
operation costs about twice its forward, so the step ≈ 3 × forward):
  kernel matrices   K_uu: 3·L·M²·D (squared distances by matmul) ; K_uf: 3·L·M·B·D
  Cholesky          L·M³/3
  triangular solve  A = L_K⁻¹K_uf: L·M²·B
  q(f) marginals    L̃ᵀA: L·M²·B (triangular product) ; means and variances: 3·L·M·B
  KL                L·(M³/3 + M²)  (log-determinant and trace of the whitened q)
  per-point terms   robust-max: B·S·C·c_Φ with S quadrature nodes and c_Φ ≈ 20 flops per log Φ
With --shared (GPflow's model: one Z [M,D] and one kernel for the C latent GPs) the kernel matrices, the
Cholesky of K_uu and the solve A = L_K⁻¹K_uf are formed once instead of L times; the marginals and the KL
stay per latent. The "hardware limit" is that count divided by the measured float64 matmul throughput (1024² GEMM,
one thread), i.e. the time if every flop ran at GEMM speed. torch.profiler on the M = 200 step says
which operators the time goes to.

    python benchmarks/perf/scale_roofline.py                    # M = 50 100 200 400 800, satimage and MNIST shapes
Writes results/<--name>.jsonl and results/<--name>.png (default name: scale_roofline).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))   # benchmarks/: _common
sys.path.insert(0, str(HERE.parents[1] / "src"))

from _common import RESULTS, write  # noqa: E402
from sgpc import kernels as K  # noqa: E402
from sgpc.likelihoods import RobustMax  # noqa: E402
from sgpc.sparse import SparseGP  # noqa: E402
from sgpc.vi import VI  # noqa: E402

SHAPES = {"satimage": dict(C=6, D=36, B=200), "mnist": dict(C=10, D=784, B=200)}


def gemm_gflops(n=1024, reps=5) -> float:
    a, b = torch.randn(n, n, dtype=torch.float64), torch.randn(n, n, dtype=torch.float64)
    a @ b
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    return 2 * n ** 3 / min(ts) / 1e9


def flops(M, C, D, B, S, shared: bool = False) -> dict:
    L = C
    Lk = 1 if shared else L                 # how many K_uu, K_uf, Cholesky factors and solves A = L_K⁻¹K_uf
    fwd = {"kernel_matrices": 3 * Lk * M * M * D + 3 * Lk * M * B * D,
           "cholesky": Lk * M ** 3 / 3,
           "triangular_solve": Lk * M * M * B,
           "marginals": L * M * M * B + 3 * L * M * B,
           "kl": L * (M ** 3 / 3 + M * M),
           "per_point": B * S * C * 20}
    return {k: 3 * v for k, v in fwd.items()}      # forward + backward (≈ 2 × forward)


def build(M, C, D, B, seed=0, shared: bool = False):
    g = torch.Generator().manual_seed(seed)
    N = max(4 * B, M)
    X = torch.randn(N, D, generator=g, dtype=torch.float64)
    y = torch.randint(0, C, (N,), generator=g)
    Z = X[:M].clone() if shared else X[:M].clone().expand(C, M, D).clone()
    model = SparseGP(K.RBF(D, C, noise=1e-3, shared=shared), RobustMax(C), Z).double()
    engine = VI()
    state = engine.init(model, X, y, g)
    opt = torch.optim.Adam(engine.trainable(model, state), lr=1e-3)

    def step():
        idx = torch.randint(0, N, (B,), generator=g)
        opt.zero_grad()
        loss = engine.loss(model, state, X[idx], y[idx], N) / N
        loss.backward()
        opt.step()
    return model, step


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--Ms", type=int, nargs="+", default=[50, 100, 200, 400, 800])
    p.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--shared", action="store_true", help="one Z and one kernel for all classes (GPflow's model)")
    p.add_argument("--name", default="scale_roofline")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    gf = gemm_gflops()
    rows, profiles = [], {}
    for shape in args.shapes:
        C, D, B = (SHAPES[shape][k] for k in ("C", "D", "B"))
        for M in args.Ms:
            model, step = build(M, C, D, B, shared=args.shared)
            S = model.likelihood.n_points
            for _ in range(args.warmup):
                step()
            ts = []
            for _ in range(args.steps):
                t0 = time.perf_counter()
                step()
                ts.append(time.perf_counter() - t0)
            f = flops(M, C, D, B, S, args.shared)
            total = sum(f.values())
            t = statistics.median(ts)
            rows.append({"shape": shape, "M": M, "C": C, "D": D, "B": B, "ms_per_iter": 1e3 * t,
                         "gflop": total / 1e9, "flops_by_part": f, "ms_at_gemm_rate": 1e3 * total / (gf * 1e9),
                         "fraction_of_gemm_rate": total / (gf * 1e9) / t, "loadavg": os.getloadavg()})
            print(rows[-1], flush=True)
            if M == 200:
                from torch.profiler import ProfilerActivity, profile
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    for _ in range(3):
                        step()
                ev = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
                tot = sum(e.self_cpu_time_total for e in ev)
                profiles[shape] = [{"op": e.key, "self_ms_per_step": e.self_cpu_time_total / 3e3,
                                    "share": e.self_cpu_time_total / tot} for e in ev[:12]]
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12), flush=True)
    write(args.name, {"config": vars(args), "gemm_gflops_float64": gf, "rows": rows, "profile_M200": profiles})
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for shape in args.shapes:
        r = [x for x in rows if x["shape"] == shape]
        ax.loglog([x["gflop"] for x in r], [x["ms_per_iter"] for x in r], "o-", label=f"{shape}: measured")
        ax.loglog([x["gflop"] for x in r], [x["ms_at_gemm_rate"] for x in r], "k--", lw=0.8)
        for x in r:
            ax.annotate(f"M={x['M']}", (x["gflop"], x["ms_per_iter"]), fontsize=6)
    ax.plot([], [], "k--", lw=0.8, label=f"at GEMM rate ({gf:.1f} GFLOP/s)")
    ax.set_xlabel("counted work per step (GFLOP)")
    ax.set_ylabel("time per step (ms)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{args.name}.png", dpi=110)


if __name__ == "__main__":
    main()
