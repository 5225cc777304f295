"""Make `import sgpc` work from a plain checkout (no `pip install -e .` needed to run the tests)."""

import pathlib
import sys

_SRC = str(pathlib.Path(__file__).resolve().parents[1] / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

import torch

# Tests are dominated by tiny tensor ops, for which a second thread only adds synchronisation
# (and on a loaded 2-core machine, 100x slowdowns from spinning threads were measured).
torch.set_num_threads(1)
