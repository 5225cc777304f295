"""benchmarks/perf/suite.py (issue 40's real-data suite): its metrics, ranks, target check, resume logic and
one tiny end-to-end run on scikit-learn's iris. Speed is not asserted (DESIGN §7)."""
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "perf" / "suite.py"
_spec = importlib.util.spec_from_file_location("suite_bench", _PATH)
suite = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = suite          # dataclasses look their module up there
_spec.loader.exec_module(suite)


# -- metrics ---------------------------------------------------------------------------------------
def test_evaluate_on_a_hand_computed_example():
    # 4 points, 2 classes, all of class 0. Top probabilities 0.9, 0.9, 0.6, 0.55. Bins have width 1/15 and are
    # right-closed: 0.9 -> (13/15, 14/15]; 0.6 = 9/15 lies on an edge and goes to the bin below, (8/15, 9/15],
    # which also holds 0.55 (> 8/15 = 0.533).
    proba = np.array([[0.9, 0.1], [0.1, 0.9], [0.6, 0.4], [0.45, 0.55]])
    y = np.array([0, 0, 0, 0])
    got = suite.evaluate(y, proba)
    # bin 0.9: point 1 right, point 2 wrong: |1/2 - 0.9| * 2/4 = 0.2
    # bin (8/15, 9/15]: point 3 right, point 4 wrong: |1/2 - (0.6 + 0.55)/2| * 2/4 = 0.0375
    assert got["ece"] == pytest.approx(0.2 + 0.0375, abs=1e-12)
    assert got["error"] == pytest.approx(0.5, abs=0)
    assert got["nll"] == pytest.approx(-np.mean(np.log([0.9, 0.1, 0.6, 0.45])), rel=1e-12)


def test_nll_clips_zero_probabilities_at_1e_15():
    got = suite.evaluate(np.array([1]), np.array([[1.0, 0.0]]))
    assert got["nll"] == pytest.approx(-np.log(1e-15), rel=1e-12)   # 34.54, not inf or 708


def test_full_proba_places_columns_of_classes_seen_in_training():
    out = suite.full_proba(np.array([[0.25, 0.75]]), np.array([0, 2]), 3)
    np.testing.assert_array_equal(out, [[0.25, 0.0, 0.75]])


# -- ranks and targets ------------------------------------------------------------------------------
def test_mean_ranks_share_ties_and_restrict_to_common_sets():
    table = {"s1": {"a": 1.0, "b": 1.0, "c": 2.0},   # a, b tie for ranks 1 and 2 -> 1.5 each
             "s2": {"a": 3.0, "b": 1.0, "c": 2.0},
             "s3": {"a": 0.5, "b": 0.7}}              # c absent
    every = suite.mean_ranks(table, ["a", "b", "c"])
    assert every == {"a": ((1.5 + 3) / 2, 2), "b": ((1.5 + 1) / 2, 2), "c": ((3 + 2) / 2, 2)}
    anyset = suite.mean_ranks(table)
    assert anyset["a"] == ((1.5 + 3 + 1) / 3, 3)
    assert anyset["c"] == ((3 + 2) / 2, 2)


def test_target_check():
    nll = {"sgpc": 0.51, "logreg": 0.50, "hgb": 0.40}
    err = {"sgpc": 0.12, "logreg": 0.11, "hgb": 0.10}
    t = {"sgpc": 1.5}
    assert suite.target_check(nll, err, t, "sgpc", 300) == {"nll": True, "error": True, "time": True}
    # 3% above logreg's NLL fails; 2.5 points above the best error fails; 11 s at 2000 rows fails
    assert suite.target_check({**nll, "sgpc": 0.515}, {**err, "sgpc": 0.125}, {"sgpc": 11.0}, "sgpc", 2000) == \
        {"nll": False, "error": False, "time": False}
    # no logreg on this set, and no time target above 20 000 rows
    assert suite.target_check({"sgpc": 0.5}, {"sgpc": 0.1}, {"sgpc": 999.0}, "sgpc", 30_000) == \
        {"nll": None, "error": True, "time": None}


