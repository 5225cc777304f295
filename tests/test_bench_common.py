"""The benchmark scripts' shared writer and reader (benchmarks/_common.py): one JSON line per fit in
results/<experiment>.jsonl, with the config and the run's metadata, and the pooling of re-run cells. These decide
which fits the results pages count and which code a number is attributed to."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _common  # noqa: E402


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setattr(_common, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(_common, "_written", {})
    return tmp_path / "results"


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_write_appends_one_line_per_fit_with_config_and_metadata(results):
    path = _common.write("exp", {"config": {"iters": 5}, "runs": [{"alpha": 0.5, "nll": 1.0}, {"alpha": 1.0, "nll": 2.0}],
                                 "summary": {"mean": 1.5}})
    assert path == results / "exp.jsonl"
    lines = _lines(path)
    assert [(r["alpha"], r["nll"]) for r in lines] == [(0.5, 1.0), (1.0, 2.0)]
    for r in lines:
        assert r["experiment"] == "exp" and r["config"] == {"iters": 5}
        assert {"commit", "torch", "numpy", "python", "machine", "cpu_count", "date"} <= set(r["meta"])
        assert "summary" not in r                      # derived; the report recomputes it


def test_write_called_after_every_fit_appends_each_fit_once(results):
    runs = []
    for nll in (1.0, 2.0, 3.0):
        runs.append({"nll": nll})
        _common.write("exp", {"config": {}, "runs": runs})
    assert [r["nll"] for r in _lines(results / "exp.jsonl")] == [1.0, 2.0, 3.0]


def test_write_appends_to_an_earlier_run_and_a_payload_without_fits_is_one_line(results):
    _common.write("exp", {"config": {"a": 1}, "rows": [{"nll": 1.0}]})
    _common._written.clear()                           # a second process
    _common.write("exp", {"config": {"a": 2}, "rows": [{"nll": 2.0}]})
    _common.write("probe", {"config": {"a": 3}, "ms_per_step": 4.5})
    assert [(r["config"]["a"], r["nll"]) for r in _lines(results / "exp.jsonl")] == [(1, 1.0), (2, 2.0)]
    (single,) = _lines(results / "probe.jsonl")
    assert single["ms_per_step"] == 4.5 and single["config"] == {"a": 3}


def test_read_and_pool_runs_later_line_replaces_the_same_cell(results):
    _common.write("a", {"config": {}, "runs": [{"m": "pep", "alpha": 0.5, "nll": 1.0}, {"m": "pep", "alpha": 1.0, "nll": 2.0}]})
    _common.write("b", {"config": {}, "runs": [{"m": "pep", "alpha": 0.5, "nll": 3.0}, {"m": "apep", "alpha": 0.5, "nll": 4.0}]})
    assert [r["nll"] for r in _common.read("a")] == [1.0, 2.0]
    rows = _common.pool_runs(["a", "b"], key=lambda r: (r["m"], r["alpha"]))
    assert [(r["m"], r["alpha"], r["nll"], r["source"]) for r in rows] == [
        ("pep", 0.5, 3.0, "b"), ("pep", 1.0, 2.0, "a"), ("apep", 0.5, 4.0, "b")]   # order first seen
    kept = _common.pool_runs(["a"], key=lambda r: r["alpha"], keep=lambda r: r["alpha"] < 0.6)
    assert [r["alpha"] for r in kept] == [0.5]


def test_read_takes_an_archived_experiment_first_then_its_new_lines(results):
    import gzip
    _common.write("big", {"config": {}, "runs": [{"nll": 1.0}, {"nll": 2.0}]})
    path = results / "big.jsonl"
    with gzip.open(results / "big.jsonl.gz", "wt") as fh:      # what archiving a large experiment does
        fh.write(path.read_text())
    path.unlink()
    assert [r["nll"] for r in _common.read("big")] == [1.0, 2.0]
    _common._written.clear()                                       # a later run (another process) ...
    _common.write("big", {"config": {}, "runs": [{"nll": 3.0}]})  # ... appends to the plain file
    assert [r["nll"] for r in _common.read("big")] == [1.0, 2.0, 3.0]
    with pytest.raises(FileNotFoundError, match="nor none.jsonl.gz"):
        _common.read("none")


def test_sgpc_commit_names_the_commit(monkeypatch):
    monkeypatch.setenv("SGPC_COMMIT", "0123abc")
    assert _common._git_state() == ("0123abc", None)
    monkeypatch.delenv("SGPC_COMMIT")
    commit, _ = _common._git_state()
    assert commit != "0123abc"
