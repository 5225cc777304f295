"""Milliseconds per training step (minibatch, Adam; or full batch with --b 0) at a peer-benchmark shape, in this process.

The step of ``peers_throughput.py`` without the peers or the wall-clock budget: k-means inducing inputs,
ℓ = √D, Adam 0.01 (--adam: fused as in ``train.fit``), random minibatches; 20 warm-up steps, then the median of --repeats timings of
--steps steps each. Used to compare two versions of the library on one machine, one after the other with
nothing else running: the script imports the sgpc of the tree it sits in (peers_throughput puts that
tree's src/ first on sys.path), so for an older version copy it into a worktree of that commit:

    git worktree add /tmp/old 359a0f8 && cp benchmarks/perf/vi_step.py /tmp/old/benchmarks/
    (cd /tmp/old/benchmarks && OMP_NUM_THREADS=1 python benchmarks/perf/vi_step.py --shared --name vi_step_before)
    (OMP_NUM_THREADS=1 python benchmarks/perf/vi_step.py --shared --name vi_step_after)
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import torch

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import write
from peers_throughput import _data, _inducing


def count_ops(loss, opt, X, y, b: int, g: torch.Generator) -> dict:
    """Operators reaching the dispatcher (after autograd, before the kernels) in one step, by phase."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    idx = torch.randint(0, len(X), (b,), generator=g)
    opt.zero_grad()
    counts = {}
    for phase, run in (("forward", lambda: loss(X[idx], y[idx])), ("backward", lambda: value.backward()),
                       ("adam", opt.step)):
        Count.n = 0
        with Count():
            result = run()
        if phase == "forward":
            value = result
        counts[phase] = Count.n
    return counts