def test_time_budget_follows_the_issue_anchors():
    assert suite.time_budget(100) == pytest.approx(2.0)
    assert suite.time_budget(300) == pytest.approx(2.0)
    assert suite.time_budget(2000) == pytest.approx(10.0)
    assert suite.time_budget(20_000) == pytest.approx(60.0)
    assert 2.0 < suite.time_budget(1000) < 10.0
    assert suite.time_budget(20_001) is None


def test_parse_sgpc_spec():
    name, col = suite.parse_sgpc_spec("sep=method=sep,max_iter=30,learning_rate=0.05,batch_size=None")
    assert name == "sep" and col.family == "sgpc"
    assert col.kwargs == {"method": "sep", "max_iter": 30, "learning_rate": 0.05, "batch_size": None}
    assert suite.parse_sgpc_spec("plain")[1].kwargs == {}
    ng = suite.parse_sgpc_spec("ng=method_params.natgrad_lr=0.1,method_params.damping=0.3,tol=None")[1]
    assert ng.kwargs == {"method_params": {"natgrad_lr": 0.1, "damping": 0.3}, "tol": None}
    with pytest.raises(ValueError):
        suite.parse_sgpc_spec("bad=method")
    with pytest.raises(ValueError):
        suite.select_columns("all", ["logreg=max_iter=3"])   # a built-in name


def test_unknown_set_names_fail_before_running():
    with pytest.raises(ValueError, match="no-such-set"):
        suite.set_names("iris,no-such-set")
    assert "wine-sklearn" not in suite.set_names("all") and "wine" in suite.set_names("all")


class _Slow:
    def fit(self, X, y):
        time.sleep(5)


class _Fails:
    def fit(self, X, y):
        raise RuntimeError("boom")


def _tiny_set():
    rng = np.random.default_rng(0)
    return suite.SuiteSet("toy", rng.normal(size=(40, 2)), np.repeat([0, 1], 20), ("a", "b"), 40, (), "onehot")


def test_run_fit_records_timeouts_errors_and_skips():
    data = _tiny_set()
    slow = suite.Column("baseline", lambda kw, seed: _Slow())
    t0 = time.perf_counter()
    rec = suite.run_fit(data, 0, "slow", slow, threads=1, timeout=0.2)
    assert rec["status"] == "timeout" and time.perf_counter() - t0 < 4
    rec = suite.run_fit(data, 0, "fails", suite.Column("baseline", lambda kw, seed: _Fails()), 1, None)
    assert rec["status"] == "error" and "boom" in rec["reason"]
    rec = suite.run_fit(data, 0, "small-only", suite.Column("baseline", lambda kw, seed: _Fails(), max_train=10), 1, None)
    assert rec["status"] == "skipped" and rec["reason"] == "32 training rows > 10"
    rec = suite.run_fit(data, 0, "peer", suite.Column("peer", lambda kw, seed: _Fails(), requires="no_such_module_x"),
                        1, None)
    assert (rec["status"], rec["reason"]) == ("unavailable", "no_such_module_x not installed")


def test_the_kernel_search_column_runs_on_request_and_records_the_kernel_it_refitted():
    assert "sgpc-kernel-cv" not in suite.select_columns("all", [])          # seven fits' time: never by default
    col = suite.select_columns("sgpc-kernel-cv,logreg", [])["sgpc-kernel-cv"]
    with pytest.raises(ValueError, match="built-in column"):
        suite.select_columns("all", ["sgpc-kernel-cv=max_iter=3"])
    data = _tiny_set()
    fast = {"n_inducing": 8, "max_iter": 10}
    small = suite.Column(col.family, col.make, {**col.kwargs, "estimator": fast})
    rec = suite.run_fit(data, 0, "sgpc-kernel-cv", small, threads=1, timeout=None)
    assert rec["status"] == "ok", rec.get("reason")
    kernel = rec["best_params"]["kernel"]
    assert kernel in ("rbf", "matern32", "linear")
    # the record's metrics are those of a direct fit with the chosen kernel on the same split
    Xtr, Xte, ytr, yte = suite.split(data, 0)
    from sgpc import GPClassifier
    direct = GPClassifier(random_state=0, kernel=kernel, **fast).fit(Xtr, ytr)
    want = suite.evaluate(yte, suite.full_proba(direct.predict_proba(Xte), direct.classes_, len(data.classes)))
    assert rec["nll"] == want["nll"] and rec["n_iter"] == direct.n_iter_


