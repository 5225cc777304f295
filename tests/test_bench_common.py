"""The benchmark scripts' shared helpers (benchmarks/_common.py): pooling result files, and the commit a result
records. These decide which runs a merged figure ranks and which code a number is attributed to."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _common  # noqa: E402


def _result(path, commit, runs):
    path.write_text(json.dumps({"meta": {"commit": commit}, "runs": runs}))
    return str(path)


def test_pool_runs_later_file_replaces_the_same_cell_and_tags_its_source(tmp_path):
    a = _result(tmp_path / "a.json", "aaa", [{"m": "pep", "alpha": 0.5, "nll": 1.0}, {"m": "pep", "alpha": 1.0, "nll": 2.0}])
    b = _result(tmp_path / "b.json", "bbb", [{"m": "pep", "alpha": 0.5, "nll": 3.0}, {"m": "apep", "alpha": 0.5, "nll": 4.0}])
    rows = _common.pool_runs([a, b], key=lambda r: (r["m"], r["alpha"]))
    got = {(r["m"], r["alpha"]): (r["nll"], r["source"], r["source_commit"]) for r in rows}
    assert got == {("pep", 0.5): (3.0, "b.json", "bbb"), ("pep", 1.0): (2.0, "a.json", "aaa"),
                   ("apep", 0.5): (4.0, "b.json", "bbb")}
    assert [(r["m"], r["alpha"]) for r in rows] == [("pep", 0.5), ("pep", 1.0), ("apep", 0.5)]   # order first seen


def test_pool_runs_keep_drops_runs(tmp_path):
    a = _result(tmp_path / "a.json", "aaa", [{"alpha": 0.5}, {"alpha": 0.7}])
    rows = _common.pool_runs([a], key=lambda r: r["alpha"], keep=lambda r: r["alpha"] < 0.6)
    assert [r["alpha"] for r in rows] == [0.5]


def test_sgpc_commit_names_the_commit(monkeypatch):
    monkeypatch.setenv("SGPC_COMMIT", "0123abc")
    assert _common._git_state() == ("0123abc", None)
    monkeypatch.delenv("SGPC_COMMIT")
    commit, _ = _common._git_state()
    assert commit != "0123abc"


def test_write_makes_the_folders_a_name_holds(tmp_path, monkeypatch):
    monkeypatch.setattr(_common, "RESULTS", tmp_path / "results")
    path = _common.write("new_dir/deeper/cell", {"runs": [{"alpha": 0.5}]})
    assert path == tmp_path / "results" / "new_dir" / "deeper" / "cell.json"
    assert json.loads(path.read_text())["runs"] == [{"alpha": 0.5}]