def profile(step, steps: int, top: int = 15) -> dict:
    """Where ``steps`` steps spend their time: the torch profiler's operators by self CPU time, per step, and
    the robust-max quadrature's hard-pair fix-up (``quadrature._log_largest_panels``): the steps that call it
    and its time forward (its backward runs inside the autograd operators)."""
    from torch.profiler import ProfilerActivity, record_function
    from torch.profiler import profile as torch_profile
    from sgpc import quadrature
    plain = quadrature._log_largest_panels
    calls, rows, seconds = [0], [0], [0.0]

    def timed(mean, *a, **kw):
        calls[0] += 1
        rows[0] += len(mean)
        t0 = time.perf_counter()
        with record_function("quadrature._log_largest_panels"):
            out = plain(mean, *a, **kw)
        seconds[0] += time.perf_counter() - t0
        return out

    quadrature._log_largest_panels = timed
    hit = 0
    try:
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                before = calls[0]
                step()
                hit += calls[0] > before
    finally:
        quadrature._log_largest_panels = plain
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:top]
    n = max(calls[0], 1)
    return {"steps": steps, "steps_calling_fixup": hit, "fixup_calls": calls[0], "fixup_rows_per_call": rows[0] / n,
            "fixup_forward_ms_per_call": 1e3 * seconds[0] / n,
            "top_ops": [{"name": e.key, "calls_per_step": e.count / steps,
                         "self_cpu_ms_per_step": e.self_cpu_time_total / 1e3 / steps,
                         "cpu_ms_per_step_incl_children": e.cpu_time_total / 1e3 / steps} for e in ops]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", default="satimage")
    ap.add_argument("--method", default="vi", help="any minibatch method: vi, sep, apep, arpep, rpapep")
    ap.add_argument("--m", type=int, default=100)
    ap.add_argument("--b", type=int, default=200, help="minibatch size; 0: full batch (every step updates and "
                    "differentiates on all training rows, a batch fit's iteration; with --method pep or ep)")
    ap.add_argument("--alpha", type=float, default=None, help="Power EP's α (pep, apep, arpep, rpapep)")
    ap.add_argument("--shared", action="store_true", help="one kernel and one Z for all classes (GPflow's model)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compile", action="store_true",
                    help="compile the loss as GPClassifier(compile=...) does (train._compiled; compilation timed apart)")
    ap.add_argument("--compile-mode", default="default", choices=["default", "reduce-overhead"],
                    help="torch.compile's mode; reduce-overhead replays CUDA graphs (on a GPU)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--count-ops", action="store_true",
                    help="also count the operators dispatched by one step's forward pass, backward pass and Adam")
    ap.add_argument("--adam", default="fused", choices=["fused", "foreach", "loop"],
                    help="Adam's implementation: fused is the library's since 2026-11-26 (foreach before, loop: torch's "
                         "CPU default, which the peers use)")
    ap.add_argument("--profile", type=int, default=0, metavar="STEPS",
                    help="after the timings, profile this many more steps (operators by self CPU time, and the "
                         "quadrature's hard-pair fix-up); profiled steps are slower and not in ms_per_step")
    ap.add_argument("--name", default="vi_step")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import sgpc
    from sgpc.estimator import GPClassifier
    from sgpc import fitting
    from sgpc.validation import DTYPES
    from sgpc.train import _compiled
    X, y, _, _, C = _data(args.set)
    full = args.b == 0
    est = GPClassifier(tol=None, method=args.method, n_inducing=args.m, batch_size=None if full else args.b,
                       inducing_params={"shared": args.shared}, kernel_params={"shared_kernel": args.shared}, device=args.device,
                       dtype=args.dtype, method_params=None if args.alpha is None else {"alpha": args.alpha})
    D = X.shape[1]
    model = fitting.build_model(fitting.settings(est), D, C, _inducing(X, args.m), math.sqrt(D) * np.ones(D))
    engine = est._make_engine()
    Xt = torch.as_tensor(X, dtype=DTYPES[est.dtype], device=args.device)
    yt = torch.as_tensor(y, device=args.device)
    g = torch.Generator().manual_seed(0)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    state = engine.init(model, Xt, yt, g)
    impl = {"fused": {"fused": True}, "foreach": {"foreach": True}, "loop": {"foreach": False}}[args.adam]
    opt = torch.optim.Adam(engine.trainable(model, state), lr=0.01, **impl)
    N = len(X)
    if args.compile and cuda and args.compile_mode == "reduce-overhead":
        torch.backends.cuda.preferred_linalg_library("cusolver")   # MAGMA's batched kernels allocate: not capturable
    loss_fn = _compiled(engine.loss, args.compile_mode) if args.compile else engine.loss
    loss = lambda xb, yb: loss_fn(model, state, xb, yb, N)

    def step():
        nonlocal state
        if full:
            xb, yb = Xt, yt
        else:
            idx = torch.randint(0, N, (args.b,), generator=g).to(args.device)
            xb, yb = Xt[idx], yt[idx]         # one minibatch object for both calls, as in train.fit (SEP's loss
        state = engine.update(model, state, xb, yb, N, None)   # reuses the site step's kernel matrices for it)
        opt.zero_grad()
        loss(xb, yb).backward()
        opt.step()

    t0 = time.perf_counter()
    step()
    sync()
    first_step_s = time.perf_counter() - t0
    for _ in range(19):
        step()
    sync()
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        sync()
        times.append(1e3 * (time.perf_counter() - t0) / args.steps)
    # a finite objective: the step really trained (on copies, as the minibatches are, not views of Xt)
    rows = N if full else args.b
    final_loss = float(loss(Xt[:rows].clone(), yt[:rows].clone()).detach())
    out = {"config": vars(args), "sgpc_path": sgpc.__file__, "first_step_s": first_step_s, "ms_per_step": times,
           "ms_per_step_median": statistics.median(times), "final_loss_first_rows": final_loss,
           "device_name": torch.cuda.get_device_name() if cuda else None}
    if args.profile:
        out["profile"] = profile(step, args.profile)
        p = out["profile"]
        print(f"profile of {p['steps']} steps: {p['steps_calling_fixup']} call the hard-pair fix-up "
              f"({p['fixup_rows_per_call']:.1f} rows, {p['fixup_forward_ms_per_call']:.2f} ms forward per call)")
        for e in p["top_ops"]:
            print(f"  {e['name']:<45} {e['calls_per_step']:7.1f} calls {e['self_cpu_ms_per_step']:7.3f} ms self per step")
    if args.count_ops:
        out["ops_per_step"] = count_ops(loss, opt, Xt, yt, rows, g)
        print("operators dispatched per step:", out["ops_per_step"])
    print(f"{args.method} {args.set} M={args.m} B={args.b} shared={args.shared} {args.device} {args.dtype} "
          f"compile={args.compile and args.compile_mode}: {out['ms_per_step_median']:.2f} ms/step, first step "
          f"{first_step_s:.1f} s, loss {final_loss:.4g} "
          f"({sgpc.__file__})")
    write(args.name, out)


if __name__ == "__main__":
    main()
