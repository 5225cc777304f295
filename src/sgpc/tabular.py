"""Tabular files: reading a user's CSV (header row; optionally gzip'd), Parquet or LIBSVM file into a `Dataset`.

What it does:

- `load_file(path)` reads a labelled file and returns a `Dataset`: an all-numeric float64 feature
  matrix ``X [N, D]`` and the labels ``y [N]`` (int64 when every label is an integer, else strings).
- `read_features(path)` reads the features of new data, with or without a label column, encoded with
  the training file's ``levels``; `read_feature_blocks(path)` does the same a block of rows at a time.
- Columns that are not numeric are categorical and become integer codes (``categorical="ordinal"``,
  codes in sorted order of the distinct strings) or one-hot columns named ``column=value``
  (``categorical="onehot"``); the helpers here also serve the staged data sets of ``datasets``.

What it deliberately does not do: know the named data sets, their directory or their split protocols
(``datasets``), impute missing values (a missing value, written as one of `MISSING_TOKENS`, or of
`NUMERIC_MISSING_TOKENS` in a numeric column, is an error naming the column and row unless
``missing="category"`` makes it a category of a categorical column), cache results, or use pandas.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import itertools
import os
import pathlib
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

__all__ = ["DataNotFoundError", "NonNumericColumns", "Dataset", "load_file", "read_features", "read_feature_blocks", "CATEGORICAL_MODES",
           "MISSING_MODES", "FILE_FORMATS", "MISSING_TOKENS", "NUMERIC_MISSING_TOKENS", "ZERO_BASED_MODES"]

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
    _check_choice("categorical", categorical, CATEGORICAL_MODES)
    names, columns = (_read_parquet_columns if fmt == "parquet" else _read_csv)(path)
    return _feature_matrix(path, names, columns, target, levels, categorical)


def read_feature_blocks(path: str | os.PathLike, *, target: str | int | None = None, fmt: str | None = None,
                        n_features: int | None = None, levels: Mapping[str, Sequence[str]] | None = None,
                        categorical: str = "ordinal", zero_based: bool | str = "auto", block_rows: int = 8192
                        ) -> tuple[tuple[str, ...], Iterator[np.ndarray]]:
    """`read_features` one block of rows at a time, for files larger than memory.

    Returns the feature names (read from the first block) and an iterator over the blocks X [B,D], B ≤
    ``block_rows``, in file order; each block is parsed as `read_features` parses a whole file (a
    bad value raises when its block is read, naming its row in the file). CSV files are read
    ``block_rows`` rows at a time and Parquet files in record batches of at most ``block_rows`` rows;
    LIBSVM files are read whole (one block). A file without rows gives one empty block [0,D].
    """
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")
    _check_choice("categorical", categorical, CATEGORICAL_MODES)
    fmt = fmt or _infer_format(path)
    if fmt == "libsvm":
        X, names = read_features(path, fmt="libsvm", n_features=n_features, zero_based=zero_based)
        return names, iter([X])
    header, blocks = (_parquet_blocks if fmt == "parquet" else _csv_blocks)(path, block_rows)
    first_row, columns = next(blocks)                  # the readers yield at least one block, maybe empty
    X, names = _feature_matrix(path, header, columns, target, levels, categorical, first_row)

    def all_blocks() -> Iterator[np.ndarray]:
        yield X
        for start, cols in blocks:
            yield _feature_matrix(path, header, cols, target, levels, categorical, start)[0]
    return names, all_blocks()


def _feature_matrix(path, names: list[str], columns: list[np.ndarray], target, levels, categorical: str,
                    first_row: int = 0) -> tuple[np.ndarray, tuple[str, ...]]:
    """X [N,D] and feature names from a file's header and string (or typed) columns, the ``target`` column
    dropped; ``first_row``: the file row of the columns' first value (for messages)."""
    if target is not None:
        drop = _target_index(names, target)
        names, columns = names[:drop] + names[drop + 1:], columns[:drop] + columns[drop + 1:]
    if not names:
        raise ValueError(f"{path} has no feature columns besides the label {target!r}")
    locate = lambda i: f"row {first_row + i + 1} of {path}"                         # noqa: E731
    parsed = [_parse_feature(n, c, False, locate, levels) for n, c in zip(names, columns)]
    text = [n for n, c in zip(names, parsed) if not isinstance(c, np.ndarray)]
    if text and levels is None:
        raise NonNumericColumns(f"{path}: columns {text[:5]} are not numeric; prediction needs numeric features "
                                "(if one of them is the label, pass target=<column>; for categorical columns "
                                "pass the training data's levels)", text)
    return _encode(names, parsed, categorical, len(columns[0]) if columns else 0)


@dataclass(frozen=True)
class _Categorical:
    """A categorical column: codes [N] into levels [K] (sorted strings)."""

    codes: np.ndarray
    levels: np.ndarray


def _read_csv(path: pathlib.Path, max_rows: int | None = None) -> tuple[list[str], list[np.ndarray]]:
    """Header and stripped string columns of a CSV file (gzip'd when its name ends in .gz or .GZ)."""
    gz = path.name.lower().endswith(".gz")
    opener = gzip.open if gz else open
    with _as_csv_errors(path, gz):
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


@contextlib.contextmanager
def _as_csv_errors(path: pathlib.Path, gz: bool):
    """A file that cannot be read as CSV text raises a ValueError naming it and the likely cause, in our words."""
    try:
        yield
    except (UnicodeDecodeError, csv.Error, gzip.BadGzipFile, EOFError) as exc:
        raise ValueError(f"{path} is not a CSV file: {_not_csv_cause(exc, gz)}; sgpc reads CSV (UTF-8 text with a "
                         "header row, optionally .gz), Parquet (.parquet) and LIBSVM (.libsvm, .svm) files, by "
                         "their names") from None


