"""Largest error of float32 kernel matrices against float64 on the same float32 inputs.

RBF, Matérn-½ and Matérn-5/2, D = 10, 50 standard-normal rows against every fifth row (copies, as random
inducing inputs are), at length-scale 0.1 and 1, and with every input offset by 1000; and MNIST-shaped inputs
(D = 784, uniform in [0, 1], ℓ = 7), where a float32 expansion is accurate enough to skip the float64 one
("widened" says which path ran). --time also times K_uu and K_uf with gradients for per-latent inducing inputs
[10, 200, 784] and a batch of 200 (float32, 1 thread), on the path chosen and forced to float64. The script imports
the sgpc of the tree it sits in; for the version before the kernel-distance fix, copy it into a worktree:

    git worktree add /tmp/old cbb33f0 && cp benchmarks/kernel_float32.py /tmp/old/benchmarks/
    (cd /tmp/old/benchmarks && python kernel_float32.py --name kernel_float32_before)
    (python kernel_float32.py)
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
    ap.add_argument("--time", action="store_true", help="also time the MNIST-shaped per-latent kernel")
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
            rows.append({"kernel": name, "offset": offset, "lengthscale": ls, "max_abs_error": err,
                         "widened": _widened(kernel.float(), X - Z.mean(0), Z - Z.mean(0))})
            print(f"{name:9s} offset {offset:6g} lengthscale {ls:4g}: max |k32 - k64| = {err:.3g}")
    X = torch.rand(200, 784, generator=g)
    Z = torch.rand(10, 50, 784, generator=g)
    Z[:, :5] = X[:5]                                               # a few copies, as initial inducing inputs
    for name, nu in (("rbf", None), ("matern12", 0.5), ("matern52", 2.5)):
        kernel = K.RBF(784, 10, lengthscale=7.0) if nu is None else K.Matern(784, 10, nu=nu, lengthscale=7.0)
        for what, (A, B) in (("K_uf", (Z, X)), ("K_uu", (Z, Z))):
            got = kernel.float()(A, B if B is not A else A).double()
            want = kernel.double()(A.double(), B.double() if B is not A else A.double())
            err = float((got - want).abs().max().detach())
            centre = B.mean(-2, keepdim=True)
            rows.append({"kernel": name, "inputs": f"mnist-shaped {what}", "lengthscale": 7.0, "max_abs_error": err,
                         "widened": _widened(kernel.float(), A - centre, B - centre)})
            print(f"{name:9s} mnist-shaped {what}: max |k32 - k64| = {err:.3g}  widened: {rows[-1]['widened']}")
    out = {"rows": rows, "sgpc": K.__file__}
    if args.time:
        out["timing"] = _time_per_latent()
    print("wrote", write(args.name, out))


def _widened(kernel, X1, X2) -> bool | None:
    """Whether the float32 kernel expands in float64 here (None for a tree without the choice)."""
    if not hasattr(kernel, "_narrow_rounds"):
        return None
    return bool(kernel._narrow_rounds(kernel.scaled_sqnorm(X1), kernel.scaled_sqnorm(X2)))


def _time_per_latent(repeats: int = 20) -> dict:
    """ms for K_uu + K_uf with gradients w.r.t. Z, per-latent Z [10,200,784], B = 200, float32."""
    import time
    g = torch.Generator().manual_seed(1)
    X = torch.rand(200, 784, generator=g)
    Z = torch.rand(10, 200, 784, generator=g).requires_grad_(True)
    kernel = K.RBF(784, 10, lengthscale=7.0, dtype=torch.float32)
    result = {}
    for path, tol in (("as chosen", None), ("forced float64", 0.0)):
        if tol is not None:
            kernel._d2_tolerance = tol
        def step():
            (kernel(Z, Z).sum() + kernel(Z, X).sum()).backward()
        for _ in range(3):
            step()
        t0 = time.perf_counter()
        for _ in range(repeats):
            step()
        result[path] = 1e3 * (time.perf_counter() - t0) / repeats
        print(f"per-latent K_uu + K_uf with gradients, {path}: {result[path]:.1f} ms")
    return result


if __name__ == "__main__":
    main()
