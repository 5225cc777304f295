"""Memory of SEP vs EP as N grows (scalable-ep §2.3.1: SEP needs O(L·M²), EP O(N·L·M)).

For each N a fresh process builds synthetic data (D = 10, C = 10), fits 20 minibatch steps
(B = 200, M = 50) and reports (a) the bytes of the engine state's tensors and (b) the process's
peak resident memory minus its peak before training (so the data set itself is excluded).

    python benchmarks/perf/sep_memory.py [--sizes 1000 10000 100000 300000]

Writes results/sep_memory.jsonl.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # benchmarks/: _common
from _common import write

CHILD = r"""
import json, resource, sys, torch
sys.path.insert(0, "src")
from sgpc import kernels as K
from sgpc.likelihoods import RobustMax
from sgpc.sparse import SparseGP
from sgpc.train import TrainSettings, fit
from sgpc.ep import EP
from sgpc.sep import SEP
torch.set_num_threads(1)
method, N = sys.argv[1], int(sys.argv[2])
g = torch.Generator().manual_seed(0)
X = torch.randn(N, 10, generator=g, dtype=torch.float64)
y = torch.randint(0, 10, (N,), generator=g)
model = SparseGP(K.RBF(10, 10, noise=1e-2), RobustMax(10), X[:50].clone())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
engine = SEP() if method == "sep" else EP()
state = engine.init(model, X, y, g)
state, _ = fit(model, engine, state, X, y, TrainSettings(max_iter=20, batch_size=200), generator=g)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
state_bytes = sum(v.numel() * v.element_size() for v in vars(state).values() if torch.is_tensor(v))
print(json.dumps({"method": method, "N": N, "state_bytes": state_bytes, "peak_rss_growth_kb": after - before}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", type=int, default=[1000, 10000, 100000, 300000])
    args = ap.parse_args()
    rows = []
    for method in ("sep", "ep"):
        for N in args.sizes:
            out = subprocess.run([sys.executable, "-c", CHILD, method, str(N)], capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{method:4s} N={N:7d}: state {row['state_bytes'] / 2**20:9.2f} MiB, "
                  f"peak RSS growth during training {row['peak_rss_growth_kb'] / 1024:8.1f} MiB", flush=True)
    print("wrote", write("sep_memory", {"config": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
