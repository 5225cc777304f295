"""The command line: ``sgpc fit | predict | evaluate | demo`` (also ``python -m sgpc``).

A thin shell over ``GPClassifier``, ``datasets``, ``tabular`` and ``metrics``: it parses arguments, reads and
writes files and prints. It holds no maths, and no modelling choice beyond the demo's fixed settings.

- ``sgpc fit DATA -o MODEL.pt``: DATA is a data-set name (``sgpc.datasets.available()``; the model is
  fitted on the training part of the paper's split protocol, ``datasets.train_test`` with ``--seed``)
  or a CSV / CSV.gz / Parquet / LIBSVM file (fitted on all its rows; label column ``--target``,
  default the last). Features are standardised with the training mean and standard deviation. The
  estimator's options are flags (``FIT_OPTIONS``, the one table from flag to ``GPClassifier`` argument;
  the choices of ``--method``, ``--likelihood`` and ``--kernel`` come from ``registry``). ``--json``
  prints a machine-readable summary.
- ``sgpc predict MODEL.pt FILE -o OUT.csv``: the predicted label (column "predicted") and the class
  probabilities (one column per class), FILE read and predicted ``--batch-size`` rows at a time.
- ``sgpc evaluate MODEL.pt DATA``: error, NLL, Brier score and ECE on the protocol's test split of a
  named set (same seed as the fit) or on a labelled file.
- ``sgpc demo``: digits, end to end, with a figure.

The data record. ``fit`` stores in the model file (``GPClassifier.save(metadata=...)``, key ``RECORD_KEY``)
what ``predict`` and ``evaluate`` need besides the model: the data it was fitted on (name or path,
``source`` "name"/"file", ``seed``, ``target``, ``data_dir``), the feature names, the categorical ``levels``
and, for a LIBSVM file, the index base ``zero_based`` (new LIBSVM files are read with the training file's),
and the standardisation (``mean`` [D], ``std`` [D]; features are fed to the model as (x − mean) / std).
Models fitted by earlier versions kept it in a sidecar ``MODEL.pt.json``, which is still read. A model saved
from Python without a record takes the features as they are, checked against its ``feature_names_in_``.

Errors a user can fix (unknown data set, missing file, a file that is not an sgpc model, bad values)
print one line to stderr and exit with status 2; ``--debug`` shows the traceback instead.

What it deliberately does not do: choose hyper-parameters, tune, or write results anywhere it was
not told to (the demo writes its figure to ``--out``, default ``out/`` in the current directory).
Categorical columns of a training file get ordinal codes (``tabular.load_file``); their levels go
into the record, and ``predict`` and ``evaluate`` code a file's columns with those levels, so a
file holding only some of them gets the training codes, and a level the training file did not have
is an error naming the column and row.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import pathlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from . import __version__, datasets, metrics, tabular
from .estimator import GPClassifier
from .registry import (KERNEL_OPTIONS, KERNELS, LIKELIHOOD_OPTIONS, LIKELIHOODS, METHOD_OPTIONS, METHODS,
                       OPTIMIZER_OPTIONS)
from .train import COMPILE_MODES, OPTIMIZERS
from .validation import DTYPES, USER_LIKELIHOODS

__all__ = ["main", "build_parser", "FIT_OPTIONS", "SIDECAR_SUFFIX", "RECORD_KEY"]

SIDECAR_SUFFIX = ".json"
_SIDECAR_FORMAT = "sgpc-cli-sidecar"
_SIDECAR_VERSION = 1
RECORD_KEY = "cli"       # the model file's metadata entry that holds the data record (``_record``)
_DEFAULTS = GPClassifier().get_params()  # the estimator's defaults are the CLI's defaults
PREDICT_BATCH_ROWS = 8192                # rows that ``predict`` reads and predicts at once by default

# The demo's settings: GPClassifier() with its defaults (on 1437 digits: `ep` on the full batch, M = 100 per class),
# seeded. It stops on its own: 43 iterations, 8.4 s on one thread, test NLL 0.0993 and error 3.06% (2026-12-02).
DEMO_SETTINGS = dict(random_state=0)
DEMO_EVAL_EVERY = 10          # steps between the demo's evaluations of its test rows
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


def _inducing(value: str) -> int | str:
    """--n-inducing: a positive integer, or "auto" (``GPClassifier``'s rule from the number of rows)."""
    return "auto" if value.lower() == "auto" else int(value)


def _max_iter(value: str) -> int | str:
    """--max-iter: a non-negative integer, or "auto" (``GPClassifier``'s ceiling: 500 steps on the full batch, 2000
    with minibatches)."""
    return "auto" if value.lower() == "auto" else int(value)


def _batch(value: str) -> int | str | None:
    """--batch-size: a positive integer, "auto" (``GPClassifier``'s rule from the size of the problem) or "none"
    (the full batch)."""
    return None if value.lower() == "none" else "auto" if value.lower() == "auto" else int(value)


def _tol(value: str) -> float | str | None:
    """--tol: a number, "auto" (the method's) or "none" (run to the ceiling)."""
    return None if value.lower() == "none" else "auto" if value.lower() == "auto" else float(value)


def _number_or_none(value: str) -> float | str:
    """--prior-scale: a number, or "none" (kept as the word: a group's key is passed only when given, and
    "none" is given — ``Option.convert`` makes it None)."""
    return "none" if value.lower() == "none" else float(value)


@dataclass(frozen=True)
class Option:
    """One ``fit`` option: its flag, where its value goes in ``GPClassifier`` and its argparse settings.

    ``target`` is a constructor parameter ("n_inducing"), or "group.key" for a key of one of the option
    dicts ("method_params.alpha"): such a key is passed only when the flag is given, so a method that does
    not take it is refused only when asked for it. ``convert`` maps the parsed value to the parameter's."""
    flag: str
    target: str
    help: str
    settings: dict = field(default_factory=dict)
    convert: Callable | None = None

    @property
    def dest(self) -> str:
        """The argparse attribute of the flag ("--n-inducing" -> "n_inducing")."""
        return self.flag.lstrip("-").replace("-", "_")


def _takers(key: str) -> str:
    """The methods or likelihoods that take the option ``key`` (for --help)."""
    if key in METHOD_OPTIONS:
        names = [n for n, m in METHODS.items() if key in m.options]
    else:
        names = [n for n, e in LIKELIHOODS.items() if key in e.options]
    return ", ".join(names)


# CLI flag -> GPClassifier argument: the one table to change when the estimator's arguments change. Choices come
# from the registry (methods, likelihoods, kernels) and the modules that define them.
FIT_OPTIONS: tuple[Option, ...] = (
    Option("--method", "method", "inference method; 'auto' ep on the full batch, sep with minibatches (default: "
           "%(default)s)", dict(choices=("auto", *METHODS))),
    Option("--likelihood", "likelihood", "likelihood (default: %(default)s; bsvm uses its own hinge)",
           dict(choices=USER_LIKELIHOODS)),
    Option("--kernel", "kernel", "kernel (default: %(default)s)", dict(choices=tuple(KERNELS))),
    Option("--n-inducing", "n_inducing", "inducing points per latent function, or 'auto': one per 8 rows, "
           "between 30 and 100 (default: %(default)s)", dict(type=_inducing, metavar="M")),
    Option("--max-iter", "max_iter", "optimiser steps, a ceiling: the fit stops once it has converged, see --tol; "
           "'auto' 500 on the full batch, 2000 with minibatches (default: %(default)s)",
           dict(type=_max_iter, metavar="N")),
    Option("--epochs", "n_epochs", "passes over the data, with --batch-size (replaces --max-iter)",
           dict(type=int, metavar="E")),
    Option("--batch-size", "batch_size", "minibatch size; 'none' the full batch; 'auto' minibatches of 1024 rows "
           "(Adam at 0.1 with the inducing inputs at 0.05 for sep, 0.05 for the other methods, unless --learning-rate is "
           "given) once rows × classes × inducing points × (inducing points + features) reach 1e9, or the "
           "classes 17 for auto and sep (default: %(default)s)", dict(type=_batch, metavar="B")),
    Option("--optimizer", "optimizer", "(default: the method's: rprop for gfitc, rmgpc, smgpc and a full-batch ep "
           "fit, adam otherwise)",
           dict(choices=OPTIMIZERS)),
    Option("--learning-rate", "learning_rate", "optimiser step size (default: the method's, 0.05 for ep, gfitc, "
           "rmgpc, smgpc and a full-batch robust-max or step vi fit, 0.1 for a full-batch sep fit, 0.01 for the "
           "others; 0.05 for --batch-size auto's minibatches)",
           dict(type=float, metavar="LR")),
    Option("--lr-decay", "optimizer_params.lr_decay", "Adam: multiply the learning rate by D per pass over the "
           f"data (default: {OPTIMIZER_OPTIONS['lr_decay']})", dict(type=float, metavar="D")),
    Option("--tol", "tol", "stop once the objective per datum moved by at most TOL for --n-iter-no-change "
           "checks; 'auto' the method's (3e-4 for a full-batch ep, sep or robust-max or step vi fit, else 1e-4), "
           "'none' runs to the ceiling (default: %(default)s)", dict(type=_tol, metavar="TOL")),
    Option("--n-iter-no-change", "n_iter_no_change", "(default: %(default)s)", dict(type=int, metavar="K")),
    Option("--early-stopping", "early_stopping", "stop on the log-likelihood of held-out rows instead "
           "(--validation-fraction of them)", dict(action="store_true")),
    Option("--validation-fraction", "validation_fraction", "(default: %(default)s)", dict(type=float, metavar="F")),
    Option("--class-weight", "class_weight", "'balanced': weigh each class's rows by n / (n_classes · its row "
           "count), as scikit-learn (default: every row 1; not with --stream)", dict(choices=("balanced",))),
    Option("--seed", "random_state", "random_state of the fit and seed of the data split (default: %(default)s)",
           dict(type=int, metavar="S", default=0)),
    Option("--dtype", "dtype", "'auto': for ep, and sep with minibatches, float32 when rows × classes × inducing points "
           "reach 400 000, else float64 "
           "(default: %(default)s)", dict(choices=("auto", *DTYPES))),
    Option("--device", "device", "torch device: cpu, cuda, cuda:N (default: %(default)s)", dict(metavar="DEV")),
    Option("--compile", "compile", "torch.compile the minibatch loss of a streamable method (default: eager)",
           dict(choices=tuple(m for m in COMPILE_MODES if m is not None))),
    Option("--verbose", "verbose", "progress bar and model summary", dict(action="store_true"), convert=int),
    Option("--alpha", "method_params.alpha", f"the Power-EP α in (0, 1] ({_takers('alpha')}; default "
           f"{METHOD_OPTIONS['alpha']})", dict(type=float, metavar="A")),
    Option("--damping", "method_params.damping", f"initial EP damping ({_takers('damping')}; default "
           f"{METHOD_OPTIONS['damping']})", dict(type=float, metavar="R")),
    Option("--ep-tol", "method_params.ep_tol", "relative site change at which the inner EP stops "
           f"({_takers('ep_tol')}; default {METHOD_OPTIONS['ep_tol']})", dict(type=float, metavar="T")),
    Option("--natgrad-lr", "method_params.natgrad_lr", "natural-gradient step size of q(u) "
           f"({_takers('natgrad_lr')}; default: none, q(u) moves with the optimiser)", dict(type=float, metavar="G")),
    Option("--epsilon", "likelihood_params.epsilon", f"label-noise probability ({_takers('epsilon')}; default "
           f"{LIKELIHOOD_OPTIONS['epsilon']})", dict(type=float, metavar="EPS")),
    Option("--init-lengthscale", "kernel_params.init_lengthscale", "initial length-scale, every feature "
           "(default: from each feature's spread)", dict(type=float, metavar="L")),
    Option("--prior-scale", "kernel_params.prior_scale", "scale of the log-normal prior on the length-scales and "
           "amplitudes, around their initial values; 'none': no prior, the papers' ML-II (default: the method's, "
           "2 for ep, gfitc, rmgpc, smgpc and a full-batch sep or robust-max or step vi fit, none for the others)",
           dict(type=_number_or_none, metavar="S"),
           convert=lambda v: None if v == "none" else v),
    Option("--shared-kernel", "kernel_params.shared_kernel", "one set of kernel hyper-parameters for all latent "
           f"functions (default: {KERNEL_OPTIONS['shared_kernel']}, one per latent)",
           dict(action="store_const", const=True)),
)


def _estimator_params(args) -> dict:
    """The ``GPClassifier`` arguments that the ``fit`` options ``args`` give (``FIT_OPTIONS``)."""
    params: dict = {}
    for opt in FIT_OPTIONS:
        given = getattr(args, opt.dest)
        value = given if opt.convert is None else opt.convert(given)
        if "." not in opt.target:
            params[opt.target] = value
        elif given is not None:
            group, key = opt.target.split(".")
            params.setdefault(group, {})[key] = value
    return params


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
                   help="model file to write (it also records the data's columns and standardisation)")
    for opt in FIT_OPTIONS:
        settings = dict(opt.settings)
        if "." not in opt.target and "default" not in settings and settings.get("action") != "store_true":
            settings["default"] = _DEFAULTS[opt.target]
        p.add_argument(opt.flag, dest=opt.dest, help=opt.help, **settings)
    p.add_argument("--data-dir", metavar="DIR", help="directory of the staged data sets (default: $SGPC_DATA "
                   "or ../shared/datasets)")
    p.add_argument("--target", type=_target, metavar="COL",
                   help="label column of a file, by name or position (default: the last column)")
    # the run's own arguments (``fit``'s, not the estimator's)
    p.add_argument("--checkpoint", metavar="PATH", help="checkpoint file for resumable fits")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="K",
                   help="write the checkpoint every K steps (needs --checkpoint)")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint if it exists")
    p.add_argument("--json", action="store_true",
                   help="print a JSON summary (model file, classes, n_iter, converged, timings, ...) to stdout "
                        "instead of the one-line report")
    p.add_argument("--stream", action="store_true",
                   help="stream a Parquet file in row groups instead of loading it (vi, sep, apep, arpep, rpapep; "
                        "minibatches of --batch-size rows, 1024 when auto; standardisation statistics from one "
                        "streaming pass)")
    p.add_argument("--nproc", type=int, default=1, metavar="P",
                   help="data-parallel training in P local processes (torch.distributed, gloo; default: 1), "
                        "each with --threads torch threads (default 1)")
    p.set_defaults(func=_cmd_fit)

    p = sub.add_parser("predict", parents=[common], help="write predicted labels and class probabilities for a file",
                       description="Write the predicted label (column 'predicted') and the class probabilities (one "
                                   "column per class) of every row of FILE as CSV, reading FILE a block of rows at "
                                   "a time (CSV, Parquet; LIBSVM files are read whole).")
    p.add_argument("model", metavar="MODEL.pt")
    p.add_argument("file", metavar="FILE", help="CSV/CSV.gz/Parquet/LIBSVM file of features")
    p.add_argument("-o", "--output", default="-", metavar="OUT.csv", help="output CSV (default: stdout)")
    p.add_argument("--target", type=_target, metavar="COL",
                   help="a label column in FILE to drop (by name or position); without it every column "
                        "is a feature (LIBSVM labels are always dropped)")
    p.add_argument("--batch-size", type=int, default=PREDICT_BATCH_ROWS, metavar="B",
                   help="rows read and predicted at once (default: %(default)s)")
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
                       description="Fit GPClassifier() with its defaults on scikit-learn's bundled digits (80/20 "
                                   "stratified split), print test metrics, convergence and times, and save a figure. "
                                   "Runs on one torch thread unless --threads is given.")
    p.add_argument("--out", default="out", metavar="DIR", help="directory of the figure (default: %(default)s)")
    p.add_argument("--max-iter", type=int, default=None, metavar="N",
                   help="ceiling on the fit's iterations (default: the estimator's)")
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


