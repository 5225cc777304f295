"""Tests of sgpc.cli: fit -> predict -> evaluate round trips, the options table, the demo, and user-error exit codes.

Most run in-process through ``main(argv)`` with tiny fits (iris, 20 steps, M = 10); the ``--json`` summary, the
new options and ``predict`` on a model saved from Python run through the real entry point (``python -m sgpc``,
the console script's ``sgpc.cli:main``) in a subprocess.
"""
import csv
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris

from sgpc import cli

TINY = ["--max-iter", "20", "--n-inducing", "10"]
NAMES = np.array(["setosa", "versicolor", "virginica"])


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny fits run fastest on one thread; on a shared machine more threads oversubscribe the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _write_iris_csv(path, with_label=True, rows=slice(None)):
    X, y = load_iris(return_X_y=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["a", "b", "c", "d"] + (["species"] if with_label else []))
        for xi, yi in zip(X[rows], y[rows]):
            w.writerow(list(xi) + ([NAMES[yi]] if with_label else []))
    return path


def _read_csv(path):
    """Header and probabilities [N,C] of a predict output (its first column, the predicted label, dropped)."""
    header, labels, proba = _read_predictions(path)
    return header, proba


def _read_predictions(path):
    """Class columns of the header, predicted labels [N] (text) and probabilities [N,C] of a predict output."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][0] == "predicted"
    return rows[0][1:], np.array([r[0] for r in rows[1:]]), np.array([r[1:] for r in rows[1:]], dtype=float)


def _record(model):
    """The data record that ``fit`` stores in the model file."""
    from sgpc import GPClassifier
    return GPClassifier.load(model).metadata_[cli.RECORD_KEY]


@pytest.fixture(scope="module")
def name_model(tmp_path_factory):
    """A model fitted on the iris training split, by name."""
    model = tmp_path_factory.mktemp("name") / "iris.pt"
    assert cli.main(["fit", "iris", "-o", str(model), *TINY]) == 0
    return model


@pytest.fixture(scope="module")
def file_model(tmp_path_factory):
    """A model fitted on a CSV with string labels in the column 'species'."""
    d = tmp_path_factory.mktemp("file")
    data = _write_iris_csv(d / "iris.csv")
    model = d / "model.pt"
    assert cli.main(["fit", str(data), "-o", str(model), "--target", "species", "--seed", "1", *TINY]) == 0
    return model, data


def test_fit_by_name_records_the_data_in_the_model_file(name_model, capsys):
    side = _record(name_model)
    assert side["source"] == "name" and side["data"] == "iris" and side["seed"] == 0
    assert len(side["mean"]) == len(side["std"]) == 4
    assert not (name_model.parent / "iris.pt.json").exists()          # no sidecar any more


def test_evaluate_by_name_uses_the_test_split(name_model, tmp_path, capsys):
    out = tmp_path / "metrics.json"
    assert cli.main(["evaluate", str(name_model), "iris", "-o", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["n"] == 15  # iris: 10% of 150 rows
    assert set(result) >= {"error", "nll", "brier", "ece", "n"}
    assert 0 <= result["error"] <= 0.5  # 20 steps on iris: far better than chance (2/3)
    assert "error" in capsys.readouterr().out


def test_file_round_trip(file_model, tmp_path, capsys):
    model, data = file_model
    out = tmp_path / "proba.csv"
    assert cli.main(["predict", str(model), str(data), "--target", "species", "-o", str(out)]) == 0
    header, labels, proba = _read_predictions(out)
    assert header == NAMES.tolist()
    assert proba.shape == (150, 3)
    np.testing.assert_array_equal(labels, NAMES[proba.argmax(1)])      # vi: the most probable class
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-9)  # written with full float precision

    features = _write_iris_csv(tmp_path / "features.csv", with_label=False, rows=slice(0, 10))
    out2 = tmp_path / "proba2.csv"
    assert cli.main(["predict", str(model), str(features), "-o", str(out2)]) == 0
    # same rows, same probabilities up to rounding (BLAS sums in a different order for 10 rows than for 150)
    np.testing.assert_allclose(_read_csv(out2)[1], proba[:10], rtol=1e-12, atol=1e-15)

    assert cli.main(["evaluate", str(model), str(data)]) == 0  # label column taken from the sidecar
    assert "n 150" in capsys.readouterr().out


def test_evaluate_on_another_named_set_is_refused(name_model, capsys):
    # its test split could contain this model's training rows
    capsys.readouterr()
    assert cli.main(["evaluate", str(name_model), "wine-sklearn"]) == 2
    err = capsys.readouterr().err
    assert "fitted on the training split of 'iris'" in err and "Traceback" not in err


def test_predict_to_stdout(name_model, tmp_path, capsys):
    features = _write_iris_csv(tmp_path / "f.csv", with_label=False, rows=slice(0, 3))
    capsys.readouterr()
    assert cli.main(["predict", str(name_model), str(features)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "predicted,0,1,2" and len(lines) == 4


def test_predict_with_label_column_but_no_target_is_a_clear_error(file_model, capsys):
    model, data = file_model
    assert cli.main(["predict", str(model), str(data)]) == 2
    err = capsys.readouterr().err
    assert "not numeric" in err and "--target" in err and "Traceback" not in err


def test_predict_refuses_a_file_whose_columns_are_shuffled(file_model, tmp_path, capsys):
    # same number of columns, other order: read as the fitted columns it would give confident nonsense
    model, data = file_model
    X, _ = load_iris(return_X_y=True)
    shuffled = tmp_path / "shuffled.csv"
    with open(shuffled, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["d", "c", "b", "a"])
        w.writerows(X[:5, ::-1].tolist())
    capsys.readouterr()
    assert cli.main(["predict", str(model), str(shuffled), "-o", str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err
    assert "not the ones the model was fitted on" in err and "'d' (model: 'a')" in err and "Traceback" not in err


def _fit_libsvm(tmp_path, seed: int, first_index: int):
    """Fit a model on a 3-feature LIBSVM file whose indices start at ``first_index``; returns its path."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] > 0).astype(int) + (X[:, 2] > 0.5)
    i, j, k = first_index, first_index + 1, first_index + 2
    train = tmp_path / "train.libsvm"
    train.write_text("".join(f"{c} {i}:{a:.4f} {j}:{b:.4f} {k}:{d:.4f}\n" for (a, b, d), c in zip(X, y)))
    model = tmp_path / "m.pt"
    assert cli.main(["fit", str(train), "-o", str(model), *TINY]) == 0
    return model


