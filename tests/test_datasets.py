"""Tests of sgpc.datasets: user files and errors (always run), the staged sets (skip without data)."""

import gzip
import re
import struct
import sys

import numpy as np
import pytest

from sgpc import datasets
from sgpc.datasets import DataNotFoundError, Dataset, SplitProtocol

# ------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def shared():
    """The shared data directory, or skip: these tests need ../shared/datasets (or SGPC_DATA)."""
    try:
        return datasets.data_dir()
    except DataNotFoundError as err:
        pytest.skip(f"shared data sets not available: {err}")


CSV_TEXT = (
    "size, colour ,weight,target\n"
    "1.5,red,10,cat\n"
    "2.0,blue,12,dog\n"
    "0.5, red,9,cat\n"
    "3.0,green,20, bird\n"
)


@pytest.fixture
def small_csv(tmp_path):
    path = tmp_path / "pets.csv"
    path.write_text(CSV_TEXT)
    return path


# ------------------------------------------------------------------------------------------------
# Names and protocols (no data needed)


def test_available_has_every_required_name():
    required = {
        "glass", "new-thyroid", "satimage", "statlog-landsat", "svmguide2", "vehicle", "vowel",
        "waveform", "wine", "chess-krvk", "letter", "nursery", "page-blocks", "pendigits",
        "statlog-shuttle", "shuttle", "thyroid", "wall-following", "waveform-noise",
        "wine-quality-white", "adult", "connect-4", "connect-4-binary", "magic", "mushroom",
        "ringnorm", "twonorm", "optdigits", "mnist", "flights-3m", "nycflights13",
        "digits", "iris", "wine-sklearn", "breast-cancer",
    }
    assert required <= set(datasets.available())
    assert datasets.available() == sorted(datasets.available())


def test_every_name_has_a_protocol():
    # guard: a name added to load() without a protocol would silently get the default
    assert set(datasets.PROTOCOLS) == set(datasets.available())
    assert datasets.PROTOCOLS["satimage"] == SplitProtocol(0.8)
    assert datasets.PROTOCOLS["waveform"] == SplitProtocol(0.7, subsample=1000)
    assert datasets.PROTOCOLS["vowel"] == SplitProtocol(0.1, classes=6)
    assert datasets.PROTOCOLS["mnist"].source_split
    assert datasets.PROTOCOLS["flights-3m"].last_n_test == 10_000


@pytest.mark.parametrize(
    "kwargs",
    [dict(test_fraction=None), dict(test_fraction=0.1, source_split=True), dict(test_fraction=1.0),
     dict(test_fraction=None, source_split=True, last_n_test=5)],
)
def test_split_protocol_rejects_ambiguous_settings(kwargs):
    with pytest.raises(ValueError):
        SplitProtocol(**kwargs)


@pytest.mark.parametrize(
    "name, shape, n_classes",
    [("digits", (1797, 64), 10), ("iris", (150, 4), 3), ("wine-sklearn", (178, 13), 3),
     ("breast-cancer", (569, 30), 2)],
)
def test_sklearn_sets_need_no_data_directory(name, shape, n_classes, monkeypatch, tmp_path):
    monkeypatch.setenv("SGPC_DATA", str(tmp_path))  # an empty directory: must not be consulted
    ds = datasets.load(name)
    assert ds.X.shape == shape and ds.X.dtype == np.float64
    assert len(ds.feature_names) == shape[1]
    assert len(np.unique(ds.y)) == n_classes
    X_train, X_test, y_train, y_test = datasets.train_test(name, seed=0)
    assert len(X_test) == int(np.ceil(0.1 * shape[0])) and len(X_train) + len(X_test) == shape[0]


# ------------------------------------------------------------------------------------------------
# Errors (no data needed)


def test_unknown_name_lists_available_names():
    with pytest.raises(ValueError, match="available:.*glass.*iris"):
        datasets.load("no-such-set")


