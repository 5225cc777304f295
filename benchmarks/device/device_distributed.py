"""Data-parallel training on an accelerator: 2 processes on CUDA tensors against 1 process.

tests/test_distributed.py shows, on the CPU with gloo, that a 2-process fit equals the 1-process fit
on the same global minibatches. This script makes the same comparison with the model on ``--device``
(each rank on ``cuda:(rank mod number of GPUs)``) for every backend in ``--backends``:

* ``gloo``: gloo reducing CUDA tensors (it copies them through the host);
* ``nccl``: NVIDIA's collectives, the backend for GPUs. NCCL refuses two ranks on one GPU, so on a
  one-GPU machine the 2-process run is expected to fail: the error is recorded as found, and a
  1-process NCCL run still shows that every collective of a fit runs through NCCL on CUDA tensors;
* ``cpu:gloo,cuda:nccl``: what ``distributed.init()`` picks where CUDA is available.

For each (backend, nproc, method) the largest relative difference of any parameter, the posterior
and the objective trace from the 1-process, no-communicator fit on the same device is recorded, with
``match`` (rtol 1e-9, atol 1e-11, as the CPU test) or the error.

    python benchmarks/device/device_distributed.py --device cuda
    python benchmarks/device/device_distributed.py --device cpu --backends gloo      # the CPU check, as the test

Writes results/<--out>.jsonl.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import write
from sgpc import distributed
from sgpc.estimator import GPClassifier


def _data(n=90, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] > 0.3, 2, np.where(X[:, 1] > 0.0, 1, 0))
    return X, y


def _rank_device(device: str, rank: int) -> str:
    if device.startswith("cuda") and torch.cuda.device_count() > 0:
        return f"cuda:{rank % torch.cuda.device_count()}"
    return device


def fit(comm, method: str, device: str) -> dict:
    """One fit (batch 31 over 2 ranks: unequal shards); every parameter and the trace, on the CPU."""
    X, y = _data()
    dev = _rank_device(device, 0 if comm is None else comm.rank)
    est = GPClassifier(method=method, n_inducing=5, batch_size=31, max_iter=15, learning_rate=0.05,
                       random_state=0, inducing_params={"init": "random"}, device=dev).fit(X, y, comm=comm)
    out = {k: v.detach().cpu().clone() for k, v in est.model_.state_dict().items()}
    out["q_mean"], out["q_chol"] = est.posterior_.mean.cpu().clone(), est.posterior_.chol.cpu().clone()
    out["objective"] = torch.tensor(est.history_["objective"], dtype=torch.float64)
    return out


def fits(comm, methods, device):
    return [fit(comm, m, device) for m in methods]


def compare(a: dict, b: dict) -> tuple[float, bool]:
    worst, ok = 0.0, a.keys() == b.keys()
    for k in b:
        x, y = a[k].double(), b[k].double()
        worst = max(worst, float(((x - y).abs() / y.abs().clamp_min(1e-300)).max()) if y.numel() else 0.0)
        ok = ok and torch.allclose(x, y, rtol=1e-9, atol=1e-11)
    return worst, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--backends", nargs="+", default=["gloo", "nccl", "cpu:gloo,cuda:nccl"])
    ap.add_argument("--methods", nargs="+", default=["vi", "sep", "apep"])
    ap.add_argument("--out", default="device_distributed")
    args = ap.parse_args()
    info = {"torch": torch.__version__, "cuda_devices": torch.cuda.device_count(),
            "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
            "nccl": torch.distributed.is_nccl_available(), "gloo": torch.distributed.is_gloo_available()}
    print(info, flush=True)
    single = fits(None, args.methods, args.device)
    rows = []
    for backend in args.backends:
        for nproc in ((2, 1) if "nccl" in backend else (2,)):
            t0 = time.perf_counter()
            try:
                ranks = distributed.launch(fits, nproc, args.methods, args.device, backend=backend)
            except Exception as exc:           # a refused backend is a finding, recorded with its message
                rows.append({"backend": backend, "nproc": nproc, "error": f"{type(exc).__name__}: {str(exc)[-1500:]}"})
                print(rows[-1], flush=True)
                continue
            for i, method in enumerate(args.methods):
                for r, res in enumerate(ranks):
                    worst, ok = compare(res[i], single[i])
                    rows.append({"backend": backend, "nproc": nproc, "method": method, "rank": r,
                                 "max_rel_diff": worst, "match": ok, "seconds": time.perf_counter() - t0})
                    print(rows[-1], flush=True)
            write(args.out, {"config": vars(args), "info": info, "runs": rows})
    print("wrote", write(args.out, {"config": vars(args), "info": info, "runs": rows}))


if __name__ == "__main__":
    main()