def _load_model(model: str) -> tuple[GPClassifier, dict]:
    """The estimator (``GPClassifier.load``) and its data record: the one in the model file (``sgpc fit``
    writes it), else a sidecar MODEL.pt.json (models fitted by sgpc before the record moved into the model
    file), else the record of a model saved from Python (``_python_record``)."""
    _require_file(model, "model file")
    est = GPClassifier.load(model)
    record = est.metadata_.get(RECORD_KEY)
    if record is None and os.path.isfile(_sidecar_path(model)):
        return est, _read_sidecar(_sidecar_path(model))
    if record is None:
        return est, _python_record(est)
    if not isinstance(record, dict) or record.get("format") != _SIDECAR_FORMAT:
        raise CLIError(f"{model} holds a data record that is not sgpc's")
    if record.get("version") != _SIDECAR_VERSION:
        raise CLIError(f"{model} has data record version {record.get('version')}; this sgpc reads {_SIDECAR_VERSION}")
    return est, record


def _read_sidecar(path: str) -> dict:
    """The data record of a sidecar file."""
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
    return side


def _python_record(est: GPClassifier) -> dict:
    """The data record of a model saved from Python without one: features used as they are (mean 0, std 1),
    checked against the column names it was fitted with, when it has them."""
    D = int(est.n_features_in_)
    names = [str(n) for n in getattr(est, "feature_names_in_", [])]
    return {"source": "python", "feature_names": names, "mean": [0.0] * D, "std": [1.0] * D}


