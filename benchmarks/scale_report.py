"""Markdown tables of the scale benchmarks' JSON files (results/scale_*.jsonl, results/peers_throughput.jsonl).

    python benchmarks/scale_report.py        # prints the tables used in docs/results-scale.md
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _load(name):
    p = RESULTS / f"{name}.json"
    return json.loads(p.read_text()) if p.exists() else None


def memory(d):
    print("| mode | method | N | peak RSS (MB) | RSS after imports (MB) | ms/iter | test error | test NLL | load avg |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in d["runs"]:
        extra = f" (output {r['output_mb']:.0f} MB)" if "output_mb" in r else ""
        print(f"| {r['mode']} | {r['method']} | {r['N']:,} | {r['peak_rss_mb']:.0f}{extra} | {r['rss_after_import_mb']:.0f} | "
              f"{r['ms_per_iter']:.0f} | {r['test_error']:.3f} | {r['test_nll']:.3f} | {r['loadavg'][0]:.1f} |")


def peers(d):
    print("| set | library | method | N | M | B | iterations | ms/iter (median) | test NLL | test error | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in d["runs"]:
        if "error" in r:
            print(f"| {r['set']} | {r['lib']} | {r['method']} | failed | | | | | | | |")
            continue
        print(f"| {r['set']} | {r['lib']} | {r['method']} | {r['N']:,} | {r['M']} | {r['B']} | {r['iterations']} | "
              f"{r['ms_per_iter_median']:.0f} | {r['test_nll']:.3f} | {r['test_error']:.3f} | {r['loadavg_before'][0]:.1f} |")
    print()
    for k, v in d["speed_ratio_peer_over_sgpc"].items():
        print(f"- {k}: {v:.2f}")
    if d.get("skipped"):
        print(f"- skipped: {d['skipped']}")


def roofline(d):
    print(f"float64 GEMM throughput (1 thread, measured under the same load): {d['gemm_gflops_float64']:.2f} GFLOP/s\n")
    print("| shape | M | counted GFLOP/step | ms/step measured | ms at GEMM rate | fraction of GEMM rate |")
    print("|---|---|---|---|---|---|")
    for r in d["rows"]:
        print(f"| {r['shape']} | {r['M']} | {r['gflop']:.3f} | {r['ms_per_iter']:.0f} | {r['ms_at_gemm_rate']:.0f} | "
              f"{r['fraction_of_gemm_rate']:.2f} |")
    for shape, ops in d["profile_M200"].items():
        print(f"\nM = 200, {shape}: " + ", ".join(f"{o['op']} {100 * o['share']:.0f}%" for o in ops[:6]))


def flights(d):
    print("| run | processes | iterations | ms/iter | epoch (s, extrapolated) | test error | test NLL | peak RSS (MB) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in d["runs"]:
        if r["kind"] == "logreg":
            print(f"| logistic regression (sklearn, {r['iterations']} L-BFGS its, {r['fit_seconds']:.0f} s) | 1 | | | | "
                  f"{r['final_error']:.4f} | {r['final_nll']:.4f} | {r['peak_rss_mb']:.0f} |")
        else:
            print(f"| {r['kind']} | {r['world_size']} | {r['iterations']} | {r['ms_per_iter']:.0f} | {r['epoch_seconds']:.0f} | "
                  f"{r['final_error']:.4f} | {r['final_nll']:.4f} | {r['peak_rss_mb']:.0f} |")


def main():
    for name, fn in (("scale_memory", memory), ("peers_throughput", peers), ("scale_roofline", roofline),
                     ("scale_flights", flights)):
        d = _load(name)
        if d is None:
            print(f"\n({name}.json not found)\n", file=sys.stderr)
            continue
        print(f"\n### {name}\n\ncommand: `{d['meta']['command']}`\n")
        fn(d)


if __name__ == "__main__":
    main()
