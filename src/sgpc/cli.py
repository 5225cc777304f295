"""The command line: ``sgpc fit | predict | evaluate | demo`` (also ``python -m sgpc``).

A thin shell over ``GPClassifier``, ``datasets`` and ``metrics``: it parses arguments, reads and
writes files and prints. It holds no maths, and no modelling choice beyond the demo's fixed settings.

- ``sgpc fit DATA -o MODEL.pt``: DATA is a data-set name (``sgpc.datasets.available()``; the model is
  fitted on the training part of the paper's split protocol, ``datasets.train_test`` with ``--seed``)
  or a CSV / CSV.gz / Parquet / LIBSVM file (fitted on all its rows; label column ``--target``,
  default the last). Features are standardised with the training mean and standard deviation.
- ``sgpc predict MODEL.pt FILE -o OUT.csv``: class probabilities, one column per class.
- ``sgpc evaluate MODEL.pt DATA``: error, NLL, Brier score and ECE on the protocol's test split of a
  named set (same seed as the fit) or on a labelled file.
- ``sgpc demo``: digits, end to end, with a figure.

The sidecar. ``fit`` writes, next to MODEL.pt, a JSON file ``MODEL.pt.json`` holding what the model
file does not: the data it was fitted on (name or path, ``source`` "name"/"file", ``seed``,
``target``, ``data_dir``), the feature names, the categorical ``levels`` and, for a LIBSVM file, the
index base ``zero_based`` (new LIBSVM files are read with the training file's), and the standardisation
(``mean`` [D], ``std`` [D]; features are fed to the model as (x − mean) / std). ``predict`` and
``evaluate`` need it.

Errors a user can fix (unknown data set, missing file, a file that is not an sgpc model, bad values)
print one line to stderr and exit with status 2; ``--debug`` shows the traceback instead.

What it deliberately does not do: choose hyper-parameters, tune, or write results anywhere it was
not told to (the demo writes its figure to ``--out``, default ``out/`` in the current directory).
Categorical columns of a training file get ordinal codes (``tabular.load_file``); their levels go
into the sidecar, and ``predict`` and ``evaluate`` code a file's columns with those levels, so a
file holding only some of them gets the training codes, and a level the training file did not have
is an error naming the column and row.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import pathlib
import sys
import time

import numpy as np
import torch

from . import __version__, datasets, metrics, tabular
from .estimator import GPClassifier
from .registry import METHODS

__all__ = ["main", "build_parser", "SIDECAR_SUFFIX"]

SIDECAR_SUFFIX = ".json"
_SIDECAR_FORMAT = "sgpc-cli-sidecar"
_SIDECAR_VERSION = 1
_DEFAULTS = GPClassifier().get_params()  # the estimator's defaults are the CLI's defaults

# The demo's settings: full-batch Adam on 1437 digits with M = 100 inducing points per class. 100 steps
# (≈ 15-25 s on 2 cores): the ELBO is still rising slowly after that, but the held-out NLL is flat
# from step ~50 and creeps up by 300 steps (0.069 at 100, 0.074 at 300), so more steps buy nothing here.
DEMO_SETTINGS = dict(method="vi", n_inducing=100, batch_size=None, optimizer="adam", learning_rate=0.05,
                     max_iter=100, random_state=0, eval_every=10)
DEMO_TEST_FRACTION = 0.2
# One torch thread unless --threads says otherwise: measured on a 2-core machine that other jobs
# shared, 0.21 s per step with 1 thread against 1.9 s with 2 (the many small kernels of a step wait
# for a second core that is busy elsewhere); on an idle machine 2 threads save little.
DEMO_THREADS = 1


class CLIError(Exception):
    """A user error found by the CLI itself (bad argument combination, missing sidecar, ...)."""


# -- argument parsing ---------------------------------------------------------------------------------
def _target(value: str) -> str | int:
    """--target: a column name, or an integer position (negative counts from the end)."""
    try:
        return int(value)
    except ValueError:
        return value


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``sgpc``."""
    parser = argparse.ArgumentParser(
        prog="sgpc", description="Scalable Gaussian-process classification: fit, predict, evaluate, demo.")
    parser.add_argument("--version", action="version", version=f"sgpc {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser.add_argument("--threads", type=int, metavar="T",
                        help="CPU threads of torch (default: torch's choice; 1 is fastest on a busy machine)")
    common = argparse.ArgumentParser(add_help=False)  # the same two options after the subcommand
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks of errors")
    common.add_argument("--threads", type=int, default=argparse.SUPPRESS, metavar="T",
                        help="CPU threads of torch (default: torch's choice; 1 is fastest on a busy machine)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    names = ", ".join(datasets.available())
    p = sub.add_parser("fit", parents=[common], help="fit a classifier and save it",
                       description="Fit a GPClassifier. DATA is a data-set name or a CSV/Parquet/LIBSVM file. "
                                   f"Names: {names}.")
    p.add_argument("data", metavar="DATA", help="data-set name or file path")
    p.add_argument("-o", "--output", required=True, metavar="MODEL.pt",
                   help="model file to write (the sidecar goes to MODEL.pt.json)")
    p.add_argument("--method", default=_DEFAULTS["method"], choices=tuple(METHODS),
                   help="inference method (default: %(default)s)")
    p.add_argument("--n-inducing", type=int, default=_DEFAULTS["n_inducing"], metavar="M",
                   help="inducing points per latent function (default: %(default)s)")
    p.add_argument("--max-iter", type=int, default=_DEFAULTS["max_iter"], metavar="N",
                   help="optimiser steps (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=_DEFAULTS["batch_size"], metavar="B",
                   help="minibatch size (default: full batch)")
    p.add_argument("--learning-rate", type=float, default=_DEFAULTS["learning_rate"], metavar="LR",
                   help="optimiser step size (default: %(default)s)")
    p.add_argument("--lr-decay", type=float, default=_DEFAULTS["lr_decay"], metavar="D",
                   help="Adam: multiply the learning rate by D per pass over the data (default: %(default)s)")
    p.add_argument("--optimizer", choices=("adam", "lbfgs"), default=_DEFAULTS["optimizer"],
                   help="(default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="random_state of the fit and seed of the data split (default: %(default)s)")
    p.add_argument("--dtype", choices=("float64", "float32"), default=_DEFAULTS["dtype"],
                   help="(default: %(default)s)")
    p.add_argument("--data-dir", metavar="DIR", help="directory of the staged data sets (default: $SGPC_DATA "
                   "or ../shared/datasets)")
    p.add_argument("--target", type=_target, metavar="COL",
                   help="label column of a file, by name or position (default: the last column)")
    p.add_argument("--checkpoint", metavar="PATH", help="checkpoint file for resumable fits")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="K",
                   help="write the checkpoint every K steps (needs --checkpoint)")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint if it exists")
    p.add_argument("--verbose", action="store_true", help="progress bar and model summary")
    p.add_argument("--stream", action="store_true",
                   help="stream a Parquet file in row groups instead of loading it (vi, sep, apep, arpep, rpapep; "
                        "needs --batch-size; standardisation statistics from one streaming pass)")
    p.add_argument("--nproc", type=int, default=1, metavar="P",
                   help="data-parallel training in P local processes (torch.distributed, gloo; default: 1), "
                        "each with --threads torch threads (default 1)")
    p.set_defaults(func=_cmd_fit)

    p = sub.add_parser("predict", parents=[common], help="write class probabilities for a file",
                       description="Write predictive class probabilities (one column per class) as CSV.")
    p.add_argument("model", metavar="MODEL.pt")
    p.add_argument("file", metavar="FILE", help="CSV/CSV.gz/Parquet/LIBSVM file of features")
    p.add_argument("-o", "--output", default="-", metavar="OUT.csv", help="output CSV (default: stdout)")
    p.add_argument("--target", type=_target, metavar="COL",
                   help="a label column in FILE to drop (by name or position); without it every column "
                        "is a feature (LIBSVM labels are always dropped)")
    p.set_defaults(func=_cmd_predict)

    p = sub.add_parser("evaluate", parents=[common], help="error, NLL, Brier score and ECE of a model",
                       description="Evaluate a model on the protocol test split of a named data set (same "
                                   "seed as the fit) or on a labelled file.")
    p.add_argument("model", metavar="MODEL.pt")
    p.add_argument("data", metavar="DATA", help="data-set name or labelled file")
    p.add_argument("-o", "--output", metavar="metrics.json", help="also write the metrics as JSON")
    p.add_argument("--target", type=_target, metavar="COL",
                   help="label column of a file (default: the one used by fit, else the last)")
    p.add_argument("--data-dir", metavar="DIR", help="directory of the staged data sets (default: the fit's)")
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("demo", parents=[common], help="fit scikit-learn's digits and draw a figure",
                       description="Fit GPClassifier(method='vi') on scikit-learn's bundled digits (80/20 "
                                   "stratified split), print test metrics and times, and save a figure. Runs on one "
                                   "torch thread unless --threads is given.")
    p.add_argument("--out", default="out", metavar="DIR", help="directory of the figure (default: %(default)s)")
    p.add_argument("--max-iter", type=int, default=DEMO_SETTINGS["max_iter"], metavar="N",
                   help="optimiser steps (default: %(default)s)")
    p.set_defaults(func=_cmd_demo)  # the demo runs on DEMO_THREADS = 1 torch thread unless --threads is given
    return parser


# -- data and files ---------------------------------------------------------------------------------
def _is_name(data: str) -> bool:
    """DATA is read as a data-set name unless it is an existing path or looks like one."""
    if os.path.exists(data):
        return False
    looks_like_path = os.sep in data or "/" in data or pathlib.Path(data).suffix.lower() in (
        ".csv", ".gz", ".parquet", ".pq", ".libsvm", ".svm", ".txt")
    return not looks_like_path


def _require_file(path: str, what: str) -> None:
    """CLIError "<what> not found: <path>" unless path is a file."""
    if not os.path.isfile(path):
        raise CLIError(f"{what} not found: {path}")


def _sidecar_path(model: str) -> str:
    """MODEL.pt -> MODEL.pt.json."""
    return model + SIDECAR_SUFFIX


def _write_sidecar(model: str, info: dict) -> str:
    """Write the sidecar of ``model``; returns its path."""
    path = _sidecar_path(model)
    payload = {"format": _SIDECAR_FORMAT, "version": _SIDECAR_VERSION, **info}
    with open(path, "w") as f:
        json.dump(payload, f, indent=1)
    return path


def _load_model(model: str) -> tuple[GPClassifier, dict]:
    """The estimator (``GPClassifier.load``) and its sidecar."""
    _require_file(model, "model file")
    est = GPClassifier.load(model)
    path = _sidecar_path(model)
    if not os.path.isfile(path):
        raise CLIError(f"{path} not found: `sgpc fit` writes it next to the model (data, feature "
                       "standardisation); models saved from Python need one too")
    try:
        with open(path) as f:
            side = json.load(f)
    except (OSError, ValueError) as exc:
        why = ("it is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else
               f"it is not valid JSON (line {exc.lineno}: damaged or edited?)" if isinstance(exc, json.JSONDecodeError)
               else "the system could not read it")
        raise CLIError(f"{path} is not a readable sgpc sidecar: {why}; `sgpc fit` rewrites it") from None
    if not isinstance(side, dict) or side.get("format") != _SIDECAR_FORMAT:
        raise CLIError(f"{path} is not an sgpc sidecar file")
    if side.get("version") != _SIDECAR_VERSION:
        raise CLIError(f"{path} has sidecar version {side.get('version')}; this sgpc reads {_SIDECAR_VERSION}")
    return est, side


def _read_features(path: str, target, n_features: int | None = None, levels: dict | None = None,
                   zero_based: bool | str = "auto") -> tuple[np.ndarray, tuple[str, ...]]:
    """Feature matrix [N,D] of a file and its column names; the ``target`` column (when given) is dropped.
    ``n_features``: the model's D, for a LIBSVM file whose rows never use the highest index;
    ``levels``, ``zero_based``: the training file's categorical levels and LIBSVM index base (the sidecar's)."""
    blocks = list(_feature_blocks(path, target, n_features, levels, zero_based, block_rows=None))
    return np.vstack([X for X, _ in blocks]), blocks[0][1]


PREDICT_BLOCK_ROWS = 1 << 16       # rows `sgpc predict` reads, predicts and writes at a time


def _feature_blocks(path: str, target, n_features: int | None, levels: dict | None, zero_based: bool | str,
                    block_rows: int | None = 1 << 16):
    """``_read_features`` in blocks of ``block_rows`` rows (a CSV file; other formats in one block): yields
    (X [B,D], names)."""
    _require_file(path, "file")
    try:
        yield from tabular.iter_features(path, target=target, n_features=n_features, levels=levels,
                                         zero_based=zero_based, block_rows=block_rows)
    except tabular.NonNumericColumns as exc:
        where = f" ({exc.where})" if exc.where else ""
        raise CLIError(f"{path}: columns {exc.columns[:5]} are not numeric{where}; the model needs numeric features "
                       "(if one of them is the label, pass --target COL to drop it)") from None


def _levels(side: dict) -> dict | None:
    """The training file's categorical levels from a sidecar; None for a model fitted on a named set
    (its features are numeric) or a sidecar written before levels were recorded."""
    return side.get("levels") if side.get("source") == "file" else None


def _zero_based(side: dict) -> bool | str:
    """The training LIBSVM file's index base from a sidecar; "auto" (guess per file) for a model fitted on
    another format or a named set, or a sidecar written before the base was recorded."""
    base = side.get("zero_based") if side.get("source") == "file" else None
    return "auto" if base is None else bool(base)


def _standardise(X: np.ndarray, side: dict, source: str, hint: str, names=None) -> np.ndarray:
    """(X − mean) / std with the sidecar's training statistics.

    ``names``: the file's column names; for a model fitted on a file they must be its columns, in order
    (a file with the columns shuffled has the right count and would be read as the wrong features)."""
    mean, std = np.asarray(side["mean"]), np.asarray(side["std"])
    if X.shape[1] != len(mean):
        raise CLIError(f"{source} has {X.shape[1]} feature columns but the model was fitted on {len(mean)} "
                       f"({', '.join(side['feature_names'][:8])}{', ...' if len(mean) > 8 else ''}); {hint}")
    fitted = [str(n) for n in side.get("feature_names", [])]
    if names is not None and side.get("source") == "file" and len(fitted) == len(mean) \
            and [str(n) for n in names] != fitted:
        wrong = [f"{a!r} (model: {b!r})" for a, b in zip(names, fitted) if str(a) != b]
        raise CLIError(f"{source}'s feature columns are not the ones the model was fitted on, in that order: "
                       f"{', '.join(wrong[:5])}{', ...' if len(wrong) > 5 else ''}")
    return (X - mean) / std


def _check_writable(path: str, *inputs: str | None) -> None:
    """Fail before a long fit, not after it, when the output's folder does not exist or the output is one
    of the command's inputs (``-o`` naming the data or the model would overwrite it)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"cannot write {path}: the folder {folder} does not exist")
    target = os.path.realpath(path)
    for inp in inputs:
        if inp is not None and os.path.realpath(inp) == target:
            raise CLIError(f"the output {path} is also an input of this command ({inp}); it would be overwritten: "
                           "choose another output path")


def _write_csv(path: str, header, rows: np.ndarray) -> None:
    """A header row and the rows [N,C] (full float precision) to ``path``, or stdout for "-"."""
    f = sys.stdout if path == "-" else open(path, "w", newline="")
    try:
        writer = csv.writer(f)
        writer.writerow([str(h) for h in header])
        writer.writerows(rows.tolist())
    finally:
        if f is not sys.stdout:
            f.close()


# -- subcommands --------------------------------------------------------------------------------------
def _fit_rank(comm, est, X, y, resume):
    """One process of ``fit --nproc``: the same fit on every rank; rank 0 returns the estimator. The
    parent has shown the warnings it can check before spawning; rank 0 shows the fit's own, once."""
    import warnings
    with warnings.catch_warnings():
        if comm.rank == 0:
            warnings.showwarning = lambda message, *a, **k: print(f"sgpc fit: warning: {message}", file=sys.stderr)
            warnings.filterwarnings("ignore", message="checkpoint_path .* checkpoint_every=0")
        else:
            warnings.simplefilter("ignore")
        est.fit(X, y, resume=resume, comm=comm)
    return est if comm.rank == 0 else None


def _as_numeric_classes(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Text labels ``y`` ("2") as the model's numeric classes (2), matched as text; unknown labels raise."""
    by_text = {str(c): c for c in classes.tolist()}
    unknown = sorted({v for v in y.tolist() if v not in by_text})
    if unknown:
        raise ValueError(f"labels {unknown[:5]} are not among the model's classes {classes.tolist()}")
    return np.asarray([by_text[v] for v in y.tolist()], dtype=classes.dtype)


def _fit_maybe_parallel(est, X, y, args):
    """``est.fit`` in this process, or in ``--nproc`` processes (``distributed.launch``)."""
    if args.nproc < 1:
        raise CLIError(f"--nproc must be >= 1, got {args.nproc}")
    if args.nproc == 1:
        return est.fit(X, y, resume=args.resume)
    from . import distributed
    from .train import _check_checkpoint_path
    # what the ranks would refuse, refused here: one message, before spawning (workers take seconds to start)
    est._check_options()
    _check_checkpoint_path(est._train_settings(), args.resume)
    threads = args.threads if args.threads is not None else 1       # per process: P processes share the cores
    import logging
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    spawn_log.setLevel(logging.ERROR)          # not its "Terminating process …" line before our one-line error
    try:
        return distributed.launch(_fit_rank, args.nproc, est, X, y, args.resume, threads=threads)[0]
    finally:
        spawn_log.setLevel(level)


def _cmd_fit_stream(args) -> int:
    """``fit --stream``: a Parquet file read row group by row group (``stream.ParquetSource``)."""
    from . import stream
    _require_file(args.data, "data file")
    if not args.data.endswith((".parquet", ".pq")):
        raise CLIError(f"--stream reads Parquet files (.parquet, .pq); got {args.data}")
    import pyarrow.parquet as pq
    names = pq.ParquetFile(args.data).schema_arrow.names
    target = -1 if args.target is None else args.target
    if isinstance(target, int):
        if not -len(names) <= target < len(names):
            raise CLIError(f"--target {target} is out of range for {len(names)} columns")
        target = names[target]
    src, st = stream.standardized(stream.ParquetSource(args.data, target=target))
    est = _estimator(args)
    start = time.perf_counter()
    est = _fit_maybe_parallel(est, src, None, args)
    seconds = time.perf_counter() - start
    est.save(args.output)
    sidecar = _write_sidecar(args.output, {
        "data": args.data, "source": "file", "seed": args.seed, "target": target, "data_dir": args.data_dir,
        "feature_names": list(src.source.features), "mean": st.mean.tolist(), "std": st.std.tolist()})
    print(f"fitted {est.method} streaming {args.data}: N={st.n_rows} D={src.n_features} C={len(est.classes_)}, "
          f"{est.n_iter_} iterations in {seconds:.1f} s, {_fit_status(est)}; wrote {args.output} and {sidecar}")
    return 0


def _fit_status(est: GPClassifier) -> str:
    """How a fit ended, for its summary line (``converged_``, ``stalled_``, ``at_prior_``; the warnings on stderr say why)."""
    status = "converged" if est.converged_ else "NOT converged (stopped at --max-iter)"
    if est.stalled_:
        status += ", STALLED (EP restarted latent functions from the prior)"
    if est.at_prior_:
        status += ", AT THE PRIOR (its predictions are the prior's: it learned nothing from the data)"
    return status


def _estimator(args) -> GPClassifier:
    """The estimator that ``fit`` and ``fit --stream`` configure from the command line."""
    return GPClassifier(method=args.method, n_inducing=args.n_inducing, max_iter=args.max_iter,
                        batch_size=args.batch_size, learning_rate=args.learning_rate, lr_decay=args.lr_decay,
                        optimizer=args.optimizer, random_state=args.seed, dtype=args.dtype, verbose=int(args.verbose),
                        checkpoint_path=args.checkpoint, checkpoint_every=args.checkpoint_every)


def _cmd_fit(args) -> int:
    if args.checkpoint_every and not args.checkpoint:
        raise CLIError("--checkpoint-every needs --checkpoint PATH")
    if args.resume and not args.checkpoint:
        raise CLIError("--resume needs --checkpoint PATH")
    data = None if _is_name(args.data) else args.data
    _check_writable(args.output, data, args.checkpoint)
    _check_writable(_sidecar_path(args.output), data, args.checkpoint)
    if args.stream:
        return _cmd_fit_stream(args)
    if _is_name(args.data):
        if args.target is not None:
            raise CLIError("--target applies to files; a named data set knows its label column")
        ds = datasets.load(args.data, args.data_dir)
        X, _, y, _ = datasets.train_test(ds, seed=args.seed, standardize=False)
        source, what = "name", f"{ds.name} (training split, seed {args.seed})"
    else:
        _require_file(args.data, "data file")
        ds = tabular.load_file(args.data, target=-1 if args.target is None else args.target)
        X, y = ds.X, ds.y
        source, what = "file", f"{args.data} (all rows)"
    Xs, _, mean, std = datasets.standardize(X)
    est = _estimator(args)
    start = time.perf_counter()
    est = _fit_maybe_parallel(est, Xs, y, args)
    seconds = time.perf_counter() - start
    est.save(args.output)
    sidecar = _write_sidecar(args.output, {
        "data": args.data if source == "file" else ds.name, "source": source, "seed": args.seed,
        "target": args.target, "data_dir": args.data_dir, "feature_names": list(ds.feature_names),
        "levels": {k: list(v) for k, v in ds.levels.items()}, "zero_based": ds.zero_based,
        "mean": mean.tolist(), "std": std.tolist()})
    objective = est.history_["objective"][-1] if est.history_["objective"] else float("nan")
    print(f"fitted {est.method} on {what}: N={X.shape[0]} D={X.shape[1]} C={len(est.classes_)} "
          f"M={min(est.n_inducing, X.shape[0])}, {est.n_iter_} iterations in {seconds:.1f} s, "
          f"final objective {objective:.6g}, {_fit_status(est)}; wrote {args.output} and {sidecar}")
    return 0


def _cmd_predict(args) -> int:
    est, side = _load_model(args.model)
    if args.output != "-":
        _check_writable(args.output, args.model, _sidecar_path(args.model), args.file)
    # streamed: a block of rows is read, predicted and written before the next is read (memory: one block); the
    # output goes to a temporary file renamed at the end, so a bad row found late leaves no partial output
    out = sys.stdout if args.output == "-" else open(args.output + ".tmp", "w", newline="")
    n = 0
    try:
        writer = csv.writer(out)
        writer.writerow([str(c) for c in est.classes_.tolist()])
        for X, names in _feature_blocks(args.file, args.target, len(side["mean"]), _levels(side), _zero_based(side),
                                        PREDICT_BLOCK_ROWS):
            X = _standardise(X, side, args.file, "if FILE has a label column, pass --target COL to drop it", names)
            try:
                proba = est.predict_proba(X)
            except ValueError as exc:     # rows are numbered within the block: renumber them in the file
                raise CLIError(_renumbered(str(exc), n)) from None
            writer.writerows(proba.tolist())
            n += len(proba)
        if out is not sys.stdout:
            out.close()
            os.replace(args.output + ".tmp", args.output)
    finally:
        if out is not sys.stdout and not out.closed:
            out.close()
        if args.output != "-" and os.path.exists(args.output + ".tmp"):
            os.remove(args.output + ".tmp")
    if args.output != "-":
        print(f"wrote probabilities of {n} rows x {len(est.classes_)} classes to {args.output}")
    return 0


def _renumbered(message: str, offset: int) -> str:
    """An estimator message that names rows "first: 3, 17" of a block, with the rows numbered in the whole file
    (rows counted from 0, after the header)."""
    import re
    if not offset:
        return message
    return re.sub(r"first: (\d+(?:, \d+)*)", lambda m: "first: " + ", ".join(
        str(int(r) + offset) for r in m.group(1).split(", ")), message)


def _cmd_evaluate(args) -> int:
    est, side = _load_model(args.model)
    if args.output:
        _check_writable(args.output, args.model, _sidecar_path(args.model), args.data)
    if _is_name(args.data):
        data_dir = args.data_dir if args.data_dir is not None else side.get("data_dir")
        ds, names = datasets.load(args.data, data_dir), None
        if side.get("source") == "name" and side.get("data") != ds.name:
            # another set's test split can hold this model's training rows (the same data, another protocol)
            raise CLIError(f"the model was fitted on the training split of {side.get('data')!r}; evaluate it on "
                           f"{side.get('data')!r} (its test split) or on a labelled file, not on {args.data!r}")
        _, X, _, y = datasets.train_test(ds, seed=side["seed"], standardize=False)
        what = f"{args.data} (test split, seed {side['seed']})"
    else:
        _require_file(args.data, "data file")
        target = args.target if args.target is not None else side.get("target")
        ds = tabular.load_file(args.data, target=-1 if target is None else target,
                                n_features=len(side["mean"]), levels=_levels(side), zero_based=_zero_based(side))
        X, y, what, names = ds.X, ds.y, args.data, ds.feature_names
    hint = ("evaluate needs labelled data: the label column is --target (default: the one used by fit, "
            "else the last column)")
    Xs = _standardise(X, side, args.data, hint, names)
    y = np.asarray(y)
    if (est.classes_.dtype.kind in "UO") != (y.dtype.kind in "UO"):
        # one side's labels are text, the other's numbers: a CSV holding only some of a text column's labels
        # (1, 2 of 1, 2, other) parses them as numbers, a Parquet string column keeps "1", "2" as text.
        # Compare as text; integer-valued floats as integers ("2", not "2.0")
        y = y.astype(np.int64) if y.dtype.kind == "f" and np.all(y == np.round(y)) else y
        if est.classes_.dtype.kind in "UO":
            y = y.astype(str)
        else:
            y = _as_numeric_classes(y.astype(str), est.classes_)
    proba = est.predict_proba(Xs)
    # the error of the model's own decision rule (argmax proba, or the posterior mean for bsvm)
    result = metrics.evaluate(metrics.class_indices(y, est.classes_), proba,
                              pred_idx=metrics.class_indices(est.predict(Xs), est.classes_))
    result["n"] = int(len(y))
    print(f"{what}: error {result['error']:.4f}  nll {result['nll']:.4f}  brier {result['brier']:.4f}  "
          f"ece {result['ece']:.4f}  n {result['n']}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"model": args.model, "data": args.data, **result}, f, indent=1)
        print(f"wrote {args.output}")
    return 0


def _cmd_demo(args) -> int:
    if args.threads is not None:
        return _run_demo(args)
    before = torch.get_num_threads()
    torch.set_num_threads(DEMO_THREADS)
    try:
        return _run_demo(args)
    finally:
        torch.set_num_threads(before)


def _run_demo(args) -> int:
    start = time.perf_counter()
    settings = {**DEMO_SETTINGS, "max_iter": args.max_iter}
    protocol = datasets.SplitProtocol(DEMO_TEST_FRACTION)
    X_train, X_test, y_train, y_test = datasets.train_test("digits", seed=0, protocol=protocol)
    print(f"sgpc demo: scikit-learn digits, {len(y_train)} training / {len(y_test)} test rows "
          f"({X_train.shape[1]} features, 10 classes; stratified {1 - DEMO_TEST_FRACTION:.0%}/"
          f"{DEMO_TEST_FRACTION:.0%} split, seed 0, standardised on the training rows)")
    print("settings: " + ", ".join(f"{k}={v!r}" for k, v in settings.items())
          + f"; torch threads: {torch.get_num_threads()}")
    est = GPClassifier(**settings, verbose=1)
    fit_start = time.perf_counter()
    est.fit(X_train, y_train, X_val=X_test, y_val=y_test)
    fit_seconds = time.perf_counter() - fit_start
    proba = est.predict_proba(X_test)
    y_idx = metrics.class_indices(y_test, est.classes_)
    result = metrics.evaluate(y_idx, proba)
    print(f"test error  {result['error']:.2%}")
    print(f"test NLL    {result['nll']:.4f}")
    print(f"Brier score {result['brier']:.4f}")
    print(f"ECE         {result['ece']:.4f} (15 bins)")
    curve = metrics.reliability_curve(y_idx, proba)
    figure = _demo_figure(est.history_, len(y_train), curve, pathlib.Path(args.out))
    if figure is None:
        print("figure skipped: matplotlib is not installed (pip install sgpc[plot])")
    else:
        print(f"figure: {figure} (left: training objective, and NLL on the held-out test split; "
              "right: reliability diagram)")
    print(f"time: fit {fit_seconds:.1f} s, total {time.perf_counter() - start:.1f} s")
    return 0


def _demo_figure(history: dict, n_train: int, curve: dict, out: pathlib.Path) -> pathlib.Path | None:
    """Draw the demo's figure to out/demo.png; None when matplotlib is missing."""
    try:
        from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
    except ImportError:
        return None
    fig = Figure(figsize=(10, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.semilogy(history["iteration"], [-o / n_train for o in history["objective"]], color="C0")
    left.set_xlabel("iteration")
    left.set_ylabel("−ELBO per training point", color="C0")
    if history["validation"]:
        twin = left.twinx()
        rows = history["validation"]
        twin.plot([r["iteration"] for r in rows], [r["nll"] for r in rows], "o-", color="C1")
        twin.set_ylabel("NLL on the held-out test split", color="C1")
        twin.set_ylim(0, 1.2 * max(r["nll"] for r in rows))  # from 0, so small changes look small
    left.set_title("training")
    edges, used = curve["bin_edges"], curve["count"] > 0
    right.bar(edges[:-1][used], curve["accuracy"][used], width=edges[1] - edges[0], align="edge", alpha=0.7,
              edgecolor="k", label="accuracy in bin")
    right.plot(curve["confidence"][used], curve["accuracy"][used], "o", color="C3", label="at mean confidence")
    right.plot([0, 1], [0, 1], "k--", label="perfect calibration")
    right.set_xlim(0, 1)
    right.set_ylim(0, 1.02)
    right.set_xlabel("confidence (max probability)")
    right.set_ylabel("accuracy")
    right.set_title(f"reliability on the test split ({int(curve['count'].sum())} points)")
    right.legend(loc="lower right")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "demo.png"
    fig.savefig(path, dpi=100)
    return path


# -- entry point --------------------------------------------------------------------------------------
_USER_ERRORS = (CLIError, ValueError, FileNotFoundError, ImportError, NotImplementedError, FloatingPointError,
                OSError)


def main(argv: list[str] | None = None) -> int:
    """Run ``sgpc`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return int(exc.code or 0)
    if args.threads is not None:
        if args.threads < 1:
            print(f"sgpc {args.command}: error: --threads must be >= 1, got {args.threads}", file=sys.stderr)
            return 2
        torch.set_num_threads(args.threads)
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):     # one line, as errors are
        print(f"sgpc {args.command}: warning: {message}", file=sys.stderr)

    previous = warnings.showwarning
    warnings.showwarning = show
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("sgpc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:              # `sgpc predict ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except _USER_ERRORS as exc:
        if args.debug:
            raise
        print(f"sgpc {args.command}: error: {exc}", file=sys.stderr)
        return 2
    finally:
        warnings.showwarning = previous
