"""
Data-parallel training
======================

``sgpc.distributed`` trains one model in several processes: every process draws the same global
minibatch, keeps its own shard of the rows, and the gradients (and, for ``sep``, the site increments) are
summed over the processes. Every process ends with the same parameters, and they are those of a single
process fed the same minibatches, up to the order of floating-point sums. Methods: ``vi``, ``sep``,
``apep``, ``arpep``, ``rpapep``.

Two ways to launch: ``torchrun --nproc-per-node 2 script.py`` with ``comm = sgpc.distributed.init()`` in the
script (one or several machines, gloo on CPUs, NCCL on GPUs), or :func:`sgpc.distributed.launch`, which
starts local processes and returns each one's result. ``sgpc fit DATA --nproc 2`` does the latter from
the command line. See :doc:`../scale`.

``launch`` starts fresh Python processes, so the function each one runs must be importable from a module.
This page writes that module to a temporary directory (in a project it would simply be one of its modules).
The new processes import the script that launched them, so, as with any ``multiprocessing`` code, the
launching code sits under ``if __name__ == "__main__":``.
"""

import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
from sklearn.datasets import load_wine
from sklearn.preprocessing import StandardScaler

from sgpc import distributed

WORKER = textwrap.dedent('''
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from sgpc import GPClassifier

    warnings.filterwarnings("ignore", category=ConvergenceWarning)  # 40 steps: short


    def fit(comm, X, y):
        """Run in every process: fit on its shard of each minibatch (comm None: all rows)."""
        gp = GPClassifier(method="sep", n_inducing=10, batch_size=60, max_iter=40,
                          learning_rate=0.05, random_state=0)
        gp.fit(X, y, comm=comm)
        return gp.predict_proba(X)
''')


def main():
    module_dir = Path(tempfile.mkdtemp(prefix="sgpc-gallery-"))
    (module_dir / "dp_worker.py").write_text(WORKER)
    sys.path.insert(0, str(module_dir))
    import dp_worker

    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)

    # two local processes (gloo backend, one torch thread each), then the same fit in this process
    two = distributed.launch(dp_worker.fit, 2, X, y)
    one = dp_worker.fit(None, X, y)

    print(
        "largest difference between the two processes' probabilities:",
        np.abs(two[0] - two[1]).max(),
    )
    print(
        "largest difference from the single-process fit:           ",
        np.abs(two[0] - one).max(),
    )
    print("training accuracy:", np.mean(one.argmax(1) == y))


if __name__ == "__main__":
    main()