def _record(data: str, source: str, seed: int, target, data_dir, feature_names, mean, std, levels=None,
            zero_based=None) -> dict:
    """What ``predict`` and ``evaluate`` need besides the model, stored in the model file's metadata under
    ``RECORD_KEY``: the data it was fitted on (name or path, ``source`` "name"/"file", ``seed``, ``target``,
    ``data_dir``), the feature names, the categorical ``levels``, a LIBSVM file's index base ``zero_based``
    and the standardisation (``mean`` [D], ``std`` [D]: the model sees (x − mean) / std)."""
    return {"format": _SIDECAR_FORMAT, "version": _SIDECAR_VERSION, "data": data, "source": source, "seed": seed,
            "target": target, "data_dir": data_dir, "feature_names": [str(n) for n in feature_names],
            "levels": {str(k): [str(v) for v in vs] for k, vs in (levels or {}).items()}, "zero_based": zero_based,
            "mean": [float(v) for v in mean], "std": [float(v) for v in std]}


def _read_feature_blocks(path: str, target, side: dict, block_rows: int):
    """Feature names and an iterator over blocks [B,D] of a file (``tabular.read_feature_blocks``), read with the
    record's LIBSVM width and index base and categorical levels; read errors say how to drop a label column."""
    _require_file(path, "file")

    def hinted(blocks):
        try:
            yield from blocks
        except ValueError as exc:
            raise CLIError(f"{exc} (or pass --target COL)") from None
    try:
        names, blocks = tabular.read_feature_blocks(path, target=target, n_features=len(side["mean"]),
                                                    levels=_levels(side), zero_based=_zero_based(side),
                                                    block_rows=block_rows)
    except tabular.NonNumericColumns as exc:
        where = f" ({exc.where})" if exc.where else ""
        raise CLIError(f"{path}: columns {exc.columns[:5]} are not numeric{where}; the model needs numeric features "
                       "(if one of them is the label, pass --target COL to drop it)") from None
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    return names, hinted(blocks)


