"""benchmarks/perf/time_to_target.py (issue 41): what it reports from the runs' traces — each peer's best test NLL,
the time the peer and each sgpc run first reached it + 0.005, the NLL after fixed budgets. The traces here are made
up, so every number the summary gives can be worked out by hand. Speed is not asserted (DESIGN §7)."""
import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "perf" / "time_to_target.py"
_spec = importlib.util.spec_from_file_location("time_to_target_bench", _PATH)
ttt = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = ttt
_spec.loader.exec_module(ttt)


def _run(name, points, steps=100, **extra):
    return {"set": "connect4-100", "run": name, "budget_s": 60.0, "steps": steps,
            "trace": [{"step": 10 * i, "time": t, "nll": v, "error": 0.3} for i, (t, v) in enumerate(points)],
            **extra}


def test_first_time_and_nll_at_read_the_trace_as_the_evaluations_saw_it():
    trace = _run("x", [(1.0, 0.9), (5.0, 0.7), (12.0, 0.65), (40.0, 0.66)])["trace"]
    assert ttt.first_time(trace, 0.7) == 5.0            # reached at an evaluation, not interpolated
    assert ttt.first_time(trace, 0.69) == 12.0
    assert ttt.first_time(trace, 0.6) is None            # never within the budget
    assert ttt.nll_at(trace, 0.5) is None                # no evaluation yet
    assert ttt.nll_at(trace, 30.0) == 0.65               # the last one at or before 30 s
    assert ttt.nll_at(trace, 40.0) == 0.66


def test_summary_times_every_sgpc_run_to_each_peers_best_plus_the_margin():
    peer = _run("gpytorch-adam", [(2.0, 0.8), (20.0, 0.63), (50.0, 0.6245), (60.0, 0.626)])
    sep = _run("sgpc-sep", [(1.0, 0.7), (5.0, 0.64), (10.0, 0.629), (30.0, 0.6)])
    fast = _run("sgpc-sep@0.05", [(1.0, 0.7), (4.0, 0.629)], learning_rate=0.05)   # another rate: its own column
    failed = {"set": "connect4-100", "run": "gpytorch-ngd", "diverged": "step 2: NotPSDError"}
    s = ttt.summarise([peer, sep, fast, failed])["connect4-100"]
    (v,) = s["versus_peers"]
    assert v["peer"] == "gpytorch-adam" and v["best_nll"] == 0.6245
    assert v["value"] == pytest.approx(0.6295)
    assert v["peer_time"] == 50.0                        # 0.63 at 20 s is above 0.6295
    assert v["sgpc"]["sgpc-sep"] == {"time": 10.0, "sooner": 5.0}
    assert v["sgpc"]["sgpc-sep@0.05"] == {"time": 4.0, "sooner": 12.5}
    assert s["nll_after"]["sgpc-sep"] == {"10": 0.629, "30": 0.6, "60": 0.6}
    assert s["nll_after"]["gpytorch-adam"]["10"] == 0.8
    assert s["final"]["sgpc-sep"] == {"nll": 0.6, "error": 0.3, "steps": 100}
    assert s["failed"] == {"gpytorch-ngd": "step 2: NotPSDError"}
    assert s["final"]["gpytorch-ngd"]["failed"] == "step 2: NotPSDError"
    assert s["target"] is None and s["time_to_target"] is None     # connect-4 has no fixed target


def test_an_sgpc_run_that_never_reaches_a_peers_value_is_reported_as_not_reached():
    peer = _run("gpflow-adam", [(8.0, 0.5)])
    slow = _run("sgpc-sep", [(1.0, 0.9), (60.0, 0.6)])
    s = ttt.summarise([peer, slow])["connect4-100"]
    assert s["versus_peers"][0]["sgpc"]["sgpc-sep"] == {"time": None, "sooner": None}
    table = ttt.report({"connect4-100": s})
    assert "| gpflow-adam | 0.5000 | 8 s | not reached |" in table


def test_a_run_at_another_rate_is_named_apart_and_the_peers_keep_their_names():
    assert ttt.run_name("sgpc-sep", 0.05) == "sgpc-sep@0.05"
    assert ttt.run_name("sgpc-sep-shared", 0.1) == "sgpc-sep-shared@0.1"
    assert ttt.run_name("sgpc-sep", None) == "sgpc-sep"
    assert ttt.run_name("gpytorch-adam", 0.05) == "gpytorch-adam"     # the rate is sgpc's only


def test_a_run_with_a_rate_decay_is_named_apart_and_the_peers_keep_their_names():
    assert ttt.run_name("sgpc-sep", 0.05, 0.9) == "sgpc-sep@0.05/decay=0.9"
    assert ttt.run_name("sgpc-sep-shared", None, 0.8) == "sgpc-sep-shared/decay=0.8"
    assert ttt.run_name("gpytorch-adam", 0.05, 0.9) == "gpytorch-adam"
    assert ttt.run_name("sgpc-sep", 0.1, 0.9, 0.05) == "sgpc-sep@0.1/decay=0.9/z=0.05"
    assert ttt.run_name("gpytorch-adam", 0.1, None, 0.05) == "gpytorch-adam"


