"""Scalable-EP paper §4.4 / Figure 5 (top): MNIST, M = 200, minibatches of 200, Adam.

EP, SEP and VI are trained for a wall-clock budget each; every --eval-every steps the 10 000 test
images are evaluated (excluded from the clock). The paper reports SEP 2.08% / 0.0725 and
VI 2.02% / 0.0686 (error / NLL) after long runs; we record how far each method gets in the budget
and the time at which the test NLL first reaches 0.0725, if it does, and the time (initialisation — k-means,
model and engine state — included) at which NLL ≤ 0.0725 and error ≤ 2.1% both hold (issue 41's MNIST target).

    python benchmarks/paper/scalable_ep_mnist.py [--minutes 10] [--methods sep vi ep] [--scale unit]
    python benchmarks/paper/scalable_ep_mnist.py --methods apep arpep --alphas 0.5 1.0 --scale unit   # alpha paper Fig. 4
    python benchmarks/paper/scalable_ep_mnist.py --device cuda --methods vi --scale unit --z-per-latent \
        --batch 1000 --lr 0.03 --minutes 1 --eval-every 500 --out scalable_ep_mnist_gpu        # on a GPU

--scale unit keeps the pixels in [0, 1]; the default standardises each pixel, which makes the pixels lit in
only a few training images dominate the distances (it trains about twice as slowly, see docs/results.md).

Writes results/scalable_ep_mnist.jsonl (+ .png).
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
from sgpc import kernels as K
from sgpc.datasets import train_test
from sgpc.ep import EP
from sgpc.likelihoods import RobustMax
from sgpc.sep import APEP, SEP
from sgpc.sparse import SparseGP, init_inducing, predict_log_proba
from sgpc.train import TrainSettings, fit
from sgpc.vi import VI

TARGET_NLL = 0.0725
TARGET_ERROR = 0.021     # the paper's SEP error is 2.08%; issue 41 asks for <= 2.1% with the NLL


ALPHA_METHODS = ("pep", "apep", "arpep", "rpapep")


def make_engine(method: str, alpha: float | None, sep_log_z: str = "local", natgrad_lr: float | None = None):
    """The engine of ``method`` (robust-max pairwise factors for EP/SEP, as §4.4; α-methods as the estimator)."""
    if method == "pep":
        return EP(alpha=alpha, factor="likelihood")
    if method == "apep":
        return APEP(alpha=alpha)
    if method == "arpep":
        return VI(alpha=alpha)
    if method == "rpapep":
        return VI(alpha=alpha, objective="rpapep")
    return {"ep": EP(), "sep": SEP(log_z=sep_log_z), "vi": VI(natgrad_lr=natgrad_lr)}[method]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=["sep", "vi", "ep"],
                    help="ep, sep, vi, and the alpha-divergence methods pep, apep, arpep, rpapep (run at each --alphas)")
    ap.add_argument("--alphas", nargs="+", type=float, default=[0.5],
                    help="alpha values for pep/apep/arpep/rpapep (alpha paper Fig. 4 / D.10)")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--M", type=int, default=200)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--lr-decay", type=float, default=1.0, help="Adam rate factor per pass over the data")
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help='"cpu" or "cuda"')
    ap.add_argument("--sep-log-z", default="local", choices=["local", "tied"],
                    help="SEP's log Z_q estimate for the hyper-parameter gradient (sgpc.sep; 'tied' before 2026-11-23)")
    ap.add_argument("--z-per-latent", action="store_true",
                    help="one set of M inducing inputs per class ([L,M,D], the paper's X̄^k of §2.1), all starting at "
                         "the same k-means centres; default: one set [M,D] shared by the classes")
    ap.add_argument("--natgrad-lr", type=float, default=None,
                    help="vi: natural-gradient steps of size γ for q(u), Adam for the rest (sgpc.vi.VI.natgrad_lr)")
    ap.add_argument("--out", default="scalable_ep_mnist", help="results/<out>.jsonl")
    ap.add_argument("--scale", default="standardize", choices=["standardize", "unit"],
                    help="standardize: per-pixel zero mean / unit std (length-scales start at sqrt(D)); "
                         "unit: pixels in [0, 1] as loaded (length-scales start at the RMS distance / sqrt(2) of a sample)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dt = getattr(torch, args.dtype)
    Xtr, Xte, ytr, yte = train_test("mnist", standardize=args.scale == "standardize")
    lengthscale = None                                             # sqrt(D)
    if args.scale == "unit":
        # a pixel lit in a handful of training images has a tiny std: standardised, it puts those images
        # (and test images with the same rare pixel) hundreds of units away from everything else
        sub = Xtr[np.random.default_rng(0).choice(len(Xtr), 2000, replace=False)]
        sq = (sub * sub).sum(1)
        lengthscale = float(np.sqrt(np.mean(sq[:, None] + sq[None, :] - 2 * sub @ sub.T) / 2))
    classes = np.unique(ytr)
    dev = torch.device(args.device)
    Xtr_t, Xte_t = torch.as_tensor(Xtr, dtype=dt, device=dev), torch.as_tensor(Xte, dtype=dt, device=dev)
    ytr_t = torch.as_tensor(np.searchsorted(classes, ytr), device=dev)
    yte_t = torch.as_tensor(np.searchsorted(classes, yte), device=dev)
    t_kmeans = time.perf_counter()
    Z0 = init_inducing(Xtr, args.M, "kmeans", seed=0)
    t_kmeans = time.perf_counter() - t_kmeans       # initialisation counts in the time to the target (issue 41)
    if args.z_per_latent:
        Z0 = np.repeat(Z0[None], len(classes), axis=0)
    runs = []
    jobs = [(m, a) for m in args.methods for a in (args.alphas if m in ALPHA_METHODS else [None])]
    for method, alpha in jobs:
        torch.manual_seed(0)
        t_init = time.perf_counter()
        D, C = Xtr.shape[1], len(classes)
        model = SparseGP(K.RBF(D, C, noise=1e-2, lengthscale=lengthscale, dtype=dt), RobustMax(C), torch.as_tensor(Z0, dtype=dt)).to(dev, dt)
        engine = make_engine(method, alpha, args.sep_log_z, args.natgrad_lr)
        gen = torch.Generator().manual_seed(0)
        state = engine.init(model, Xtr_t, ytr_t, gen)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        init_s = t_kmeans + time.perf_counter() - t_init     # k-means, model and engine state

        cpu = {"start": time.process_time(), "eval": 0.0}

        def validate(model, st):
            # training CPU seconds of this process so far (evaluations excluded): unlike the wall clock
            # they do not grow when other jobs share the core (they include ~1 s of set-up the clock excludes)
            t0 = time.process_time()
            train_cpu = t0 - cpu["start"] - cpu["eval"]
            lp = predict_log_proba(model, engine.posterior(model, st), Xte_t, batch_size=2000)
            amp = model.kernel.variance.detach().double().cpu()          # the kernel amplitudes σ² [L]
            out = {"error": float((lp.argmax(1) != yte_t).double().mean()),
                   "nll": float(-lp.gather(1, yte_t[:, None]).double().mean()), "cpu_s": train_cpu,
                   "amplitude_min": float(amp.min()), "amplitude_median": float(amp.median()),
                   "amplitude_max": float(amp.max())}
            cpu["eval"] += time.process_time() - t0
            # progress while the run goes on (the full curve with wall-clock times is printed at the end)
            print(f"{method:4s} alpha={alpha} cpu={train_cpu:7.1f}s err={out['error']:.4f} nll={out['nll']:.4f}", flush=True)
            return out

        settings = TrainSettings(optimizer="adam", learning_rate=args.lr, lr_decay=args.lr_decay, max_iter=10 ** 9,
                                 batch_size=args.batch,
                                 eval_every=args.eval_every, max_time=60 * args.minutes)
        state, hist = fit(model, engine, state, Xtr_t, ytr_t, settings, generator=gen, validate=validate,
                          callback=None)
        rows = hist.validation
        for r in rows:
            print(f"{method:4s} alpha={alpha} t={r['time']:7.1f}s steps={r['iteration']:6d} err={r['error']:.4f} nll={r['nll']:.4f}", flush=True)
        reached = next((r["time"] for r in rows if r["nll"] <= TARGET_NLL), None)
        both = next((r["time"] for r in rows if r["nll"] <= TARGET_NLL and r["error"] <= TARGET_ERROR), None)
        print(f"{method:4s} initialisation {init_s:.1f} s; test NLL <= {TARGET_NLL} after {reached} s of training, "
              f"and error <= {TARGET_ERROR} too after {both} s", flush=True)
        runs.append({"method": method, "alpha": alpha, "curve": rows, "events": hist.events, "time_to_nll_0.0725": reached,
                     "init_s": init_s,
                     "time_to_nll_0.0725_and_error_0.021_with_init": None if both is None else both + init_s,
                     "lengthscale0": lengthscale})
        write(args.out, {"config": vars(args), "runs": runs})
    path = write(args.out, {"config": vars(args), "runs": runs})
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(7, 3))
        for r in runs:
            t = [c["time"] for c in r["curve"]]
            name = r["method"].upper() + ("" if r["alpha"] is None else f" α={r['alpha']:g}")
            ax[0].plot(t, [c["error"] for c in r["curve"]], label=name)
            ax[1].plot(t, [c["nll"] for c in r["curve"]], label=name)
        ax[0].set_ylabel("test error")
        ax[1].set_ylabel("test NLL")
        ax[1].axhline(TARGET_NLL, ls=":", c="k")
        for a in ax:
            a.set_xlabel("training time (s)")
        ax[0].legend()
        fig.tight_layout()
        fig.savefig(path.with_suffix(".png"), dpi=70)
    except ImportError:
        pass
    print("wrote", path)


if __name__ == "__main__":
    main()