def _levels(side: dict) -> dict | None:
    """The training file's categorical levels from a sidecar; None for a model fitted on a named set
    (its features are numeric) or a sidecar written before levels were recorded."""
    return side.get("levels") if side.get("source") == "file" else None


def _zero_based(side: dict) -> bool | str:
    """The training LIBSVM file's index base from a sidecar; "auto" (guess per file) for a model fitted on
    another format or a named set, or a sidecar written before the base was recorded."""
    base = side.get("zero_based") if side.get("source") == "file" else None
    return "auto" if base is None else bool(base)


def _check_columns(n_columns: int, names, side: dict, source: str, hint: str) -> None:
    """A CLIError unless a file's feature columns are the model's: as many, and for a model fitted on a file
    (or saved from Python with column names) the same names in the same order (a file with the columns
    shuffled has the right count and would be read as the wrong features)."""
    n_model = len(side["mean"])
    fitted = [str(n) for n in side.get("feature_names", [])]
    if n_columns != n_model:
        shown = f" ({', '.join(fitted[:8])}{', ...' if n_model > 8 else ''})" if fitted else ""
        raise CLIError(f"{source} has {n_columns} feature columns but the model was fitted on {n_model}{shown}; {hint}")
    if names is not None and side.get("source") in ("file", "python") and len(fitted) == n_model \
            and [str(n) for n in names] != fitted:
        wrong = [f"{a!r} (model: {b!r})" for a, b in zip(names, fitted) if str(a) != b]
        raise CLIError(f"{source}'s feature columns are not the ones the model was fitted on, in that order: "
                       f"{', '.join(wrong[:5])}{', ...' if len(wrong) > 5 else ''}")


