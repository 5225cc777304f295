"""Accuracy of P(f_c is the largest) against scipy's adaptive quadrature over class-variance ratios.

For each variance ratio r, 30 random rows (2–5 classes, means N(0, 1.5²), variances spanning 0.3 … 0.3·r):
the largest absolute error of the predictive table (``log_prob_largest``, 64 nodes, as predictions use it)
and of the label variant (``log_prob_label_largest``, 32 nodes, as training objectives use it).

    OMP_NUM_THREADS=1 python benchmarks/quadrature_accuracy.py --name quadrature_accuracy
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
from scipy import integrate, stats

from _common import write
from sgpc import quadrature as Q


def reference(m, v, c):
    s = np.sqrt(v)
    f = lambda t: stats.norm.pdf(t, m[c], s[c]) * np.prod([stats.norm.cdf((t - m[j]) / s[j])
                                                            for j in range(len(m)) if j != c])
    lo, hi = m[c] - 12 * s[c], m[c] + 12 * s[c]
    pts = sorted({float(p) for p in np.concatenate([m - 3 * s, m, m + 3 * s]) if lo < p < hi})
    return integrate.quad(f, lo, hi, points=pts, limit=500, epsabs=1e-14, epsrel=1e-12)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ratios", nargs="+", type=float, default=[1, 3, 10, 30, 100, 1e3, 1e4])
    ap.add_argument("--rows", type=int, default=30)
    ap.add_argument("--name", default="quadrature_accuracy")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for r in args.ratios:
        err_pred, err_label = 0.0, 0.0
        for _ in range(args.rows):
            C = int(rng.integers(2, 6))
            m = rng.normal(size=C) * 1.5
            v = np.exp(rng.uniform(0, np.log(r), size=C)) * 0.3
            v[rng.integers(C)] = 0.3
            v[rng.integers(C)] = 0.3 * r
            mt, vt = torch.tensor(m)[None], torch.tensor(v)[None]
            ref = np.array([reference(m, v, c) for c in range(C)])
            pred = Q.log_prob_largest(mt, vt, 64).exp()[0].numpy()
            label = np.array([Q.log_prob_label_largest(torch.tensor([c]), mt, vt, 32).exp().item() for c in range(C)])
            err_pred = max(err_pred, float(np.abs(pred - ref).max()))
            err_label = max(err_label, float(np.abs(label - ref).max()))
        rows.append({"variance_ratio": r, "max_error_predict_64": err_pred, "max_error_label_32": err_label})
        print(f"variance ratio {r:g}: predictions {err_pred:.2e}, label variant {err_label:.2e}")
    write(args.name, {"config": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
