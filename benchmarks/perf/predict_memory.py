"""Peak memory of predicting N rows: from an in-memory array and from a file (issue 43, "under load").

A model (vi, D = 10, C = 3, M = 50) is fitted once on 2 000 rows and saved. For each N and source, a fresh process
loads it and predicts the probabilities of N rows:

* "array": ``predict_proba(X)`` of an [N, 10] float64 array already in memory (made before the measurement);
* "npy": ``predict_proba(path)`` of an [N, 10] .npy file (memory-mapped, streamed block by block);
* "csv": ``sgpc predict MODEL FILE.csv -o OUT.csv`` (the command line, streaming rows from the CSV to the output).

It reports the process's resident memory before predicting (VmRSS) and its peak after (VmHWM: of this process
image; ru_maxrss would carry the parent's peak across exec), and the growth less the output [N, C] float64 that
``predict_proba`` must return (the CLI writes its output as it goes). A memory-mapped .npy file's pages count
as resident once read (file-backed, reclaimable). Bounded prediction
means that this overhead stays flat as N grows.

    python benchmarks/perf/predict_memory.py [--sizes 100000 1000000 10000000] [--sources array npy csv]
    python benchmarks/perf/predict_memory.py --device cuda --sources array npy --out predict_memory_gpu

Writes results/predict_memory.jsonl.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import ROOT, write

D, C = 10, 3

CHILD = r"""
import json, sys, time, numpy as np, torch

def status(key):
    # VmRSS / VmHWM of this process image in KiB (ru_maxrss would carry the parent's peak across exec)
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(key + ":"))

sys.path.insert(0, "src")
torch.set_num_threads(1)
from sgpc import GPClassifier, cli
model, source, N, path, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
est = GPClassifier.load(model, device=device)
if source == "array":
    X = np.empty((N, 10))
    rng = np.random.default_rng(0)
    for a in range(0, N, 1 << 16):
        X[a:a + (1 << 16)] = rng.normal(size=(min(1 << 16, N - a), 10))
before = status("VmRSS")
start = time.perf_counter()
if source == "array":
    p = est.predict_proba(X)
elif source == "npy":
    p = est.predict_proba(path)
else:
    assert cli.main(["predict", model, path, "-o", path + ".out.csv"]) == 0
    p = None
if device.startswith("cuda"):
    torch.cuda.synchronize()
seconds = time.perf_counter() - start
after = status("VmHWM")
gpu_mb = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None
out_kb = 0 if p is None else p.nbytes / 1024
print(json.dumps({"source": source, "N": N, "rss_before_mb": before / 1024, "peak_rss_after_mb": after / 1024,
                  "growth_mb": (after - before) / 1024, "output_mb": out_kb / 1024,
                  "overhead_mb": (after - before - out_kb) / 1024, "seconds": seconds,
                  "device": device, "peak_gpu_allocated_mb": gpu_mb}))
"""


def _write_inputs(folder: str, N: int, sources) -> dict[str, str]:
    """The .npy and .csv files of N standard-normal rows (written in blocks, never all in memory)."""
    import numpy as np
    paths = {"array": ""}
    rng = np.random.default_rng(0)
    if "npy" in sources:
        paths["npy"] = os.path.join(folder, f"X{N}.npy")
        X = np.lib.format.open_memmap(paths["npy"], mode="w+", dtype=np.float64, shape=(N, D))
        for a in range(0, N, 1 << 16):
            X[a:a + (1 << 16)] = rng.normal(size=(min(1 << 16, N - a), D))
        X.flush()
        del X
    if "csv" in sources:
        paths["csv"] = os.path.join(folder, f"X{N}.csv")
        with open(paths["csv"], "w") as fh:
            fh.write(",".join(f"x{j}" for j in range(D)) + "\n")
            for a in range(0, N, 1 << 16):
                np.savetxt(fh, rng.normal(size=(min(1 << 16, N - a), D)), delimiter=",", fmt="%.6g")
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", type=int, default=[100_000, 1_000_000, 10_000_000])
    ap.add_argument("--sources", nargs="+", default=["array", "npy", "csv"], choices=["array", "npy", "csv"])
    ap.add_argument("--device", default="cpu", help='where the loaded model predicts ("cuda": each block of rows '
                    'is moved to the GPU in turn; the peak GPU memory allocated is recorded); the csv source runs '
                    'the command line, which predicts on the device the model was fitted on (the CPU here)')
    ap.add_argument("--out", default="predict_memory", help="results/<out>.jsonl")
    ap.add_argument("--folder", default=None, help="where the input files go (default: a temporary folder)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    import numpy as np
    from sgpc import GPClassifier, cli
    rows = []
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        rng = np.random.default_rng(1)
        X = rng.normal(size=(2000, D))
        y = np.argmax(X[:, :C] + 0.3 * rng.normal(size=(2000, C)), 1)
        # fitted through the command line, so that the model has the sidecar `sgpc predict` needs
        train = os.path.join(folder, "train.csv")
        np.savetxt(train, np.column_stack([X, y]), delimiter=",", fmt="%.6g",
                   header=",".join([f"x{j}" for j in range(D)] + ["label"]), comments="")
        model = os.path.join(folder, "model.pt")
        # the method named: the command line's default (ep since the suite chose it) is not what the record says
        assert cli.main(["fit", train, "-o", model, "--method", "vi", "--n-inducing", "50", "--max-iter", "20",
                         "--seed", "0"]) == 0
        GPClassifier.load(model)
        for N in args.sizes:
            paths = _write_inputs(folder, N, args.sources)
            for source in args.sources:
                out = subprocess.run([sys.executable, "-c", CHILD, model, source, str(N), paths[source], args.device],
                                     capture_output=True, text=True, cwd=ROOT)
                if out.returncode:
                    print(out.stderr[-2000:], file=sys.stderr)
                    raise SystemExit(f"{source} N={N} failed")
                row = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append(row)
                gpu = "" if row["peak_gpu_allocated_mb"] is None else f", peak GPU {row['peak_gpu_allocated_mb']:.1f} MiB"
                print(f"{source:5s} N={N:9d}: peak RSS {row['peak_rss_after_mb']:8.1f} MiB (RSS before {row['rss_before_mb']:8.1f}), "
                      f"output {row['output_mb']:7.1f} MiB, overhead {row['overhead_mb']:7.1f} MiB{gpu}, {row['seconds']:.1f} s",
                      flush=True)
                write(args.out, {"config": {**vars(args), "D": D, "C": C, "M": 50, "method": "vi"}, "rows": rows})
            for p in paths.values():
                if p and os.path.exists(p):
                    os.remove(p)
    print(f"wrote results/{args.out}.jsonl")


if __name__ == "__main__":
    main()
