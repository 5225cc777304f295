"""Alpha-divergence paper, Tables C.3/C.4: an MCMC reference beside PEP at α → 0, 0.5 and 1.

For each set and split (the scalable-EP splits, ``sgpc.datasets.train_test``): PEP with M = --fraction
of N random inducing points, --iters iterations of the adaptive rate of App. A, at each α; then the
full GP: EP (PEP at α = 1) with every training input as a fixed inducing input (Z = X, M = N: the
non-sparse model) for its hyper-parameters, and elliptical slice sampling (``sgpc.mcmc``) of that
model with them, --burn-in + --samples × --thin iterations. MCMC is the exact posterior of the full
GP up to sampling error — the reference that full EP, and less directly the sparse approximations,
should approach; it does not learn hyper-parameters. (With the sparse fit's hyper-parameters instead
— ``--hyper sparse`` — the full GP overfits: test NLL above the sparse fits' on glass, svmguide2 and
waveform.) α → 0 is run as α = 1e-3.

    python benchmarks/paper/alpha_mcmc.py --sets glass new-thyroid wine svmguide2 waveform --splits 3
    python benchmarks/paper/alpha_mcmc.py --sets glass --splits 1 --alphas 1 --chains 4 --start ep   # mixing check
    python benchmarks/paper/alpha_mcmc.py --sets glass --splits 1 --alphas 1 --chains 4 --start ep --sampler ep
    python benchmarks/paper/alpha_mcmc.py --sets glass --splits 1 --alphas 1 --chains 4 --start ep --sampler gibbs
    python benchmarks/paper/alpha_mcmc.py --sets svmguide2 --splits 1 --alphas 1 --chains 4 --start ep --sampler gibbs --row-sweep-every 10

Writes results/<--out>.jsonl: test NLL and error of every fit and of MCMC, and MCMC's time and
proposals per iteration.
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
from sgpc import GPClassifier
from sgpc.datasets import train_test
from sgpc.metrics import nll as mean_nll
from sgpc.mcmc import (elliptical_slice, posterior_reference, predict_log_proba, prior_cholesky, robust_max_gibbs,
                       split_rhat)
from sgpc.sparse import marginals


def evaluate(proba: np.ndarray, classes: np.ndarray, y: np.ndarray) -> dict:
    idx = np.searchsorted(classes, y)
    return {"nll": float(mean_nll(idx, proba)), "error": float(np.mean(classes[proba.argmax(1)] != y))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=["glass", "new-thyroid", "wine", "svmguide2", "waveform"])
    ap.add_argument("--splits", type=int, default=3)
    ap.add_argument("--alphas", nargs="+", type=float, default=[0.001, 0.5, 1.0])
    ap.add_argument("--fraction", type=float, default=0.1)
    ap.add_argument("--iters", type=int, default=250)
    ap.add_argument("--burn-in", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--thin", type=int, default=5)
    ap.add_argument("--hyper", choices=["full", "sparse"], default="full",
                    help="hyper-parameters for MCMC: of full EP (Z = X), or of the sparse α = 1 fit")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--chains", type=int, default=1, help="independent chains (split-R̂ of the log-likelihood with >= 1)")
    ap.add_argument("--start", choices=["zero", "ep"], default="zero",
                    help="chain starts: F = 0, or full EP's latent means plus 2 EP standard deviations of noise per chain")
    ap.add_argument("--sampler", choices=["prior", "ep", "gibbs"], default="prior",
                    help="ellipses from the prior (plain elliptical slice), around full EP's joint q(F) "
                         "(generalised elliptical slice, sgpc.mcmc.posterior_reference), or Gibbs on the "
                         "robust-max label-noise indicators with exact HMC of F (sgpc.mcmc.robust_max_gibbs); "
                         "the target is the same")
    ap.add_argument("--row-sweep-every", type=int, default=0,
                    help="with --sampler gibbs: every that many iterations a sweep draws each point's (z_i, f_i) from "
                         "its conditional given the others (robust_max_gibbs row_sweep_every; 0 = none)")
    ap.add_argument("--out", default="alpha_mcmc")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if 1.0 not in args.alphas:
        raise SystemExit("--alphas must include 1 (MCMC uses the EP fit's hyper-parameters)")
    rows = []
    for name in args.sets:
        for seed in range(args.splits):
            Xtr, Xte, ytr, yte = train_test(name, seed=seed)
            M = max(1, int(round(args.fraction * len(Xtr))))
            fits = {}
            for alpha in args.alphas:
                clf = GPClassifier(tol=None, method="pep", method_params={"alpha": alpha}, n_inducing=M, inducing_params={"init": "random"}, optimizer="adaptive",
                                   learning_rate=0.1, max_iter=args.iters, random_state=seed)
                t0 = time.perf_counter()
                clf.fit(Xtr, ytr)
                t = time.perf_counter() - t0
                fits[alpha] = clf
                rows.append({"set": name, "seed": seed, "method": "pep", "alpha": alpha, "M": M, "time_s": t,
                             **evaluate(clf.predict_proba(Xte), clf.classes_, yte)})
                print(f"{name:12s} split {seed} pep α={alpha:<5g} nll {rows[-1]['nll']:.3f} err {rows[-1]['error']:.3f} "
                      f"t={t:.0f}s", flush=True)
            ep = fits[1.0]
            if args.hyper == "full":
                ep = GPClassifier(tol=None, method="pep", method_params={"alpha": 1.0}, n_inducing=len(Xtr),
                                  inducing_params={"init": "random", "learn": False}, optimizer="adaptive", learning_rate=0.1, max_iter=args.iters,
                                  random_state=seed)
                t0 = time.perf_counter()
                ep.fit(Xtr, ytr)
                rows.append({"set": name, "seed": seed, "method": "ep_full", "alpha": 1.0, "M": len(Xtr),
                             "time_s": time.perf_counter() - t0, **evaluate(ep.predict_proba(Xte), ep.classes_, yte)})
                print(f"{name:12s} split {seed} full EP      nll {rows[-1]['nll']:.3f} err {rows[-1]['error']:.3f} "
                      f"t={rows[-1]['time_s']:.0f}s", flush=True)
            kern, lik = ep.model_.kernel, ep.model_.likelihood
            X = torch.as_tensor(Xtr, dtype=torch.float64)
            y = torch.as_tensor(np.searchsorted(ep.classes_, ytr))
            t0 = time.perf_counter()
            chol = prior_cholesky(kern, X)
            g = torch.Generator().manual_seed(seed)
            if args.start == "ep":
                mean, var = marginals(ep.model_, ep.posterior_, X)                   # [N,L]
            reference = posterior_reference(ep.model_, ep.posterior_, X) if args.sampler == "ep" else None
            chains, traces, proposals, noise_counts = [], [], [], []
            for c in range(args.chains):
                f0 = None
                if args.start == "ep":   # over-dispersed around full EP's marginals, so that R̂ can see disagreement
                    f0 = (mean + 2.0 * var.sqrt() * torch.randn(mean.shape, generator=g, dtype=mean.dtype)).T
                if args.sampler == "gibbs":
                    smp, info = robust_max_gibbs(chol, y, lik, args.samples, burn_in=args.burn_in,
                                                 thin=args.thin, f0=f0, row_sweep_every=args.row_sweep_every,
                                                 generator=g)
                    proposals.append(info["bounces_per_iteration"])         # reflections of exact HMC
                    noise_counts.append(info["noise_labels"])
                else:
                    smp, info = elliptical_slice(lambda F: lik.log_prob(y, F.T).sum(), chol, args.samples,
                                                 burn_in=args.burn_in, thin=args.thin, f0=f0, reference=reference,
                                                 generator=g)
                    proposals.append(info["proposals_per_iteration"])
                chains.append(smp)
                traces.append(info["log_lik"])
            samples = torch.cat(chains)
            Xt = torch.as_tensor(Xte, dtype=torch.float64)
            lp = predict_log_proba(kern, lik, X, chol, samples, Xt)
            # each chain's own predictive: chains that agree here have mixed for what the table reports, even
            # where a slow discrete quantity (robust-max's count of noise labels in the log-likelihood) has not
            per_chain = [evaluate(predict_log_proba(kern, lik, X, chol, ch, Xt).exp().numpy(), ep.classes_, yte)["nll"]
                         for ch in chains]
            t = time.perf_counter() - t0
            rows.append({"set": name, "seed": seed, "method": "mcmc", "alpha": None, "hyper": args.hyper, "M": len(Xtr), "time_s": t,
                         "chains": args.chains, "start": args.start, "sampler": args.sampler,
                         # ellipse proposals per iteration, or with --sampler gibbs HMC reflections per iteration
                         "proposals_per_iteration": float(np.mean(proposals)),
                         "rhat_log_lik": split_rhat(torch.stack(traces)) if args.samples >= 4 else None,
                         "log_lik_chain_means": [float(tr.mean()) for tr in traces],
                         "test_nll_per_chain": per_chain,
                         "noise_labels_per_chain": noise_counts or None,      # mean count of z = noise (gibbs)
                         "train_error_last_sample": [float((ch[-1].argmax(0) != y).double().mean()) for ch in chains],
                         **evaluate(lp.exp().numpy(), ep.classes_, yte)})
            print(f"{name:12s} split {seed} mcmc         nll {rows[-1]['nll']:.3f} err {rows[-1]['error']:.3f} "
                  f"t={t:.0f}s ({rows[-1]['proposals_per_iteration']:.1f} "
                  f"{'reflections' if args.sampler == 'gibbs' else 'proposals'}/iteration, "
                  f"split-R̂ of log-lik {rows[-1]['rhat_log_lik']}, test NLL per chain {np.round(per_chain, 3).tolist()}, "
                  f"last-sample train error {rows[-1]['train_error_last_sample']})",
                  flush=True)
            write(args.out, {"config": vars(args), "runs": rows, "summary": summarise(rows)})
    path = write(args.out, {"config": vars(args), "runs": rows, "summary": summarise(rows)})
    for r in summarise(rows):
        print(r)
    print("wrote", path)


def summarise(rows: list[dict]) -> list[dict]:
    """Mean test NLL and error per set and (method, α) over the splits."""
    cells = {}
    for r in rows:
        cells.setdefault((r["set"], r["method"], r["alpha"]), []).append(r)
    return [{"set": s, "method": m, "alpha": a, "n": len(rs), "nll": float(np.mean([r["nll"] for r in rs])),
             "error": float(np.mean([r["error"] for r in rs])), "time_s": float(np.mean([r["time_s"] for r in rs]))}
            for (s, m, a), rs in cells.items()]


if __name__ == "__main__":
    main()
