"""Data sets: loaders for the papers' data, scikit-learn's bundled sets and user files; split protocols.

What it does:

- `load(name)` reads one of the staged data sets in the data directory (see `data_dir`; the files
  and their columns are listed in ``../shared/datasets/MANIFEST.md``) or one of scikit-learn's
  bundled sets, and returns a `Dataset`: an all-numeric float64 feature matrix ``X [N, D]``, the
  labels ``y [N]`` as the source gives them (ints or strings), and the source's own test split in
  ``X_test``/``y_test`` where it has one.
- `load_file(path)` does the same for a user's CSV (comma-separated, with a header row; optionally
  gzip'd), Parquet or LIBSVM file.
- `train_test(name)` applies the split protocol of the paper that used the set (`PROTOCOLS`) and
  standardises the features with training statistics only (`standardize`).

Columns that are not numeric are categorical and become integer codes (``categorical="ordinal"``,
codes in sorted order of the distinct strings) or one-hot columns named ``column=value``
(``categorical="onehot"``).

What it deliberately does not do: download anything (a fresh install without a data directory still
has "digits", "iris", "wine-sklearn" and "breast-cancer"), impute missing values (a missing value,
written as one of `MISSING_TOKENS`, or of `NUMERIC_MISSING_TOKENS` in a numeric column, is an error
naming the column and row, except in adult and
mushroom where ``?`` is a category of its own, and in nycflights13 where incomplete rows are dropped
as documented there), cache results, or use pandas.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import os
import pathlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

__all__ = [
    "DataNotFoundError",
    "Dataset",
    "SplitProtocol",
    "PROTOCOLS",
    "data_dir",
    "available",
    "load",
    "load_file",
    "read_features",
    "train_test",
    "standardize",
]

CATEGORICAL_MODES = ("ordinal", "onehot")
MISSING_MODES = ("error", "category")
FILE_FORMATS = ("csv", "parquet", "libsvm")
# How a missing value is written: "?" and "" by the staged CSVs (and most UCI files), in any column.
MISSING_TOKENS = ("?", "")
# "NA" (R), "N/A", "NaN", "nan" and "null" (pandas, spreadsheets, JSON exports) are missing in a column whose
# other values are numbers — without them such a column did not parse and silently became categorical codes
# — and ordinary values in a text column, where "NA" may well be a class or a level (North America).
NUMERIC_MISSING_TOKENS = ("NA", "N/A", "NaN", "nan", "null")
ZERO_BASED_MODES = (True, False, "auto")
_DATA_MARKERS = ("MANIFEST.md", "uci", "mnist", "flights")  # a data directory holds one of these
_PARQUET_HINT = "reading Parquet files needs pyarrow: pip install sgpc[parquet]"


class DataNotFoundError(FileNotFoundError):
    """The data directory, or a file expected in it, does not exist."""


@dataclass(frozen=True)
class Dataset:
    """A classification data set with all-numeric features.

    Attributes:
        name: the name it was loaded under (a file's stem for `load_file`).
        X: [N, D] float64 features; categorical columns already encoded.
        y: [N] labels as the source gives them (int64 or str).
        feature_names: D names, one per column of X (one-hot columns are named ``column=value``).
        X_test: [N_test, D] the source's own test split, or None when the source has none.
        y_test: [N_test] its labels, or None.
        description: where the data come from and what was derived.
        user_file: loaded by `load_file` from a user's file: `train_test` then uses the default 10% test
            split, not a paper's protocol that happens to share the file's name.
        levels: for a file, the levels of each categorical column, {column: (level, ...)} in code
            order; pass them to `load_file`/`read_features` of new data so that its codes are these.
        zero_based: for a LIBSVM file, whether its feature indices were read as 0-based (as given to
            `load_file`, or as "auto" guessed them); pass it as ``zero_based`` to `load_file`/
            `read_features` of new data so that its columns are these. None for other formats.
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    description: str = ""
    user_file: bool = False
    levels: dict = field(default_factory=dict)
    zero_based: bool | None = None

    def __post_init__(self):
        _check_xy(self.name, "X/y", self.X, self.y, len(self.feature_names))
        if (self.X_test is None) != (self.y_test is None):
            raise ValueError(f"{self.name}: X_test and y_test must both be given or both be None")
        if self.X_test is not None:
            _check_xy(self.name, "X_test/y_test", self.X_test, self.y_test, len(self.feature_names))


@dataclass(frozen=True)
class SplitProtocol:
    """How a paper split a data set into training and test rows (applied by `train_test`).

    The steps run in this order: concatenate the source's train and test files (unless
    ``source_split``), keep the first ``classes`` classes in sorted label order, draw ``subsample``
    rows at random, then hold out ``test_fraction`` of the rows (stratified when every class has at
    least 2 rows) — or take the last ``last_n_test`` rows as the test set, or keep the source's split.

    Attributes:
        test_fraction: fraction of rows in the test set; None when the test set is fixed.
        subsample: number of rows drawn at random (without replacement) before splitting, or None.
        classes: keep only this many classes, the smallest labels in sorted order, or None.
        source_split: use the source's own train/test files unchanged (seed ignored).
        last_n_test: the last this-many rows, in file order, are the test set (seed ignored).
    """

    test_fraction: float | None
    subsample: int | None = None
    classes: int | None = None
    source_split: bool = False
    last_n_test: int | None = None

    def __post_init__(self):
        fixed = int(self.source_split) + int(self.last_n_test is not None)
        if fixed > 1 or (fixed == 1) == (self.test_fraction is not None):
            raise ValueError(
                "a SplitProtocol needs exactly one of test_fraction, source_split=True or last_n_test"
            )
        if self.test_fraction is not None and not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}")


# ------------------------------------------------------------------------------------------------
# The staged files (paths relative to the data directory; see MANIFEST.md).

_DELGADO = "UCI file from the Fernandez-Delgado et al. (2014) collection"


@dataclass(frozen=True)
class _CsvSource:
    """One staged CSV data set: its file(s), train first, and how to read them."""

    files: tuple[str, ...]
    description: str
    missing_as_category: bool = False
    label_suffix: str = ""  # removed from labels (UCI adult.test writes '>50K.')


