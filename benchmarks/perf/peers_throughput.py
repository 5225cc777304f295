"""sgpc vs GPyTorch SVGP (softmax) vs GPflow SVGP (robust-max): ms per iteration and test NLL after a
fixed wall-clock budget, at equal data, M, minibatch size, dtype (float64) and thread count (1).

Settings (--sets): satimage M = 100 and 200 (B = 200; the paper's 20/80 split), MNIST M = 200, B = 200
(60k/10k), flights-3m M = 200, B = 1024 (last 10 000 rows as test), and MNIST M = 1 024, B = 4 096 (mnist-1024,
the GPU throughput shape of issue 41). Every run reports training points per second (B / median step time). Features standardised with the
training statistics. Every library starts from the same k-means inducing inputs (20 000-row sample,
seed 0), length-scales √D and unit amplitude, Adam with learning rate 0.01, and trains for --budget
seconds of wall clock (test evaluation excluded). Each (set, library, method) runs in a fresh process.

Model differences that are the libraries' own (stated, not hidden):
  sgpc      one GP per class with its own inducing inputs [C,M,D] and ARD kernel; robust-max likelihood
            (vi: Gauss–Hermite expectation; sep: pairwise step factors, scalable-ep eq. 6);
            "vi-shared": GPflow's model (one Z [M,D] and one kernel shared by the classes);
            "vi-shared-gh20": the same with the robust-max integral on GPflow's 20 Gauss–Hermite
            nodes (sgpc's default is 32); a "-compiled" suffix ("vi-compiled", "vi-shared-compiled"):
            the fit with compile="default" (CPU) or "reduce-overhead" (CUDA graphs); like GPflow's
            tracing step, one compiling step runs before the clock starts.
  GPyTorch  one GP per class with its own inducing inputs (IndependentMultitaskVariationalStrategy over
            a batch of C ApproximateGPs), ARD RBF; SoftmaxLikelihood (Monte Carlo expectation,
            gpytorch's default number of samples); Cholesky variational distribution. "svgp-softmax-largebatch":
            the same with GPyTorch's LargeBatchVariationalStrategy (1.15; made for large minibatches on
            data-centre GPUs) in place of VariationalStrategy.
  GPflow    SVGP with MultiClass (robust-max) likelihood, one shared set of inducing inputs [M,D] and
            one shared ARD kernel for the C latent GPs (GPflow's standard multi-class setup),
            training step compiled with tf.function (the first, tracing step runs before the clock starts).
A peer that is not installed is skipped and the JSON says so (pip install sgpc[bench]).
--device cuda / --dtype float32 move sgpc and GPyTorch to a GPU / single precision (GPflow stays
CPU/float64 and is then skipped); on a GPU each GPyTorch step ends with a synchronisation, as sgpc's
fit reads the objective every step, so both per-step times include the GPU's work.

    python benchmarks/perf/peers_throughput.py --budget 60                     # full protocol
    python benchmarks/perf/peers_throughput.py --budget 20 --sets satimage-100 --libs sgpc gpytorch
    python benchmarks/perf/peers_throughput.py --device cuda --budget 10 --libs sgpc gpytorch --methods vi sep
    python benchmarks/perf/peers_throughput.py --device cuda --dtype float32 --budget 6 --sets mnist-1024 --libs sgpc gpytorch
Timings are only meaningful on an idle machine: the JSON records os.getloadavg() before each run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))   # benchmarks/: _common
sys.path.insert(0, str(HERE.parents[1] / "src"))

SETS = {"satimage-100": ("satimage", 100, 200), "satimage-200": ("satimage", 200, 200),
        "mnist-200": ("mnist", 200, 200), "flights-200": ("flights-3m", 200, 1024),
        "mnist-1024": ("mnist", 1024, 4096)}     # issue 41's GPU shape: M = 1 024, B = 4 096, C = 10
RUNS = [("sgpc", "vi"), ("sgpc", "sep"), ("sgpc", "apep"), ("sgpc", "vi-shared"), ("sgpc", "vi-shared-gh20"),
        ("sgpc", "vi-compiled"), ("sgpc", "vi-shared-compiled"),
        ("gpytorch", "svgp-softmax"), ("gpytorch", "svgp-softmax-largebatch"),
        ("gpflow", "svgp-robustmax")]


def _data(name, protocol=None):
    """A set's training and test rows, standardised: ``sgpc.datasets.train_test(name, seed=0)``, by the set's own
    split protocol or by ``protocol`` when given (a `sgpc.datasets.SplitProtocol`)."""
    import numpy as np
    from sgpc import datasets
    Xtr, Xte, ytr, yte = datasets.train_test(name, seed=0, standardize=True, protocol=protocol)
    classes = np.unique(ytr)
    return Xtr, np.searchsorted(classes, ytr), Xte, np.searchsorted(classes, yte), len(classes)


def _inducing(X, M):
    """The k-means inducing inputs, computed once per (data, M) and kept in the temporary folder: every run of a
    set starts from the same ones, and M = 1 024 on MNIST does not repeat a minute of k-means per run."""
    import hashlib
    import tempfile
    import numpy as np
    from sgpc.sparse import init_inducing
    key = hashlib.sha1(np.ascontiguousarray(X[:1000]).tobytes() + repr((X.shape, M)).encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"sgpc-peers-Z-{key}.npy"
    if path.exists():
        return np.load(path)
    Z = init_inducing(X, M, "kmeans", seed=0)
    np.save(path, Z)
    return Z


def _nll(logp, y):
    import numpy as np
    return float(-np.mean(logp[np.arange(len(y)), y])), float(np.mean(logp.argmax(1) != y))


def _sync(device):
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_sgpc(method, X, y, Xt, yt, C, M, B, budget, lr, device, dtype):
    import dataclasses
    import math
    import numpy as np
    import torch
    from sgpc.estimator import GPClassifier
    from sgpc import fitting
    from sgpc.sparse import predict_log_proba
    from sgpc.train import TrainSettings, fit
    compiled = method.endswith("-compiled")
    base, _, nodes = method.removesuffix("-compiled").partition("-gh")   # "-gh20": the integral on 20 nodes
    shared = base.endswith("-shared")          # GPflow's model: one Z [M,D] and one kernel for all classes
    est = GPClassifier(tol=None, method=base.removesuffix("-shared"), n_inducing=M, batch_size=B,
                       inducing_params={"shared": shared}, kernel_params={"shared_kernel": shared}, device=device, dtype=dtype)
    D = X.shape[1]
    model = fitting.build_model(fitting.settings(est), D, C, _inducing(X, M), math.sqrt(D) * np.ones(D))
    if nodes:
        model.likelihood.n_points = int(nodes)
    engine = est._make_engine()
    tdt = getattr(torch, dtype)
    Xt_, yt_ = torch.as_tensor(X, dtype=tdt, device=device), torch.as_tensor(y, device=device)
    g = torch.Generator().manual_seed(0)
    state = engine.init(model, Xt_, yt_, g)
    mode = None if not compiled else "reduce-overhead" if device.startswith("cuda") else "default"
    settings = TrainSettings(learning_rate=lr, max_iter=10 ** 9, batch_size=B, max_time=budget, eval_every=10 ** 9,
                             compile=mode)
    if compiled:    # compile before the clock starts, as GPflow traces (torch.compile's cache keeps the code)
        state, _ = fit(model, engine, state, Xt_, yt_, dataclasses.replace(settings, max_iter=1, max_time=None),
                       generator=g)
    state, hist = fit(model, engine, state, Xt_, yt_, settings, generator=g)
    with torch.no_grad():      # fit() reads the objective every step, so its step times include the GPU's work
        lp = predict_log_proba(model, engine.posterior(model, state),
                               torch.as_tensor(Xt, dtype=tdt, device=device)).double().cpu().numpy()
    return np.diff([0.0] + hist.time), lp


def gpytorch_svgp(Z, natural: bool = False, large_batch: bool = False):
    """GPyTorch's multi-class SVGP as its examples build it: one GP per class with its own inducing inputs Z [C,M,D]
    (``IndependentMultitaskVariationalStrategy``), zero mean, ARD RBF with a scale, length-scales √D; q(u)
    Cholesky-parameterised, or natural (``NaturalVariationalDistribution``, for ``NGD``); the standard
    ``VariationalStrategy`` or ``LargeBatchVariationalStrategy``."""
    import math
    import torch
    import gpytorch
    C, M, D = Z.shape

    class GP(gpytorch.models.ApproximateGP):
        def __init__(self):
            kind = (gpytorch.variational.NaturalVariationalDistribution if natural
                    else gpytorch.variational.CholeskyVariationalDistribution)
            strategy = (gpytorch.variational.LargeBatchVariationalStrategy if large_batch
                        else gpytorch.variational.VariationalStrategy)
            vs = gpytorch.variational.IndependentMultitaskVariationalStrategy(
                strategy(self, Z, kind(M, batch_shape=torch.Size([C])), learn_inducing_locations=True), num_tasks=C)
            super().__init__(vs)
            self.mean_module = gpytorch.means.ZeroMean(batch_shape=torch.Size([C]))
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=D, batch_shape=torch.Size([C])), batch_shape=torch.Size([C]))
            self.covar_module.base_kernel.lengthscale = math.sqrt(D)

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    return GP()


def run_gpytorch(X, y, Xt, yt, C, M, B, budget, lr, device, dtype, strategy="svgp-softmax"):
    import numpy as np
    import torch
    import gpytorch
    D = X.shape[1]
    tdt = getattr(torch, dtype)
    Z = torch.as_tensor(_inducing(X, M), dtype=tdt, device=device).expand(C, M, D).clone()
    # "-largebatch": GPyTorch's LargeBatchVariationalStrategy (1.15), its strategy for large minibatches on
    # data-centre GPUs; otherwise the standard VariationalStrategy
    model = gpytorch_svgp(Z, large_batch=strategy.endswith("-largebatch")).to(device=device, dtype=tdt)
    lik = gpytorch.likelihoods.SoftmaxLikelihood(num_features=C, num_classes=C, mixing_weights=False).to(device, tdt)
    mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=len(y))
    opt = torch.optim.Adam(list(model.parameters()) + list(lik.parameters()), lr=lr)
    Xs, ys = torch.as_tensor(X, dtype=tdt, device=device), torch.as_tensor(y, device=device)
    g = torch.Generator().manual_seed(0)
    times, start = [], time.perf_counter()
    model.train(), lik.train()
    while time.perf_counter() - start < budget:
        t0 = time.perf_counter()
        idx = torch.randint(0, len(ys), (B,), generator=g)
        opt.zero_grad()
        loss = -mll(model(Xs[idx]), ys[idx])
        loss.backward()
        opt.step()
        _sync(device)                 # as sgpc's fit, which reads the objective every step
        times.append(time.perf_counter() - t0)
    model.eval(), lik.eval()
    out = []
    with torch.no_grad(), gpytorch.settings.num_likelihood_samples(256):
        for a in range(0, len(Xt), 2048):
            xb = torch.as_tensor(Xt[a:a + 2048], dtype=tdt, device=device)
            out.append(lik(model(xb)).probs.mean(0).log().double().cpu().numpy())
    return np.array(times), np.concatenate(out)


def run_gpflow(X, y, Xt, yt, C, M, B, budget, lr):
    import math
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import gpflow
    D = X.shape[1]
    kern = gpflow.kernels.SquaredExponential(lengthscales=np.full(D, math.sqrt(D)))
    lik = gpflow.likelihoods.MultiClass(C)
    model = gpflow.models.SVGP(kern, lik, _inducing(X, M), num_latent_gps=C, num_data=len(y))
    opt = tf.optimizers.Adam(lr)
    Xs, ys = X.astype(np.float64), y.astype(np.float64)[:, None]

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = model.training_loss((xb, yb))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(ys), B)
    step(tf.constant(Xs[idx]), tf.constant(ys[idx]))        # tracing/compilation, outside the budget
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < budget:
        t0 = time.perf_counter()
        idx = rng.integers(0, len(ys), B)
        step(tf.constant(Xs[idx]), tf.constant(ys[idx]))
        times.append(time.perf_counter() - t0)
    out = []
    for a in range(0, len(Xt), 2048):
        m, v = model.predict_f(Xt[a:a + 2048])
        lp = [model.likelihood.predict_log_density(Xt[a:a + 2048], m, v, np.full((len(m), 1), c, np.float64)).numpy()
              for c in range(C)]
        out.append(np.stack(lp, 1))
    return np.array(times), np.concatenate(out)


def child(setname, lib, method, budget, lr, device="cpu", dtype="float64"):
    import numpy as np
    import torch
    torch.set_num_threads(1)
    name, M, B = SETS[setname]
    X, y, Xt, yt, C = _data(name)
    load = os.getloadavg()
    if lib == "sgpc":
        times, lp = run_sgpc(method, X, y, Xt, yt, C, M, B, budget, lr, device, dtype)
    elif lib == "gpytorch":
        times, lp = run_gpytorch(X, y, Xt, yt, C, M, B, budget, lr, device, dtype, method)
    else:
        if device != "cpu" or dtype != "float64":
            raise ValueError("the GPflow run is CPU/float64 only here")
        times, lp = run_gpflow(X, y, Xt, yt, C, M, B, budget, lr)
    nll, err = _nll(lp, yt)
    steady = times[min(5, len(times) - 1):]              # the first steps include compilation / warm-up
    return {"set": setname, "lib": lib, "method": method, "N": len(y), "D": X.shape[1], "C": C, "M": M, "B": B,
            "iterations": len(times), "ms_per_iter_median": 1e3 * float(np.median(steady)),
            "ms_per_iter_mean": 1e3 * float(np.mean(steady)),
            "training_points_per_s": B / float(np.median(steady)), "test_nll": nll, "test_error": err,
            "budget_s": budget, "device": device, "dtype": dtype, "loadavg_before": load, "loadavg_after": os.getloadavg()}


def _installed(lib):
    if lib == "sgpc":
        return True
    mod = {"gpytorch": "gpytorch", "gpflow": "gpflow"}[lib]
    r = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True, text=True)
    return r.returncode == 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=float, default=60.0, help="training seconds per run")
    p.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    p.add_argument("--libs", nargs="+", default=["sgpc", "gpytorch", "gpflow"])
    p.add_argument("--methods", nargs="+", default=["vi", "sep", "apep", "vi-shared", "vi-shared-gh20"],
                   help="sgpc methods")
    p.add_argument("--peer-methods", nargs="+", default=None,
                   help="the peers' models to run (default: all of RUNS, e.g. svgp-softmax svgp-softmax-largebatch)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--device", default="cpu", help='"cpu" or "cuda" (sgpc and GPyTorch; GPflow runs on the CPU only)')
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    p.add_argument("--name", default="peers_throughput")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child, args.budget, args.lr, args.device, args.dtype)))
        return
    from _common import write
    skipped = {lib: "not installed (pip install sgpc[bench])" for lib in args.libs if not _installed(lib)}
    rows = []
    for s in args.sets:
        for lib, method in RUNS:
            if lib not in args.libs or lib in skipped or (lib == "sgpc" and method not in args.methods) \
                    or (lib != "sgpc" and args.peer_methods is not None and method not in args.peer_methods):
                continue
            if lib == "gpflow" and (args.device != "cpu" or args.dtype != "float64"):
                skipped["gpflow"] = "CPU/float64 only in this script"
                continue
            cmd = [sys.executable, __file__, "--child", s, lib, method, "--budget", str(args.budget), "--lr", str(args.lr),
                   "--device", args.device, "--dtype", args.dtype]
            env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode:
                rows.append({"set": s, "lib": lib, "method": method, "error": r.stderr[-2000:]})
                print(f"{s} {lib} {method}: FAILED\n{r.stderr[-2000:]}", flush=True)
                continue
            rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    ratios = {}
    for s in args.sets:
        ours = {r["method"]: r["ms_per_iter_median"] for r in rows if r["set"] == s and r["lib"] == "sgpc" and "error" not in r}
        for r in rows:
            if r["set"] == s and r["lib"] != "sgpc" and "error" not in r:
                for m, t in ours.items():
                    ratios[f"{s}: {r['lib']}-{r['method']} / sgpc-{m}"] = r["ms_per_iter_median"] / t
    write(args.name, {"config": {k: v for k, v in vars(args).items() if k != "child"}, "skipped": skipped,
                      "runs": rows, "speed_ratio_peer_over_sgpc": ratios})


if __name__ == "__main__":
    main()