def test_libsvm_prediction_file_without_the_highest_feature_index(tmp_path, capsys):
    # no row of the new file uses feature 3: read at the model's width, not at 2 columns
    model = _fit_libsvm(tmp_path, 0, 1)
    new = tmp_path / "new.libsvm"
    new.write_text("0 1:0.5 2:-0.2\n1 1:-1.0 2:0.3\n")
    out = tmp_path / "p.csv"
    assert cli.main(["predict", str(model), str(new), "-o", str(out)]) == 0
    assert _read_csv(out)[1].shape == (2, 3)
    assert cli.main(["evaluate", str(model), str(new)]) == 0


def test_libsvm_prediction_file_is_read_with_the_training_files_index_base(tmp_path, capsys):
    # a 0-based training file; new rows whose feature 0 is zero never write index 0, so guessing
    # their base from the file alone read them as 1-based: every feature shifted by one column
    model = _fit_libsvm(tmp_path, 1, 0)
    assert _record(model)["zero_based"] is True
    implicit, explicit = tmp_path / "implicit.libsvm", tmp_path / "explicit.libsvm"
    implicit.write_text("0 1:0.5 2:-0.2\n1 1:-1.0 2:1.3\n")
    explicit.write_text("0 0:0 1:0.5 2:-0.2\n1 0:0 1:-1.0 2:1.3\n")         # index 0 written: 0-based
    for new in (implicit, explicit):
        assert cli.main(["predict", str(model), str(new), "-o", str(tmp_path / f"{new.stem}.csv")]) == 0
    np.testing.assert_array_equal(_read_csv(tmp_path / "implicit.csv")[1], _read_csv(tmp_path / "explicit.csv")[1])
    for new in (implicit, explicit):
        assert cli.main(["evaluate", str(model), str(new), "-o", str(tmp_path / f"{new.stem}.json")]) == 0
    assert json.loads((tmp_path / "implicit.json").read_text())["nll"] == \
        json.loads((tmp_path / "explicit.json").read_text())["nll"]