_CSV_SOURCES = {
    "glass": _CsvSource(("uci/glass.csv.gz",), f"Glass identification (P1); {_DELGADO}."),
    "new-thyroid": _CsvSource(("uci/new-thyroid.csv.gz",), "UCI new-thyroid (P1): 1 normal, 2 hyper, 3 hypo."),
    "satimage": _CsvSource(
        ("uci/satimage_train.csv.gz", "uci/satimage_test.csv.gz"),
        f"Statlog Landsat satellite (P1, and Liu et al.'s statlog-landsat); {_DELGADO}; "
        "source split sat.trn (4435) / sat.tst (2000).",
    ),
    "svmguide2": _CsvSource(("uci/svmguide2.csv.gz",), "LIBSVM svmguide2 (P1), already scaled."),
    "vehicle": _CsvSource(("uci/vehicle.csv.gz",), f"Statlog vehicle silhouettes (P1); {_DELGADO}."),
    "vowel": _CsvSource(
        ("uci/vowel_train.csv.gz", "uci/vowel_test.csv.gz"),
        "Deterding vowels (P1), 11 classes 0..10 = hid hId hEd hAd hYd had hOd hod hUd hud hed; "
        "source split by speaker, 528 / 462.",
    ),
    "waveform": _CsvSource(("uci/waveform.csv.gz",), "Waveform generator v1, 5000 rows (P1 and Liu et al.)."),
    "wine": _CsvSource(("uci/wine.csv.gz",), "UCI wine (P1), classes 1..3; scikit-learn's copy is 'wine-sklearn'."),
    "chess-krvk": _CsvSource(("uci/chess-krvk.csv.gz",), f"Chess king-rook vs king (P4); {_DELGADO}."),
    "letter": _CsvSource(("uci/letter.csv.gz",), f"Letter recognition (P4); {_DELGADO}."),
    "nursery": _CsvSource(("uci/nursery.csv.gz",), f"Nursery (P4), all features categorical; {_DELGADO}."),
    "page-blocks": _CsvSource(("uci/page-blocks.csv.gz",), f"Page blocks (P4); {_DELGADO}."),
    "pendigits": _CsvSource(
        ("uci/pendigits_train.csv.gz", "uci/pendigits_test.csv.gz"),
        f"Pen-based digits (P4); {_DELGADO}; source split by writer, 7494 / 3498.",
    ),
    "statlog-shuttle": _CsvSource(
        ("uci/shuttle_train.csv.gz", "uci/shuttle_test.csv.gz"),
        f"Statlog shuttle (P4); {_DELGADO}; source split 43500 / 14500.",
    ),
    "thyroid": _CsvSource(
        ("uci/ann-thyroid_train.csv.gz", "uci/ann-thyroid_test.csv.gz"),
        f"UCI ann-thyroid (P4), 3 = normal; {_DELGADO}; source split 3772 / 3428.",
    ),
    "wall-following": _CsvSource(("uci/wall-following.csv.gz",), f"Wall-following robot, 24 sensors (P4); {_DELGADO}."),
    "waveform-noise": _CsvSource(("uci/waveform-noise.csv.gz",), "Waveform generator v2, 21 + 19 noise features (P4)."),
    "wine-quality-white": _CsvSource(("uci/wine-quality-white.csv.gz",), "Wine quality, white, scores 3..9 (P4)."),
    "adult": _CsvSource(
        ("uci/adult_train.csv.gz", "uci/adult_test.csv.gz"),
        f"UCI adult (P4, binary); {_DELGADO}; source split 32561 / 16281; '?' (missing) is a "
        "category of its own; a trailing '.' on test labels is removed.",
        missing_as_category=True,
        label_suffix=".",
    ),
    "connect-4": _CsvSource(("uci/connect-4.csv.gz",), "Connect-4 (P4), 3 raw classes win/loss/draw; from PMLB."),
    "magic": _CsvSource(("uci/magic.csv.gz",), f"MAGIC gamma telescope (P4, binary); {_DELGADO}."),
    "mushroom": _CsvSource(
        ("uci/mushroom.csv.gz",),
        f"Mushroom (P4, binary), 22 categorical features; {_DELGADO}; '?' (missing stalk_root) is "
        "a category of its own; veil_type is constant and kept.",
        missing_as_category=True,
    ),
    "ringnorm": _CsvSource(("uci/ringnorm.csv.gz",), "Breiman's ringnorm, DELVE copy (P4, binary)."),
    "twonorm": _CsvSource(("uci/twonorm.csv.gz",), "Breiman's twonorm, DELVE copy (P4, binary)."),
    "optdigits": _CsvSource(
        ("uci/optdigits_train.csv.gz", "uci/optdigits_test.csv.gz"),
        f"Optical digits 8x8 (P5); {_DELGADO}; source split 3823 / 1797.",
    ),
}
_ALIASES = {"statlog-landsat": "satimage", "shuttle": "statlog-shuttle"}
_SKLEARN = {  # name -> loader in sklearn.datasets (bundled with scikit-learn, no network)
    "digits": "load_digits",
    "iris": "load_iris",
    "wine-sklearn": "load_wine",
    "breast-cancer": "load_breast_cancer",
}
_MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
_DERIVED = ("mnist", "flights-3m", "nycflights13", "connect-4-binary")
_DELAY_MINUTES = 5  # flights: "late" if delay > 5, "early" if delay < -5, "on-time" otherwise


def available() -> list[str]:
    """Every name `load` accepts, sorted (aliases included)."""
    return sorted([*_CSV_SOURCES, *_ALIASES, *_SKLEARN, *_DERIVED])


# Split protocols. P1 = Villacampa-Calvo & Hernandez-Lobato (scalable EP); P4 = Liu et al.; every set
# without a listed protocol (the P4 sets included) gets a 10% random test split after concatenating
# the source's train/test files.
PROTOCOLS: dict[str, SplitProtocol] = {name: SplitProtocol(0.1) for name in available()} | {
    "satimage": SplitProtocol(0.8),  # P1: 6435 rows, 20% train / 80% test
    "waveform": SplitProtocol(0.7, subsample=1000),  # P1: 1000 of the 5000 rows, 30% / 70%
    "vowel": SplitProtocol(0.1, classes=6),  # P1: classes 0..5 (hid hId hEd hAd hYd had), 540 rows
    "mnist": SplitProtocol(None, source_split=True),  # 60k / 10k
    "optdigits": SplitProtocol(None, source_split=True),  # 3823 / 1797
    "flights-3m": SplitProtocol(None, last_n_test=10_000),  # airline experiment: last 10k rows
}


# ------------------------------------------------------------------------------------------------
# Data directory