def _standardise(X: np.ndarray, side: dict) -> np.ndarray:
    """(X − mean) / std with the record's training statistics."""
    return (X - np.asarray(side["mean"])) / np.asarray(side["std"])


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


@contextlib.contextmanager
def _csv_output(path: str):
    """A csv writer on stdout ("-") or on ``path``, written to a temporary file that replaces ``path`` only when
    the block ends without an error (a bad row late in a large input leaves no partial output)."""
    if path == "-":
        yield csv.writer(sys.stdout)
        return
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", newline="") as f:
            yield csv.writer(f)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# -- subcommands --------------------------------------------------------------------------------------
def _run(args) -> dict:
    """The arguments of ``fit`` that describe this run: checkpoints and resuming."""
    return dict(checkpoint_path=args.checkpoint, checkpoint_every=args.checkpoint_every, resume=args.resume)


def _fit_rank(comm, est, X, y, run):
    """One process of ``fit --nproc``: the same fit on every rank; rank 0 returns the estimator. The
    parent has shown the warnings it can check before spawning; rank 0 shows the fit's own, once."""
    import warnings
    with warnings.catch_warnings():
        if comm.rank == 0:
            warnings.showwarning = lambda message, *a, **k: print(f"sgpc fit: warning: {message}", file=sys.stderr)
            warnings.filterwarnings("ignore", message="checkpoint_path .* checkpoint_every=0")
        else:
            warnings.simplefilter("ignore")
        est.fit(X, y, **run, comm=comm)
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
        return est.fit(X, y, **_run(args))
    from . import distributed
    from .fitting import settings, train_settings
    from .train import _check_checkpoint_path
    # what the ranks would refuse, refused here: one message, before spawning (workers take seconds to start)
    _check_checkpoint_path(train_settings(settings(est), {**_run(args), "eval_every": 50}), args.resume)
    threads = args.threads if args.threads is not None else 1       # per process: P processes share the cores
    import logging
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    spawn_log.setLevel(logging.ERROR)          # not its "Terminating process …" line before our one-line error
    try:
        return distributed.launch(_fit_rank, args.nproc, est, X, y, _run(args), threads=threads)[0]
    finally:
        spawn_log.setLevel(level)


