"""Alpha-divergence paper §5.2 / Figure 2: inducing-point locations and decision boundaries vs α.

The synthetic 2-D, 3-class problem of the scalable-EP paper (``scalable_ep_inducing.sample_problem``:
1000 points, latent functions drawn from the GP prior, y = argmax), M = 128 inducing points initialised
at the same random training points for every method and α; kernel hyper-parameters fixed at their
true values, so only Z and q are learnt. As in the paper, PEP and APEP are trained in batch and
ARPEP/RPAPEP on minibatches of 100, all with Adam (PEP's sites by its own updates); the paper runs
2000 iterations / epochs, --iters sets ours.

    python benchmarks/paper/alpha_inducing.py [--alphas 0.001 0.5 1] [--iters 200] [--m 128]

Writes results/<--out>.jsonl and .png (default alpha_inducing) (rows: methods, columns: α).
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import RESULTS, write
from scalable_ep_inducing import sample_problem
from sgpc import kernels as K
from sgpc.ep import EP
from sgpc.likelihoods import RobustMax
from sgpc.sep import APEP
from sgpc.sparse import SparseGP, predict_log_proba
from sgpc.train import TrainSettings, fit
from sgpc.vi import VI

ENGINES = {"pep": (lambda a: EP(alpha=a, factor="likelihood"), None),
           "apep": (lambda a: APEP(alpha=a), None),
           "arpep": (lambda a: VI(alpha=a), 100),
           "rpapep": (lambda a: VI(alpha=a, objective="rpapep"), 100)}


def spread(Z: np.ndarray) -> float:
    """Median distance from each inducing point to its nearest neighbour (small = points overlap)."""
    d = np.sqrt(((Z[:, None] - Z[None]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    return float(np.median(d.min(1)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=list(ENGINES))
    ap.add_argument("--alphas", nargs="+", type=float, default=[1e-3, 0.5, 1.0])
    ap.add_argument("--m", type=int, default=128)
    ap.add_argument("--iters", type=int, default=200, help="batch iterations (PEP, APEP) / epochs (ARPEP, RPAPEP)")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--ls", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="alpha_inducing", help="results/<out>.jsonl and .png")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    X, y, _ = sample_problem(args.n, args.ls, 0)
    Z0 = X[np.random.default_rng(0).choice(len(X), args.m, replace=False)].clone()
    grid = torch.stack(torch.meshgrid(torch.linspace(-2.5, 2.5, 80, dtype=torch.float64),
                                      torch.linspace(-2.5, 2.5, 80, dtype=torch.float64), indexing="xy"), -1).reshape(-1, 2)
    runs = []
    for method in args.methods:
        make, batch = ENGINES[method]
        for a in args.alphas:
            kern = K.RBF(2, 3, lengthscale=args.ls, variance=1.0, noise=1e-3)
            for p in kern.parameters():
                p.requires_grad_(False)
            model = SparseGP(kern, RobustMax(3), Z0.expand(3, args.m, 2).clone())
            engine = make(a)
            gen = torch.Generator().manual_seed(0)
            state = engine.init(model, X, y, gen)
            settings = TrainSettings(optimizer="adam", learning_rate=args.lr, max_iter=args.iters,
                                     n_epochs=args.iters if batch else None, batch_size=batch)
            state, hist = fit(model, engine, state, X, y, settings, generator=gen)
            state = engine.update(model, state, X, y, len(X), torch.arange(len(X)))
            q = engine.posterior(model, state)
            acc = float((predict_log_proba(model, q, X).argmax(1) == y).double().mean())
            Z = model.Z.detach().numpy()
            runs.append({"method": method, "alpha": a, "train_accuracy": acc, "time_s": hist.time[-1],
                         "nn_distance": [spread(Zl) for Zl in Z], "Z": Z.tolist(),
                         "grid_pred": predict_log_proba(model, q, grid).argmax(1).tolist()})
            print(f"{method:6s} alpha={a:<6g} train acc {acc:.3f}  median NN distance of Z per latent "
                  f"{np.round(runs[-1]['nn_distance'], 3).tolist()}  {hist.time[-1]:.0f}s", flush=True)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        rows, cols = len(args.methods), len(args.alphas)
        fig, axes = plt.subplots(rows, cols, figsize=(2.2 * cols, 2.2 * rows), squeeze=False)
        colours = np.array(["tab:blue", "tab:red", "tab:green"])
        for r in runs:
            ax = axes[args.methods.index(r["method"]), args.alphas.index(r["alpha"])]
            ax.contour(grid[:, 0].reshape(80, 80), grid[:, 1].reshape(80, 80),
                       np.asarray(r["grid_pred"]).reshape(80, 80), levels=[0.5, 1.5], colors="k", linewidths=1)
            ax.scatter(X[:, 0], X[:, 1], c=colours[y.numpy()], s=1, alpha=0.3)
            for l, Zl in enumerate(np.asarray(r["Z"])):
                ax.scatter(Zl[:, 0], Zl[:, 1], facecolors="none", edgecolors=colours[l], s=10, linewidths=0.8)
            ax.set_xlim(-2.6, 2.6)
            ax.set_ylim(-2.6, 2.6)
            ax.set_title(f"{r['method'].upper()} α={r['alpha']:g}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
        fig.tight_layout()
        RESULTS.mkdir(exist_ok=True)
        fig.savefig(RESULTS / f"{args.out}.png", dpi=55)
        plt.close(fig)
        try:                             # a 64-colour palette keeps the scatter-heavy PNG small (~100 KB)
            from PIL import Image
            Image.open(RESULTS / f"{args.out}.png").convert("RGB").quantize(colors=64).save(
                RESULTS / f"{args.out}.png", optimize=True)
        except ImportError:
            pass
    except ImportError:
        pass
    for r in runs:                       # the decision grids only feed the figure
        r.pop("grid_pred")
    print("wrote", write(args.out, {"config": vars(args), "nn_distance_initial": spread(Z0.numpy()), "runs": runs}))


if __name__ == "__main__":
    main()