def data_dir(path: str | os.PathLike | None = None) -> pathlib.Path:
    """The directory holding the staged data sets (MANIFEST.md, uci/, mnist/, flights/).

    Looked up in this order: ``path`` when given; else the environment variable ``SGPC_DATA``;
    else ``<repository root>/../shared/datasets`` (the repository root is the directory holding
    pyproject.toml, two levels above this file); else ``../shared/datasets`` relative to the
    current directory. An explicit ``path`` or ``SGPC_DATA`` is used as given, never skipped.

    Raises:
        DataNotFoundError: no such directory; the message lists every place looked.
    """
    if path is not None:
        places = [("data_dir=", pathlib.Path(path))]
    elif os.environ.get("SGPC_DATA"):
        places = [("SGPC_DATA", pathlib.Path(os.environ["SGPC_DATA"]))]
    else:
        places = []
        repo = pathlib.Path(__file__).resolve().parents[2]
        if (repo / "pyproject.toml").is_file():
            places.append(("repository default", repo.parent / "shared" / "datasets"))
        places.append(("current directory", pathlib.Path.cwd().parent / "shared" / "datasets"))
    for _, place in places:
        if place.is_dir() and any((place / marker).exists() for marker in _DATA_MARKERS):
            return place
    looked = "; ".join(f"{how}: {place}" for how, place in places)
    raise DataNotFoundError(
        f"no data directory found (a directory holding one of {', '.join(_DATA_MARKERS)}); looked in "
        f"{looked}. set SGPC_DATA=/path/to/datasets or pass data_dir="
    )


_find_data_dir = data_dir  # `load` and `train_test` have a parameter called data_dir


def _require(root: pathlib.Path, relative: str) -> pathlib.Path:
    """The path of one expected data file, or DataNotFoundError naming it and the data directory."""
    path = root / relative
    if not path.is_file():
        raise DataNotFoundError(f"data file {relative!r} not found in the data directory {root}")
    return path


# ------------------------------------------------------------------------------------------------
# Public loaders


def load(
    name: str,
    data_dir: str | os.PathLike | None = None,
    *,
    categorical: str = "ordinal",
    max_rows: int | None = None,
) -> Dataset:
    """Load a data set by name (see `available`).

    The staged UCI sets keep the source's train/test files in X/y and X_test/y_test; categorical
    codes are computed over both files together, so they agree. The derived sets:

    - "mnist": IDX files; pixels scaled to [0, 1] (float64), 60000 rows in X, 10000 in X_test.
    - "flights-3m" (needs pyarrow): 3 classes from the delay in minutes, "late" if delay > 5,
      "early" if delay < -5, else "on-time"; features month, day_of_month, day_of_week
      (0 = Monday), dep_time_hours (hour + minute / 60 of the ``date`` timestamp), distance,
      origin, destination (codes from one airport table sorted by IATA code); file order kept.
    - "nycflights13": the same 3 classes from arr_delay; features month, day, day_of_week,
      dep_time_hours, arr_time_hours, air_time, distance, plane_age (2013 - year built, joined on
      tailnum), carrier, origin, dest codes; rows without a plane year or with NA dep_time,
      arr_time, arr_delay or air_time are dropped (details in `_load_nycflights13`).
    - "connect-4-binary": connect-4 with labels "loss" vs "draw-or-win", the binary target Liu
      et al. used (their source's reader maps only "loss" to the positive class).

    Args:
        name: a name from `available()` (case-insensitive; '_' may stand for '-').
        data_dir: the data directory; default `data_dir()`. Not needed for scikit-learn's sets.
        categorical: "ordinal" (integer codes, sorted order of the values) or "onehot".
        max_rows: read only the first max_rows rows of each file (for quick tests); None = all.

    Returns:
        A `Dataset` with X [N, D] float64 and y [N].

    Raises:
        ValueError: unknown name or categorical mode. DataNotFoundError: a missing file.
    """
    _check_choice("categorical", categorical, CATEGORICAL_MODES)
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be a positive integer or None, got {max_rows}")
    key = name.strip().lower().replace("_", "-")
    if key not in available():
        raise ValueError(f"unknown data set {name!r}; available: {', '.join(available())}")
    if key in _SKLEARN:
        return _load_sklearn(key, max_rows)
    root = _find_data_dir(data_dir)
    if key == "mnist":
        return _load_mnist(root, max_rows)
    if key == "flights-3m":
        return _load_flights_3m(root, categorical, max_rows)
    if key == "nycflights13":
        return _load_nycflights13(root, categorical, max_rows)
    if key == "connect-4-binary":
        base = _load_csv_source(key, _CSV_SOURCES["connect-4"], root, categorical, max_rows)
        y = np.where(base.y == "loss", "loss", "draw-or-win")
        note = "connect-4 with labels 'loss' vs 'draw-or-win' (Liu et al.'s binary target)."
        return Dataset(key, base.X, y, base.feature_names, description=note, levels=base.levels)
    return _load_csv_source(key, _CSV_SOURCES[_ALIASES.get(key, key)], root, categorical, max_rows)


