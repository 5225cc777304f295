"""Print pip requirements that pin every lower bound in pyproject.toml (``name>=v`` becomes ``name==v``).

Used by ``make test-min``: the runtime dependencies and the ``parquet``/``plot`` extras at their floors.
torch is left out (the Makefile installs it: on this machine only the local CPU wheel is installable).
"""
import pathlib
import re
import sys

try:
    import tomllib
except ImportError:                      # Python 3.10
    sys.exit("tools/min_requirements.py needs Python >= 3.11 (tomllib)")

EXTRAS = ("parquet", "plot")
SKIP = {"torch"}

project = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
for spec in [*project["dependencies"], *(s for e in EXTRAS for s in project["optional-dependencies"][e])]:
    match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)", spec)
    if match is None:
        sys.exit(f"pyproject.toml: {spec!r} has no plain lower bound (name>=version)")
    if match[1] not in SKIP:
        print(f"{match[1]}=={match[2]}")
