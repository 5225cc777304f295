"""Accuracy and cost of the GPCsm prediction rules (additive-noise-gpc eq. 26).

E_q[softmax(f*)] for independent Gaussian marginals has no closed form. Two rules of ``additive.Softmax``:
seeded Monte Carlo ("mc", the paper's estimate) and scrambled-Sobol quasi-Monte Carlo with a fixed
seed ("qmc", deterministic), each with S points. Both are measured against a 10⁶-sample Monte Carlo
reference (different seed); its own standard error is reported, since errors below it cannot be resolved.

Marginals are drawn like those of a fitted model: means N(0, 2²), variances U(0.05, 3).

    python benchmarks/softmax_predict.py [--n-points 200] [--classes 3 10 26] [--reference 1000000]

Writes results/softmax_predict.json.
"""
from __future__ import annotations

import argparse
import math
import time

import torch

from _common import write
from sgpc.likelihoods import Softmax


def marginals(N, C, seed):
    g = torch.Generator().manual_seed(seed)
    return 2.0 * torch.randn(N, C, generator=g, dtype=torch.float64), \
        0.05 + 2.95 * torch.rand(N, C, generator=g, dtype=torch.float64)


def timed(lik, mean, var, repeats=3):
    best, out = math.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = lik.predict_log_proba(mean, var).exp()
        best = min(best, time.perf_counter() - t0)
    return out, best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-points", type=int, default=200, help="test points N per class count")
    ap.add_argument("--classes", type=int, nargs="+", default=[3, 10, 26])
    ap.add_argument("--samples", type=int, nargs="+", default=[64, 256, 1024, 4096])
    ap.add_argument("--reference", type=int, default=1_000_000)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for C in args.classes:
        mean, var = marginals(args.n_points, C, seed=C)
        ref_lik = Softmax(C, n_samples_predict=args.reference, predict_rule="mc", seed=999)
        t0 = time.perf_counter()
        ref = ref_lik.predict_log_proba(mean, var).exp()
        t_ref = time.perf_counter() - t0
        # standard error of the reference: per-sample sd of softmax(f) over 20 000 draws / √reference
        T = Softmax(C, n_samples_predict=20000, predict_rule="mc", seed=5).normal_points(C)
        sd = torch.stack([torch.softmax(mean + var.sqrt() * t, -1) for t in T[:2000]]).std(0)
        ref_se = float((sd / math.sqrt(args.reference)).max())
        print(f"C={C}: reference {args.reference} samples in {t_ref:.1f}s, max standard error {ref_se:.2e}")
        for S in args.samples:
            for rule in ("mc", "qmc"):
                P, t = timed(Softmax(C, n_samples_predict=S, predict_rule=rule), mean, var)
                err = (P - ref).abs()
                rows.append(dict(C=C, S=S, rule=rule, max_abs_error=float(err.max()),
                                 mean_abs_error=float(err.mean()), seconds=t, reference_se_max=ref_se))
                print(f"  {rule:3s} S={S:5d}: max |err| {err.max():.2e}, mean |err| {err.mean():.2e}, {t * 1e3:.1f} ms")
    path = write("softmax_predict", {"config": vars(args), "rows": rows})
    print("wrote", path)


if __name__ == "__main__":
    main()