# -- resume ------------------------------------------------------------------------------------------
def _rec(s, split, c, status, **kw):
    return {"set": s, "split": split, "column": c, "status": status,
            "config": {"family": "baseline", "kwargs": {}, "max_train": None}, **kw}


def test_completed_keys_skip_final_statuses_and_retry_failures(tmp_path):
    path = tmp_path / "r.jsonl"
    rows = [_rec("iris", 0, "logreg", "ok"), _rec("iris", 0, "hgb", "error"),
            _rec("iris", 1, "gpytorch-svgp", "unavailable"), _rec("big", 0, "sklearn-gpc", "skipped"),
            _rec("iris", 1, "hgb", "error"), _rec("iris", 1, "hgb", "ok"),        # a retry that succeeded
            _rec("iris", 2, "logreg", "timeout")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"set": "torn')   # interrupted last line
    records = suite.read_records(path)
    assert len(records) == len(rows)
    assert suite.completed(records) == {("iris", 0, "logreg"), ("big", 0, "sklearn-gpc"), ("iris", 1, "hgb"),
                                        ("iris", 2, "logreg")}
    assert suite.read_records(tmp_path / "absent.jsonl") == []


def test_check_configs_refuses_a_renamed_configuration():
    records = [{**_rec("iris", 0, "fast", "ok"), "config": {"family": "sgpc", "kwargs": {"max_iter": 30},
                                                             "max_train": None}}]
    same = dict([suite.parse_sgpc_spec("fast=max_iter=30")])
    suite.check_configs(records, same)
    with pytest.raises(ValueError, match="fast"):
        suite.check_configs(records, dict([suite.parse_sgpc_spec("fast=max_iter=40")]))


def test_report_from_a_fake_file(tmp_path):
    recs = []
    for s, n_train, vals in (("small", 120, {"logreg": 0.30, "hgb": 0.40, "sgpc-default": 0.30}),
                             ("mid", 1600, {"logreg": 0.50, "hgb": 0.20, "sgpc-default": 0.45})):
        for c, v in vals.items():
            fam = "sgpc" if c.startswith("sgpc") else "baseline"
            recs.append({**_rec(s, 0, c, "ok"), "config": {"family": fam, "kwargs": {}, "max_train": None},
                         "nll": v, "error": v / 10, "ece": 0.01, "fit_time": 2.0 if fam == "sgpc" else 1.0,
                         "N": n_train * 5 // 4, "N_train": n_train, "D": 4, "C": 3, "set_notes": []})
    recs.append(_rec("mid", 0, "sklearn-gpc", "skipped", reason="3000 training rows > 2000",
                     N=2000, N_train=1600, D=4, C=3))
    text = suite.report(recs)
    assert "| logreg | 2.00 | 2 |" in text and "| hgb | 2.00 | 2 |" in text   # fit-time ratio, ours / theirs
    assert "| small | 150 | 4 | 3 | **0.300** | **0.300** | 0.400 |  |" in text     # a tie: both best
    assert "| mid | 2000 | 4 | 3 | 0.450 | 0.500 | **0.200** | skip |" in text     # sklearn-gpc skipped
    assert "sgpc-default 1/2" in text          # small passes; mid: error 0.045 > best 0.020 + 0.02
    # a candidate of our own outranks everything; the issue's ranks leave it out: default (1.5 + 2) / 2,
    # logreg (1.5 + 3) / 2, hgb (3 + 1) / 2
    cand = [{**r, "column": "cand", "config": {"family": "sgpc", "kwargs": {"x": 1}, "max_train": None},
             "nll": r["nll"] / 10} for r in recs if r["column"] == "sgpc-default"]
    ranked = suite.report(recs + cand)
    issue_row = next(line for line in ranked.splitlines() if line.startswith("| every set, among the default"))
    assert issue_row.endswith("| 1.75 (2) | 2.25 (2) | 2.00 (2) |  |")
    assert "among the default" not in text      # no candidate: the plain rows say it all
    doc = tmp_path / "suite.md"
    doc.write_text(f"# title\n\nintro\n\n{suite.MARK_BEGIN}\nold\n{suite.MARK_END}\n\ntail\n")
    suite.write_report(text, doc)
    body = doc.read_text()
    assert body.startswith("# title\n\nintro\n\n") and body.endswith("\n\ntail\n") and "old" not in body
    assert text.strip() in body
    # another results file reports between its own markers on the same page, leaving the first report alone
    begin, end = suite.markers(tmp_path / "suite-full.jsonl")
    assert (begin, end) == ("<!-- suite-report:suite-full:begin -->", "<!-- suite-report:suite-full:end -->")
    assert suite.markers(tmp_path / "suite.jsonl") == (suite.MARK_BEGIN, suite.MARK_END)
    suite.write_report("second", doc, (begin, end))
    body2 = doc.read_text()
    assert body2.startswith(body.rstrip()) and body2.rstrip().endswith(f"{begin}\nsecond\n{end}")
    suite.write_report("third", doc, (begin, end))
    assert "second" not in doc.read_text() and text.strip() in doc.read_text()


def test_a_report_adds_the_columns_of_other_files_and_keeps_the_splits_asked_for(tmp_path):
    peers, main = tmp_path / "suite-full-peers.jsonl", tmp_path / "suite-full.jsonl"
    peers.write_text("".join(json.dumps(r) + "\n" for r in [_rec("iris", 0, "gpflow-svgp", "ok", nll=0.2)]))
    main.write_text("".join(json.dumps(r) + "\n" for r in
                            [_rec("iris", k, c, "ok", nll=0.1 * k) for k in range(3) for c in ("logreg", "hgb")]
                            + [_rec("iris", 0, "gpflow-svgp", "ok", nll=9.0)]))      # --out's column wins
    got = suite.report_records(peers, [main], splits=1)
    assert sorted((r["column"], r["split"], r["nll"]) for r in got) == [
        ("gpflow-svgp", 0, 0.2), ("hgb", 0, 0.0), ("logreg", 0, 0.0)]
    assert len(suite.report_records(peers, [main])) == 7
    assert suite.markers(peers, 1) == ("<!-- suite-report:suite-full-peers-splits1:begin -->",
                                       "<!-- suite-report:suite-full-peers-splits1:end -->")
    with pytest.raises(FileNotFoundError, match="--also"):
        suite.report_records(peers, [tmp_path / "missing.jsonl"])


# -- end to end ----------------------------------------------------------------------------------------
def test_end_to_end_on_iris_and_resume(tmp_path):
    out = tmp_path / "suite.jsonl"
    argv = ["--sets", "iris", "--splits", "1", "--columns", "logreg,tiny,gpytorch-svgp",
            "--sgpc", "tiny=n_inducing=5,max_iter=5", "--out", str(out)]
    assert suite.main(argv) == 0
    recs = suite.read_records(out)
    by = {r["column"]: r for r in recs}
    assert set(by) == {"logreg", "tiny", "gpytorch-svgp"}
    for c in ("logreg", "tiny"):
        r = by[c]
        assert r["status"] == "ok", r
        assert (r["N"], r["N_train"], r["N_test"], r["D"], r["C"]) == (150, 120, 30, 4, 3)
        assert 0 <= r["error"] <= 1 and 0 <= r["ece"] <= 1 and r["nll"] > 0 and r["fit_time"] > 0
        assert r["meta"]["threads"] == 1 and "torch" in r["meta"]["versions"]
    assert by["tiny"]["n_iter"] == 5 and by["tiny"]["config"]["kwargs"] == {"n_inducing": 5, "max_iter": 5}
    assert by["logreg"]["nll"] < 0.5                      # iris is easy for logistic regression
    if importlib.util.find_spec("gpytorch") is None:
        assert by["gpytorch-svgp"]["status"] == "unavailable"
        assert by["gpytorch-svgp"]["reason"] == "gpytorch not installed"
    # a second run writes only what is not final: nothing, or the unavailable peer again
    suite.main(argv)
    again = suite.read_records(out)[len(recs):]
    assert [r["column"] for r in again] == ([] if by["gpytorch-svgp"]["status"] == "ok" else ["gpytorch-svgp"])
    doc = tmp_path / "doc.md"
    assert suite.main(["--out", str(out), "--report", str(doc)]) == 0
    assert suite.MARK_BEGIN in doc.read_text() and "| iris | 150 | 4 | 3 |" in doc.read_text()