def load_file(
    path: str | os.PathLike,
    *,
    target: str | int = -1,
    fmt: str | None = None,
    categorical: str = "ordinal",
    missing: str = "error",
    n_features: int | None = None,
    levels: Mapping[str, Sequence[str]] | None = None,
    zero_based: bool | str = "auto",
) -> Dataset:
    """Load a user's data file: CSV (header row; optionally .gz), Parquet or LIBSVM.

    A column is numeric when every value parses as a number; otherwise it is categorical and
    encoded by ``categorical``. Values are stripped of surrounding whitespace. Integer-valued labels
    become int64, other labels stay strings; a Parquet string label column stays strings even when
    its values read as integers (its type says they are text; streamed, it is read the same way).

    Args:
        path: the file. The format follows the name (.csv, .csv.gz, .parquet, .libsvm, .svm) or fmt.
        target: label column, by name or position (default: the last column). Ignored for LIBSVM,
            whose label is always first.
        fmt: "csv", "parquet" or "libsvm"; required for names like .txt.
        categorical: "ordinal" or "onehot".
        missing: "error" (a missing value — '?' or '' in any column, 'NA', 'N/A', 'NaN', 'nan' or 'null'
            in a numeric one — raises ValueError naming the column and row) or "category" (in a
            categorical column it is a category of its own; numeric columns and the label still raise).
        n_features: LIBSVM only: the number of features (a file read for a fitted model whose rows never
            use the highest index would otherwise come out narrower); None: the highest index present.
            Other formats ignore it (their width is their columns).
        levels: the ``levels`` of the data set a model was fitted on: the columns named there are
            encoded with those levels (not with this file's own, which may lack some and shift every
            code); a value outside them, or a text value in a column that was numeric, is a
            ValueError naming the column and row. None: codes from this file alone.
        zero_based: LIBSVM only: True if the feature indices start at 0, False if at 1, "auto" to guess
            from this file alone (0-based when some row uses index 0, else 1-based). A 0-based file whose
            rows never use index 0 is then read as 1-based, every column shifted by one: for new data
            pass the training file's ``Dataset.zero_based``. Other formats ignore it.

    Returns:
        A `Dataset` named after the file's stem, without a test split; for LIBSVM its ``zero_based``
        is the base used.
    """
    path = pathlib.Path(path)
    _check_choice("categorical", categorical, CATEGORICAL_MODES)
    _check_choice("missing", missing, MISSING_MODES)
    _check_choice("zero_based", zero_based, ZERO_BASED_MODES)
    if fmt is None:
        fmt = _infer_format(path)
    _check_choice("fmt", fmt, FILE_FORMATS)
    if not path.is_file():
        raise DataNotFoundError(f"file not found: {path}")
    stem = path.name.split(".")[0]
    if fmt == "libsvm":
        return replace(_load_libsvm(path, stem, n_features, zero_based), user_file=True)
    if fmt == "parquet":
        header, columns = _read_parquet_columns(path)
    else:
        header, columns = _read_csv(path)
    if len(header) < 2:
        delimiter = "; sgpc reads comma-separated files: check the delimiter" if fmt == "csv" else ""
        raise ValueError(f"{path} has the single column {header}: no feature columns besides the label"
                         f"{delimiter}")
    return replace(_table_to_dataset(
        stem, header, columns, _target_index(header, target), categorical,
        missing_as_category=(missing == "category"), locate=lambda i: f"row {i + 1} of {path}",
        description=f"loaded from {path}", levels=levels, typed=(fmt == "parquet"),
    ), user_file=True)


def read_features(path: str | os.PathLike, *, target: str | int | None = None, fmt: str | None = None,
                  n_features: int | None = None, levels: Mapping[str, Sequence[str]] | None = None,
                  categorical: str = "ordinal", zero_based: bool | str = "auto"
                  ) -> tuple[np.ndarray, tuple[str, ...]]:
    """Numeric feature matrix [N,D] and column names of a file that may have no label column.

    For new data at prediction time: CSV/CSV.gz, Parquet or LIBSVM (whose label is always first and
    is dropped). ``target`` names a column to drop when the file has one. A non-numeric column is
    encoded only with the training data's ``levels`` (as in `load_file`, with ``categorical`` as
    there); without them it is refused: its codes would be this file's own. ``n_features`` and
    ``zero_based``: as for `load_file` (LIBSVM only; pass the training file's ``Dataset.zero_based``).
    """
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    fmt = fmt or _infer_format(path)
    if fmt == "libsvm":
        ds = load_file(path, fmt="libsvm", n_features=n_features, zero_based=zero_based)
        return ds.X, ds.feature_names
    names, columns = (_read_parquet_columns if fmt == "parquet" else _read_csv)(path)
    if target is not None:
        drop = _target_index(names, target)
        names, columns = names[:drop] + names[drop + 1:], columns[:drop] + columns[drop + 1:]
    if not names:
        raise ValueError(f"{path} has no feature columns besides the label {target!r}")
    _check_choice("categorical", categorical, CATEGORICAL_MODES)
    locate = lambda i: f"row {i + 1} of {path}"                                    # noqa: E731
    parsed = [_parse_feature(n, c, False, locate, levels) for n, c in zip(names, columns)]
    text = [n for n, c in zip(names, parsed) if not isinstance(c, np.ndarray)]
    if text and levels is None:
        raise ValueError(f"{path}: columns {text[:5]} are not numeric; prediction needs numeric features "
                         "(if one of them is the label, pass target=<column>; for categorical columns "
                         "pass the training data's levels)")
    return _encode(names, parsed, categorical, len(columns[0]) if columns else 0)


