"""Data sets: the registry of the papers' named data sets and scikit-learn's bundled sets; split protocols.

What it does:

- `load(name)` reads one of the staged data sets in the data directory (see `data_dir`; the files
  and their columns are listed in ``../shared/datasets/MANIFEST.md``) or one of scikit-learn's
  bundled sets, and returns a `Dataset`: an all-numeric float64 feature matrix ``X [N, D]``, the
  labels ``y [N]`` as the source gives them (ints or strings), and the source's own test split in
  ``X_test``/``y_test`` where it has one.
- `load_file(path)` does the same for a user's CSV, Parquet or LIBSVM file; it and the file parsing
  (`read_features`, categorical coding, missing values) live in ``tabular`` and are re-exported here.
- `train_test(name)` applies the split protocol of the paper that used the set (`PROTOCOLS`) and
  standardises the features with training statistics only (`standardize`).

Columns that are not numeric are categorical and become integer codes (``categorical="ordinal"``,
codes in sorted order of the distinct strings) or one-hot columns named ``column=value``
(``categorical="onehot"``).

What it deliberately does not do: parse files itself (``tabular`` does), download anything (a fresh
install without a data directory still has "digits", "iris", "wine-sklearn" and "breast-cancer"),
impute missing values (a missing value is an error naming the column and row, except in adult and
mushroom where ``?`` is a category of its own, and in nycflights13 where incomplete rows are dropped
as documented there), cache results, or use pandas.
"""

from __future__ import annotations

import gzip
import os
import pathlib
from dataclasses import dataclass

import numpy as np

from .tabular import (CATEGORICAL_MODES, DataNotFoundError, Dataset, _Categorical, _check_choice, _encode,
                      _import_parquet, _read_csv, _table_to_dataset, _target_index)
from .tabular import load_file, read_features   # noqa: F401  (re-exported: the documented sgpc.datasets API)

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

_DATA_MARKERS = ("MANIFEST.md", "uci", "mnist", "flights")  # a data directory holds one of these


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
