"""Markdown tables for docs/results-bsvm.md from the JSON results of bsvm_uci.py and bsvm_active_learning.py.

    python benchmarks/bsvm_report.py [--uci bsvm_uci bsvm_uci_lr5e-4] [--al bsvm_active_learning_q100]

Prints, for each UCI result, accuracy per set and method with training times and the mean ranks; for
the active-learning result, the mean rank per policy every 10 queries and the error curve of each set.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bsvm_uci import METHODS, SETS, summary

RESULTS = Path(__file__).resolve().parent.parent / "results"


def uci_table(name: str) -> str:
    d = json.loads((RESULTS / f"{name}.json").read_text())
    rows = d["runs"]
    cfg = d["config"]
    by = {(r["set"], r["method"]): r for r in rows if r["seed"] == 0}
    lines = [f"`results/{name}.jsonl` (lr {cfg['lr']}, {cfg['iters']} steps)", "",
             "| set | N train / test | C | BSVM | one-vs-rest BSVM | SVGP (vi) | time (s) BSVM / OvR / SVGP |",
             "|---|---|---|---|---|---|---|"]
    for s in SETS:
        if not all((s, m) in by for m in METHODS):
            continue
        r0 = by[(s, METHODS[0])]
        acc = " | ".join(f"{by[(s, m)]['accuracy']:.3f}" for m in METHODS)
        t = " / ".join(f"{by[(s, m)]['time_s']:.1f}" for m in METHODS)
        lines.append(f"| {s} | {r0['n_train']} / {r0['n_test']} | {r0['n_classes']} | {acc} | {t} |")
    sm = summary(rows)
    lines += ["", "mean rank: " + ", ".join(f"{m} {sm[m]['mean_rank']:.2f}" for m in METHODS if m in sm)
              + f" (n = {sm[METHODS[0]]['n']} sets); median time / BSVM: "
              + ", ".join(f"{m} {sm[m]['median_time_ratio_to_bsvm']:.2f}" for m in METHODS if m in sm)]
    return "\n".join(lines)


def al_table(name: str) -> str:
    d = json.loads((RESULTS / f"{name}.json").read_text())
    mr = d["mean_rank_per_query"]
    policies = list(mr)
    q = len(next(iter(mr.values())))
    marks = list(range(0, q, 10)) + ([q - 1] if (q - 1) % 10 else [])
    lines = [f"`results/{name}.jsonl`", "", "| queries | " + " | ".join(str(k) for k in marks) + " |",
             "|---|" + "---|" * len(marks)]
    for p in policies:
        lines.append(f"| mean rank, {p} | " + " | ".join(f"{mr[p][k]:.2f}" for k in marks) + " |")
    lines += ["", "summary: " + json.dumps(d["summary"]), "",
              "| set | policy | error at 0 | 25 | 50 | 100 queries | mean over queries |", "|---|---|---|---|---|---|---|"]
    for r in d["runs"]:
        e = r["error"]
        pick = [e[min(k, len(e) - 1)] for k in (0, 25, 50, 100)]
        lines.append(f"| {r['set']} | {r['policy']} | " + " | ".join(f"{v:.3f}" for v in pick)
                     + f" | {np.mean(e):.3f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uci", nargs="*", default=["bsvm_uci", "bsvm_uci_lr5e-4"])
    ap.add_argument("--al", nargs="*", default=["bsvm_active_learning_q100"])
    args = ap.parse_args()
    for name in args.uci:
        print(uci_table(name), "\n")
    for name in args.al:
        print(al_table(name), "\n")


if __name__ == "__main__":
    main()