def train_test(
    name_or_dataset: str | Dataset,
    seed: int = 0,
    *,
    data_dir: str | os.PathLike | None = None,
    standardize: bool = True,
    protocol: SplitProtocol | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split a data set by its paper's protocol (`PROTOCOLS`) and standardise the features.

    All randomness (subsample, split) comes from ``numpy.random.default_rng(seed)``: same seed,
    same split. The split is stratified when every class has at least 2 rows (and both sides can
    hold one row per class), plain random otherwise. Standardisation uses training statistics only.

    The protocols (`PROTOCOLS`): glass, new-thyroid, svmguide2, vehicle, wine 90% / 10% (P1);
    satimage = both source files, 6435 rows, 20% train / 80% test (P1); waveform 1000 rows drawn
    from the 5000, 30% / 70% (P1); vowel = both source files, only classes 0..5 (hid, hId, hEd, hAd,
    hYd, had; 540 rows), 90% / 10% (P1); mnist and optdigits the source split; flights-3m the last
    10000 rows as test set; every other set 10% test after concatenating the source's files.

    Args:
        name_or_dataset: a name for `load`, or a loaded `Dataset` (its name picks the protocol; one
            from `load_file` gets the default 10% split).
        seed: seed of the split; ignored by fixed splits (mnist, optdigits, flights-3m).
        data_dir: passed to `load`.
        standardize: standardise with the training mean and std (see `standardize`).
        protocol: use this protocol instead of the one in `PROTOCOLS` (e.g. Liu et al.'s 10% split
            of the 5000 waveform rows: ``SplitProtocol(0.1)``).

    Returns:
        X_train [N_train, D], X_test [N_test, D] (float64), y_train [N_train], y_test [N_test].
    """
    if isinstance(name_or_dataset, Dataset):
        ds = name_or_dataset
    else:
        ds = load(name_or_dataset, data_dir)
    if protocol is None:
        # a user's file named like a paper's set (satimage.csv) is not that set: no paper protocol
        protocol = SplitProtocol(0.1) if ds.user_file else PROTOCOLS.get(ds.name, SplitProtocol(0.1))
    X_train, X_test, y_train, y_test = _split(ds, protocol, seed)
    if standardize:
        X_train, X_test, _, _ = _standardize(X_train, X_test)
    return X_train, X_test, y_train, y_test


def standardize(
    X_train: np.ndarray, X_test: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """Standardise features with the training mean and standard deviation: (X - mean) / std.

    A feature whose training std is zero (up to rounding) is only centred (divided by 1).

    Args:
        X_train: [N, D] training features. X_test: [N_test, D] or None.

    Returns:
        X_train_s [N, D], X_test_s [N_test, D] or None, mean [D], std [D] (the divisors used:
        the training std, with 1 where it is zero), so that X = X_s * std + mean.
    """
    return _standardize(X_train, X_test)


def _standardize(X_train, X_test=None):
    """Implementation of `standardize` (train_test's `standardize` argument hides the name)."""
    X_train = np.asarray(X_train, dtype=np.float64)
    mean = X_train.mean(axis=0)
    std = X_train.std(axis=0)
    # a constant column's computed std is rounding noise (~1e-16 |mean|), not a scale
    std = np.where(std > 1e-12 * np.maximum(1.0, np.abs(mean)), std, 1.0)
    X_test_s = None if X_test is None else (np.asarray(X_test, dtype=np.float64) - mean) / std
    return (X_train - mean) / std, X_test_s, mean, std


# ------------------------------------------------------------------------------------------------
# Split protocols


def _split(ds: Dataset, protocol: SplitProtocol, seed: int):
    """Apply one SplitProtocol to a Dataset; returns X_train, X_test, y_train, y_test."""
    if protocol.source_split:
        if ds.X_test is None:
            raise ValueError(f"{ds.name}: the protocol keeps the source's test split, but it has none")
        return ds.X, ds.X_test, ds.y, ds.y_test
    X, y = ds.X, ds.y
    if ds.X_test is not None:
        X, y = np.concatenate([X, ds.X_test]), np.concatenate([y, ds.y_test])
    if protocol.last_n_test is not None:
        n = protocol.last_n_test
        if n >= len(y):
            raise ValueError(f"{ds.name}: last_n_test={n} leaves no training rows of {len(y)}")
        return X[:-n], X[-n:], y[:-n], y[-n:]
    rng = np.random.default_rng(seed)
    if protocol.classes is not None:
        keep = np.isin(y, np.unique(y)[: protocol.classes])
        X, y = X[keep], y[keep]
    if protocol.subsample is not None:
        if protocol.subsample > len(y):
            raise ValueError(f"{ds.name}: cannot subsample {protocol.subsample} of {len(y)} rows")
        rows = np.sort(rng.choice(len(y), size=protocol.subsample, replace=False))
        X, y = X[rows], y[rows]
    from sklearn.model_selection import train_test_split

    n_test = int(np.ceil(protocol.test_fraction * len(y)))  # sklearn's rounding
    _, counts = np.unique(y, return_counts=True)
    stratified = counts.min() >= 2 and min(n_test, len(y) - n_test) >= len(counts)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=protocol.test_fraction, stratify=y if stratified else None,
        random_state=int(rng.integers(2**31 - 1)),
    )
    return X_train, X_test, y_train, y_test


# ------------------------------------------------------------------------------------------------
# Tables: parsing string columns, encoding categorical ones


@dataclass(frozen=True)
class _Categorical:
    """A categorical column: codes [N] into levels [K] (sorted strings)."""

    codes: np.ndarray
    levels: np.ndarray


def _read_csv(path: pathlib.Path, max_rows: int | None = None) -> tuple[list[str], list[np.ndarray]]:
    """Header and stripped string columns of a CSV file (gzip'd when its name ends in .gz or .GZ)."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rt", newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        rows = [row for row in itertools.islice(reader, max_rows) if row]
    if not header:
        raise ValueError(f"{path} is empty; a header row is required")
    if len(header) == 1 and any(sep in header[0] for sep in ";\t|"):
        raise ValueError(f"{path} reads as the single column {header[0]!r}: sgpc reads comma-separated "
                         "files; check the delimiter (write the file with ',' between values)")
    if all(_parses_as_number(np.array(header))):
        # numbers as column names are legitimate (pandas writes 0, 1, 2, ...; wavelengths), repeated ones are not
        if len(set(header)) < len(header):
            raise ValueError(f"{path} seems to have no header row: its first row {header[:5]} is all numbers, "
                             "some repeated. sgpc reads the first row as column names: add a header row "
                             "(e.g. x1,x2,...,label)")
        warnings.warn(f"{path}: every column name is a number ({header[:5]}); if the file has no header row, its "
                      "first row was read as the names and is missing from the data", UserWarning, stacklevel=3)
    if "" in header:
        raise ValueError(f"column {header.index('') + 1} of {path} has no name in the header row (a pandas "
                         "index written by to_csv? write with index=False); name it or drop it")
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(
                f"row {i + 1} of {path} has {len(row)} fields but the header has {len(header)}"
            )
    if not rows:
        return header, [np.array([], dtype=str) for _ in header]
    return header, [np.char.strip(np.array(col, dtype=str)) for col in zip(*rows)]


def _parse_feature(
    name: str, values: np.ndarray, missing_as_category: bool, locate: Callable[[int], str],
    levels: Mapping[str, Sequence[str]] | None = None,
) -> np.ndarray | _Categorical:
    """A column as float64 [N] when every value is a number, else as a _Categorical.

    ``levels``: the training data's categorical columns; a column named there is coded by its
    training levels whatever this file holds, and one not named there must be numeric.
    """
    if levels is not None and name in levels:
        return _known_levels(name, values, levels[name], locate)
    missing = np.zeros(len(values), dtype=bool)
    if values.dtype.kind in "iufb":  # already typed (Parquet)
        numbers = values.astype(np.float64)
    else:
        missing = np.isin(values, MISSING_TOKENS)
        try:
            absent = missing | np.isin(values, NUMERIC_MISSING_TOKENS)
            numbers = np.where(absent, "nan", values).astype(np.float64)
        except ValueError:
            numbers = None
    if numbers is not None:
        bad = ~np.isfinite(numbers)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"column {name!r} is numeric but has the missing or non-finite value "
                f"{str(values[i])!r} at {locate(i)}; sgpc does not impute: fix or drop those rows"
            )
        return numbers
    if levels is not None:
        i = int(np.argmax(~np.isin(values, MISSING_TOKENS) & ~_parses_as_number(values)))
        raise ValueError(f"column {name!r} is not numeric (the value {str(values[i])!r} at {locate(i)}) "
                         "and was not a categorical column of the training data")
    if missing.any() and not missing_as_category:
        i = int(np.argmax(missing))
        raise ValueError(
            f"column {name!r} has the missing value {str(values[i])!r} at {locate(i)}; "
            "pass missing='category' to make it a category of its own"
        )
    found, codes = np.unique(values, return_inverse=True)
    return _Categorical(codes.reshape(-1), found)


def _parses_as_number(values: np.ndarray) -> np.ndarray:
    """[N] bool: which string values parse as a float."""
    def number(v):
        try:
            float(v)
            return True
        except ValueError:
            return False
    return np.fromiter((number(v) for v in values), dtype=bool, count=len(values))


def _known_levels(name: str, values: np.ndarray, levels: Sequence[str],
                  locate: Callable[[int], str]) -> _Categorical:
    """A categorical column coded by the training data's levels (in their order)."""
    levels = np.asarray([str(v) for v in levels])
    values = np.asarray(values).astype(str)
    order = np.argsort(levels, kind="stable")
    pos = np.searchsorted(levels[order], values).clip(0, max(len(levels) - 1, 0))
    known = levels[order][pos] == values if len(levels) else np.zeros(len(values), dtype=bool)
    if not known.all():
        i = int(np.argmax(~known))
        shown = ", ".join(repr(str(v)) for v in levels[:8]) + (", ..." if len(levels) > 8 else "")
        raise ValueError(f"column {name!r} has the value {str(values[i])!r} at {locate(i)}, which the training "
                         f"data did not have (its levels: {shown})")
    return _Categorical(order[pos], levels)


def _parse_labels(name: str, values: np.ndarray, locate: Callable[[int], str], *,
                  text_is_text: bool = False) -> np.ndarray:
    """Labels [N]: int64 when every label is an integer (possibly written 1.0), else str.

    ``text_is_text``: the values come from a typed text column (Parquet string): they stay strings
    even when they read as integers, as ``stream.ParquetSource`` keeps them, so that a model fitted
    on the file in memory and one fitted on it streamed have the same classes."""
    if values.dtype.kind in "iub":  # already typed (Parquet)
        return values.astype(np.int64)
    if values.dtype.kind == "f":  # NaN is how Parquet float columns (and pandas) write a missing label
        missing = ~np.isfinite(values)
    else:
        missing = np.isin(values, MISSING_TOKENS)
        soft = np.isin(values, NUMERIC_MISSING_TOKENS)
        if soft.any() and (~soft).any() and _parses_as_number(values[~soft & ~missing]).all():
            missing |= soft           # "NA" among numeric labels is a missing label; among words, a class
    if missing.any():
        i, n = int(np.argmax(missing)), int(missing.sum())
        more = f" and {n - 1} more row(s)" if n > 1 else ""
        raise ValueError(f"label column {name!r} has the missing value {str(values[i])!r} at {locate(i)}{more}; "
                         "every row needs a class label: fix or drop those rows")
    if values.dtype.kind == "f":
        return values.astype(np.int64) if np.all(values == np.round(values)) else values
    if text_is_text:
        return values
    try:
        return values.astype(np.int64)
    except ValueError:
        pass
    try:
        numbers = values.astype(np.float64)
    except ValueError:
        return values
    if np.all(np.isfinite(numbers)) and np.all(numbers == np.round(numbers)):
        return numbers.astype(np.int64)
    return values


def _encode(
    names: list[str], columns: list[np.ndarray | _Categorical], categorical: str, n_rows: int
) -> tuple[np.ndarray, tuple[str, ...]]:
    """X [N, D] float64 and feature names from parsed columns (ordinal codes or one-hot)."""
    blocks, out_names = [np.empty((n_rows, 0))], []
    for name, col in zip(names, columns):
        if not isinstance(col, _Categorical):
            blocks.append(np.asarray(col, dtype=np.float64)[:, None])
            out_names.append(name)
        elif categorical == "ordinal":
            blocks.append(col.codes.astype(np.float64)[:, None])
            out_names.append(name)
        else:
            blocks.append((col.codes[:, None] == np.arange(len(col.levels))).astype(np.float64))
            out_names.extend(f"{name}={level}" for level in col.levels)
    return np.concatenate(blocks, axis=1), tuple(out_names)


def _table_to_dataset(
    name, header, columns, target, categorical, *, missing_as_category, locate, description,
    n_train=None, label_suffix="", levels=None, typed=False,
) -> Dataset:
    """Dataset from string columns; rows from n_train on (when given) become X_test/y_test.
    ``levels``: as for `load_file`. ``typed``: the columns come from a typed file (Parquet), whose
    text label column stays text."""
    labels = columns[target]
    if label_suffix:
        labels = np.char.rstrip(labels, label_suffix)  # rstrip takes a set of characters
    y = _parse_labels(header[target], labels, locate, text_is_text=typed)
    feature_idx = [j for j in range(len(header)) if j != target]
    parsed = [_parse_feature(header[j], columns[j], missing_as_category, locate, levels) for j in feature_idx]
    X, feature_names = _encode([header[j] for j in feature_idx], parsed, categorical, len(y))
    found = {header[j]: tuple(str(v) for v in c.levels)
             for j, c in zip(feature_idx, parsed) if isinstance(c, _Categorical)}
    if n_train is None or n_train == len(y):
        return Dataset(name, X, y, feature_names, description=description, levels=found)
    return Dataset(
        name, X[:n_train], y[:n_train], feature_names, X[n_train:], y[n_train:], description, levels=found
    )


def _load_csv_source(name, source: _CsvSource, root, categorical, max_rows) -> Dataset:
    """A staged CSV data set; train and test files are parsed together so their codes agree."""
    paths = [_require(root, f) for f in source.files]
    tables = [(path, *_read_csv(path, max_rows)) for path in paths]
    header = tables[0][1]
    for path, other, _ in tables[1:]:
        if other != header:
            raise ValueError(f"{path} has columns {other}, but {tables[0][0]} has {header}")
    sizes = [len(cols[0]) if cols else 0 for _, _, cols in tables]
    columns = [np.concatenate([cols[j] for _, _, cols in tables]) for j in range(len(header))]

    def locate(i):
        for (path, _, _), start, size in zip(tables, np.cumsum([0, *sizes]), sizes):
            if i < start + size:
                return f"row {i - start + 1} of {path}"
        return f"row {i + 1}"

    return _table_to_dataset(
        name, header, columns, _target_index(header, "target"), categorical,
        missing_as_category=source.missing_as_category, locate=locate,
        description=source.description, n_train=sizes[0], label_suffix=source.label_suffix,
    )


def _target_index(header: list[str], target: str | int) -> int:
    """Position of the label column given by name or (possibly negative) position."""
    if isinstance(target, str):
        if target not in header:
            raise ValueError(f"no label column {target!r}; the columns are {header}")
        return header.index(target)
    if not -len(header) <= target < len(header):
        raise ValueError(f"label column {target} out of range for {len(header)} columns")
    return target % len(header)


# ------------------------------------------------------------------------------------------------
# Other formats


def _infer_format(path: pathlib.Path) -> str:
    """File format from the file name."""
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".csv", ".csv.gz")):
        return "csv"
    if name.endswith((".libsvm", ".svm", ".libsvm.gz", ".svm.gz")):
        return "libsvm"
    raise ValueError(
        f"cannot tell the format of {path.name!r} from its name; pass fmt= one of {', '.join(FILE_FORMATS)}"
    )