def test_unknown_categorical_mode_lists_valid_ones():
    with pytest.raises(ValueError, match="'ordinal', 'onehot'"):
        datasets.load("iris", categorical="dummy")


def test_sgpc_data_pointing_at_empty_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("SGPC_DATA", str(tmp_path))
    with pytest.raises(DataNotFoundError, match="SGPC_DATA") as info:
        datasets.data_dir()
    assert str(tmp_path) in str(info.value)
    assert "pass data_dir=" in str(info.value)
    with pytest.raises(DataNotFoundError, match="SGPC_DATA"):
        datasets.load("glass")
    assert isinstance(info.value, FileNotFoundError)


def test_missing_file_names_the_file_and_the_data_dir(tmp_path):
    (tmp_path / "uci").mkdir()
    with pytest.raises(DataNotFoundError) as info:
        datasets.load("glass", data_dir=tmp_path)
    assert "uci/glass.csv.gz" in str(info.value) and str(tmp_path) in str(info.value)


def test_explicit_data_dir_is_not_replaced_by_a_default(tmp_path):
    with pytest.raises(DataNotFoundError, match="data_dir="):
        datasets.data_dir(tmp_path / "nowhere")


def test_dataset_checks_its_shapes():
    with pytest.raises(ValueError, match="one label per row"):
        Dataset("bad", np.zeros((3, 2)), np.zeros(4), ("a", "b"))
    with pytest.raises(ValueError, match="feature names"):
        Dataset("bad", np.zeros((3, 2)), np.zeros(3), ("a",))
    with pytest.raises(ValueError, match="both"):
        Dataset("bad", np.zeros((3, 2)), np.zeros(3), ("a", "b"), X_test=np.zeros((1, 2)))


# ------------------------------------------------------------------------------------------------
# User files (no shared data needed)


def test_load_file_csv_with_string_labels_and_a_categorical_column(small_csv):
    ds = datasets.load_file(small_csv)
    assert ds.name == "pets"
    assert ds.feature_names == ("size", "colour", "weight")
    # colour codes in sorted order: blue 0, green 1, red 2 (whitespace stripped)
    np.testing.assert_array_equal(ds.X, [[1.5, 2, 10], [2.0, 0, 12], [0.5, 2, 9], [3.0, 1, 20]])
    np.testing.assert_array_equal(ds.y, ["cat", "dog", "cat", "bird"])
    assert ds.X_test is None


def test_load_file_onehot_names_columns_by_value(small_csv):
    ds = datasets.load_file(small_csv, categorical="onehot")
    assert ds.feature_names == ("size", "colour=blue", "colour=green", "colour=red", "weight")
    np.testing.assert_array_equal(ds.X[:, 1:4].sum(axis=1), 1.0)
    np.testing.assert_array_equal(ds.X[:, 3], [1, 0, 1, 0])


def test_load_file_target_by_name_or_position(small_csv):
    by_name = datasets.load_file(small_csv, target="colour")
    by_position = datasets.load_file(small_csv, target=1)
    np.testing.assert_array_equal(by_name.y, ["red", "blue", "red", "green"])
    np.testing.assert_array_equal(by_name.X, by_position.X)
    assert by_name.feature_names == ("size", "weight", "target")
    with pytest.raises(ValueError, match="no label column 'label'"):
        datasets.load_file(small_csv, target="label")


def test_load_file_csv_gz_equals_csv(small_csv, tmp_path):
    gz = tmp_path / "pets.csv.gz"
    with gzip.open(gz, "wt") as f:
        f.write(CSV_TEXT)
    plain, zipped = datasets.load_file(small_csv), datasets.load_file(gz)
    np.testing.assert_array_equal(plain.X, zipped.X)
    np.testing.assert_array_equal(plain.y, zipped.y)


def test_load_file_integer_labels_become_int(tmp_path):
    path = tmp_path / "ints.csv"
    path.write_text("a,b,target\n1,2,3\n4,5,1.0\n")
    ds = datasets.load_file(path)
    assert ds.y.dtype == np.int64 and ds.y.tolist() == [3, 1]


