"""Make `import sgpc` work from a plain checkout (no `pip install -e .` needed to run the tests)."""

import pathlib
import sys

_SRC = str(pathlib.Path(__file__).resolve().parents[1] / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)