def _import_parquet():
    """pyarrow.parquet, or an ImportError with the install hint."""
    try:
        import pyarrow.parquet as pq
    except ImportError as err:
        raise ImportError(_PARQUET_HINT) from err
    return pq


def _read_parquet_columns(path: pathlib.Path) -> tuple[list[str], list[np.ndarray]]:
    """Header and columns of a Parquet file: numbers as int64/float64, text as stripped str."""
    pq = _import_parquet()
    import pyarrow as pa

    table = pq.read_table(path)
    columns = []
    for name, col in zip(table.column_names, table.columns):
        if col.null_count:
            first = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
            raise ValueError(f"column {name!r} has a missing value at row {first + 1} of {path}")
        kind = col.type
        if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
            columns.append(col.to_numpy().astype(np.int64))
        elif pa.types.is_floating(kind) or pa.types.is_decimal(kind):
            columns.append(col.to_numpy().astype(np.float64))
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_dictionary(kind):
            values = col.cast(pa.string()) if pa.types.is_dictionary(kind) else col
            columns.append(np.char.strip(np.asarray(values.to_numpy(zero_copy_only=False), dtype=str)))
        else:
            raise ValueError(f"column {name!r} of {path} has type {kind}; convert it to a number or a string")
    return table.column_names, columns