def test_demo_writes_figure(tmp_path, capsys):
    assert cli.main(["demo", "--max-iter", "5", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    png = tmp_path / "demo.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for word in ("test error", "test NLL", "Brier", "ECE", "time: fit", str(png), "held-out"):
        assert word in out
    # the demo is GPClassifier() with its defaults, and says whether the fit converged (5 iterations: it did not)
    assert "settings: GPClassifier(random_state=0, max_iter=5), every other setting at its default" in out
    assert "fit: ep, 5 iterations, stopped at its ceiling before it converged" in out
    assert cli.build_parser().parse_args(["demo"]).max_iter is None     # without --max-iter: the estimator's ceiling


def test_demo_without_matplotlib(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # makes the import fail
    monkeypatch.setattr(cli, "DEMO_SETTINGS", {**cli.DEMO_SETTINGS, "n_inducing": 10})
    assert cli.main(["demo", "--max-iter", "2", "--out", str(tmp_path)]) == 0
    assert "pip install sgpc[plot]" in capsys.readouterr().out
    assert not (tmp_path / "demo.png").exists()


def test_unknown_dataset(tmp_path, capsys):
    assert cli.main(["fit", "no-such-set", "-o", str(tmp_path / "m.pt")]) == 2
    err = capsys.readouterr().err
    assert "unknown data set 'no-such-set'" in err and "iris" in err and "Traceback" not in err


def test_missing_file(tmp_path, capsys):
    assert cli.main(["fit", str(tmp_path / "absent.csv"), "-o", str(tmp_path / "m.pt")]) == 2
    assert "not found" in capsys.readouterr().err


def test_corrupt_model_file(tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"this is not a model")
    assert cli.main(["evaluate", str(bad), "iris"]) == 2
    err = capsys.readouterr().err
    assert "not a readable sgpc model file" in err and "Traceback" not in err


def test_debug_shows_the_exception(tmp_path):
    with pytest.raises(ValueError, match="unknown data set"):
        cli.main(["fit", "no-such-set", "-o", str(tmp_path / "m.pt"), "--debug"])


def test_bad_argument_combination(tmp_path, capsys):
    assert cli.main(["fit", "iris", "-o", str(tmp_path / "m.pt"), "--resume"]) == 2
    assert "--resume needs --checkpoint" in capsys.readouterr().err


def test_usage_error_returns_2(capsys):
    assert cli.main(["fit"]) == 2
    assert "required" in capsys.readouterr().err
    assert cli.main(["--threads", "0", "evaluate", "m.pt", "iris"]) == 2
    assert "--threads must be >= 1" in capsys.readouterr().err


def test_missing_model_file(tmp_path, capsys):
    assert cli.main(["predict", str(tmp_path / "absent.pt"), str(tmp_path / "x.csv")]) == 2
    assert "model file not found" in capsys.readouterr().err


def test_python_dash_m_help():
    run = subprocess.run([sys.executable, "-m", "sgpc", "--help"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    for command in ("fit", "predict", "evaluate", "demo"):
        assert command in run.stdout


def test_predict_parquet_features(name_model, tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    X = load_iris().data[:5]
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({f"x{j}": X[:, j] for j in range(4)} | {"label": [0, 0, 1, 1, 2]}), path)
    out = tmp_path / "p.csv"
    assert cli.main(["predict", str(name_model), str(path), "--target", "label", "-o", str(out)]) == 0
    assert _read_csv(out)[1].shape == (5, 3)
    assert cli.main(["predict", str(name_model), str(path)]) == 2  # 5 columns for a 4-feature model
    assert "pass --target COL" in capsys.readouterr().err


def test_an_output_that_is_an_input_is_refused_and_nothing_is_overwritten(file_model, tmp_path, capsys):
    model, data = file_model
    before_data, before_model = data.read_bytes(), model.read_bytes()
    assert cli.main(["fit", str(data), "-o", str(data), "--target", "species", *TINY]) == 2
    assert cli.main(["evaluate", str(model), str(data), "-o", str(model)]) == 2
    assert cli.main(["predict", str(model), str(data), "--target", "species", "-o", str(data)]) == 2
    assert cli.main(["predict", str(model), str(data), "--target", "species", "-o", str(model) + ".json"]) == 2
    assert "would be overwritten" in capsys.readouterr().err
    assert data.read_bytes() == before_data and model.read_bytes() == before_model


def test_evaluate_compares_text_labels_as_text(tmp_path, capsys):
    # trained on labels 1, 2 and "other" (text); a file with only 1 and 2 parses them as numbers
    X, y = load_iris(return_X_y=True)
    labels = np.array(["1", "2", "other"])[y]
    for name, rows in (("train.csv", slice(None)), ("sub.csv", y < 2)):
        with open(tmp_path / name, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["a", "b", "c", "d", "label"])
            w.writerows([list(xi) + [li] for xi, li in zip(X[rows], labels[rows])])
    model = tmp_path / "m.pt"
    assert cli.main(["fit", str(tmp_path / "train.csv"), "-o", str(model), *TINY]) == 0
    assert cli.main(["evaluate", str(model), str(tmp_path / "sub.csv")]) == 0
    assert "n 100" in capsys.readouterr().out


def _write_coloured_iris(path, rows):
    """iris with a categorical column 'colour' (red/green/blue, one per species) before the label."""
    X, y = load_iris(return_X_y=True)
    colour = np.array(["red", "green", "blue"])[y]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["a", "b", "colour", "species"])
        w.writerows([[xi[0], xi[1], ci, NAMES[yi]] for xi, ci, yi in zip(X[rows], colour[rows], y[rows])])
    return path


def test_categorical_columns_keep_the_training_codes(tmp_path, capsys):
    # levels sorted: blue = 0, green = 1, red = 2. A file without blue rows coded from itself alone
    # would make green 0 and red 1: every row's colour feature shifted, silently.
    X, y = load_iris(return_X_y=True)
    train = _write_coloured_iris(tmp_path / "train.csv", slice(None))
    model = tmp_path / "m.pt"
    assert cli.main(["fit", str(train), "-o", str(model), *TINY]) == 0
    assert _record(model)["levels"] == {"colour": ["blue", "green", "red"]}
    sub = _write_coloured_iris(tmp_path / "sub.csv", y < 2)            # setosa and versicolor: no blue
    full_p, sub_p = tmp_path / "full.csv", tmp_path / "sub_p.csv"
    assert cli.main(["predict", str(model), str(train), "--target", "species", "-o", str(full_p)]) == 0
    assert cli.main(["predict", str(model), str(sub), "--target", "species", "-o", str(sub_p)]) == 0
    np.testing.assert_allclose(_read_csv(sub_p)[1], _read_csv(full_p)[1][y < 2], rtol=1e-12)
    capsys.readouterr()
    assert cli.main(["evaluate", str(model), str(sub), "-o", str(tmp_path / "e.json")]) == 0
    sub_eval = json.loads((tmp_path / "e.json").read_text())
    proba = _read_csv(sub_p)[1]
    assert sub_eval["nll"] == pytest.approx(-np.mean(np.log(proba[np.arange(100), y[y < 2]])), rel=1e-9)
    # a level the training file did not have is an error naming the column, value and row
    text = (tmp_path / "sub.csv").read_text().replace("green", "purple", 1)
    (tmp_path / "bad.csv").write_text(text)
    capsys.readouterr()
    assert cli.main(["evaluate", str(model), str(tmp_path / "bad.csv")]) == 2
    err = capsys.readouterr().err
    assert "'colour'" in err and "'purple'" in err and "did not have" in err and "Traceback" not in err


def test_numeric_model_evaluated_on_text_labels_warnings_in_one_line_and_nproc_checks_first(tmp_path, capsys):
    # a model fitted on integer labels refused a Parquet file whose string column holds "1", "2"; warnings
    # came out as Python's two-line UserWarning; a bad option under --nproc surfaced after spawning
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    X, y = load_iris(return_X_y=True)
    path = tmp_path / "num.csv"
    np.savetxt(path, np.column_stack([X, y + 1]), delimiter=",", header="a,b,c,d,label", comments="")
    model = tmp_path / "m.pt"
    assert cli.main(["fit", str(path), "-o", str(model), "--checkpoint", str(tmp_path / "ck.pt"), *TINY]) == 0
    assert "sgpc fit: warning: checkpoint_path" in capsys.readouterr().err
    table = {k: X[:, j] for j, k in enumerate("abcd")}
    pq.write_table(pa.table({**table, "label": [str(int(v) + 1) for v in y]}), tmp_path / "text.parquet")
    assert cli.main(["evaluate", str(model), str(tmp_path / "text.parquet"), "--target", "label"]) == 0
    assert "error" in capsys.readouterr().out
    pq.write_table(pa.table({**table, "label": ["7"] * len(y)}), tmp_path / "other.parquet")
    assert cli.main(["evaluate", str(model), str(tmp_path / "other.parquet"), "--target", "label"]) == 2
    assert "labels ['7'] are not among the model's classes" in capsys.readouterr().err
    assert cli.main(["fit", str(path), "-o", str(tmp_path / "p.pt"), "--nproc", "2", "--learning-rate", "-1"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["sgpc fit: error: learning_rate must be a finite number "
                                                             "in (0, ∞) or None (the method's default), got -1.0"]


# -- the options table, the real entry point, fit --json, streamed predict, models saved from Python -------------
def _run(*argv, cwd=None):
    """``python -m sgpc ARGV`` in a subprocess (one torch thread): the entry point a user runs."""
    import os
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "sgpc", *argv], capture_output=True, text=True, timeout=300,
                          env=env, cwd=cwd)


def test_every_fit_option_reaches_a_gpclassifier_argument():
    # the guard for renames: each flag's target is a constructor parameter or a key of an option dict
    from sgpc import GPClassifier
    from sgpc.registry import OPTION_GROUPS, resolve
    params = GPClassifier().get_params()
    groups = {group: set(declared({**params, "method": m})) for group, declared in OPTION_GROUPS.items()
              for m in ["vi"]}
    groups["method_params"] = {k for m in cli.METHODS for k in resolve({**params, "method": m})["method_params"]}
    groups["likelihood_params"] = {k for lik in cli.LIKELIHOODS
                                   for k in resolve({**params, "method": "vi", "likelihood": lik})["likelihood_params"]}
    for opt in cli.FIT_OPTIONS:
        if "." in opt.target:
            group, key = opt.target.split(".")
            assert key in groups[group], opt.flag
        else:
            assert opt.target in params, opt.flag
    assert len({o.flag for o in cli.FIT_OPTIONS}) == len(cli.FIT_OPTIONS)


def test_the_inner_ep_tolerance_flag_reaches_method_params():
    args = cli.build_parser().parse_args(["fit", "iris", "-o", "m.pt", "--method", "rmgpc", "--ep-tol", "0.001"])
    assert cli._estimator_params(args)["method_params"] == {"ep_tol": 0.001}


def test_fit_options_become_estimator_arguments():
    args = cli.build_parser().parse_args(["fit", "iris", "-o", "m.pt", "--method", "pep", "--alpha", "0.3",
                                          "--kernel", "matern32", "--epsilon", "0.01", "--epochs", "3",
                                          "--batch-size", "16", "--tol", "none", "--device", "cpu", "--verbose",
                                          "--class-weight", "balanced"])
    params = cli._estimator_params(args)
    assert params["class_weight"] == "balanced"
    assert params["method"] == "pep" and params["kernel"] == "matern32" and params["n_epochs"] == 3
    assert params["method_params"] == {"alpha": 0.3} and params["likelihood_params"] == {"epsilon": 0.01}
    assert params["tol"] is None and params["verbose"] == 1 and params["random_state"] == 0
    assert "kernel_params" not in params                     # no kernel flag given: the estimator's defaults
    for flag, scale in (("none", None), ("0.5", 0.5)):     # "none": the papers' ML-II, no prior
        args = cli.build_parser().parse_args(["fit", "iris", "-o", "m.pt", "--prior-scale", flag])
        assert cli._estimator_params(args)["kernel_params"] == {"prior_scale": scale}
    defaults = cli._estimator_params(cli.build_parser().parse_args(["fit", "iris", "-o", "m.pt"]))
    from sgpc import GPClassifier
    expected = {k: v for k, v in GPClassifier().get_params().items() if k in defaults}
    assert {**defaults, "random_state": None} == {**expected, "random_state": None}


def test_help_lists_the_registry_choices():
    from sgpc.registry import KERNELS, METHODS
    from sgpc.validation import USER_LIKELIHOODS
    text = cli.build_parser()._subparsers._group_actions[0].choices["fit"].format_help()
    for names in (("auto", *METHODS), USER_LIKELIHOODS, KERNELS):
        assert "{" + ",".join(names) + "}" in text
    assert "--device" in text and "--json" in text


def test_console_script_is_the_cli():
    import importlib.metadata
    (script,) = [e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == "sgpc"]
    assert script.value == "sgpc.cli:main"


def test_fit_json_and_options_through_the_entry_point(tmp_path):
    from sgpc import GPClassifier
    model = tmp_path / "m.pt"
    run = _run("fit", "iris", "-o", str(model), "--method", "arpep", "--alpha", "0.7", "--kernel", "matern32",
               "--epochs", "2", "--batch-size", "32", "--tol", "none", "--n-inducing", "10", "--json", "--verbose")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)                       # stdout is the JSON alone (--verbose goes to stderr)
    assert summary["model"] == str(model) and summary["classes"] == [0, 1, 2] and summary["converged"] is False
    assert summary["n_iter"] == 2 * (135 // 32) and summary["n_rows"] == 135 and summary["n_features"] == 4
    assert summary["timings"]["total_s"] >= summary["timings"]["fit_s"] > 0
    assert "sgpc: arpep" in run.stderr
    est = GPClassifier.load(model)
    assert (est.method, est.kernel, est.method_params, est.n_epochs, est.tol) == ("arpep", "matern32", {"alpha": 0.7},
                                                                                   2, None)
    wrong = _run("fit", "iris", "-o", str(tmp_path / "w.pt"), "--alpha", "0.5", *TINY)   # vi takes no alpha
    assert wrong.returncode == 2 and "alpha" in wrong.stderr and "Traceback" not in wrong.stderr


def test_predict_streams_a_python_saved_model_in_blocks(tmp_path):
    # a model saved from Python has no data record and no sidecar: its features are used as they are
    from sgpc import GPClassifier
    X, y = load_iris(return_X_y=True)
    est = GPClassifier(method="bsvm", n_inducing=10, max_iter=20, random_state=0, tol=None).fit(X, NAMES[y])
    est.save(tmp_path / "py.pt")
    features = _write_iris_csv(tmp_path / "f.csv", with_label=False)
    out = tmp_path / "p.csv"
    run = _run("predict", str(tmp_path / "py.pt"), str(features), "-o", str(out), "--batch-size", "7")
    assert run.returncode == 0, run.stderr
    header, labels, proba = _read_predictions(out)
    assert header == NAMES.tolist()
    np.testing.assert_allclose(proba, est.predict_proba(X), rtol=1e-9)
    np.testing.assert_array_equal(labels, est.predict(X))     # bsvm's own rule, not always argmax proba


def test_an_old_sidecar_is_still_read(tmp_path, capsys):
    from sgpc import GPClassifier
    X, y = load_iris(return_X_y=True)
    mean, std = X.mean(0), X.std(0)
    est = GPClassifier(n_inducing=10, max_iter=20, random_state=0, tol=None).fit((X - mean) / std, y)
    est.save(tmp_path / "old.pt")
    (tmp_path / "old.pt.json").write_text(json.dumps({
        "format": "sgpc-cli-sidecar", "version": 1, "data": "iris", "source": "name", "seed": 0, "target": None,
        "data_dir": None, "feature_names": ["a", "b", "c", "d"], "mean": mean.tolist(), "std": std.tolist()}))
    features = _write_iris_csv(tmp_path / "f.csv", with_label=False)
    assert cli.main(["predict", str(tmp_path / "old.pt"), str(features), "-o", str(tmp_path / "p.csv")]) == 0
    np.testing.assert_allclose(_read_csv(tmp_path / "p.csv")[1], est.predict_proba((X - mean) / std), rtol=1e-9)


def test_a_bad_row_late_in_the_file_leaves_no_output(name_model, tmp_path, capsys):
    X = load_iris().data
    path = tmp_path / "f.csv"
    rows = [",".join(map(str, x)) for x in X[:100]]
    rows[90] = ",".join([*rows[90].split(",")[:1], "nan", *rows[90].split(",")[2:]])
    path.write_text("a,b,c,d\n" + "\n".join(rows) + "\n")
    out = tmp_path / "p.csv"
    capsys.readouterr()
    assert cli.main(["predict", str(name_model), str(path), "-o", str(out), "--batch-size", "16"]) == 2
    err = capsys.readouterr().err
    assert "row 91 of" in err and "Traceback" not in err
    assert not out.exists() and not (tmp_path / "p.csv.tmp").exists()


def test_predict_streams_blocks_and_numbers_bad_rows_in_the_file(file_model, tmp_path, capsys, monkeypatch):
    # `sgpc predict` reads, predicts and writes a block of rows at a time (memory O(block), issue 43); the result
    # is the one of the whole file at once, and a bad row in a later block is named by its row in the file
    model, data = file_model
    whole, blocks = tmp_path / "whole.csv", tmp_path / "blocks.csv"
    assert cli.main(["predict", str(model), str(data), "--target", "species", "-o", str(whole)]) == 0
    assert cli.main(["predict", str(model), str(data), "--target", "species", "-o", str(blocks), "--batch-size", "7"]) == 0
    (header_w, p_w), (header_b, p_b) = _read_csv(whole), _read_csv(blocks)
    assert header_w == header_b
    np.testing.assert_allclose(p_b, p_w, rtol=0, atol=1e-12)     # other batch shapes: ulps, not the other rows
    lines = data.read_text().splitlines()
    missing = lines[:20] + [",".join(["?"] * 4 + [lines[20].split(",")[-1]])] + lines[21:]   # row 20 of the data
    (tmp_path / "missing.csv").write_text("\n".join(missing) + "\n")
    capsys.readouterr()
    bad = tmp_path / "bad.csv"
    assert cli.main(["predict", str(model), str(tmp_path / "missing.csv"), "--target", "species", "-o", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "row 20 of" in err and not bad.exists() and not (tmp_path / "bad.csv.tmp").exists()
    # the estimator numbers rows within the block it was given: renumbered in the file
    assert cli._renumbered("X has 2 row(s) too large ..., first: 0, 5 (largest", 14) == \
        "X has 2 row(s) too large ..., first: 14, 19 (largest"


def test_fit_says_when_the_model_stayed_at_the_prior(tmp_path, capsys):
    # a length-scale far below the features' spread leaves every prediction at the prior: the summary line and
    # --json say so (diagnostics), besides the DegenerateFitWarning on stderr
    model = tmp_path / "m.pt"
    assert cli.main(["fit", "iris", "-o", str(model), "--init-lengthscale", "1e-3", *TINY]) == 0
    out = capsys.readouterr().out
    assert "AT THE PRIOR" in out
    assert cli.main(["fit", "iris", "-o", str(model), "--init-lengthscale", "1e-3", "--json", *TINY]) == 0
    assert json.loads(capsys.readouterr().out)["at_prior"] is True
    assert cli.main(["fit", "iris", "-o", str(model), *TINY]) == 0
    assert "AT THE PRIOR" not in capsys.readouterr().out
