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


def pytest_collection_modifyitems(config, items):
    """scikit-learn's ``check_class_weight_classifiers`` forces max_iter=1000 on every method it is run for (5–14 s
    each on 2 cores): the default suite runs it for the default method, ep; the others' are marked ``slow``."""
    import pytest
    for item in items:
        other_method = "method='" in item.name and "method='ep'" not in item.name
        if "check_class_weight_classifiers" in item.name and other_method:
            item.add_marker(pytest.mark.slow)
