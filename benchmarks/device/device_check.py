"""Device check: every method fitted on the CPU and on an accelerator from the same seed, compared.

For each method (and each additive-noise likelihood) a ``GPClassifier`` is fitted twice on the same
standardised data with the same ``random_state`` — ``device="cpu"`` and ``device=--device`` — in
float64, and the largest absolute difference of ``predict_proba`` on held-out rows is recorded, with
both test errors. The device model is saved and loaded back on the CPU (``GPClassifier.load``), and
its probabilities must not change. A streamed ``fit`` (``stream.NpySource``) runs on the device.
Then the time of one minibatch step (forward + backward + Adam; SEP: its closed-form update too) at
the MNIST shape (M = 200, C = 10, D = 784, B = 200), float64 and float32, on the device.

    python benchmarks/device/device_check.py --device cuda

Writes results/<--out>.jsonl. Differences of ~1e-10 are the expected floating-point drift of two
implementations of the same algebra over a few dozen optimiser steps; a broken device path shows up
as an exception or an O(1) difference.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

import numpy as np
import torch
from sklearn.datasets import load_wine
from sklearn.preprocessing import StandardScaler

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import write
from sgpc import GPClassifier, stream
from sgpc import kernels as K
from sgpc.likelihoods import RobustMax
from sgpc.sep import SEP
from sgpc.sparse import SparseGP
from sgpc.vi import VI

CASES = [
    dict(method="vi"), dict(method="vi", likelihood="step"), dict(method="vi", likelihood="probit"),
    dict(method="vi", likelihood="logit"), dict(method="vi", likelihood="softmax"),
    dict(method="ep", optimizer="adaptive", learning_rate=0.05), dict(method="sep", optimizer="adaptive", learning_rate=0.05),
    dict(method="pep", method_params={"alpha": 0.5}, optimizer="adaptive", learning_rate=0.05),
    dict(method="apep", method_params={"alpha": 0.5}), dict(method="arpep", method_params={"alpha": 0.5}),
    dict(method="rpapep", method_params={"alpha": 0.5}), dict(method="bsvm"),
    dict(method="gfitc", optimizer="lbfgs", learning_rate=1.0, max_iter=5),
    dict(method="rmgpc", optimizer="lbfgs", learning_rate=1.0, max_iter=5),
    dict(method="smgpc", optimizer="lbfgs", learning_rate=1.0, max_iter=5),
]


def _data():
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(X))
    return X[idx[:140]], y[idx[:140]], X[idx[140:]], y[idx[140:]]


def compare(case: dict, device: str) -> dict:
    Xtr, ytr, Xte, yte = _data()
    base = dict(n_inducing=15, max_iter=30, learning_rate=0.05, random_state=0) | case
    out = {"case": case}
    probs = {}
    for dev in ("cpu", device):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf = GPClassifier(**base, device=dev).fit(Xtr, ytr)
        probs[dev] = clf.predict_proba(Xte)
        out[f"error_{dev}"] = float((clf.classes_[probs[dev].argmax(1)] != yte).mean())
    out["max_abs_diff_proba"] = float(np.abs(probs["cpu"] - probs[device]).max())
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.pt")
        clf.save(path)
        loaded = GPClassifier.load(path, device="cpu")
        out["load_on_cpu_max_abs_diff"] = float(np.abs(loaded.predict_proba(Xte) - probs[device]).max())
    return out


def streamed(device: str) -> dict:
    Xtr, ytr, Xte, yte = _data()
    src = stream.NpySource(Xtr, ytr, block_rows=32)
    clf = GPClassifier(method="sep", n_inducing=15, batch_size=32, max_iter=40, learning_rate=0.05,
                       random_state=0, device=device).fit(src)
    return {"streamed_sep_error": float((clf.predict(Xte) != yte).mean())}


def mnist_shaped_step(method: str, dtype: torch.dtype, device: str, M: int = 200, B: int = 200):
    """A ``step()`` that runs one minibatch step (closed-form update, forward, backward, Adam) of ``method``
    ("vi" or "sep") on a model of the MNIST shape (C = 10, D = 784; M = 200, B = 200 unless given; random data)."""
    C, D = 10, 784
    g = torch.Generator().manual_seed(0)
    N = 4 * B
    X = torch.randn(N, D, generator=g, dtype=dtype).to(device)
    y = torch.randint(0, C, (N,), generator=g).to(device)
    model = SparseGP(K.RBF(D, C, noise=1e-3, dtype=dtype), RobustMax(C), X[:M].cpu().expand(C, M, D).clone())
    model = model.to(device=device, dtype=dtype)
    engine = VI() if method == "vi" else SEP()
    box = {"state": engine.init(model, X, y, g)}
    opt = torch.optim.Adam(engine.trainable(model, box["state"]), lr=1e-3)

    def step():
        idx = torch.randint(0, N, (B,), generator=g).to(device)
        box["state"] = state = engine.update(model, box["state"], X[idx], y[idx], N, idx)
        opt.zero_grad(set_to_none=True)
        loss = engine.loss(model, state, X[idx], y[idx], N, idx) / N
        loss.backward()
        opt.step()
    return step


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def step_time(method: str, dtype: torch.dtype, device: str, steps: int, warmup: int) -> float:
    step, times = mnist_shaped_step(method, dtype, device), []
    for i in range(warmup + steps):
        _sync(device)
        t0 = time.perf_counter()
        step()
        _sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default="device_check")
    args = ap.parse_args()
    info = {"device_name": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else args.device,
            "torch": torch.__version__}
    rows = []
    for case in CASES:
        try:
            r = compare(case, args.device)
        except Exception as exc:          # reported, not hidden: a failing device path is the finding
            r = {"case": case, "error": f"{type(exc).__name__}: {exc}"}
        rows.append(r)
        print(r, flush=True)
        write(args.out, {"config": vars(args), "info": info, "fits": rows})      # partial results survive a timeout
    extra = streamed(args.device)
    print(extra, flush=True)
    timing = []
    for method in ("vi", "sep"):
        for dt in ("float64", "float32"):
            ms = step_time(method, getattr(torch, dt), args.device, args.steps, args.warmup)
            timing.append({"method": method, "dtype": dt, "M": 200, "C": 10, "D": 784, "B": 200, "ms_per_step": ms})
            print(timing[-1], flush=True)
    print("wrote", write(args.out, {"config": vars(args), "info": info, "fits": rows, "stream": extra,
                                    "timing": timing}))


if __name__ == "__main__":
    main()