def _load_libsvm(path: pathlib.Path, name: str, n_features: int | None = None,
                 zero_based: bool | str = "auto") -> Dataset:
    """A LIBSVM/SVMlight file (label first, then index:value pairs) as a dense Dataset ([N, n_features]
    when given); ``zero_based`` as for `load_file`, the base used kept in ``Dataset.zero_based``."""
    from sklearn.datasets import load_svmlight_file

    # read the indices as written (zero_based=True shifts nothing) and apply the base here: sklearn's
    # "auto" does not say which base it chose, and new data must be read with the same one
    X, y = load_svmlight_file(str(path), zero_based=True)
    uses_zero = X.nnz > 0 and int(X.indices.min()) == 0
    if zero_based == "auto":
        zero_based = uses_zero or X.nnz == 0  # sklearn's guess: 1-based unless some row uses index 0
    if not zero_based:
        if uses_zero:
            raise ValueError(f"{path} uses the feature index 0, so it is not 1-based; pass zero_based=True "
                             "(or \"auto\")")
        X = X[:, 1:]
    X = np.asarray(X.toarray(), dtype=np.float64)
    if n_features is not None:
        if X.shape[1] > n_features:
            base = "0-based" if zero_based else "1-based"
            raise ValueError(f"{path} has {X.shape[1]} features (indices read as {base}), but the model has "
                             f"{n_features}")
        X = np.pad(X, ((0, 0), (0, n_features - X.shape[1])))
    if np.all(y == np.round(y)):
        y = y.astype(np.int64)
    names = tuple(f"x{j + 1}" for j in range(X.shape[1]))
    return Dataset(name, X, y, names, description=f"loaded from {path} (LIBSVM)", zero_based=bool(zero_based))


def _load_sklearn(key: str, max_rows: int | None) -> Dataset:
    """One of scikit-learn's bundled data sets (no network); integer labels as sklearn gives them."""
    import sklearn.datasets

    bunch = getattr(sklearn.datasets, _SKLEARN[key])()
    X = np.asarray(bunch.data, dtype=np.float64)[:max_rows]
    y = np.asarray(bunch.target, dtype=np.int64)[:max_rows]
    names = tuple(str(f) for f in bunch.feature_names)
    return Dataset(key, X, y, names, description=f"scikit-learn sklearn.datasets.{_SKLEARN[key]}()")


