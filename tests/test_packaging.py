"""Tests of the release metadata: one version, the typing marker, the licence and the changelog."""
import importlib.metadata
import pathlib
import re

import pytest

import sgpc

ROOT = pathlib.Path(__file__).parents[1]
tomllib = pytest.importorskip("tomllib")      # Python >= 3.11
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_version_comes_from_the_package_metadata():
    assert sgpc.__version__ == importlib.metadata.version("sgpc") == PROJECT["version"]


def test_package_is_marked_typed():
    assert (pathlib.Path(sgpc.__file__).parent / "py.typed").is_file()


def test_license_file_matches_the_metadata():
    assert PROJECT["license"] == {"text": "BSD-3-Clause"}
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License") and "the sgpc developers" in text


def test_changelog_has_a_section_for_this_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(PROJECT['version'])}\]", text, re.M)


def test_every_dependency_has_a_lower_bound():
    # `make test-min` installs these floors (tools/min_requirements.py refuses a spec without one)
    for spec in [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["parquet"],
                 *PROJECT["optional-dependencies"]["plot"]]:
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+>=[0-9][0-9A-Za-z.]*", spec), spec


def test_import_does_not_load_the_compiler():
    # torch._dynamo took about a third of `import sgpc` (python -X importtime); it loads when a fit compiles
    import subprocess
    import sys
    code = "import sys, sgpc; print('torch._dynamo' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"
