"""Where the time of one minibatch step goes on an accelerator: torch.profiler over the MNIST-shaped step.

The step is ``device_check.mnist_shaped_step`` (M = 200, C = 10, D = 784, B = 200, or --m / --b: closed-form
update, forward, backward, Adam). For each method and dtype, after --warmup steps, --steps steps run under
``torch.profiler`` and the JSON records per step:

* wall milliseconds (profiled, so a little above the plain timing of device_check.py);
* the device's busy time (the sum of the kernels' durations, and the same summed over the operators that
  launched them) and the number of kernels launched, and of aten operators dispatched (nested ones too);
* host synchronisations (cudaStreamSynchronize / cudaDeviceSynchronize / cudaMemcpy device-to-host calls);
* the 12 operators with the most own device time and the 12 with the most own host time.

A step whose device busy time is a small part of its wall time is bound by the host issuing operators
(one launch each), not by arithmetic; then fewer, larger operators (or CUDA graphs) are the cure and
float32 cannot help.

    python benchmarks/perf/gpu_profile.py --device cuda
    python benchmarks/perf/gpu_profile.py --device cpu --steps 2 --warmup 1        # the script itself, on a CPU

Writes results/<--out>.jsonl.
"""
from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "device"))   # benchmarks/device/: device_check
from _common import write
from device_check import _sync, mnist_shaped_step

_SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync", "cudaMemcpy")


def _own_device_us(e) -> float:
    return float(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0)))


def profile_one(method: str, dtype: str, device: str, steps: int, warmup: int, M: int = 200, B: int = 200) -> dict:
    step = mnist_shaped_step(method, getattr(torch, dtype), device, M, B)
    for _ in range(warmup):
        step()
    _sync(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(device)
        wall = time.perf_counter() - t0
    table = prof.key_averages()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(e.time_range.elapsed_us() for e in kernels)
    own_dev_us = sum(_own_device_us(e) for e in table if e.device_type == torch.autograd.DeviceType.CPU)
    host_api = {e.key: e.count for e in table if e.key in _SYNC_CALLS}
    top_dev = sorted(table, key=_own_device_us, reverse=True)[:12]
    top_host = sorted(table, key=lambda e: e.self_cpu_time_total, reverse=True)[:12]
    return {"method": method, "dtype": dtype, "device": device, "steps": steps, "M": M, "B": B,
            "wall_ms_per_step": 1e3 * wall / steps,
            "device_busy_ms_per_step": busy_us / 1e3 / steps,
            "ops_own_device_ms_per_step": own_dev_us / 1e3 / steps,     # the same busy time, seen from the operators
            "kernels_per_step": len(kernels) / steps,
            "aten_ops_per_step": sum(e.count for e in table if e.key.startswith("aten::")) / steps,
            "host_sync_calls_per_step": {k: v / steps for k, v in host_api.items()},
            "top_own_device_ms_per_step": [(e.key, _own_device_us(e) / 1e3 / steps, e.count / steps) for e in top_dev
                                           if _own_device_us(e) > 0],
            "top_own_host_ms_per_step": [(e.key, e.self_cpu_time_total / 1e3 / steps, e.count / steps)
                                         for e in top_host]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--methods", nargs="+", default=["vi", "sep"], choices=["vi", "sep"])
    ap.add_argument("--dtypes", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    ap.add_argument("--m", type=int, default=200, help="inducing points per class")
    ap.add_argument("--b", type=int, default=200, help="minibatch size")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default="gpu_profile")
    args = ap.parse_args()
    rows = []
    for method in args.methods:
        for dt in args.dtypes:
            r = profile_one(method, dt, args.device, args.steps, args.warmup, args.m, args.b)
            rows.append(r)
            print({k: r[k] for k in ("method", "dtype", "wall_ms_per_step", "device_busy_ms_per_step",
                                     "ops_own_device_ms_per_step", "kernels_per_step", "aten_ops_per_step", "host_sync_calls_per_step")}, flush=True)
            for name, ms, n in r["top_own_device_ms_per_step"][:6] + r["top_own_host_ms_per_step"][:6]:
                print(f"    {name[:60]:60s} {ms:8.3f} ms  x{n:.1f}", flush=True)
            write(args.out, {"config": vars(args), "runs": rows})
    print("wrote", write(args.out, {"config": vars(args), "runs": rows}))


if __name__ == "__main__":
    main()