def test_an_sgpc_runs_estimator_takes_the_rate_and_its_decay_and_the_runs_structure():
    est = ttt.sgpc_estimator("sgpc-sep-shared", 100, 256, learning_rate=0.05, lr_decay=0.9)
    assert (est.method, est.n_inducing, est.batch_size, est.tol) == ("sep", 100, 256, None)
    assert (est.learning_rate, est.optimizer_params) == (0.05, {"lr_decay": 0.9})
    assert est.inducing_params == {"shared": True} and est.kernel_params == {"shared_kernel": True}
    plain = ttt.sgpc_estimator("sgpc-vi-natgrad", 200, 200)
    assert (plain.method, plain.learning_rate, plain.optimizer_params) == ("vi", None, None)
    assert plain.method_params == {"natgrad_lr": ttt.NATGRAD_GAMMA} and plain.inducing_params is None
    # the optimizer reads the decay: the settings a fit resolves carry it
    from sgpc import fitting
    assert fitting.settings(est)["optimizer_params"]["lr_decay"] == 0.9
    # the inducing inputs' own rate reaches the fit's settings, beside the shared inducing inputs
    z = ttt.sgpc_estimator("sgpc-sep-shared", 100, 256, learning_rate=0.1, inducing_lr=0.05)
    assert z.inducing_params == {"shared": True, "learning_rate": 0.05}
    assert ttt.sgpc_estimator("sgpc-sep", 100, 256, inducing_lr=0.05).inducing_params == {"learning_rate": 0.05}
    assert fitting.train_settings(fitting.settings(z), {"checkpoint_path": None, "checkpoint_every": 0,
                                                        "eval_every": 50}).inducing_learning_rate == 0.05


def test_the_random_flights_set_holds_out_ten_thousand_rows_drawn_from_the_whole_file():
    import numpy as np
    from sgpc.datasets import train_test
    from sgpc.tabular import Dataset
    assert "flights-200" not in ttt.TEST_SPLITS                       # the data set's own: the last 10 000 rows
    protocol = ttt.TEST_SPLITS["flights-200-random"]
    assert ttt.SETS["flights-200-random"] == ttt.SETS["flights-200"]  # the same data, M and B
    assert round(protocol.test_fraction * 3_000_000) == 10_000
    # on a file in time order whose labels drift, the random test rows come from every part of it (the last
    # 10 000 rows would all be from its end) and keep the classes' shares
    n = 30_000
    order = np.arange(n, dtype=float)[:, None]
    y = np.where(np.arange(n) < 2 * n // 3, "early", "late")
    X_train, X_test, _, y_test = train_test(Dataset("flights-3m", order, y, ("t",)), protocol=protocol,
                                            standardize=False)
    assert len(X_test) == round(protocol.test_fraction * n) == 100
    assert X_test.min() < n / 10 and X_test.max() > 9 * n / 10
    assert abs(np.mean(y_test == "late") - 1 / 3) <= 0.02
    assert len(X_train) + len(X_test) == n


def test_the_returned_model_is_scored_as_fit_returns_it_without_changing_the_fit(monkeypatch):
    # --sgpc-returned: at each evaluation, the sites refreshed on all training rows, as fit does after its last
    # step. At the last step that is the fitted model itself; and the refreshes (on copies) leave training as it was.
    import numpy as np
    from sklearn.datasets import load_iris
    from sklearn.preprocessing import StandardScaler
    from sgpc import GPClassifier, fitting
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    Xv, yv = X[::3], y[::3]

    def fit():
        est = GPClassifier(method="sep", n_inducing=10, batch_size=30, tol=None, max_iter=24, random_state=0)
        return est.fit(X, y, X_val=Xv, y_val=yv, eval_every=8)
    plain = fit()
    monkeypatch.setattr(fitting, "validator", ttt.returned_validator(fitting.validator, X, y))
    scored = fit()
    assert scored.history_["objective"] == plain.history_["objective"]
    rows = scored.history_["validation"]
    assert [r["iteration"] for r in rows] == [8, 16, 24]
    assert [r["nll"] for r in rows] == [r["nll"] for r in plain.history_["validation"]]
    p = scored.predict_proba(Xv)
    assert rows[-1]["nll_returned"] == pytest.approx(-np.mean(np.log(p[np.arange(len(yv)), yv])), rel=1e-9)
    assert rows[-1]["nll_returned"] != pytest.approx(rows[-1]["nll"], rel=1e-6)   # the running sites differ
    assert all(r["refresh_s"] > 0 for r in rows)


def test_a_run_scored_as_returned_becomes_its_own_column():
    record = {"set": "mnist-200", "run": "sgpc-sep", "steps": 5, "trace": [{"time": 1.0, "nll": 0.3}],
              "returned_trace": [{"time": 1.5, "nll": 0.25}]}
    plain, returned = ttt.as_records(record)
    assert "returned_trace" not in plain and plain["trace"] == [{"time": 1.0, "nll": 0.3}]
    assert returned["run"] == "sgpc-sep/returned" and returned["trace"] == [{"time": 1.5, "nll": 0.25}]
    assert ttt.as_records({"set": "s", "run": "gpflow-adam", "trace": []}) == [{"set": "s", "run": "gpflow-adam", "trace": []}]
