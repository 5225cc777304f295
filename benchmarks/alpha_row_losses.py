"""Alpha paper, Figure 1 diagnostics: where does the test-NLL gap between two α of one fit come from?

For one set, split and M (the protocol of alpha_uci.py), fits the method cold at α_a and at α_b, and once more
at α_b warm-started from the α_a fit (``warm_start=True``). A warm fit that ends at a higher α_b objective
than the cold one with the same test NLL says the cold fit was not stuck in a worse optimum. Then the test
rows are ordered by their share of the summed gap in −log p(y|x).

    python benchmarks/alpha_row_losses.py --set vowel --split 2 --fraction 0.2 --method arpep --alphas 0.001 0.5

Writes results/<out>.jsonl: the three fits (test NLL, error, final objective, kernel length-scales) and the
rows that make most of the gap.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from _common import write
from alpha_uci import OPT
from scalable_ep_uci import classifier
from sgpc.datasets import DataNotFoundError, train_test


def fit(clf, Xtr, ytr, Xte, yte) -> tuple[dict, np.ndarray]:
    """Fit, and the fit's summary with the test rows' −log p(y|x)."""
    t0 = time.perf_counter()
    clf.fit(Xtr, ytr)
    seconds = time.perf_counter() - t0
    P = clf.predict_proba(Xte)
    loss = -np.log(P[np.arange(len(yte)), np.searchsorted(clf.classes_, yte)])
    ls = clf.model_.kernel.lengthscale.detach().cpu().numpy()
    return {"alpha": clf.alpha, "warm_started": bool(clf.warm_started_), "nll": float(loss.mean()),
            "error": float(np.mean(clf.classes_[P.argmax(1)] != yte)), "steps": len(clf.history_["objective"]),
            "final_objective": clf.history_["objective"][-1], "lengthscale_median": float(np.median(ls)),
            "lengthscale_min": float(ls.min()), "time_s": seconds}, loss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", default="vowel")
    ap.add_argument("--split", type=int, default=2)
    ap.add_argument("--fraction", type=float, default=0.2)
    ap.add_argument("--method", default="arpep", choices=sorted(OPT))
    ap.add_argument("--alphas", nargs=2, type=float, default=[0.001, 0.5], metavar=("A", "B"))
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--rows", type=int, default=5, help="how many of the largest-gap test rows to list")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="alpha_row_losses")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    Xtr, Xte, ytr, yte = train_test(args.set, seed=args.split)
    M = max(1, int(round(args.fraction * len(Xtr))))
    a, b = args.alphas

    def make(alpha):
        return classifier(args.method, M, args.split, args.iters, OPT[args.method], alpha=alpha)

    first = make(a)
    fit_a, loss_a = fit(first, Xtr, ytr, Xte, yte)
    fit_b, loss_b = fit(make(b), Xtr, ytr, Xte, yte)
    first.set_params(alpha=b, warm_start=True)
    fit_warm, _ = fit(first, Xtr, ytr, Xte, yte)
    gap = loss_b - loss_a
    order = np.argsort(-gap)[:args.rows]
    rows = [{"test_row": int(i), "label": int(yte[i]), f"loss_at_{a:g}": float(loss_a[i]),
             f"loss_at_{b:g}": float(loss_b[i]), "share_of_gap": float(gap[i] / gap.sum())} for i in order]
    for f in (fit_a, fit_b, fit_warm):
        print(f"α = {f['alpha']:g}{' (warm)' if f['warm_started'] else ''}: test NLL {f['nll']:.4f}, "
              f"error {f['error']:.3f}, final objective {f['final_objective']:.2f}")
    for r in rows:
        print(r)
    write(args.out, {"config": vars(args), "M": M, "n_test": len(yte), "fits": [fit_a, fit_b, fit_warm],
                     "summed_gap": float(gap.sum()), "rows": rows})


if __name__ == "__main__":
    try:
        main()
    except DataNotFoundError as exc:
        raise SystemExit(f"alpha_row_losses: {exc}")