@pytest.mark.parametrize("token", ["?", "", "NA", "N/A", "NaN", "nan", "null"])
def test_a_missing_value_in_a_numeric_column_names_column_and_row(tmp_path, token):
    # "NA" (R's missing value) and the others after it made the column fail to parse as numbers, so it
    # became categorical codes in string order without a word
    path = tmp_path / "holes.csv"
    path.write_text(f"age,hours,target\n30,40,a\n{token},38,b\n45,50,a\n")
    with pytest.raises(ValueError, match=f"column 'age'.*'{re.escape(token)}' at row 2 of"):
        datasets.load_file(path)
    # a missing value in a numeric column is an error even when missing values may be a category
    with pytest.raises(ValueError, match="column 'age'"):
        datasets.load_file(path, missing="category")


def test_question_mark_in_categorical_column(tmp_path):
    path = tmp_path / "cats.csv"
    path.write_text("job,target\nclerk,a\n?,b\nsales,a\n")
    with pytest.raises(ValueError, match=r"column 'job'.*row 2.*missing='category'"):
        datasets.load_file(path)
    ds = datasets.load_file(path, missing="category", categorical="onehot")
    assert ds.feature_names == ("job=?", "job=clerk", "job=sales")


def test_na_in_a_text_column_is_a_value_and_in_a_numeric_one_missing(tmp_path):
    # "NA" may be a level (North America) or a class: only where the other values are numbers is it missing
    path = tmp_path / "regions.csv"
    path.write_text("x,region,target\n1.0,EU,NA\n2.0,NA,EU\n3.0,EU,EU\n")
    ds = datasets.load_file(path)
    assert ds.levels == {"region": ("EU", "NA")} and ds.y.tolist() == ["NA", "EU", "EU"]
    path.write_text("x,region,target\n1.0,EU,1\nNA,NA,2\n3.0,EU,1\n")
    with pytest.raises(ValueError, match=r"column 'x' is numeric.*'NA' at row 2"):
        datasets.load_file(path)


def test_missing_labels_are_an_error_naming_the_rows(tmp_path):
    # they became classes: 'NA' and 'nan' in a CSV, NaN in a float Parquet column
    path = tmp_path / "labels.csv"
    path.write_text("a,target\n1,1\n2,NA\n3,2\n4,nan\n")
    with pytest.raises(ValueError, match=r"label column 'target'.*'NA' at row 2 of .* and 1 more row"):
        datasets.load_file(path, missing="category")
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "labels.parquet"
    pq.write_table(pa.table({"a": [1.0, 2.0, 3.0], "target": [1.0, np.nan, 2.0]}), path)
    with pytest.raises(ValueError, match=r"label column 'target'.*'nan' at row 2 of"):
        datasets.load_file(path)


def test_a_csv_without_a_header_row_is_an_error_or_a_warning(tmp_path):
    # the first data row became the header: one row lost, columns named '1.5' and '2.0'. Repeated numbers
    # cannot be column names (an error); distinct ones can (pandas writes 0, 1, 2, ...): a warning
    path = tmp_path / "bare.csv"
    path.write_text("1.5,1.5,1\n3.5,4.0,2\n5.5,6.0,1\n")
    with pytest.raises(ValueError, match="no header row.*add a header row"):
        datasets.load_file(path)
    with pytest.raises(ValueError, match="no header row"):
        datasets.read_features(path)
    path.write_text("0,1,2\n3.5,4.0,2\n5.5,6.0,1\n")
    with pytest.warns(UserWarning, match="every column name is a number"):
        ds = datasets.load_file(path)
    assert ds.feature_names == ("0", "1") and ds.y.tolist() == [2, 1]


def test_a_column_without_a_name_is_an_error(tmp_path):
    # pandas' to_csv writes its index as a first column with an empty name: it became a feature
    path = tmp_path / "indexed.csv"
    path.write_text(",a,target\n0,1.5,1\n1,3.5,2\n2,5.5,1\n")
    with pytest.raises(ValueError, match="column 1 of .* has no name.*index=False"):
        datasets.load_file(path)