def _cmd_fit_stream(args, started: float) -> int:
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
    record = _record(args.data, "file", args.seed, target, args.data_dir, src.source.features, st.mean, st.std)
    return _fit_and_save(args, src, None, record, f"{args.data} (all rows, streaming)", (st.n_rows, src.n_features), started)


def _fit_status(est: GPClassifier) -> str:
    """How a fit ended, for its summary line (``converged_``, ``stalled_``, ``at_prior_``; the warnings on stderr say why)."""
    status = "converged" if est.converged_ else "NOT converged (stopped at --max-iter)"
    if est.stalled_:
        status += ", STALLED (EP restarted latent functions from the prior)"
    if est.at_prior_:
        status += ", AT THE PRIOR (its predictions are the prior's: it learned nothing from the data)"
    return status


def _estimator(args) -> GPClassifier:
    """The estimator that ``fit`` and ``fit --stream`` configure from the command line (``FIT_OPTIONS``)."""
    return GPClassifier(**_estimator_params(args))


def _fit_and_save(args, X, y, record: dict, what: str, shape: tuple[int, int], started: float) -> int:
    """Fit the estimator of ``args`` on X, y, save it with its data ``record`` and report: one line, or with
    ``--json`` a JSON object on stdout (the fit's own printing then goes to stderr)."""
    est = _estimator(args)
    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        est = _fit_maybe_parallel(est, X, y, args)
    seconds = time.perf_counter() - start
    est.save(args.output, metadata={RECORD_KEY: record})
    objective = est.history_["objective"][-1] if est.history_["objective"] else None
    N, D = shape
    if args.json:
        summary = {"model": args.output, "data": record["data"], "source": record["source"], "n_rows": N,
                   "n_features": D, "classes": est.classes_.tolist(), "method": est.method_,
                   "likelihood": est.likelihood, "kernel": est.kernel, "n_inducing": est.model_.n_inducing,
                   "batch_size": getattr(est, "batch_size_", None), "dtype": getattr(est, "dtype_", None),
                   "n_iter": int(est.n_iter_), "converged": bool(est.converged_), "at_prior": bool(est.at_prior_),
                   "stalled": bool(est.stalled_), "objective": objective,
                   "timings": {"fit_s": seconds, "total_s": time.perf_counter() - started},
                   "device": str(est.device), "sgpc_version": __version__, "torch_version": str(torch.__version__)}
        print(json.dumps(summary))
        return 0
    shown = "nan" if objective is None else f"{objective:.6g}"
    batches = "" if getattr(est, "batch_size_", None) is None else f" in minibatches of {est.batch_size_}"
    print(f"fitted {est.method_} on {what}: N={N} D={D} C={len(est.classes_)} M={est.model_.n_inducing}, "
          f"{est.n_iter_} iterations{batches} in {seconds:.1f} s ({_fit_status(est)}), "
          f"final objective {shown}; wrote {args.output}")
    return 0


