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


def metadata() -> dict:
    """Git commit, library versions, machine description and thread count."""
    import numpy
    import sklearn
    import torch
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                    capture_output=True, text=True).stdout.strip())
    except OSError:
        commit, dirty = "unknown", None
    return {
        "commit": commit, "dirty": dirty, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "python": sys.version.split()[0], "torch": torch.__version__, "numpy": numpy.__version__,
        "sklearn": sklearn.__version__, "machine": platform.machine(), "processor": platform.processor(),
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "command": " ".join(sys.argv),
    }


def write(name: str, payload: dict) -> Path:
    """Write results/<name>.json with the metadata block added; returns the path."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"meta": metadata(), **payload}, indent=2))
    return path


def shrink_png(path) -> None:
    """Re-save a PNG with a 32-colour palette (scatter plots with transparency compress badly: ~5× smaller).
    Needs Pillow, which matplotlib depends on; leaves the file as it is without it."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=32)
    small.save(path, optimize=True)
