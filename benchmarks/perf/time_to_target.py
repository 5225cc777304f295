"""Time to a target test NLL: sgpc against the SVGP recipes of GPflow and GPyTorch (issue 41).

One script, one run, nothing else running. Every run trains for --budget seconds of wall clock in a fresh
process, one thread (--threads), float64 (--dtype), on the CPU (--device), and records the test NLL and error every --eval-every steps (the evaluation is
not training time; the clock stops during it). The clock starts when the fit is called: initialisation —
k-means of the inducing inputs, length-scale heuristics, building the model, GPflow's tracing of its step —
counts.

Sets (--sets, the shapes of peers_throughput.py): satimage M = 100 and 200 (B = 200), MNIST M = 200 (B = 200),
flights-3m M = 200 (B = 1 024; "flights-200-random": the same with 10 000 test rows drawn at random), connect-4 M = 100 (B = 256; the out-of-the-box suite's set nearest 50 000
training rows). Splits: ``sgpc.datasets.train_test(name, seed=0)``, features standardised.

Runs (--runs):
  sgpc-sep, sgpc-vi, sgpc-vi-natgrad       ``GPClassifier(method=..., n_inducing=M, batch_size=B)`` with its own
                                           defaults otherwise (k-means inducing inputs per class, length-scales
                                           from the features' spread, Adam at 0.01; vi-natgrad: natural-gradient
                                           steps of q(u) at γ = 0.1, ``method_params={"natgrad_lr": 0.1}``);
                                           tol=None (the budget ends the fit). --sgpc-learning-rate R replaces
                                           Adam's rate for every sgpc run and names the run ``<run>@R``, so
                                           runs at several rates share one results file; --sgpc-lr-decay G
                                           multiplies that rate by G per pass over the data
                                           (``optimizer_params={"lr_decay": G}``) and adds ``/decay=G``;
                                           --sgpc-inducing-lr Z gives the inducing inputs their own rate
                                           (``inducing_params={"learning_rate": Z}``) and adds ``/z=Z``.
                                           --sgpc-returned adds the column ``<run>/returned``: at every evaluation,
                                           the model ``fit`` would return if it stopped there (SEP's sites refreshed
                                           on all training rows, as ``fit`` does after its last step), at the
                                           training time plus that refresh's. The budget is imposed from outside:
                                           the child wraps ``fitting.train_settings`` to set ``max_time`` to the
                                           budget less the initialisation time.
  sgpc-sep-shared, sgpc-vi-shared          the same with one set of inducing inputs and one kernel for all
                                           classes (GPflow's model)
  gpflow-adam, gpflow-natgrad              GPflow 2's ``SVGP`` with the ``MultiClass`` (robust-max) likelihood, one
                                           shared set of inducing inputs and one shared ARD kernel; Adam at 0.01
                                           on every parameter, or its ``NaturalGradient`` (γ = 0.1) on q(u) and Adam
                                           at 0.01 on the rest — GPflow's own recipes (its SVGP and natural-
                                           gradient notebooks). Steps compiled with ``tf.function``.
  gpytorch-adam, gpytorch-ngd              GPyTorch's SVGP: one GP per class with its own inducing inputs
                                           (``IndependentMultitaskVariationalStrategy``), ARD RBF with a scale,
                                           ``SoftmaxLikelihood``; Adam at 0.01 on everything with a Cholesky q(u),
                                           or ``NGD`` (lr 0.1) on a ``NaturalVariationalDistribution`` and Adam at
                                           0.01 on the rest — GPyTorch's own recipes (its SVGP and NGD examples).
The peers start from the same k-means inducing inputs as sgpc (computed inside their clock), length-scales √D
and unit amplitude; their minibatches are drawn with replacement, as their examples' loaders shuffle.

What it reports (``results/<--name>.jsonl``, and the Markdown of --report):
  - for every peer run: its best test NLL within the budget, the time it first reached that NLL + 0.005, and
    the time each sgpc run first reached the same value (the ratio: how many times sooner);
  - the time of every run to the set's fixed target (``TARGETS``: the paper's 0.0725 on MNIST), when given;
  - the test NLL of every run after fixed budgets (``CHECKPOINTS_S`` seconds, those within --budget);
  - with --figure, the test NLL against time per set (matplotlib).

    python benchmarks/perf/time_to_target.py --sets satimage-100 --budget 60 --eval-every 10
    python benchmarks/perf/time_to_target.py --device cuda --threads 8 --sets mnist-200 --budget 40 --eval-every 200 \
        --runs sgpc-sep sgpc-vi gpytorch-adam gpytorch-ngd --name time_to_target_gpu     # sgpc and GPyTorch on a GPU
    python benchmarks/perf/time_to_target.py --report results/time_to_target.jsonl
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))   # benchmarks/: _common
sys.path.insert(0, str(HERE.parents[1] / "src"))
sys.path.insert(0, str(HERE))          # peers_throughput: the data and GPyTorch's model, shared with it
from peers_throughput import _data, gpytorch_svgp  # noqa: E402
from sgpc.datasets import SplitProtocol  # noqa: E402

SETS = {"satimage-100": ("satimage", 100, 200), "satimage-200": ("satimage", 200, 200),
        "mnist-200": ("mnist", 200, 200), "flights-200": ("flights-3m", 200, 1024),
        "connect4-100": ("connect-4", 100, 256), "flights-200-random": ("flights-3m", 200, 1024)}
# A set whose test rows are not its protocol's: flights-3m's protocol tests on the file's last 10 000 rows, the
# last hours of 30 June 2001 (52.6% of them late, against 33.4% over the half-year), so a test NLL there is
# mostly one afternoon's delays; "flights-200-random" holds out 10 000 rows drawn at random (stratified, seed 0).
TEST_SPLITS = {"flights-200-random": SplitProtocol(test_fraction=10_000 / 3_000_000)}   # else the data set's own
TARGETS = {"mnist": 0.0725}               # the paper's SEP test NLL on MNIST (scalable-ep, Table 3)
RUNS = ("sgpc-sep", "sgpc-vi", "sgpc-vi-natgrad", "sgpc-sep-shared", "sgpc-vi-shared",
        "gpflow-adam", "gpflow-natgrad", "gpytorch-adam", "gpytorch-ngd")
MARGIN = 0.005                            # a peer's best NLL + MARGIN is the value every run is timed to
CHECKPOINTS_S = (10, 30, 60, 120, 300, 600, 900)
LEARNING_RATE, NATGRAD_GAMMA = 0.01, 0.1       # --gamma replaces NATGRAD_GAMMA


def _kmeans(X, M):
    from sgpc.sparse import init_inducing
    return init_inducing(X, M, "kmeans", seed=0)


def _nll_error(logp, y):
    import numpy as np
    logp = logp - np.logaddexp.reduce(logp, axis=1, keepdims=True)     # Monte Carlo averages may miss 1
    return float(-np.mean(logp[np.arange(len(y)), y])), float(np.mean(logp.argmax(1) != y))


class Clock:
    """Training time since the fit was called, paused while the test set is evaluated."""

    def __init__(self):
        self.start, self.paused = time.perf_counter(), 0.0

    def now(self) -> float:
        return time.perf_counter() - self.start - self.paused

    def evaluate(self, trace: list, step: int, predict_log_proba, Xt, yt) -> None:
        t, t_eval = self.now(), time.perf_counter()
        nll, err = _nll_error(predict_log_proba(Xt), yt)
        trace.append({"step": step, "time": t, "nll": nll, "error": err})
        self.paused += time.perf_counter() - t_eval


def run_name(run: str, sgpc_learning_rate: float | None, sgpc_lr_decay: float | None = None,
             sgpc_inducing_lr: float | None = None) -> str:
    """The name a run's record carries: an sgpc run at a given Adam rate R is ``<run>@R``, with a decay G of that
    rate per pass ``<run>@R/decay=G`` (``<run>/decay=G`` at its own rate), with the inducing inputs at their own
    rate Z ``.../z=Z``: its own column."""
    if not run.startswith("sgpc-"):
        return run
    rate = "" if sgpc_learning_rate is None else f"@{sgpc_learning_rate:g}"
    return (f"{run}{rate}" + ("" if sgpc_lr_decay is None else f"/decay={sgpc_lr_decay:g}")
            + ("" if sgpc_inducing_lr is None else f"/z={sgpc_inducing_lr:g}"))


def sgpc_estimator(run, M, B, device="cpu", dtype="float64", learning_rate=None, lr_decay=None, inducing_lr=None):
    """The ``GPClassifier`` of an sgpc run (``RUNS``): its method, M inducing inputs, minibatches of B, no stopping
    rule (the budget ends the fit), Adam at ``learning_rate`` (None: the method's own) decayed by ``lr_decay`` per
    pass (None: no decay), the inducing inputs at ``inducing_lr`` (None: the same rate)."""
    from sgpc import GPClassifier
    base = run.removeprefix("sgpc-")
    shared = base.endswith("-shared")
    method = base.removesuffix("-shared").removesuffix("-natgrad")
    return GPClassifier(method=method, n_inducing=M, batch_size=B, tol=None, max_iter=10 ** 9, random_state=0,
                        learning_rate=learning_rate,
                        optimizer_params=None if lr_decay is None else {"lr_decay": lr_decay},
                        device=device, dtype=dtype,
                        inducing_params={**({"shared": True} if shared else {}),
                                         **({} if inducing_lr is None else {"learning_rate": inducing_lr})} or None,
                        kernel_params={"shared_kernel": True} if shared else None,
                        method_params={"natgrad_lr": NATGRAD_GAMMA} if base.endswith("-natgrad") else None)


def returned_validator(validator, X, y):
    """``fitting.validator`` wrapped so that each evaluation also scores the model ``fit`` would return if it stopped
    at that step: the sites refreshed on all training rows X, y (``train.refresh``, what ``fit`` does after its last
    step), on a copy of the state; the running state's constants are written back before training goes on. The row
    gets ``nll_returned``, ``error_returned`` and ``refresh_s`` (the refresh's seconds, which a user stopping there
    would wait)."""
    import torch
    from sgpc.train import refresh, write_constants

    def wrapped(est, p, engine, X_val, y_val):
        validate = validator(est, p, engine, X_val, y_val)
        if validate is None or not engine.capabilities.increment:
            return validate
        Xs = torch.as_tensor(X, dtype=getattr(torch, p["dtype"]), device=p["device"])
        ys = torch.as_tensor(y, device=p["device"])

        def both(model, state):
            row = validate(model, state)
            start = time.perf_counter()
            fresh = refresh(model, engine, state, Xs, ys)
            refresh_s = time.perf_counter() - start
            now = validate(model, fresh)
            write_constants(model, engine, state)
            return {**row, "nll_returned": now["nll"], "error_returned": now["error"], "refresh_s": refresh_s}
        return both
    return wrapped


def run_sgpc(run, X, y, Xt, yt, M, B, budget, eval_every, device="cpu", dtype="float64", learning_rate=None,
             lr_decay=None, returned=False, inducing_lr=None):
    from sgpc import fitting
    est = sgpc_estimator(run, M, B, device, dtype, learning_rate, lr_decay, inducing_lr)
    marks, train_settings = {}, fitting.train_settings

    def budgeted(p, run_args):          # called once the model and the engine state are built
        marks["init_s"] = time.perf_counter() - marks["called"]
        return dataclasses.replace(train_settings(p, run_args), max_time=max(budget - marks["init_s"], 1e-9))

    fitting.train_settings = budgeted
    if returned:
        fitting.validator = returned_validator(fitting.validator, X, y)
    marks["called"] = time.perf_counter()
    est.fit(X, y, X_val=Xt, y_val=yt, eval_every=eval_every)
    rows = est.history_["validation"]
    trace = [{"step": r["iteration"], "time": marks["init_s"] + r["time"], "nll": r["nll"], "error": r["error"]}
             for r in rows]
    if returned and rows and "nll_returned" in rows[0]:
        as_returned = [{"step": r["iteration"], "time": marks["init_s"] + r["time"] + r["refresh_s"],
                        "nll": r["nll_returned"], "error": r["error_returned"], "refresh_s": r["refresh_s"]}
                       for r in rows if "nll_returned" in r]
        return trace, {"init_s": marks["init_s"], "steps": est.n_iter_, "returned_trace": as_returned}
    return trace, {"init_s": marks["init_s"], "steps": est.n_iter_}


def run_gpytorch(run, X, y, Xt, yt, C, M, B, budget, eval_every, device="cpu", dtype="float64"):
    import numpy as np
    import torch
    import gpytorch
    clock = Clock()
    tdt = getattr(torch, dtype)
    Z = torch.as_tensor(_kmeans(X, M), dtype=tdt).expand(C, M, X.shape[1]).clone()
    natural = run.endswith("-ngd")
    model = gpytorch_svgp(Z, natural=natural).to(device, tdt)
    lik = gpytorch.likelihoods.SoftmaxLikelihood(num_features=C, num_classes=C, mixing_weights=False).to(device, tdt)
    mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=len(y))
    variational = list(model.variational_parameters())
    ids = {id(p) for p in variational}
    hyper = [p for p in list(model.parameters()) + list(lik.parameters()) if id(p) not in ids]
    optimizers = ([gpytorch.optim.NGD(variational, num_data=len(y), lr=NATGRAD_GAMMA),
                   torch.optim.Adam(hyper, lr=LEARNING_RATE)] if natural
                  else [torch.optim.Adam(hyper + variational, lr=LEARNING_RATE)])
    Xs, ys = torch.as_tensor(X, dtype=tdt, device=device), torch.as_tensor(y, device=device)
    g = torch.Generator().manual_seed(0)

    def predict_log_proba(A):
        # p(y|x) depends on f(x)'s marginal alone: 256 draws of the [n, C] marginals, softmax, mean. (The
        # likelihood's own call on model(x) samples the joint predictive of a whole block, a Cholesky of a
        # [2048, 2048] covariance per class: minutes per evaluation on satimage.)
        model.eval(), lik.eval()
        out, draws = [], torch.Generator().manual_seed(1)
        with torch.no_grad():
            for a in range(0, len(A), 2048):
                f = model(torch.as_tensor(A[a:a + 2048], dtype=tdt, device=device))
                mean, sd = f.mean, f.variance.clamp_min(0).sqrt()
                eps = torch.randn((256, *mean.shape), generator=draws, dtype=mean.dtype).to(device)
                out.append(torch.softmax(mean + sd * eps, -1).mean(0).log().double().cpu().numpy())
        model.train(), lik.train()
        return np.concatenate(out)

    def step_fn():
        idx = torch.randint(0, len(ys), (B,), generator=g).to(device)
        for opt in optimizers:
            opt.zero_grad()
        loss = -mll(model(Xs[idx]), ys[idx])
        loss.backward()
        for opt in optimizers:
            opt.step()
        if not torch.isfinite(loss):          # on a GPU this waits for the step, so the clock includes its work
            raise FloatingPointError(f"the loss became {float(loss)}")

    model.train(), lik.train()
    return _loop(clock, step_fn, budget, eval_every, predict_log_proba, Xt, yt)


def _loop(clock: Clock, step_fn, budget: float, eval_every: int, predict_log_proba, Xt, yt):
    """A peer's training loop: steps until the budget is spent, the test set evaluated every eval_every steps and
    at the end. A step that fails (a NaN, a matrix no longer positive definite) ends the run, which says so."""
    trace, step, extra = [], 0, {}
    while clock.now() < budget:
        try:
            step_fn()
        except Exception as exc:        # the peer's own failure, recorded, not hidden
            extra["diverged"] = f"step {step + 1}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            break
        step += 1
        if step % eval_every == 0:
            clock.evaluate(trace, step, predict_log_proba, Xt, yt)
    if "diverged" not in extra and (not trace or trace[-1]["step"] != step):
        clock.evaluate(trace, step, predict_log_proba, Xt, yt)
    return trace, {"steps": step, **extra}


def run_gpflow(run, X, y, Xt, yt, C, M, B, budget, eval_every):
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import gpflow
    clock = Clock()
    D = X.shape[1]
    kernel = gpflow.kernels.SquaredExponential(lengthscales=np.full(D, math.sqrt(D)))
    model = gpflow.models.SVGP(kernel, gpflow.likelihoods.MultiClass(C), _kmeans(X, M), num_latent_gps=C,
                               num_data=len(y))
    natural = run.endswith("-natgrad")
    adam = tf.optimizers.Adam(LEARNING_RATE)
    Xs, ys = X.astype(np.float64), y.astype(np.float64)[:, None]
    if natural:
        gpflow.set_trainable(model.q_mu, False)
        gpflow.set_trainable(model.q_sqrt, False)
        natgrad = gpflow.optimizers.NaturalGradient(gamma=NATGRAD_GAMMA)

    @tf.function
    def step_fn(xb, yb):
        loss = lambda: model.training_loss((xb, yb))          # noqa: E731 (GPflow's optimisers take a closure)
        if natural:
            natgrad.minimize(loss, var_list=[(model.q_mu, model.q_sqrt)])
        adam.minimize(loss, var_list=model.trainable_variables)

    def predict_log_proba(A):
        out = []
        for a in range(0, len(A), 2048):
            m, v = model.predict_f(A[a:a + 2048])
            out.append(np.stack([model.likelihood.predict_log_density(A[a:a + 2048], m, v,
                                                                      np.full((len(m), 1), c, np.float64)).numpy()
                                 for c in range(C)], 1))
        return np.concatenate(out)

    rng = np.random.default_rng(0)

    def draw_and_step():                 # the first step traces the graph: inside the clock
        idx = rng.integers(0, len(ys), B)
        step_fn(tf.constant(Xs[idx]), tf.constant(ys[idx]))

    return _loop(clock, draw_and_step, budget, eval_every, predict_log_proba, Xt, yt)


def as_records(record: dict) -> list[dict]:
    """A child's record, and with ``--sgpc-returned`` a second one, ``<run>/returned``, whose trace is the model
    ``fit`` would have returned at each evaluation (``returned_validator``): its own column in the report."""
    if "returned_trace" not in record:
        return [record]
    plain = {k: v for k, v in record.items() if k != "returned_trace"}
    return [plain, {**plain, "run": plain["run"] + "/returned", "trace": record["returned_trace"]}]


def child(setname: str, run: str, budget: float, eval_every: int, device: str = "cpu", dtype: str = "float64",
          threads: int = 1, sgpc_learning_rate: float | None = None, sgpc_lr_decay: float | None = None,
          sgpc_returned: bool = False, sgpc_inducing_lr: float | None = None) -> dict:
    import torch
    torch.set_num_threads(threads)
    name, M, B = SETS[setname]
    X, y, Xt, yt, C = _data(name, TEST_SPLITS.get(setname))
    load = os.getloadavg()
    if run.startswith("sgpc-"):
        trace, extra = run_sgpc(run, X, y, Xt, yt, M, B, budget, eval_every, device, dtype, sgpc_learning_rate,
                                sgpc_lr_decay, sgpc_returned, sgpc_inducing_lr)
        if sgpc_learning_rate is not None:
            extra = {**extra, "learning_rate": sgpc_learning_rate}
        if sgpc_lr_decay is not None:
            extra = {**extra, "lr_decay": sgpc_lr_decay}
        if sgpc_inducing_lr is not None:
            extra = {**extra, "inducing_lr": sgpc_inducing_lr}
    elif run.startswith("gpytorch-"):
        trace, extra = run_gpytorch(run, X, y, Xt, yt, C, M, B, budget, eval_every, device, dtype)
    else:
        if device != "cpu" or dtype != "float64":
            raise ValueError("the GPflow runs are CPU/float64 only here")
        trace, extra = run_gpflow(run, X, y, Xt, yt, C, M, B, budget, eval_every)
    return {"set": setname, "run": run_name(run, sgpc_learning_rate, sgpc_lr_decay, sgpc_inducing_lr), "N": len(y), "N_test": len(yt), "D": X.shape[1],
            "C": C, "M": M, "B": B,
            "budget_s": budget, "eval_every": eval_every, "device": device, "dtype": dtype, "threads": threads,
            "trace": trace, **extra,
            "loadavg_before": load, "loadavg_after": os.getloadavg()}


# ------------------------------------------------------------------------------------------------
# Analysis


def first_time(trace: list, value: float) -> float | None:
    """The training time at which the test NLL first reached ``value`` (None: never within the budget)."""
    return next((r["time"] for r in trace if r["nll"] <= value), None)


def nll_at(trace: list, seconds: float) -> float | None:
    """The last test NLL evaluated at or before ``seconds`` of training (None: none yet)."""
    before = [r["nll"] for r in trace if r["time"] <= seconds]
    return before[-1] if before else None


def summarise(runs: list) -> dict:
    """Per set: every peer run's best NLL and the times to it (+ MARGIN) of the peer and of each sgpc run, the
    times to the set's fixed target, and the NLL after the fixed budgets."""
    out = {}
    for s in dict.fromkeys(r["set"] for r in runs):
        here = {r["run"]: r for r in runs if r["set"] == s and r.get("trace")}
        failed = {r["run"]: r.get("diverged") or r.get("error", "")[-300:] for r in runs
                  if r["set"] == s and ("error" in r or "diverged" in r)}
        ours = {k: v for k, v in here.items() if k.startswith("sgpc-")}
        peers = {k: v for k, v in here.items() if not k.startswith("sgpc-")}
        versus = []
        for name, peer in peers.items():
            best = min(r["nll"] for r in peer["trace"])
            value = best + MARGIN
            t_peer = first_time(peer["trace"], value)
            versus.append({"peer": name, "best_nll": best, "value": value, "peer_time": t_peer,
                           "sgpc": {k: {"time": first_time(v["trace"], value),
                                        "sooner": None if first_time(v["trace"], value) is None
                                        else t_peer / first_time(v["trace"], value)} for k, v in ours.items()}})
        name = SETS[s][0]
        target = TARGETS.get(name)
        budget = max(r["budget_s"] for r in here.values()) if here else 0
        out[s] = {"versus_peers": versus, "target": target, "failed": failed,
                  "time_to_target": None if target is None else {k: first_time(v["trace"], target)
                                                                 for k, v in here.items()},
                  "nll_after": {k: {str(b): nll_at(v["trace"], b) for b in CHECKPOINTS_S if b <= budget}
                                for k, v in here.items()},
                  "final": {k: {"nll": v["trace"][-1]["nll"], "error": v["trace"][-1]["error"], "steps": v["steps"],
                                **({"init_s": v["init_s"]} if "init_s" in v else {})} for k, v in here.items()}}
        for name, why in failed.items():
            out[s]["final"].setdefault(name, {"nll": math.nan, "error": math.nan, "steps": None})
            out[s]["final"][name]["failed"] = why
    return out


def _fmt(v, unit=""):
    return "—" if v is None else f"{v:.3g}{unit}" if isinstance(v, float) else str(v)


def report(summary: dict) -> str:
    """The Markdown tables of ``summarise``."""
    lines = []
    for s, d in summary.items():
        ours = [k for k in d["nll_after"] if k.startswith("sgpc-")]
        lines += [f"### {s}", "", "| peer run | its best NLL | + 0.005 reached by the peer after | "
                  + " | ".join(f"{k} (× sooner)" for k in ours) + " |",
                  "|---|---|---|" + "---|" * len(ours)]
        for v in d["versus_peers"]:
            cells = [f"{_fmt(v['sgpc'][k]['time'], ' s')} ({_fmt(v['sgpc'][k]['sooner'])}×)"
                     if v['sgpc'][k]['time'] is not None else "not reached" for k in ours]
            lines.append(f"| {v['peer']} | {v['best_nll']:.4f} | {_fmt(v['peer_time'], ' s')} | " + " | ".join(cells)
                         + " |")
        budgets = sorted({b for v in d["nll_after"].values() for b in v}, key=float)
        header = ["run", *(f"NLL after {b} s" for b in budgets), "final NLL, error, steps"]
        header += [f"time to {d['target']}"] if d["target"] is not None else []
        lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for k, f in d["final"].items():
            cells = [k, *(_fmt(d["nll_after"].get(k, {}).get(b)) for b in budgets),
                     f"{f['nll']:.4f}, {100 * f['error']:.2f}%, {f['steps']}"]
            cells += [_fmt(d["time_to_target"].get(k), " s")] if d["target"] is not None else []
            lines.append("| " + " | ".join(cells) + " |")
        lines += [f"- {k} failed: {why}" for k, why in d["failed"].items()] + [""]
    return "\n".join(lines)


def figure(runs: list, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter
    sets = list(dict.fromkeys(r["set"] for r in runs))
    colour = {run: f"C{i}" for i, run in enumerate(RUNS)}          # one colour per run in every panel
    fig, axes = plt.subplots(1, len(sets), figsize=(5 * len(sets), 4), squeeze=False)
    for ax, s in zip(axes[0], sets):
        for r in (r for r in runs if r["set"] == s and r.get("trace")):
            base = re.split("[@/]", r["run"], maxsplit=1)[0]   # a run at another rate or decay: its run's colour, dotted
            ax.plot([p["time"] for p in r["trace"]], [p["nll"] for p in r["trace"]], label=r["run"], color=colour.get(base),
                    linestyle=":" if base != r["run"] else "-" if base.startswith("sgpc-") else "--")
        ax.set(xscale="log", xlabel="training time incl. initialisation (s)", ylabel="test NLL", title=s)
        ax.xaxis.set_minor_formatter(NullFormatter())
        low, high = ax.get_ylim()
        if low > 0 and high > 3 * low:      # one run far above the rest (an overconfident recipe): log NLL too
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def _installed(lib: str, python: str) -> bool:
    return lib == "sgpc" or subprocess.run([python, "-c", f"import {lib}"], capture_output=True).returncode == 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sets", nargs="+", default=["satimage-100"], choices=list(SETS))
    p.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    p.add_argument("--budget", type=float, default=60.0, help="training seconds per run, initialisation included")
    p.add_argument("--eval-every", type=int, default=10, help="steps between test evaluations")
    p.add_argument("--gamma", type=float, default=NATGRAD_GAMMA,
                   help="the natural-gradient step of every natgrad/NGD run (default %(default)s)")
    p.add_argument("--device", default="cpu", help='"cpu" or "cuda": sgpc and GPyTorch (GPflow runs on the CPU only)')
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"], help="sgpc's and GPyTorch's")
    p.add_argument("--threads", type=int, default=1, help="CPU threads per run (torch, OpenMP, MKL)")
    p.add_argument("--sgpc-learning-rate", type=float,
                   help="Adam's rate for the sgpc runs (default: the method's own); the runs are named <run>@RATE")
    p.add_argument("--sgpc-lr-decay", type=float,
                   help="multiply the sgpc runs' Adam rate by this per pass over the data (optimizer_params lr_decay); "
                        "the runs' names end in /decay=G")
    p.add_argument("--sgpc-inducing-lr", type=float,
                   help="the sgpc runs' inducing inputs at this Adam rate, the rest at --sgpc-learning-rate "
                        "(inducing_params learning_rate); the runs' names end in /z=Z")
    p.add_argument("--sgpc-returned", action="store_true",
                   help="also score, at every evaluation, the model fit would return if it stopped there (the sites "
                        "refreshed on all training rows, its time added); recorded as the run <run>/returned")
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter of the runs (one with the peers installed: pip install sgpc[bench])")
    p.add_argument("--name", default="time_to_target")
    p.add_argument("--figure", type=Path, help="write the NLL-against-time figure here (PNG)")
    p.add_argument("--report", type=Path, help="print the Markdown tables of this results file and stop")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        globals()["NATGRAD_GAMMA"] = args.gamma
        print(json.dumps(child(args.child[0], args.child[1], args.budget, args.eval_every, args.device, args.dtype,
                               args.threads, args.sgpc_learning_rate, args.sgpc_lr_decay, args.sgpc_returned,
                               args.sgpc_inducing_lr)))
        return
    if args.report:
        # _common.write stores one line per run (with the run's config); the last line of each (set, run) counts
        lines = [json.loads(line) for line in args.report.read_text().splitlines() if line.strip()]
        runs = list({(r["set"], r["run"]): r for r in lines if "run" in r and "set" in r}.values())
        print(report(summarise(runs)))
        if args.figure:
            figure(runs, args.figure)
        return
    from _common import write
    skipped = {lib: "not installed (pip install sgpc[bench])" for lib in ("gpflow", "gpytorch")
               if any(r.startswith(lib) for r in args.runs) and not _installed(lib, args.python)}
    if args.device != "cpu" or args.dtype != "float64":
        skipped.update({"gpflow": "CPU/float64 only in this script"} if any(r.startswith("gpflow") for r in args.runs)
                       else {})
    runs = []
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
           "TF_CPP_MIN_LOG_LEVEL": "2",
           "TF_USE_LEGACY_KERAS": "1",     # GPflow 2 needs Keras 2 optimisers (tf-keras) on TensorFlow >= 2.16
           "PYTHONPATH": os.pathsep.join([str(HERE.parents[1] / "src"), os.environ.get("PYTHONPATH", "")])}
    for s in args.sets:
        for run in args.runs:
            if run.split("-")[0] in skipped:
                continue
            cmd = [args.python, __file__, "--child", s, run, "--budget", str(args.budget),
                   "--eval-every", str(args.eval_every), "--gamma", str(args.gamma), "--device", args.device,
                   "--dtype", args.dtype, "--threads", str(args.threads)]
            if args.sgpc_learning_rate is not None and run.startswith("sgpc-"):
                cmd += ["--sgpc-learning-rate", str(args.sgpc_learning_rate)]
            if args.sgpc_lr_decay is not None and run.startswith("sgpc-"):
                cmd += ["--sgpc-lr-decay", str(args.sgpc_lr_decay)]
            if args.sgpc_returned and run.startswith("sgpc-"):
                cmd += ["--sgpc-returned"]
            if args.sgpc_inducing_lr is not None and run.startswith("sgpc-"):
                cmd += ["--sgpc-inducing-lr", str(args.sgpc_inducing_lr)]
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode:
                runs.append({"set": s, "run": run_name(run, args.sgpc_learning_rate, args.sgpc_lr_decay,
                                                           args.sgpc_inducing_lr), "error": r.stderr[-3000:]})
                print(f"{s} {run}: FAILED\n{r.stderr[-3000:]}", flush=True)
                continue
            runs.extend(as_records(json.loads(r.stdout.strip().splitlines()[-1])))
            done = runs[-1]
            last = done["trace"][-1] if done["trace"] else {"nll": math.nan, "error": math.nan}
            print(f"{s} {run}: {done['steps']} steps, final NLL {last['nll']:.4f}, error {last['error']:.4f}"
                  + (f"; failed at {done['diverged']}" if "diverged" in done else ""), flush=True)
    summary = summarise(runs)
    write(args.name, {"config": {k: str(v) for k, v in vars(args).items() if k not in ("child", "report")},
                      "skipped": skipped, "runs": runs, "summary": summary})
    if args.figure:
        figure(runs, args.figure)
    print(report(summary))


if __name__ == "__main__":
    main()