def _not_csv_cause(exc: Exception, gz: bool) -> str:
    """The likely cause of a failure to read a file as CSV text, in our words."""
    if isinstance(exc, gzip.BadGzipFile):
        return "its name ends in .gz but it is not gzip-compressed"
    if isinstance(exc, EOFError):
        return "the gzip stream ends early (truncated)"
    if isinstance(exc, UnicodeDecodeError):
        return (f"byte {exc.start} is not UTF-8 text; it looks like a binary file (Parquet, NumPy, a saved model, "
                "a spreadsheet, or a compressed file)" + (" after decompression" if gz else ""))
    return "it holds NUL bytes; it looks like a binary file, or text in UTF-16 (save it as UTF-8)"


class NonNumericColumns(ValueError):
    """Columns of a file read for prediction are not numbers (``read_features``); ``columns`` names them, ``where``
    (when known) the first such value and its row."""

    def __init__(self, message: str, columns: list, where: str = ""):
        super().__init__(message)
        self.columns, self.where = columns, where


def _csv_blocks(path: pathlib.Path, block_rows: int) -> tuple[list[str], Iterator[tuple[int, list[np.ndarray]]]]:
    """The header of a CSV file (checked as by `_read_csv`) and its stripped string columns ``block_rows`` rows
    at a time, each block with the index of its first row; at least one block."""
    header, _ = _read_csv(path, max_rows=0)
    gz = path.name.lower().endswith(".gz")
    opener = gzip.open if gz else open

    def blocks():
        with _as_csv_errors(path, gz), opener(path, "rt", newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            next(reader, None)
            start = 0
            while True:
                raw = list(itertools.islice(reader, block_rows))
                rows = [row for row in raw if row]          # blank lines are skipped, as by `_read_csv`
                for i, row in enumerate(rows):
                    if len(row) != len(header):
                        raise ValueError(f"row {start + i + 1} of {path} has {len(row)} fields but the header has "
                                         f"{len(header)}")
                if rows:
                    yield start, [np.char.strip(np.array(col, dtype=str)) for col in zip(*rows)]
                elif not raw and start == 0:
                    yield 0, [np.array([], dtype=str) for _ in header]
                if not raw:
                    return
                start += len(rows)
    return header, blocks()


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
        raise NonNumericColumns(f"column {name!r} is not numeric (the value {str(values[i])!r} at {locate(i)}) "
                                "and was not a categorical column of the training data", [name],
                                f"the value {str(values[i])!r} at {locate(i)}")
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


def _target_index(header: list[str], target: str | int) -> int:
    """Position of the label column given by name or (possibly negative) position."""
    if isinstance(target, str):
        if target not in header:
            raise ValueError(f"no label column {target!r}; the columns are {header}")
        return header.index(target)
    if not -len(header) <= target < len(header):
        raise ValueError(f"label column {target} out of range for {len(header)} columns")
    return target % len(header)


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
    table = _import_parquet().read_table(path)
    return table.column_names, _arrow_columns(path, table.column_names, table.columns)


def _parquet_blocks(path: pathlib.Path, block_rows: int) -> tuple[list[str], Iterator[tuple[int, list[np.ndarray]]]]:
    """The column names of a Parquet file and its columns (as `_read_parquet_columns`) in record batches of at
    most ``block_rows`` rows, each with the index of its first row; at least one block."""
    file = _import_parquet().ParquetFile(path)
    names = file.schema_arrow.names

    def blocks():
        start = 0
        for batch in file.iter_batches(batch_size=block_rows):
            yield start, _arrow_columns(path, names, batch.columns, start)
            start += batch.num_rows
        if start == 0:
            yield 0, _arrow_columns(path, names, file.schema_arrow.empty_table().columns)
    return names, blocks()


def _arrow_columns(path: pathlib.Path, names: list[str], arrow_columns, first_row: int = 0) -> list[np.ndarray]:
    """pyarrow columns (arrays or chunked arrays) as numpy: numbers as int64/float64, text as stripped str;
    ``first_row``: the file row of their first value (for messages)."""
    import pyarrow as pa

    columns = []
    for name, col in zip(names, arrow_columns):
        if col.null_count:
            first = int(np.argmax(_to_numpy(col.is_null())))
            raise ValueError(f"column {name!r} has a missing value at row {first_row + first + 1} of {path}")
        kind = col.type
        if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
            columns.append(_to_numpy(col).astype(np.int64))
        elif pa.types.is_floating(kind) or pa.types.is_decimal(kind):
            columns.append(_to_numpy(col).astype(np.float64))
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_dictionary(kind):
            values = col.cast(pa.string()) if pa.types.is_dictionary(kind) else col
            columns.append(np.char.strip(np.asarray(_to_numpy(values), dtype=str)))
        else:
            raise ValueError(f"column {name!r} of {path} has type {kind}; convert it to a number or a string")
    return columns


def _to_numpy(col) -> np.ndarray:
    """A pyarrow Array or ChunkedArray as a numpy array (a copy where needed: booleans, text, several chunks;
    ChunkedArray.to_numpy takes no zero_copy_only before pyarrow 13)."""
    import pyarrow as pa

    return col.to_numpy(zero_copy_only=False) if isinstance(col, pa.Array) else col.to_numpy()


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
