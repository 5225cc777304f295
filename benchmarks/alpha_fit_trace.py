"""One Figure-1 fit of the alpha paper, with its objective trace: for looking into a single outlying point.

The fit is exactly ``alpha_uci.py``'s (the scalable-EP split, M = fraction × N random training rows as
inducing inputs, PEP with the adaptive rate from 0.1, the other methods L-BFGS from 1.0); the trace is the
objective of the fit history, step by step (``GPClassifier.history_["objective"]``: the energy each
method maximises, summed over the training rows).

    python benchmarks/alpha_fit_trace.py --set satimage --split 4 --fraction 0.05 --alpha 0.001 --methods rpapep arpep
    python benchmarks/alpha_fit_trace.py --set satimage --split 0 --alpha 0.001 --methods pep --init-lengthscale 2

Writes results/<--out>.jsonl: per method the test NLL/error, and the objective every --every steps.
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

from _common import write
from alpha_uci import OPT
from scalable_ep_uci import run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", required=True)
    ap.add_argument("--split", type=int, default=0)
    ap.add_argument("--fraction", type=float, default=0.05)
    ap.add_argument("--alpha", type=float, required=True)
    ap.add_argument("--methods", nargs="+", default=["rpapep", "arpep"])
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--init-lengthscale", type=float, default=None,
                    help="GPClassifier init_lengthscale (default: the library's √D × each feature's spread)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="alpha_fit_trace")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    extra = {} if args.init_lengthscale is None else {"init_lengthscale": args.init_lengthscale}
    for method in args.methods:
        r = run(args.set, method, args.fraction, args.split, args.iters, optimizer=OPT[method], alpha=args.alpha,
                keep_history=True, **extra)
        h = r.pop("history")
        obj = np.asarray(h["objective"], dtype=float)
        r["objective_every"] = args.every
        r["objective"] = obj[::args.every].tolist() + [float(obj[-1])]
        rows.append(r)
        print(f"{method}: test NLL {r['nll']:.3f}, error {r['error']:.3f}, objective {obj[0]:.1f} → {obj[-1]:.1f} "
              f"in {len(obj)} steps", flush=True)
        write(args.out, {"config": vars(args), "runs": rows})
    print("wrote", write(args.out, {"config": vars(args), "runs": rows}))


if __name__ == "__main__":
    main()