@pytest.mark.parametrize("text", ["a;b;target\n1;2;1\n3;4;2\n", "target\n1\n2\n"],
                         ids=["semicolons", "label-only"])
def test_a_file_of_one_column_is_an_error_about_the_delimiter(tmp_path, text):
    # a ';'-separated file read as one column: 0 features, whole lines as labels
    path = tmp_path / "semicolons.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match="single column.*comma-separated.*delimiter"):
        datasets.load_file(path)


def test_upper_case_gz_is_read_as_gzip(small_csv, tmp_path):
    # the format was inferred case-insensitively but the file opened as plain text (UnicodeDecodeError)
    path = tmp_path / "PETS.CSV.GZ"
    with gzip.open(path, "wt") as f:
        f.write(CSV_TEXT)
    np.testing.assert_array_equal(datasets.load_file(path).X, datasets.load_file(small_csv).X)


def test_ragged_csv_row_is_an_error(tmp_path):
    path = tmp_path / "ragged.csv"
    path.write_text("a,b,target\n1,2,x\n3,y\n")
    with pytest.raises(ValueError, match="row 2 .*2 fields.*3"):
        datasets.load_file(path)


def test_load_file_libsvm(tmp_path):
    path = tmp_path / "toy.libsvm"
    path.write_text("1 1:0.5 3:2.0\n2 2:1.0\n1 1:-1 2:3 3:4\n")
    ds = datasets.load_file(path)
    assert ds.feature_names == ("x1", "x2", "x3")
    np.testing.assert_array_equal(ds.X, [[0.5, 0, 2], [0, 1, 0], [-1, 3, 4]])
    assert ds.y.dtype == np.int64 and ds.y.tolist() == [1, 2, 1]
    txt = tmp_path / "toy.txt"
    txt.write_text(path.read_text())
    with pytest.raises(ValueError, match="fmt="):
        datasets.load_file(txt)
    np.testing.assert_array_equal(datasets.load_file(txt, fmt="libsvm").X, ds.X)


def test_libsvm_index_base_is_chosen_and_kept_for_new_data(small_csv, tmp_path):
    # both files 0-based; the new one never uses index 0, so guessing its base alone ("auto") reads it
    # as 1-based and shifts every column by one
    train, new = tmp_path / "train.libsvm", tmp_path / "new.libsvm"
    train.write_text("1 0:0.5 2:1.0\n2 1:2.0\n")
    new.write_text("0 2:1.0\n0 1:2.0\n")
    ds = datasets.load_file(train)
    assert ds.zero_based is True
    np.testing.assert_array_equal(ds.X, [[0.5, 0, 1], [0, 2, 0]])
    expected = [[0, 0, 1], [0, 2, 0]]
    X, _ = datasets.read_features(new, n_features=3, zero_based=ds.zero_based)
    np.testing.assert_array_equal(X, expected)
    np.testing.assert_array_equal(datasets.load_file(new, zero_based=True, n_features=3).X, expected)
    guessed = datasets.load_file(new)
    assert guessed.zero_based is False and guessed.X.tolist() == [[0, 1], [2, 0]]   # the guess, as documented
    with pytest.raises(ValueError, match="index 0, so it is not 1-based; pass zero_based=True"):
        datasets.load_file(train, zero_based=False)
    with pytest.raises(ValueError, match="has 3 features .*0-based.*the model has 2"):
        datasets.read_features(train, n_features=2, zero_based=True)
    with pytest.raises(ValueError, match="zero_based must be one of"):
        datasets.load_file(train, zero_based="yes")
    assert datasets.load_file(small_csv).zero_based is None                      # not LIBSVM