def _read_idx(path: pathlib.Path) -> np.ndarray:
    """An IDX file of unsigned bytes (gzip'd), e.g. MNIST: uint8 array of the header's shape."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    # header: two zero bytes, type code 0x08 (unsigned byte), number of dimensions, then each
    # dimension as a big-endian uint32
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path} is not an IDX file of unsigned bytes")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says shape {shape}, but it holds {data.size} values")
    return data.reshape(shape)


def _load_mnist(root: pathlib.Path, max_rows: int | None) -> Dataset:
    """MNIST: X [60000, 784], X_test [10000, 784], pixels / 255 in [0, 1]; labels 0..9."""
    images, labels, test_images, test_labels = (
        _read_idx(_require(root, f"mnist/{name}")) for name in _MNIST_FILES
    )

    def pixels(a):
        return a[:max_rows].reshape(len(a[:max_rows]), -1).astype(np.float64) / 255.0

    names = tuple(f"pixel_{r}_{c}" for r in range(images.shape[1]) for c in range(images.shape[2]))
    return Dataset(
        "mnist", pixels(images), labels[:max_rows].astype(np.int64), names,
        pixels(test_images), test_labels[:max_rows].astype(np.int64),
        "MNIST (LeCun et al.), source split 60000 / 10000, pixels scaled to [0, 1].",
    )


def _delay_classes(delay: np.ndarray) -> np.ndarray:
    """'late' if delay > 5 min, 'early' if delay < -5 min, else 'on-time'; [N] str."""
    return np.where(delay > _DELAY_MINUTES, "late", np.where(delay < -_DELAY_MINUTES, "early", "on-time"))


def _shared_codes(columns: list[np.ndarray]) -> list[_Categorical]:
    """Categorical columns that share one sorted table of levels (origin and destination airports)."""
    levels, inverse = np.unique(np.concatenate(columns), return_inverse=True)
    bounds = np.cumsum([0, *(len(c) for c in columns)])
    return [_Categorical(inverse.reshape(-1)[a:b], levels) for a, b in zip(bounds[:-1], bounds[1:])]


def _load_flights_3m(root: pathlib.Path, categorical: str, max_rows: int | None) -> Dataset:
    """US domestic flights, first half of 2001 (vega-datasets flights-3m.parquet), 3 classes.

    Labels from the arrival delay in minutes: "late" if delay > 5, "early" if delay < -5, else
    "on-time". Features: month, day of month, day of week (0 = Monday), departure time in hours
    (hour + minute / 60, from the ``date`` timestamp), distance (miles), origin and destination
    codes. Origin and destination share one airport table, sorted by IATA code, so a code names the
    same airport in both columns. The file's row order is kept (the last 10000 rows are the test
    set of `PROTOCOLS`). Vectorised with pyarrow; no loop over rows.
    """
    pq = _import_parquet()
    import pyarrow as pa
    import pyarrow.compute as pc

    path = _require(root, "flights/flights-3m.parquet")
    reader = pq.ParquetFile(path)
    if max_rows is None:
        table = reader.read()
    else:  # read row groups only until max_rows rows are in
        batches, n = [], 0
        for i in range(reader.num_row_groups):
            if n >= max_rows:
                break
            batches.append(reader.read_row_group(i))
            n += batches[-1].num_rows
        table = pa.concat_tables(batches).slice(0, max_rows)
    for name in table.column_names:
        if table[name].null_count:
            raise ValueError(f"{path}: column {name!r} has {table[name].null_count} missing values")
    date = table["date"]
    hours = pc.add(pc.hour(date), pc.divide(pc.cast(pc.minute(date), pa.float64()), 60.0))
    numeric = [pc.month(date), pc.day(date), pc.day_of_week(date), hours, table["distance"]]
    numeric = [np.asarray(a.to_numpy(), dtype=np.float64) for a in numeric]
    airports = [np.asarray(table[c].to_numpy(), dtype=str) for c in ("origin", "destination")]
    names = ["month", "day_of_month", "day_of_week", "dep_time_hours", "distance", "origin", "destination"]
    X, feature_names = _encode(names, numeric + _shared_codes(airports), categorical, table.num_rows)
    y = _delay_classes(table["delay"].to_numpy())
    return Dataset("flights-3m", X, y, feature_names, description=" ".join(_load_flights_3m.__doc__.split()))


def _hhmm_to_hours(hhmm: np.ndarray) -> np.ndarray:
    """Clock time written hhmm (e.g. 517 = 05:17) as hours (5.283...); 2400 stays 24.0."""
    return np.floor(hhmm / 100) + np.mod(hhmm, 100) / 60.0


def _load_nycflights13(root: pathlib.Path, categorical: str, max_rows: int | None) -> Dataset:
    """Flights departing New York City in 2013 (nycflights13), joined with planes, 3 classes.

    Labels from arr_delay (minutes) as in flights-3m: "late" > 5, "early" < -5, else "on-time".
    Features: month, day, day of week (0 = Monday, from year/month/day), dep_time and arr_time in
    hours (hhmm -> hh + mm/60, local time; 2400 -> 24.0), air_time (minutes), distance (miles),
    plane_age = 2013 - year of manufacture (planes.csv joined on tailnum), and carrier, origin and
    dest codes (sorted strings; origin and dest share one airport table). Rows are dropped when
    the plane year is unknown (no tailnum, tailnum absent from planes.csv, or year NA) or when
    dep_time, arr_time, arr_delay or air_time is NA (cancelled or diverted flights). File order kept.
    """
    header, cols = _read_csv(_require(root, "flights/nycflights13_flights.csv.gz"), max_rows)
    flights = dict(zip(header, cols))
    plane_header, plane_cols = _read_csv(_require(root, "flights/nycflights13_planes.csv.gz"))
    planes = dict(zip(plane_header, plane_cols))

    def number(values):  # "NA" or "" -> NaN
        return np.where(np.isin(values, ("NA", "")), "nan", values).astype(np.float64)

    # join on tailnum: a loop over the ~4000 distinct tail numbers, not over rows
    year_of = dict(zip(planes["tailnum"].tolist(), number(planes["year"]).tolist()))
    tails, inverse = np.unique(flights["tailnum"], return_inverse=True)
    plane_year = np.array([year_of.get(t, np.nan) for t in tails.tolist()])[inverse.reshape(-1)]

    year, month, day = (flights[c].astype(np.int64) for c in ("year", "month", "day"))
    dates = (
        (year - 1970).astype("datetime64[Y]").astype("datetime64[M]")
        + (month - 1).astype("timedelta64[M]")
    ).astype("datetime64[D]") + (day - 1).astype("timedelta64[D]")
    day_of_week = np.mod(dates.astype(np.int64) + 3, 7)  # 1970-01-01 was a Thursday (= 3)
    numeric = {
        "month": month.astype(np.float64),
        "day": day.astype(np.float64),
        "day_of_week": day_of_week.astype(np.float64),
        "dep_time_hours": _hhmm_to_hours(number(flights["dep_time"])),
        "arr_time_hours": _hhmm_to_hours(number(flights["arr_time"])),
        "air_time": number(flights["air_time"]),
        "distance": number(flights["distance"]),
        "plane_age": year - plane_year,
    }
    arr_delay = number(flights["arr_delay"])
    keep = np.isfinite(arr_delay)
    for values in numeric.values():
        keep &= np.isfinite(values)
    carrier_levels, carrier_codes = np.unique(flights["carrier"][keep], return_inverse=True)
    codes = [
        _Categorical(carrier_codes.reshape(-1), carrier_levels),
        *_shared_codes([flights["origin"][keep], flights["dest"][keep]]),
    ]
    X, feature_names = _encode(
        [*numeric, "carrier", "origin", "dest"], [v[keep] for v in numeric.values()] + codes,
        categorical, int(keep.sum()),
    )
    return Dataset(
        "nycflights13", X, _delay_classes(arr_delay[keep]), feature_names,
        description=" ".join(_load_nycflights13.__doc__.split()),
    )


# ------------------------------------------------------------------------------------------------
# Checks


def _check_choice(argument: str, value, choices: tuple[str, ...]) -> None:
    """ValueError listing the valid values when value is not one of choices."""
    if value not in choices:
        raise ValueError(f"{argument} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def _check_xy(name: str, which: str, X, y, n_features: int) -> None:
    """Shape contract of a Dataset's X [N, D] / y [N] pair."""
    if not isinstance(X, np.ndarray) or X.ndim != 2 or X.dtype != np.float64:
        raise ValueError(f"{name}: {which}: X must be a 2-D float64 numpy array")
    if not isinstance(y, np.ndarray) or y.ndim != 1 or len(y) != len(X):
        raise ValueError(f"{name}: {which}: y must be 1-D with one label per row of X ({len(X)})")
    if X.shape[1] != n_features:
        raise ValueError(f"{name}: {which}: X has {X.shape[1]} columns but there are {n_features} feature names")
