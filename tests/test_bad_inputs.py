"""The bad-input catalogue: inputs a careless or hostile user gives, each with the one clear error it must get.

Cases already pinned elsewhere (NaN rows, wrong feature counts, unknown options, label types, ... in
test_estimator.py; missing files, corrupt checkpoints in test_cli.py and test_train.py) are not repeated here.
Each case: (what is given, the exception, a pattern of the message); a message names the file or the rows, says the
likely cause once, and shows no library text (no "Errno", "codec", "Traceback", "weights_only", "zip archive").
"""
import re
import warnings

import numpy as np
import pytest
import torch

from sgpc import GPClassifier, cli
from sgpc.persist import ModelFileError, atomic_save, digest, load_model

RAW = ("Errno", "codec", "Traceback", "weights_only", "zip archive", "magic number", "(or pass --target")


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    return X, np.argmax(X, 1)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    X, y = _data()
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, kw in {"ep": dict(method="ep"), "f32": dict(dtype="float32"), "linear": dict(kernel="linear")}.items():
            out[name] = GPClassifier(n_inducing=5, max_iter=3, random_state=0, **kw).fit(X, y)
    path = tmp_path_factory.mktemp("m") / "ep.pt"
    out["ep"].save(path)
    out["path"] = path
    return out


def _rows(*far):
    return np.vstack([_data()[0][:2], np.asarray(far, dtype=float)])


# -- predicting: rows that the model cannot evaluate ------------------------------------------------------------
PREDICT = {
    "float32 model, a finite float64 row beyond float32": ("f32", _rows([1e100, 0, 0]),
                                                           r"beyond float32's range .* 1 row\(s\), first: 2;"),
    "linear kernel, a row whose x·x overflows float64": ("linear", _rows([1e200, 0, 0]),
                                                         r"1 row\(s\) too large .* in float64, first: 2 "),
    "float32 fit, a finite float64 row beyond float32": (None, None, r"beyond float32's range .* first: 0;"),
}


@pytest.mark.parametrize("case", list(PREDICT))
def test_rows_a_model_cannot_evaluate_are_named(models, case):
    which, X, pattern = PREDICT[case]
    with pytest.raises(ValueError, match=pattern) as info:
        if which is None:
            Xf, y = _data()
            GPClassifier(dtype="float32", n_inducing=5, max_iter=2).fit(np.vstack([[1e100, 0, 0], Xf[1:]]), y)
        else:
            models[which].predict(X)
    assert not any(r in str(info.value) for r in RAW)


# -- model files --------------------------------------------------------------------------------------------------
def _altered(path, tmp, change):
    """A copy of the model file at ``path`` with ``change`` applied to its payload and a valid checksum."""
    d = load_model(path)
    change(d)
    d["checksum"] = digest(d)
    atomic_save(tmp, d)


def _set(part, key, value):
    def change(d):
        d[part] = dict(d[part])
        if value is None:
            del d[part][key]
        else:
            d[part][key] = value
    return change


