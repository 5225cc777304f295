"""Scalable-EP paper §4.2 / Figure 3: where each method puts the inducing points.

Synthetic problem: 1000 inputs uniform in [-2.5, 2.5]², three latent functions drawn from the GP
prior (RBF, length-scale --ls, amplitude 1, latent noise 1e-3; the paper does not state its values),
y = argmax_k f^k. Kernel hyper-parameters are fixed at their true values; only the inducing inputs
(initialised at the same random training points for every method) and q are learnt. GFITC, EP and SEP
are trained in batch (GFITC: L-BFGS; EP/SEP: the adaptive rate), VI with Adam on minibatches of 100.
The paper runs 2000 iterations / epochs and M = 1 ... 256; --iters and --ms set ours.

    python benchmarks/paper/scalable_ep_inducing.py [--ms 4 16 64] [--iters 300] [--out scalable_ep_inducing]
    python benchmarks/paper/scalable_ep_inducing.py --report results/scalable_ep_inducing.jsonl

Writes results/<out>.jsonl and one PNG per method (results/<out>_<method>.png).
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import RESULTS, shrink_png, write
from sgpc import kernels as K
from sgpc.ep import EP
from sgpc.fitc_ep import GFITC
from sgpc.likelihoods import RobustMax
from sgpc.sep import SEP
from sgpc.sparse import SparseGP, predict_log_proba
from sgpc.train import TrainSettings, fit
from sgpc.vi import VI

SETUP = {"gfitc": (GFITC, "lbfgs", 1.0, None), "ep": (EP, "adaptive", 0.1, None),
         "sep": (SEP, "adaptive", 0.1, None), "vi": (VI, "adam", 0.01, 100)}


def sample_problem(n, ls, seed):
    g = torch.Generator().manual_seed(seed)
    X = (torch.rand(n, 2, generator=g, dtype=torch.float64) - 0.5) * 5.0
    k = K.RBF(2, 3, lengthscale=ls, variance=1.0, noise=1e-3)
    with torch.no_grad():
        Kxx = k(X, X) + 1e-3 * torch.eye(n)
        F = (torch.linalg.cholesky(Kxx) @ torch.randn(3, n, 1, generator=g, dtype=torch.float64))[..., 0]
    return X, F.argmax(0), k


def placement(Z, box=2.6, overlap=0.05):
    """How the inducing inputs Z [L,M,2] of one fit are spread: how many left the data box (|z| > box, where
    the kernel no longer reaches the data: pruned by removal) and how many lie within ``overlap`` of another
    input of the same latent (pruned by coincidence, scalable-ep §4.2)."""
    Z = np.asarray(Z)
    off = int((np.abs(Z) > box).any(-1).sum())
    close = 0
    for z in Z:
        z = z[(np.abs(z) <= box).all(-1)]
        if len(z) > 1:
            D = np.sqrt(((z[:, None] - z[None]) ** 2).sum(-1)) + np.diag(np.full(len(z), np.inf))
            close += int((D.min(1) < overlap).sum())
    return {"off_box": off, "overlapping": close, "total": int(Z.shape[0] * Z.shape[1])}


def report(path):
    """Print train accuracy and inducing-input placement per method and M from a results JSON."""
    from _common import read
    runs = read(path)
    for run in runs:
        for p in run["panels"]:
            st = placement(p["Z"])
            print(f"{run['method']:5s} M={p['M']:4d}: train accuracy {p['train_accuracy']:.3f}, "
                  f"{st['overlapping']:3d} overlapping and {st['off_box']:3d} off-box of {st['total']} inducing inputs")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=["gfitc", "ep", "sep", "vi"])
    ap.add_argument("--ms", nargs="+", type=int, default=[4, 16, 64])
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--ls", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="scalable_ep_inducing", help="results/<out>.jsonl and results/<out>_<method>.png")
    ap.add_argument("--report", metavar="JSON", help="only print accuracy and placement from a results file")
    args = ap.parse_args()
    if args.report:
        return report(args.report)
    torch.set_num_threads(args.threads)
    X, y, true_kernel = sample_problem(args.n, args.ls, 0)
    grid = torch.stack(torch.meshgrid(torch.linspace(-2.5, 2.5, 80, dtype=torch.float64),
                                      torch.linspace(-2.5, 2.5, 80, dtype=torch.float64), indexing="xy"), -1).reshape(-1, 2)
    rng = np.random.default_rng(0)
    out = []
    for method in args.methods:
        panels = []
        for M in args.ms:
            Z0 = X[rng.choice(len(X), M, replace=False)].clone()
            kern = K.RBF(2, 3, lengthscale=args.ls, variance=1.0, noise=1e-3)
            for p in kern.parameters():
                p.requires_grad_(False)
            model = SparseGP(kern, RobustMax(3), Z0.expand(3, M, 2).clone())
            cls, opt, lr, batch = SETUP[method]
            engine = cls()
            gen = torch.Generator().manual_seed(0)
            state = engine.init(model, X, y, gen)
            n_epochs = args.iters if batch else None
            settings = TrainSettings(optimizer=opt, learning_rate=lr, max_iter=args.iters, n_epochs=n_epochs,
                                     batch_size=batch)
            state, hist = fit(model, engine, state, X, y, settings, generator=gen)
            state = engine.update(model, state, X, y, len(X), torch.arange(len(X)))
            lp = predict_log_proba(model, engine.posterior(model, state), grid)
            acc = float((predict_log_proba(model, engine.posterior(model, state), X).argmax(1) == y).double().mean())
            panels.append({"M": M, "Z": model.Z.detach().tolist(), "grid_pred": lp.argmax(1).tolist(),  # for the plot
                           "train_accuracy": acc, "time_s": hist.time[-1], **placement(model.Z.detach())})
            print(f"{method:5s} M={M:4d}: train accuracy {acc:.3f}, {hist.time[-1]:.1f}s", flush=True)
        out.append({"method": method, "panels": panels})
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, axes = plt.subplots(1, len(args.ms), figsize=(2.6 * len(args.ms), 2.7))
            for ax, pnl in zip(np.atleast_1d(axes), panels):
                ax.contour(grid[:, 0].reshape(80, 80), grid[:, 1].reshape(80, 80),
                           np.asarray(pnl["grid_pred"]).reshape(80, 80), levels=[0.5, 1.5], colors="k", linewidths=1)
                ax.scatter(X[:, 0], X[:, 1], c=np.array(["tab:blue", "tab:red", "tab:green"])[y.numpy()], s=2, alpha=0.4)
                Z = np.asarray(pnl["Z"]).reshape(-1, 2)
                ax.scatter(Z[:, 0], Z[:, 1], facecolors="none", edgecolors="k", s=18)
                outside = int((np.abs(Z) > 2.6).any(1).sum())
                ax.set_xlim(-2.6, 2.6)
                ax.set_ylim(-2.6, 2.6)
                ax.set_title(f"{method.upper()} M={pnl['M']}" + (f" ({outside} Z off-plot)" if outside else ""),
                             fontsize=8)
                ax.set_xticks([])
                ax.set_yticks([])
            fig.tight_layout()
            RESULTS.mkdir(exist_ok=True)
            fig.savefig(RESULTS / f"{args.out}_{method}.png", dpi=60)
            plt.close(fig)
            shrink_png(RESULTS / f"{args.out}_{method}.png")
        except ImportError:
            pass
    for run in out:                      # the 80x80 decision grids only feed the figures
        for pnl in run["panels"]:
            pnl.pop("grid_pred")
    print("wrote", write(args.out, {"config": vars(args), "runs": out}))


if __name__ == "__main__":
    main()