def test_load_file_parquet_equals_csv(small_csv, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({
        "size": [1.5, 2.0, 0.5, 3.0],
        "colour": ["red", "blue", "red", "green"],
        "weight": pa.array([10, 12, 9, 20], pa.int32()),
        "target": ["cat", "dog", "cat", "bird"],
    })
    path = tmp_path / "pets.parquet"
    pq.write_table(table, path)
    from_parquet, from_csv = datasets.load_file(path), datasets.load_file(small_csv)
    assert from_parquet.feature_names == from_csv.feature_names
    np.testing.assert_array_equal(from_parquet.X, from_csv.X)
    np.testing.assert_array_equal(from_parquet.y, from_csv.y)


def test_parquet_without_pyarrow_says_how_to_install(tmp_path, monkeypatch):
    path = tmp_path / "any.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # makes `import pyarrow...` raise ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match=r"pip install sgpc\[parquet\]"):
        datasets.load_file(path)


def test_mnist_reader_on_tiny_idx_files(tmp_path):
    # 3 training and 2 test images of 2x3 pixels, written in the IDX format MNIST uses
    (tmp_path / "mnist").mkdir()
    rng = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte.gz": rng.integers(0, 256, (3, 2, 3), dtype=np.uint8),
        "train-labels-idx1-ubyte.gz": np.array([5, 0, 4], dtype=np.uint8),
        "t10k-images-idx3-ubyte.gz": rng.integers(0, 256, (2, 2, 3), dtype=np.uint8),
        "t10k-labels-idx1-ubyte.gz": np.array([7, 2], dtype=np.uint8),
    }
    for name, a in arrays.items():
        header = bytes([0, 0, 0x08, a.ndim]) + b"".join(struct.pack(">I", n) for n in a.shape)
        with gzip.open(tmp_path / "mnist" / name, "wb") as f:
            f.write(header + a.tobytes())
    ds = datasets.load("mnist", data_dir=tmp_path)
    np.testing.assert_array_equal(ds.X * 255, arrays["train-images-idx3-ubyte.gz"].reshape(3, 6))
    np.testing.assert_array_equal(ds.y, [5, 0, 4])
    assert ds.X_test.shape == (2, 6) and ds.y_test.tolist() == [7, 2]
    assert ds.feature_names[:4] == ("pixel_0_0", "pixel_0_1", "pixel_0_2", "pixel_1_0")


# ------------------------------------------------------------------------------------------------
# Standardisation and splits on in-memory data (no data needed)


