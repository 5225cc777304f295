"""Shared plumbing for benchmark scripts: metadata (commit, versions, machine) and JSON output."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


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
    two runs on this 2-core machine on different days had different hosts (GEMM at 108 and 43 GFLOP/s)."""
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


def write(name: str, payload: dict) -> Path:
    """Write results/<name>.json with the metadata block added; returns the path. ``name`` may hold folders
    (``alpha_dev_m20/s0_pep_0.5_cpu2``): they are made, so a long run does not fail at its last step."""
    path = RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": metadata(), **payload}, indent=2))
    return path


def pool_runs(paths, key, keep=None) -> list[dict]:
    """The "runs" of several result files, each tagged with its file ("source") and that file's commit
    ("source_commit"); a later file's run replaces an earlier one with the same ``key(run)``; ``keep(run)``
    drops the runs it is false for. In the order first seen."""
    cells = {}
    for p in paths:
        with open(p) as fh:
            d = json.load(fh)
        for r in d["runs"]:
            if keep is None or keep(r):
                cells[key(r)] = {**r, "source": os.path.basename(p), "source_commit": d.get("meta", {}).get("commit")}
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
