"""Largest error of float32 kernel matrices against float64 on the same float32 inputs.

RBF, Matérn-½ and Matérn-5/2, D = 10, 50 standard-normal rows against every fifth row (copies, as random
inducing inputs are), at length-scale 0.1 and 1, and with every input offset by 1000. The script imports
the sgpc of the tree it sits in; for the version before the kernel-distance fix, copy it into a worktree:

    git worktree add /tmp/old cbb33f0 && cp benchmarks/kernel_float32.py /tmp/old/benchmarks/
    (cd /tmp/old/benchmarks && python kernel_float32.py --name kernel_float32_before)
    (cd benchmarks && python kernel_float32.py)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from _common import write  # noqa: E402
from sgpc import kernels as K  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="kernel_float32")
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    X64 = torch.randn(50, 10, generator=g, dtype=torch.float64)
    rows = []
    for name, nu in (("rbf", None), ("matern12", 0.5), ("matern52", 2.5)):
        for offset, ls in ((0.0, 0.1), (0.0, 1.0), (1000.0, 1.0)):
            kernel = K.RBF(10, 1, lengthscale=ls) if nu is None else K.Matern(10, 1, nu=nu, lengthscale=ls)
            X = (X64 + offset).float()
            Z = X[::5].clone()
            got = kernel.float()(X, Z)[0].double()
            want = kernel.double()(X.double(), Z.double())[0]
            err = float((got - want).abs().max().detach())
            rows.append({"kernel": name, "offset": offset, "lengthscale": ls, "max_abs_error": err})
            print(f"{name:9s} offset {offset:6g} lengthscale {ls:4g}: max |k32 - k64| = {err:.3g}")
    print("wrote", write(args.name, {"rows": rows, "sgpc": K.__file__}))


if __name__ == "__main__":
    main()