def _cmd_fit(args) -> int:
    started = time.perf_counter()
    if args.checkpoint_every and not args.checkpoint:
        raise CLIError("--checkpoint-every needs --checkpoint PATH")
    if args.resume and not args.checkpoint:
        raise CLIError("--resume needs --checkpoint PATH")
    data = None if _is_name(args.data) else args.data
    _check_writable(args.output, data, args.checkpoint)
    if args.stream:
        return _cmd_fit_stream(args, started)
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
    record = _record(args.data if source == "file" else ds.name, source, args.seed, args.target, args.data_dir,
                     ds.feature_names, mean, std, ds.levels, ds.zero_based)
    return _fit_and_save(args, Xs, y, record, what, X.shape, started)


def _cmd_predict(args) -> int:
    est, side = _load_model(args.model)
    if args.output != "-":
        _check_writable(args.output, args.model, _sidecar_path(args.model), args.file)
    if args.batch_size < 1:
        raise CLIError(f"--batch-size must be >= 1, got {args.batch_size}")
    names, blocks = _read_feature_blocks(args.file, args.target, side, args.batch_size)
    _check_columns(len(names), names, side, args.file, "if FILE has a label column, pass --target COL to drop it")
    n_rows = 0
    with _csv_output(args.output) as writer:
        writer.writerow(["predicted", *(str(c) for c in est.classes_.tolist())])
        for X in blocks:
            if not len(X):
                continue
            Xs = _standardise(X, side)
            try:
                labels, proba = est.predict(Xs).tolist(), est.predict_proba(Xs).tolist()
            except ValueError as exc:     # rows are numbered within the block: renumber them in the file
                raise CLIError(_renumbered(str(exc), n_rows)) from None
            writer.writerows([label, *row] for label, row in zip(labels, proba))
            n_rows += len(X)
    if args.output != "-":
        print(f"wrote predicted labels and probabilities of {n_rows} rows x {len(est.classes_)} classes to "
              f"{args.output}")
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
        seed = side.get("seed", 0)           # a model saved from Python: the split of seed 0
        _, X, _, y = datasets.train_test(ds, seed=seed, standardize=False)
        what = f"{args.data} (test split, seed {seed})"
    else:
        _require_file(args.data, "data file")
        target = args.target if args.target is not None else side.get("target")
        ds = tabular.load_file(args.data, target=-1 if target is None else target,
                                n_features=len(side["mean"]), levels=_levels(side), zero_based=_zero_based(side))
        X, y, what, names = ds.X, ds.y, args.data, ds.feature_names
    hint = ("evaluate needs labelled data: the label column is --target (default: the one used by fit, "
            "else the last column)")
    _check_columns(X.shape[1], names, side, args.data, hint)
    Xs = _standardise(X, side)
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
    settings = {**DEMO_SETTINGS, **({} if args.max_iter is None else {"max_iter": args.max_iter})}
    protocol = datasets.SplitProtocol(DEMO_TEST_FRACTION)
    X_train, X_test, y_train, y_test = datasets.train_test("digits", seed=0, protocol=protocol)
    print(f"sgpc demo: scikit-learn digits, {len(y_train)} training / {len(y_test)} test rows "
          f"({X_train.shape[1]} features, 10 classes; stratified {1 - DEMO_TEST_FRACTION:.0%}/"
          f"{DEMO_TEST_FRACTION:.0%} split, seed 0, standardised on the training rows)")
    print("settings: GPClassifier(" + ", ".join(f"{k}={v!r}" for k, v in settings.items())
          + f"), every other setting at its default; torch threads: {torch.get_num_threads()}")
    est = GPClassifier(**settings, verbose=1)
    fit_start = time.perf_counter()
    est.fit(X_train, y_train, X_val=X_test, y_val=y_test, eval_every=DEMO_EVAL_EVERY)
    fit_seconds = time.perf_counter() - fit_start
    proba = est.predict_proba(X_test)
    y_idx = metrics.class_indices(y_test, est.classes_)
    result = metrics.evaluate(y_idx, proba)
    print(f"fit: {est.method_}, {est.n_iter_} iterations, "
          + ("converged" if est.converged_ else "stopped at its ceiling before it converged"))
    print(f"test error  {result['error']:.2%}")
    print(f"test NLL    {result['nll']:.4f}")
    print(f"Brier score {result['brier']:.4f}")
    print(f"ECE         {result['ece']:.4f} (15 bins)")
    curve = metrics.reliability_curve(y_idx, proba)
    figure = _demo_figure(est.history_, len(y_train), curve, pathlib.Path(args.out), est.method_)
    if figure is None:
        print("figure skipped: matplotlib is not installed (pip install sgpc[plot])")
    else:
        print(f"figure: {figure} (left: training objective, and NLL on the held-out test split; "
              "right: reliability diagram)")
    print(f"time: fit {fit_seconds:.1f} s, total {time.perf_counter() - start:.1f} s")
    return 0


def _demo_figure(history: dict, n_train: int, curve: dict, out: pathlib.Path,
                 method: str = "") -> pathlib.Path | None:
    """Draw the demo's figure to out/demo.png; None when matplotlib is missing. ``method``: the fitted one, named in
    the left panel's title (its objective is that method's: EP's log Z_q, VI's ELBO, with any prior)."""
    try:
        from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
    except ImportError:
        return None
    fig = Figure(figsize=(10, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.semilogy(history["iteration"], [-o / n_train for o in history["objective"]], color="C0")
    left.set_xlabel("iteration")
    left.set_ylabel("−training objective per point", color="C0")
    if history["validation"]:
        twin = left.twinx()
        rows = history["validation"]
        twin.plot([r["iteration"] for r in rows], [r["nll"] for r in rows], "o-", color="C1")
        twin.set_ylabel("NLL on the held-out test split", color="C1")
        twin.set_ylim(0, 1.2 * max(r["nll"] for r in rows))  # from 0, so small changes look small
    left.set_title(f"training ({method})" if method else "training")
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
