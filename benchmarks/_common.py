"""Shared plumbing for benchmark scripts: metadata (commit, versions, machine) and the JSONL results files.

Scripts under benchmarks/paper, benchmarks/perf and benchmarks/device import it after putting benchmarks/ on
sys.path; every script appends one line per fit to results/<experiment>.jsonl through :func:`write`."""
from __future__ import annotations

import gzip
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"

# The papers fit the function-space EP engines by ML-II (no hyper-prior) with their inducing inputs learned, and
# our reproductions ran their inner EP to a relative site change of 1e-3; the library's defaults for them are ep's
# full-batch fit (registry._EP_FIT: inducing inputs kept, a log-normal hyper-prior, Rprop) with the inner EP to
# 1e-2 (method option ep_tol), which is not the papers' protocol. Their scripts pass these explicitly.
PAPER_FIT_METHODS = ("gfitc", "rmgpc", "smgpc")
PAPER_EP_TOL = 1e-3


def paper_fit(method: str, init: str = "random", method_params: dict | None = None) -> dict:
    """GPClassifier keywords that keep the papers' protocol for ``method``: inducing inputs started by ``init`` (and
    learned, as in the papers, for the engines of ``PAPER_FIT_METHODS``), no hyper-prior and the inner EP to
    ``PAPER_EP_TOL`` for those engines; ``method_params``: the script's own method options, merged in."""
    if method not in PAPER_FIT_METHODS:
        return {"inducing_params": {"init": init}, **({"method_params": method_params} if method_params else {})}
    return {"inducing_params": {"init": init, "learn": True}, "kernel_params": {"prior_scale": None},
            "method_params": {"ep_tol": PAPER_EP_TOL, **(method_params or {})}}


def _git_state() -> tuple[str, bool | None]:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                    capture_output=True, text=True).stdout.strip())
    except OSError:
        commit, dirty = "unknown", None
    if os.environ.get("SGPC_COMMIT"):   # the lent GPU machine's copy: its .git need not be the commit it runs
        commit, dirty = os.environ["SGPC_COMMIT"], None
    return commit, dirty


# the code a run executes is the code at its start (this module is imported then): a result file written
# hours later records that commit, not whatever was committed meanwhile
_START = (*_git_state(), time.strftime("%Y-%m-%d %H:%M:%S"))


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("" elsewhere): ``platform.processor()`` is empty on Linux, and
    the host behind a machine of the same name can change between runs."""
    try:
        with open("/proc/cpuinfo") as fh:
            return next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        return ""


def metadata() -> dict:
    """Git commit and dirty flag at the start of the run, library versions, machine description and
    thread count (and the commit at writing time, when it differs)."""
    import numpy
    import sklearn
    import torch
    commit, dirty, started = _START
    now = _git_state()[0]
    return {
        "commit": commit, "dirty": dirty, "started": started, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        **({"commit_at_write": now} if now != commit else {}),
        "python": sys.version.split()[0], "torch": torch.__version__, "numpy": numpy.__version__,
        "sklearn": sklearn.__version__, "machine": platform.machine(), "processor": platform.processor(),
        "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "command": " ".join(sys.argv),
    }


# the keys under which a script's payload lists its fits; every other key but "config" is a summary derived
# from those fits (ranks, means, ...) that benchmarks/report.py recomputes, or context merged into "config"
FIT_LISTS = ("runs", "rows", "fits", "curves")
DERIVED = ("summary", "ranks", "ranks_by_fraction", "method_ranks", "skipped", "speed_ratio_peer_over_sgpc",
           "paper", "paper_columns", "not_available", "entropy_minus_random", "mean_rank_per_query")
_written: dict[Path, int] = {}   # per results file: how many fits of this process's list are already in it


def write(experiment: str, payload: dict) -> Path:
    """Append one JSON line per fit to results/<experiment>.jsonl; returns the path.

    ``payload`` is ``{"config": {...}, "runs": [fit, ...], ...}`` (the list may be named as in FIT_LISTS).
    Each line is ``{"experiment", "config", **fit, "meta"}``; ``meta`` is :func:`metadata` (commit, versions,
    machine). Scripts call ``write`` after every fit with the growing list, so a run cut off midway keeps
    its fits: only the fits of the list this process has not written yet are appended. A payload with no
    fit list is one line. Summaries (DERIVED) are not written: the report recomputes them from the fits.
    """
    path = RESULTS / f"{experiment}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    key = next((k for k in FIT_LISTS if isinstance(payload.get(k), list)), None)
    config = dict(payload.get("config", {}))
    context = {k: v for k, v in payload.items() if k not in ("config", key, *DERIVED)}
    if key is None:
        fits, done = [context], 0
        context = {}
    else:
        fits, done = payload[key], _written.get(path, 0)
    config.update(context)
    meta = metadata()
    with open(path, "a") as fh:
        for fit in fits[done:]:
            fh.write(json.dumps({"experiment": experiment, "config": config, **fit, "meta": meta}) + "\n")
    if key is not None:
        _written[path] = len(fits)
    return path


def read(experiment: str) -> list[dict]:
    """The lines of results/<experiment>.jsonl (``experiment`` may also be a path to a .jsonl file), in order.

    An experiment too large to keep as text (over ~2 MB) is archived as <experiment>.jsonl.gz: its lines come
    first, then those appended to <experiment>.jsonl since."""
    path = Path(experiment) if str(experiment).endswith(".jsonl") else RESULTS / f"{experiment}.jsonl"
    archive = path.with_name(path.name + ".gz")
    if not path.exists() and not archive.exists():
        raise FileNotFoundError(f"{path} (nor {archive.name}) does not exist")
    lines = []
    if archive.exists():
        with gzip.open(archive, "rt") as fh:
            lines += [json.loads(line) for line in fh if line.strip()]
    if path.exists():
        with open(path) as fh:
            lines += [json.loads(line) for line in fh if line.strip()]
    return lines


def pool_runs(experiments, key, keep=None) -> list[dict]:
    """The fits of several experiments' JSONL files, pooled: a later line replaces an earlier one with the same
    ``key(fit)`` (a re-run of a cell replaces it); ``keep(fit)`` drops the fits it is false for. Each fit is
    tagged with its file ("source"). In the order first seen."""
    cells = {}
    for e in experiments:
        for r in read(e):
            if keep is None or keep(r):
                cells[key(r)] = {**r, "source": Path(str(e)).stem}
    return list(cells.values())


def shrink_png(path, colors: int = 32) -> None:
    """Re-save a PNG with a ``colors``-colour palette (scatter plots with transparency compress badly: ~5×
    smaller); a figure whose colour scale carries data needs more than 32 (Figure 1's colour bar kept 7
    shades). Needs Pillow, which matplotlib depends on; leaves the file as it is without it."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=colors)
    small.save(path, optimize=True)
