"""Single-thread float64 matrix-product throughput of this machine, torch (MKL in the CPU wheel) and numpy
(OpenBLAS), at a square shape and at the shapes of the peer benchmark's steps.

The roofline section of docs/results-scale.md measured 108 GFLOP/s on 2026-11-24; the host behind this
2-core machine is not always the same one, so runs that compare speed across days should quote this first:

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/gemm_rate.py --name gemm_rate_<date>
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from _common import cpu_model, write

SHAPES = {"square-1024": (1024, 1024, 1024),
          "vi-shared satimage-200 (S^T A, classes folded)": (1200, 200, 200),
          "K_uf MNIST-200 (Z [10·200,784] times X^T)": (2000, 784, 200)}


def _median_seconds(f, repeats: int) -> float:
    f()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return sorted(times)[repeats // 2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=21)
    p.add_argument("--name", default="gemm_rate")
    args = p.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    rows = []
    for label, (m, k, n) in SHAPES.items():
        A = torch.randn(m, k, dtype=torch.float64, generator=g)
        B = torch.randn(k, n, dtype=torch.float64, generator=g)
        An, Bn = A.numpy(), B.numpy()
        flops = 2.0 * m * k * n
        row = {"shape": label, "m": m, "k": k, "n": n,
               "torch_gflops": flops / _median_seconds(lambda: A @ B, args.repeats) / 1e9,
               "numpy_gflops": flops / _median_seconds(lambda: An @ Bn, args.repeats) / 1e9}
        rows.append(row)
        print(f"{label:48s} torch {row['torch_gflops']:6.1f} GFLOP/s   numpy {row['numpy_gflops']:6.1f} GFLOP/s")
    write(args.name, {"cpu_model": cpu_model(), "rows": rows})


if __name__ == "__main__":
    main()
