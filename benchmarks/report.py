"""Regenerate the tables of docs/results/*.md from results/<experiment>.jsonl.

    python benchmarks/report.py            # rewrites every block between <!-- report:NAME --> and <!-- /report -->

Each block is one function of the JSONL lines below (TABLES); the prose around the blocks is hand-written. The
papers' numbers come from the constants of the scripts that reproduce them (read with ``ast``, nothing imported).
"""
from __future__ import annotations

import ast
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import read  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "results"


def paper_constant(script: str, name: str):
    """The literal ``name = ...`` of benchmarks/paper/<script>.py."""
    tree = ast.parse((ROOT / "benchmarks" / "paper" / f"{script}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(name)


def mean_se(xs):
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    se = (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 / len(xs) ** 0.5 if len(xs) > 1 else 0.0
    return m, se


def fmt(x, d=2):
    return "—" if x is None else f"{x:.{d}f}"


def table(header, rows):
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] +
                     ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def group(rows, *keys):
    g = defaultdict(list)
    for r in rows:
        g[tuple(r.get(k) for k in keys)].append(r)
    return g


# ---- scalable-EP paper --------------------------------------------------------------------------------------
def scalable_ep_tables(metric):
    def make():
        rows = read("scalable_ep_uci")
        paper = paper_constant("scalable_ep_uci", "PAPER_NLL" if metric == "nll" else "PAPER_ERR")
        methods = ["gfitc", "ep", "sep", "vi"]
        g = group(rows, "set", "method", "fraction")
        out = []
        for i, frac in enumerate((0.05, 0.1, 0.2)):
            body = []
            for s in sorted(paper):
                cells = []
                for m in methods:
                    mu, se = mean_se([r[metric] for r in g.get((s, m, frac), [])])
                    cells.append(f"{fmt(mu)} ± {fmt(se)} ({fmt(paper[s][m][i])})" if mu is not None else "—")
                body.append([s] + cells)
            n = sorted({len(v) for k, v in g.items() if k[2] == frac})
            out.append(f"**M = {frac:.0%} of N** (splits per cell: {', '.join(map(str, n))})\n\n" +
                       table(["set", "GFITC", "EP", "SEP", "VI"], body))
        return "\n\n".join(out)
    return make


def scalable_ep_time():
    rows = read("scalable_ep_satimage_time")
    g = group(rows, "M", "method")
    body = [[M] + [(lambda c: f"{c['nll'][-1]:.3f} / {c['error'][-1]:.3f} / {c['time'][-1]:.1f} s" if c else "—")(
        (g.get((M, m)) or [None])[-1]) for m in ("sep", "ep", "vi", "gfitc")] for M in sorted({k[0] for k in g})]
    return table(["M", "SEP NLL / error / time", "EP", "VI", "GFITC"], body)


def scalable_ep_mnist():
    rows = read("scalable_ep_mnist")
    body = []
    for r in rows:
        ev = r.get("curve") or []
        last = ev[-1] if ev else r
        body.append([r.get("variant"), r.get("method"), fmt(last.get("error"), 4), fmt(last.get("nll"), 4),
                     fmt(last.get("time", r.get("time_s")), 0)])
    return table(["run", "method", "test error", "test NLL", "time (s)"], body)


# ---- alpha-divergence paper ---------------------------------------------------------------------------------
ALPHAS = (0.001, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def alpha_ranks():
    rows = read("alpha_uci")
    out = []
    for frac in (0.05, 0.1, 0.2):
        rs = [r for r in rows if abs(r["fraction"] - frac) < 1e-9]
        groups = group(rs, "method", "set", "seed")
        ranks = defaultdict(list)
        for (method, _, _), g in groups.items():
            if len(g) != len(ALPHAS):
                continue
            for k, r in enumerate(sorted(g, key=lambda r: r["nll"]), 1):
                ranks[(method, r["alpha"])].append(k)
        body = []
        for method in ("pep", "apep", "arpep", "rpapep"):
            vals = [sum(ranks[(method, a)]) / len(ranks[(method, a)]) if ranks[(method, a)] else None for a in ALPHAS]
            best = min(v for v in vals if v is not None)
            body.append([method.upper(), len(ranks[(method, 1.0)])] +
                        [f"**{v:.2f}**" if v == best else fmt(v) for v in vals])
        out.append(f"**M = {frac:.0%} of N**: {len(rs)} fits\n\n" +
                   table(["method", "groups"] + ["10⁻³" if a == 0.001 else f"{a:g}" for a in ALPHAS], body))
    return "\n\n".join(out)


def alpha_nll_by_set():
    rows = read("alpha_uci")
    g = group(rows, "set", "method", "fraction", "alpha")
    body = []
    for s in sorted({r["set"] for r in rows}):
        for method in ("pep", "apep", "arpep", "rpapep"):
            cells = [fmt(mean_se([r["nll"] for r in g.get((s, method, 0.1, a), [])])[0], 3) for a in (0.001, 0.5, 1.0)]
            body.append([s, method.upper()] + cells)
    return table(["set", "method", "α = 10⁻³", "α = 0.5", "α = 1"], body)


def alpha_time():
    rows = read("alpha_satimage_time")
    g = group(rows, "M", "method", "alpha")
    body = []
    for (M, method, a), cs in sorted(g.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0)):
        mu, se = mean_se([c["nll"][-1] for c in cs])
        body.append([M, method.upper(), "—" if a is None else f"{a:g}", len(cs), f"{mu:.3f} ± {se:.3f}"])
    return table(["M", "method", "α", "splits", "final test NLL"], body)


def alpha_active():
    rows = read("alpha_active_learning")
    g = group(rows, "method", "alpha", "repeat")
    diffs = defaultdict(list)
    for (method, a, _), rs in g.items():
        by = {r["policy"]: r["error"][-1] for r in rs}
        if {"entropy", "random"} <= set(by):
            diffs[(method, a)].append(by["entropy"] - by["random"])
    body = [[m.upper(), f"{a:g}", len(d), f"{mean_se(d)[0]:+.4f} ± {mean_se(d)[1]:.4f}"] for (m, a), d in sorted(diffs.items())]
    return table(["method", "α", "repetitions", "final error, entropy − random (mean ± s.e.)"], body)


def alpha_mcmc():
    rows = read("alpha_mcmc")
    g = group(rows, "sampler", "set", "method", "alpha")
    body = []
    for (sampler, s, method, a), rs in sorted(g.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        body.append([sampler, s, method, "—" if a is None else f"{a:g}", len(rs), fmt(mean_se([r["nll"] for r in rs])[0], 3),
                     fmt(mean_se([r["error"] for r in rs])[0], 3)])
    return table(["sampler run", "set", "method", "α", "splits", "test NLL", "test error"], body)


# ---- additive-noise paper -----------------------------------------------------------------------------------
def additive_tables():
    rows = read("additive_uci")
    paper = paper_constant("additive_uci", "PAPER")
    models = ["GPC-I", "GPC-II", "GPC-III", "GPCsm"]
    g = group(rows, "dataset", "model")
    body = []
    for s in sorted({r["dataset"] for r in rows}):
        pa, pn = paper.get(s, ([None] * 4, [None] * 4))
        cells = []
        for i, m in enumerate(models):
            rs = g.get((s, m), [])
            acc, nll = mean_se([100 * r["accuracy"] for r in rs])[0], mean_se([r["nll"] for r in rs])[0]
            cells.append("—" if acc is None else f"{acc:.2f} / {nll:.4f} ({fmt(pa[i])} / {fmt(pn[i], 4)})")
        body.append([s] + cells)
    return table(["set"] + [f"{m} acc % / NLL (paper)" for m in models], body)


def additive_delta():
    rows = read("additive_delta")
    return table(["set", "δ", "final δ", "final test accuracy"], [
        [r.get("dataset"), "learned" if r.get("learn_delta") else "fixed", fmt(r.get("final_delta"), 4),
         fmt(r.get("accuracy", (r.get("curve") or [{}])[-1].get("accuracy")), 4)] for r in rows])


# ---- multi-class Bayesian SVM paper -------------------------------------------------------------------------
def bsvm_uci():
    rows = read("bsvm_uci")
    out = []
    for variant in sorted({r["variant"] for r in rows}):
        rs = [r for r in rows if r["variant"] == variant]
        methods = sorted({r["method"] for r in rs})
        g = group(rs, "set", "method")
        body = [[s] + [fmt(mean_se([r["accuracy"] for r in g.get((s, m), [])])[0], 3) for m in methods]
                for s in sorted({r["set"] for r in rs})]
        out.append(f"**{variant}** (test accuracy, mean over splits)\n\n" + table(["set"] + methods, body))
    return "\n\n".join(out)


def bsvm_active():
    rows = read("bsvm_active_learning")
    g = group(rows, "set", "policy")
    policies = sorted({r["policy"] for r in rows})
    body = [[s] + [fmt(mean_se([r["error"][-1] for r in g.get((s, p), [])])[0], 3) for p in policies]
            for s in sorted({r["set"] for r in rows})]
    return table(["set"] + [f"final error, {p}" for p in policies], body)


# ---- robust multi-class GPC ---------------------------------------------------------------------------------
def rmgpc_synthetic():
    rows = read("rmgpc_synthetic")
    paper = paper_constant("rmgpc_synthetic", "PAPER")
    g = group(rows, "scenario")
    body = []
    for sc, rs in sorted(g.items()):
        r_mu, r_se = mean_se([r["rmgpc"] for r in rs])
        s_mu, s_se = mean_se([r["smgpc"] for r in rs])
        p = paper.get(str(sc[0]), (None, None))
        body.append([sc[0], len(rs), f"{100 * r_mu:.1f} ± {100 * r_se:.1f} ({fmt(p[0], 1)})",
                     f"{100 * s_mu:.1f} ± {100 * s_se:.1f} ({fmt(p[1], 1)})"])
    return table(["scenario", "realisations", "RMGPC test error % (paper)", "SMGPC test error % (paper)"], body)


def rmgpc_noise():
    rows = [r for r in read("rmgpc_label_noise") if r["method"] != "vi" or r.get("vi_adam")]
    g = group(rows, "set", "noise", "method")
    methods = sorted({r["method"] for r in rows})
    body = [[s, f"{n:g}"] + [fmt(mean_se([r["error"] for r in g.get((s, n, m), [])])[0], 3) for m in methods]
            for s, n in sorted({(r["set"], r["noise"]) for r in rows})]
    return table(["set", "label noise"] + [f"{m} test error" for m in methods], body)


# ---- scale and throughput -----------------------------------------------------------------------------------
def peers():
    rows = read("peers_throughput")
    body = [[r["set"], r.get("device", "cpu"), r["lib"], r["method"], fmt(r["ms_per_iter_median"], 1), fmt(r.get("test_nll"), 3)]
            for r in rows if r.get("ms_per_iter_median") is not None]
    return table(["shape", "device", "library", "model", "ms / iteration (median)", "test NLL at the end"], body)


def vi_throughput():
    rows = read("vi_throughput")
    keys = ["M", "C", "D", "B", "dtype", "shared_inducing"]
    return table(keys + ["ms / step (median)"], [[r[k] for k in keys] + [fmt(r["ms_per_iter"], 1)] for r in rows])


def sep_memory():
    rows = read("sep_memory")
    return table(["method", "N", "state (MiB)", "peak RSS growth (MiB)"],
                 [[r["method"], r["N"], fmt(r["state_bytes"] / 2 ** 20, 2), fmt(r["peak_rss_growth_kb"] / 1024, 0)] for r in rows])


TABLES = {
    "scalable-ep-nll": scalable_ep_tables("nll"), "scalable-ep-error": scalable_ep_tables("error"),
    "scalable-ep-time": scalable_ep_time, "scalable-ep-mnist": scalable_ep_mnist,
    "alpha-ranks": alpha_ranks, "alpha-nll": alpha_nll_by_set, "alpha-time": alpha_time,
    "alpha-active": alpha_active, "alpha-mcmc": alpha_mcmc,
    "additive-uci": additive_tables, "additive-delta": additive_delta,
    "bsvm-uci": bsvm_uci, "bsvm-active": bsvm_active,
    "rmgpc-synthetic": rmgpc_synthetic, "rmgpc-noise": rmgpc_noise,
    "peers": peers, "vi-throughput": vi_throughput, "sep-memory": sep_memory,
}
BLOCK = re.compile(r"(<!-- report:([a-z0-9-]+) -->\n).*?(<!-- /report -->)", re.S)


def main():
    for page in sorted(PAGES.glob("*.md")):
        text = page.read_text()
        new = BLOCK.sub(lambda m: m.group(1) + TABLES[m.group(2)]() + "\n" + m.group(3), text)
        if new != text:
            page.write_text(new)
            print("rewrote", page.relative_to(ROOT))


if __name__ == "__main__":
    main()