FILES = {
    "empty file": (lambda p, t: t.write_bytes(b""), "it is empty"),
    "a CSV file": (lambda p, t: t.write_text("a,b\n1,2\n"), "it is a text file"),
    "random bytes": (lambda p, t: t.write_bytes(np.random.default_rng(0).bytes(3000)), "is not a readable sgpc model"),
    "a zip archive that is not one": (lambda p, t: t.write_bytes(b"PK\x03\x04" + bytes(100)),
                                      "not a file written by sgpc's save"),
    "truncated": (lambda p, t: t.write_bytes(p.read_bytes()[:2000]), "is not a readable sgpc model file: it"),
    "a directory": (lambda p, t: t.mkdir(), "it is a directory"),
    "a newer format version": (lambda p, t: _altered(p, t, lambda d: d.update(version=2)),
                               "model format version 2; this sgpc .* reads format version 1: upgrade sgpc"),
    "a wrongly shaped posterior": (lambda p, t: _altered(p, t, _set("posterior", "chol", torch.zeros(3, 4, 4,
                                   dtype=torch.float64))), r"posterior/chol is a float64 tensor of shape \(3, 4, 4\), "
                                   r"the model needs a float64 tensor of shape \(3, 5, 5\)"),
    # explicit dtypes: another test module may have changed torch's default dtype
    "a weight of another dtype": (lambda p, t: _altered(p, t, _set("model", "Z", torch.zeros(
                                  3, 5, 3, dtype=torch.float32))), "model/Z is a float32 tensor"),
    "per-row sites of two lengths": (lambda p, t: _altered(p, t, _set("state", "V", torch.zeros(39, 3, 5,
                                     dtype=torch.float64))), r"state/V .* shape \(39, 3, 5\), .* shape \(40, 3, 5\)"),
    "a missing state entry": (lambda p, t: _altered(p, t, _set("state", "Lam", None)), r"missing \['Lam'\]"),
}


@pytest.mark.parametrize("case", list(FILES))
def test_bad_model_files_are_refused_with_the_cause(models, tmp_path, case):
    make, pattern = FILES[case]
    target = tmp_path / "bad.pt"
    make(models["path"], target)
    with pytest.raises(ModelFileError, match=pattern) as info:
        GPClassifier.load(target)
    message = str(info.value)
    assert message.count(str(target)) == 1 and not any(r in message for r in RAW)


# -- the command line -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cli_model(tmp_path_factory):
    model = tmp_path_factory.mktemp("cli") / "iris.pt"
    assert cli.main(["fit", "iris", "-o", str(model), "--max-iter", "5", "--n-inducing", "5"]) == 0
    return model


def _binary(path):
    path.write_bytes(b"\xc1" + np.random.default_rng(1).bytes(2000))
    return path


CLI = {
    "fit: a binary file named .csv": (lambda m, t: ["fit", str(_binary(t / "d.csv")), "-o", str(t / "o.pt")],
                                      "d.csv", r"is not a CSV file: byte 0 is not UTF-8 text; it looks like a binary"),
    "predict: a binary file named .csv": (lambda m, t: ["predict", str(m), str(_binary(t / "d.csv"))],
                                          "d.csv", r"is not a CSV file: byte 0 is not UTF-8"),
    "predict: a gzip name on plain text": (lambda m, t: ["predict", str(m), str(t / "d.csv.gz")], "d.csv.gz",
                                           "its name ends in .gz but it is not gzip-compressed"),
    "evaluate: a CSV given as the model": (lambda m, t: ["evaluate", str(t / "d.csv"), "iris"], "d.csv",
                                           "not a readable sgpc model file: it is a text file"),
    "evaluate: a damaged sidecar": (lambda m, t: ["evaluate", str(m), "iris"], ".pt.json",
                                    r"not a readable sgpc sidecar: it is not valid JSON \(line 1"),
}


@pytest.mark.parametrize("case", list(CLI))
def test_cli_file_errors_name_the_file_and_cause_once(cli_model, tmp_path, capsys, case):
    argv, name, pattern = CLI[case]
    (tmp_path / "d.csv").write_text("x1,x2\n1,2\n")
    (tmp_path / "d.csv.gz").write_text("x1,x2\n1,2\n")
    model = cli_model
    if "sidecar" in case:       # a model without a data record (saved from Python) beside a damaged sidecar
        from sklearn.datasets import load_iris
        from sgpc import GPClassifier
        model = tmp_path / "m.pt"
        GPClassifier(n_inducing=5, max_iter=5, tol=None, random_state=0).fit(*load_iris(return_X_y=True)).save(model)
        (tmp_path / "m.pt.json").write_text("{not json")
    capsys.readouterr()
    assert cli.main(argv(model, tmp_path)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.count(name) == 1, err
    assert re.search(pattern, err), err
    assert not any(r in err for r in RAW), err
