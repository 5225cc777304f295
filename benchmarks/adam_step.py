"""Milliseconds per ``optimizer.step()`` of torch's Adam implementations on MNIST-shaped parameters, and how
far apart their parameters end.

The parameters of a per-latent MNIST model at M = 200 (Z [10,200,784], length-scales [10,784], and a
[10,200,200] matrix), float64, one thread; the same gradients are fed to each implementation (four random
gradients in turn); the median over --steps steps. ``train.fit`` uses ``fused=True``; torch's CPU default is
the per-parameter loop, ``foreach`` one multi-tensor operator per stage.

    OMP_NUM_THREADS=1 python benchmarks/adam_step.py --name adam_step
"""
from __future__ import annotations

import argparse
import time

import torch

from _common import write

SHAPES = [(10, 200, 784), (10, 784), (10, 200, 200)]
KINDS = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def run(kind: str, steps: int) -> tuple[float, list[torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(s, dtype=torch.float64, generator=g).requires_grad_() for s in SHAPES]
    grads = [[torch.randn(s, dtype=torch.float64, generator=g) for s in SHAPES] for _ in range(4)]
    opt = torch.optim.Adam(params, lr=0.01, **KINDS[kind])
    times = []
    for i in range(steps):
        for p, gr in zip(params, grads[i % 4]):
            p.grad = gr
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    return 1e3 * sorted(times)[steps // 2], [p.detach() for p in params]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--name", default="adam_step")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out, final = {}, {}
    for rep in ("a", "b"):                          # each implementation twice, alternated
        for kind in KINDS:
            ms, final[kind] = run(kind, args.steps)
            out.setdefault(kind, []).append(ms)
    diff = {k: max(float((a - b).abs().max()) for a, b in zip(final[k], final["loop"])) for k in KINDS}
    for k in KINDS:
        print(f"{k:8s} {out[k][0]:6.2f} / {out[k][1]:6.2f} ms per step; max |param − loop's| after "
              f"{args.steps} steps: {diff[k]:.1e}")
    write(args.name, {"config": vars(args), "shapes": SHAPES, "ms_per_step": out, "max_abs_diff_from_loop": diff})


if __name__ == "__main__":
    main()