def test_standardize_uses_training_statistics_only():
    rng = np.random.default_rng(1)
    X_train = rng.normal(3.0, 2.0, (200, 3))
    X_train[:, 2] = 7.0  # constant column: centred, not divided by 0
    X_test = rng.normal(3.0, 2.0, (50, 3))
    Xs_train, Xs_test, mean, std = datasets.standardize(X_train, X_test)
    # 1e-12: exact up to float64 rounding of a mean/std over 200 values
    np.testing.assert_allclose(Xs_train.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(Xs_train[:, :2].std(axis=0), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(Xs_train[:, 2], 0.0)
    assert std[2] == 1.0
    np.testing.assert_allclose(Xs_test, (X_test - X_train.mean(0)) / std, rtol=1e-12)
    np.testing.assert_allclose(Xs_test * std + mean, X_test, rtol=1e-12)


def test_train_test_on_a_dataset_applies_a_given_protocol():
    rng = np.random.default_rng(2)
    y = np.repeat(np.arange(5), 40)
    ds = Dataset("toy", rng.normal(size=(200, 2)), y, ("a", "b"))
    protocol = SplitProtocol(0.25, subsample=100, classes=3)
    X_train, X_test, y_train, y_test = datasets.train_test(ds, seed=3, protocol=protocol)
    assert len(X_train) + len(X_test) == 100 and len(X_test) == 25
    assert set(y_train) | set(y_test) == {0, 1, 2}


def test_a_user_file_named_like_a_paper_set_gets_the_default_split(tmp_path):
    # satimage's protocol is 20% train / 80% test and waveform's subsamples 1000 rows: neither applies to
    # a user's own satimage.csv / waveform.csv (it gave a 6/24 split, and "cannot subsample 1000 of 30")
    rng = np.random.default_rng(0)
    rows = "\n".join(f"{a:.3f},{b:.3f},{k}" for a, b, k in zip(rng.normal(size=30), rng.normal(size=30), [0, 1, 2] * 10))
    for name in ("satimage", "waveform"):
        path = tmp_path / f"{name}.csv"
        path.write_text("a,b,label\n" + rows + "\n")
        ds = datasets.load_file(path)
        assert ds.name == name and ds.user_file
        X_train, X_test, _, _ = datasets.train_test(ds, seed=0)
        assert (len(X_train), len(X_test)) == (27, 3)


# ------------------------------------------------------------------------------------------------
# The staged data sets (skip without ../shared/datasets)

P1 = [  # name, rows (train + test files), features, classes -- MANIFEST.md
    ("glass", 214, 9, 6),
    ("new-thyroid", 215, 5, 3),
    ("satimage", 6435, 36, 6),
    ("svmguide2", 391, 20, 3),
    ("vehicle", 846, 18, 4),
    ("vowel", 990, 10, 11),
    ("waveform", 5000, 21, 3),
    ("wine", 178, 13, 3),
]


@pytest.mark.data
@pytest.mark.parametrize("name, rows, features, classes", P1)
def test_p1_sets_match_the_manifest(shared, name, rows, features, classes):
    ds = datasets.load(name, shared)
    y = ds.y if ds.y_test is None else np.concatenate([ds.y, ds.y_test])
    n_test = 0 if ds.X_test is None else len(ds.X_test)
    assert (len(ds.X) + n_test, ds.X.shape[1], len(np.unique(y))) == (rows, features, classes)
    assert ds.X.dtype == np.float64 and not np.isnan(ds.X).any()


@pytest.mark.data
@pytest.mark.parametrize(
    "name", [n for n in datasets.available() if n not in ("mnist", "flights-3m", "nycflights13")]
)
def test_every_table_loads_all_numeric(shared, name):
    ds = datasets.load(name, shared)
    assert ds.X.ndim == 2 and ds.X.dtype == np.float64 and np.isfinite(ds.X).all()
    assert len(ds.feature_names) == ds.X.shape[1] and len(ds.y) == len(ds.X)


@pytest.mark.data
@pytest.mark.parametrize(
    "name, train, test, features",
    [("satimage", 4435, 2000, 36), ("vowel", 528, 462, 10), ("adult", 32561, 16281, 14)],
)
def test_source_splits_are_kept(shared, name, train, test, features):
    ds = datasets.load(name, shared)
    assert ds.X.shape == (train, features) and ds.X_test.shape == (test, features)
    assert len(ds.y_test) == test
    assert set(ds.y_test) <= set(ds.y)


@pytest.mark.data
def test_adult_missing_values_are_a_category(shared):
    ds = datasets.load("adult", shared, categorical="onehot")
    assert set(ds.y) == set(ds.y_test) == {"<=50K", ">50K"}
    assert {"workclass=?", "occupation=?", "native_country=?"} <= set(ds.feature_names)
    # one-hot blocks of train and test share the same columns
    assert ds.X.shape[1] == ds.X_test.shape[1]


@pytest.mark.data
def test_connect4_binary_is_loss_vs_rest(shared):
    ds = datasets.load("connect-4-binary", shared)
    labels, counts = np.unique(ds.y, return_counts=True)
    assert dict(zip(labels, counts)) == {"loss": 16635, "draw-or-win": 6449 + 44473}
    # the board's 42 categorical columns keep connect-4's levels (they were dropped: {})
    assert ds.levels == datasets.load("connect-4", shared).levels and len(ds.levels) == 42


@pytest.mark.data
def test_mnist_shapes_and_scale(shared):
    ds = datasets.load("mnist", shared)
    assert ds.X.shape == (60000, 784) and ds.X_test.shape == (10000, 784)
    assert ds.X.min() == 0.0 and ds.X.max() == 1.0
    assert np.bincount(ds.y).tolist()[:2] == [5923, 6742]  # MANIFEST class counts
    assert np.bincount(ds.y_test).tolist()[:2] == [980, 1135]


@pytest.mark.data
@pytest.mark.parametrize(
    "name, n_train, n_test, n_classes",
    [("satimage", 1287, 5148, 6), ("waveform", 300, 700, 3), ("vowel", 486, 54, 6)],
)
def test_p1_protocol_sizes(shared, name, n_train, n_test, n_classes):
    X_train, X_test, y_train, y_test = datasets.train_test(name, seed=0, data_dir=shared)
    assert (len(X_train), len(X_test)) == (n_train, n_test)
    assert len(np.unique(np.concatenate([y_train, y_test]))) == n_classes


@pytest.mark.data
def test_vowel_keeps_the_first_six_classes(shared):
    _, _, y_train, y_test = datasets.train_test("vowel", data_dir=shared)
    assert set(y_train) | set(y_test) == {0, 1, 2, 3, 4, 5}


@pytest.mark.data
def test_train_test_standardises_with_training_statistics(shared):
    X_train, X_test, _, _ = datasets.train_test("vehicle", seed=0, data_dir=shared)
    # 1e-10: float64 rounding of means over ~760 rows of values up to ~1000
    np.testing.assert_allclose(X_train.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(X_train.std(axis=0), 1.0, rtol=1e-10)
    # the test rows were not used for the statistics, so their mean is not exactly 0
    assert np.abs(X_test.mean(axis=0)).max() > 1e-3


@pytest.mark.data
def test_same_seed_same_split_other_seed_other_split(shared):
    first = datasets.train_test("glass", seed=0, data_dir=shared)
    again = datasets.train_test("glass", seed=0, data_dir=shared)
    other = datasets.train_test("glass", seed=1, data_dir=shared)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[1], other[1])


@pytest.mark.data
def test_flights_3m_first_rows(shared):
    pytest.importorskip("pyarrow")
    ds = datasets.load("flights-3m", shared, max_rows=50_000)
    assert ds.X.shape == (50_000, 7) and not np.isnan(ds.X).any()
    assert ds.feature_names == (
        "month", "day_of_month", "day_of_week", "dep_time_hours", "distance", "origin", "destination"
    )
    assert set(ds.y) == {"early", "on-time", "late"}
    assert ds.X[0, :4].tolist() == [1, 1, 0, 1 / 60]  # 2001-01-01 00:01, a Monday
    assert 0 <= ds.X[:, 3].min() and ds.X[:, 3].max() < 24
    # airline protocol: the last 10000 rows, in file order, are the test set
    X_train, X_test, _, y_test = datasets.train_test(ds, standardize=False)
    assert len(X_train) == 40_000
    np.testing.assert_array_equal(X_test, ds.X[-10_000:])
    np.testing.assert_array_equal(y_test, ds.y[-10_000:])


@pytest.mark.data
def test_nycflights13_features(shared):
    ds = datasets.load("nycflights13", shared, max_rows=20_000)
    assert ds.feature_names == (
        "month", "day", "day_of_week", "dep_time_hours", "arr_time_hours", "air_time", "distance",
        "plane_age", "carrier", "origin", "dest",
    )
    assert 0 < len(ds.X) < 20_000 and np.isfinite(ds.X).all()  # rows without plane year dropped
    assert set(ds.y) == {"early", "on-time", "late"}
    assert ds.X[0, 2] == 1  # 2013-01-01 was a Tuesday (0 = Monday)


def test_read_features_drops_the_target_and_refuses_text(tmp_path):
    p = tmp_path / "new.csv"
    p.write_text("a,b,label\n1,2,x\n3,4,y\n")
    X, names = datasets.read_features(p, target="label")
    np.testing.assert_array_equal(X, [[1, 2], [3, 4]])
    assert names == ("a", "b")
    with pytest.raises(ValueError, match="not numeric"):
        datasets.read_features(p)


@pytest.mark.parametrize("categorical", ["ordinal", "onehot"])
def test_new_data_is_coded_with_the_training_levels(tmp_path, categorical):
    rows = [("1.0", "red", "a"), ("2.0", "green", "b"), ("3.0", "blue", "a"), ("4.0", "green", "b")]
    train, new = tmp_path / "train.csv", tmp_path / "new.csv"
    train.write_text("x,colour,y\n" + "".join(",".join(r) + "\n" for r in rows))
    new.write_text("x,colour,y\n" + "".join(",".join(r) + "\n" for r in rows[::2]))    # red, blue only
    ds = datasets.load_file(train, categorical=categorical)
    assert ds.levels == {"colour": ("blue", "green", "red")}
    alone = datasets.load_file(new, categorical=categorical)
    coded = datasets.load_file(new, categorical=categorical, levels=ds.levels)
    assert coded.feature_names == ds.feature_names
    np.testing.assert_array_equal(coded.X, ds.X[::2])
    assert alone.X.tolist() != ds.X[::2].tolist()          # what coding from the file alone would give
    X, names = datasets.read_features(new, target="y", levels=ds.levels, categorical=categorical)
    np.testing.assert_array_equal(X, ds.X[::2])
    assert names == ds.feature_names
    with pytest.raises(ValueError, match="not numeric"):
        datasets.read_features(new, target="y")               # no levels: refused, as before
    new.write_text("x,colour,y\n5.0,purple,a\n")
    with pytest.raises(ValueError, match=r"'colour' has the value 'purple' at row 1 .*did not have"):
        datasets.load_file(new, levels=ds.levels)
    new.write_text("x,colour,y\nfive,red,a\n")
    with pytest.raises(ValueError, match="'x' is not numeric .*'five'.* not a categorical column"):
        datasets.load_file(new, levels=ds.levels)


@pytest.mark.parametrize("fmt", ["csv", "csv.gz", "parquet"])
def test_read_feature_blocks_equals_read_features(tmp_path, fmt):
    # a block of blank lines mid-file must not end a CSV early; levels code every block alike
    from sgpc import tabular
    rng = np.random.default_rng(0)
    X = rng.normal(size=(257, 2))
    colour = np.array(["red", "green", "blue"])[rng.integers(0, 3, 257)]
    path = tmp_path / f"f.{fmt}"
    if fmt == "parquet":
        pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
        pq.write_table(pa.table({"a": X[:, 0], "colour": colour, "b": X[:, 1], "y": np.arange(257) % 2}), path,
                       row_group_size=100)
    else:
        lines = ["a,colour,b,y"] + [f"{float(a)!r},{c},{float(b)!r},{i % 2}"
                                    for i, ((a, b), c) in enumerate(zip(X, colour))]
        lines[40:40] = [""] * 30
        text = "\n".join(lines) + "\n"
        path.write_bytes(gzip.compress(text.encode()) if fmt.endswith("gz") else text.encode())
    levels = {"colour": ["blue", "green", "red"]}
    whole, names = tabular.read_features(path, target="y", levels=levels)
    block_names, blocks = tabular.read_feature_blocks(path, target="y", levels=levels, block_rows=16)
    blocks = list(blocks)
    assert block_names == names == ("a", "colour", "b")
    assert max(len(b) for b in blocks) <= 16 and len(blocks) >= 257 // 16
    np.testing.assert_array_equal(np.concatenate(blocks), whole)


def test_read_feature_blocks_names_the_file_row_of_a_bad_value(tmp_path):
    from sgpc import tabular
    path = tmp_path / "f.csv"
    path.write_text("a,b\n" + "1,2\n" * 40 + "1,nan\n")
    names, blocks = tabular.read_feature_blocks(path, block_rows=16)
    with pytest.raises(ValueError, match=r"'b' .* at row 41 of"):
        list(blocks)
