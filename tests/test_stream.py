"""Out-of-core sources (sgpc.stream): reading, block-shuffled minibatches, exact resume, one-pass
statistics, and fitting/predicting from files through the estimator and the CLI."""
import numpy as np
import pytest
import torch

pytest.importorskip("pyarrow")

from sgpc import stream
from sgpc.estimator import GPClassifier
from sgpc.initialization import initial_lengthscales


def _data(n=203, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * [1.0, 3.0, 0.5] + [0.0, 5.0, -1.0]
    y = np.where(X[:, 0] > 0.5, "a", np.where(X[:, 2] < -1.0, "b", "c"))
    return X, y


def _write(tmp_path, X, y, rows=40):
    path = tmp_path / "d.parquet"
    chunks = ((X[a:a + rows], y[a:a + rows]) for a in range(0, len(X), rows))
    stream.write_parquet(path, chunks, [f"x{j}" for j in range(X.shape[1])], target="label", row_group_size=rows)
    return path


def test_sources_read_the_data_block_by_block(tmp_path):
    X, y = _data()
    pq_src = stream.ParquetSource(_write(tmp_path, X, y), target="label")
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    np_src = stream.NpySource(tmp_path / "X.npy", tmp_path / "y.npy", block_rows=40)
    for src in (pq_src, np_src):
        assert (src.n_rows, src.n_features) == X.shape
        assert src.block_sizes == [40] * 5 + [3]
        parts = [src.read(b) for b in range(len(src.block_sizes))]
        np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), X)
        np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), y)
    assert isinstance(np_src.X, np.memmap)           # memory-mapped, not loaded


def test_an_epoch_is_a_permutation_cut_into_batches():
    X = np.arange(200.0)[:, None]
    src = stream.NpySource(X, np.arange(200), block_rows=30)
    mb = stream.Minibatches(src, 25, torch.Generator().manual_seed(0), buffer_blocks=2)
    epoch = [next(mb) for _ in range(8)]                     # 200 / 25 = 8 batches, nothing dropped
    rows = np.concatenate([b[1] for b in epoch])
    np.testing.assert_array_equal(np.sort(rows), np.arange(200))
    for Xb, yb in epoch:
        np.testing.assert_array_equal(Xb[:, 0], yb)         # features and labels stay together
    nxt = np.concatenate([next(mb)[1] for _ in range(8)])
    assert not np.array_equal(nxt, rows)                    # the next epoch is shuffled anew
    # shuffling is by blocks: the first batch comes from the first window of 2 blocks (≤ 60 rows)
    assert len(np.unique(epoch[0][1] // 30)) <= 2


def test_drops_the_incomplete_last_batch_of_an_epoch():
    src = stream.NpySource(np.zeros((23, 1)), np.arange(23), block_rows=5)
    mb = stream.Minibatches(src, 10, torch.Generator().manual_seed(1))
    epoch = [next(mb)[1] for _ in range(2)]                  # 23 // 10 = 2 batches per epoch
    assert len(np.unique(np.concatenate(epoch))) == 20       # disjoint; 3 rows are left out
    before = mb.state_dict()["epoch_rng"]
    next(mb)                                                 # the third batch opens a new epoch
    assert not torch.equal(mb.state_dict()["epoch_rng"], before)


@pytest.mark.parametrize("consumed", [0, 3, 8, 11])
def test_resume_from_state_gives_the_same_batches(consumed):
    src = stream.NpySource(np.arange(97.0)[:, None], np.arange(97), block_rows=10)
    a = stream.Minibatches(src, 12, torch.Generator().manual_seed(3), buffer_blocks=3)
    for _ in range(consumed):
        next(a)
    saved = a.state_dict()
    expected = [next(a)[1] for _ in range(15)]             # crosses at least one epoch boundary (8 per epoch)
    b = stream.Minibatches(src, 12, torch.Generator().manual_seed(999), buffer_blocks=3)
    b.load_state_dict(saved)
    for e in expected:
        np.testing.assert_array_equal(next(b)[1], e)


def test_a_position_is_refused_on_another_block_layout():
    # the draws of a position select rows through the block sizes and the window of buffer_blocks: on
    # another layout the resumed epoch repeated 26 of 100 rows and skipped as many, without a word
    src = stream.NpySource(np.arange(100.0)[:, None], np.arange(100), block_rows=10)
    a = stream.Minibatches(src, 10, torch.Generator().manual_seed(0), buffer_blocks=2)
    next(a)
    saved = a.state_dict()
    other = stream.NpySource(np.arange(100.0)[:, None], np.arange(100), block_rows=25)
    with pytest.raises(ValueError, match=r"saved for 10 blocks of sizes 10 \(×10\), this source has 4 of 25 \(×4\)"):
        stream.Minibatches(other, 10, torch.Generator()).load_state_dict(saved)
    with pytest.raises(ValueError, match="buffer_blocks=2, this fit uses 4"):
        stream.Minibatches(src, 10, torch.Generator(), buffer_blocks=4).load_state_dict(saved)
    legacy = {k: v for k, v in saved.items() if k not in ("block_sizes", "buffer_blocks")}
    stream.Minibatches(src, 10, torch.Generator(), buffer_blocks=2).load_state_dict(legacy)


def test_a_memory_map_opened_by_the_caller_travels_as_its_file(tmp_path):
    # pickled for every rank of a data-parallel fit: a map the caller opened copied every row (8.2 MB
    # for an 8.2 MB file), a path travelled as a path
    import pickle
    X = np.random.default_rng(0).normal(size=(5000, 4))
    np.save(tmp_path / "X.npy", X)
    mm = np.load(tmp_path / "X.npy", mmap_mode="r")
    src = stream.NpySource(mm, np.arange(5000) % 3, block_rows=512)
    blob = pickle.dumps(src)
    assert len(blob) < 50_000                        # the labels (40 kB) travel, the rows do not
    back = pickle.loads(blob)
    assert isinstance(back.X, np.memmap)
    np.testing.assert_array_equal(back.read(3)[0], src.read(3)[0])
    np.testing.assert_array_equal(back.y, src.y)
    part = stream.NpySource(mm[100:300], None, block_rows=50)       # a slice is not a whole map: copied
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(part)).read(1)[0], X[150:200])
    cow = np.load(tmp_path / "X.npy", mmap_mode="c")                 # copy-on-write: edits live in memory only
    cow[0, 0] = -7.0
    assert pickle.loads(pickle.dumps(stream.NpySource(cow, None))).read(0)[0][0, 0] == -7.0


def test_parquet_bool_labels_and_decimal_features_read_as_in_memory(tmp_path):
    # streamed, a bool label gave classes False/True where load_file gives 0/1, and a decimal feature
    # column was refused as "not numeric" where load_file reads it as float64
    import decimal
    import pyarrow as pa
    import pyarrow.parquet as pq
    from sgpc import datasets
    path = tmp_path / "b.parquet"
    price = pa.array([decimal.Decimal("64.06"), decimal.Decimal("27.71"), decimal.Decimal("3.50")] * 4,
                     type=pa.decimal128(6, 2))
    pq.write_table(pa.table({"price": price, "x": np.linspace(0.0, 1.0, 12), "label": [True, False, True] * 4}), path)
    ds = datasets.load_file(path, target="label")
    X, y = stream.ParquetSource(path, target="label").read(0)
    np.testing.assert_array_equal(y, ds.y)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(X, ds.X)


def test_statistics_in_one_pass_match_numpy():
    X, y = _data(n=1000)
    src = stream.NpySource(X, y, block_rows=64)
    st = stream.statistics(src, sample_size=100, seed=0)
    np.testing.assert_allclose(st.mean, X.mean(0), rtol=1e-12)
    np.testing.assert_allclose(st.std, X.std(0), rtol=1e-12)
    cls, cnt = np.unique(y, return_counts=True)
    np.testing.assert_array_equal(st.classes, cls)
    np.testing.assert_array_equal(st.class_counts, cnt)
    assert st.X_sample.shape == (100, 3)
    # the sample is made of real rows with their labels, without repetition
    hits = [np.flatnonzero((X == r).all(1)) for r in st.X_sample]
    assert all(len(h) == 1 for h in hits)
    np.testing.assert_array_equal(y[[h[0] for h in hits]], st.y_sample)
    assert len({h[0] for h in hits}) == 100
    Xs, _ = stream.standardized(src)[0].read(0)
    np.testing.assert_allclose(Xs, ((X - X.mean(0)) / X.std(0))[:64], rtol=1e-10, atol=1e-12)


def test_bottom_k_sample_is_uniform_over_blocks():
    """Each of 10 blocks of 100 rows should supply ~1/10 of a 200-row sample: over 200 seeds the
    mean share of block 0 is 0.1 ± 3·sd (sd of a hypergeometric share ≈ 0.019/√200)."""
    src = stream.NpySource(np.arange(1000.0)[:, None], np.zeros(1000), block_rows=100)
    shares = [np.mean(stream.statistics(src, sample_size=200, seed=s).X_sample[:, 0] < 100) for s in range(200)]
    assert abs(np.mean(shares) - 0.1) < 3 * 0.0195 / np.sqrt(200)


def _clf(method="vi", **kw):
    kw = {"max_iter": 12, "batch_size": 32, **kw}
    return GPClassifier(method=method, n_inducing=6, learning_rate=0.05, random_state=0, inducing_params={"init": "random"}, **kw)


@pytest.mark.parametrize("method", ["vi", "sep", "apep", "arpep", "rpapep"])
def test_fit_from_parquet_and_npy_agree_and_learn(tmp_path, method):
    X, y = _data(n=400)
    path = _write(tmp_path, X, y, rows=64)
    np.save(tmp_path / "X.npy", X)
    a = _clf(method).fit(stream.ParquetSource(path, target="label"))
    b = _clf(method).fit(str(tmp_path / "X.npy"), y)                    # one block of 400 rows
    c = _clf(method).fit(stream.NpySource(X, y, block_rows=64))          # the Parquet file's blocks
    for k, v in a.model_.state_dict().items():                           # same blocks: same minibatches
        torch.testing.assert_close(c.model_.state_dict()[k], v, rtol=0, atol=0)
    assert b.n_iter_ == 12 and np.isfinite(b.history_["objective"]).all()
    np.testing.assert_array_equal(a.classes_, np.unique(y))
    assert a.n_iter_ == 12
    proba = a.predict_proba(X)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-12)


def test_streamed_fit_learns(tmp_path):
    X, y = _data(n=600, seed=1)
    clf = GPClassifier(method="sep", n_inducing=10, batch_size=50, n_epochs=6, learning_rate=0.05,
                       random_state=0).fit(stream.standardized(stream.NpySource(X, y, block_rows=100))[0])
    st = stream.statistics(stream.NpySource(X, y))
    err = np.mean(clf.predict((X - st.mean) / st.std) != y)
    assert err < 0.15, err          # the classes are (almost) separable by two thresholds


@pytest.mark.parametrize("method", ["vi", "sep"])
def test_streamed_warm_start_continues_the_previous_fit(method):
    X, y = _data(n=400)
    clf = GPClassifier(method=method, n_inducing=6, batch_size=50, max_iter=15, learning_rate=0.05,
                       warm_start=True, random_state=0).fit(stream.NpySource(X, y, block_rows=100))
    before = {k: v.clone() for k, v in clf.model_.state_dict().items()}
    state = clf.state_
    # zero further steps: a warm fit leaves the model as it was (a cold one re-initialises Z and the kernel)
    clf.set_params(max_iter=0).fit(stream.NpySource(X, y, block_rows=100))
    for k, v in clf.model_.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
    if method == "sep":
        # the tied site is n_l copies of one average site: on the first 200 rows it becomes n'_l copies
        torch.testing.assert_close(clf.state_.Lam, state.Lam)
        old_counts = state.counts.clone()
        clf.fit(stream.NpySource(X[:200], y[:200], block_rows=100))
        scale = clf.state_.counts / old_counts
        assert (scale < 0.75).all()
        torch.testing.assert_close(clf.state_.Lam, state.Lam * scale[:, None, None])
    cold = GPClassifier(method=method, n_inducing=6, batch_size=50, max_iter=0,
                        random_state=0).fit(stream.NpySource(X, y, block_rows=100))
    assert not torch.equal(cold.model_.Z, before["Z"])


def test_a_streamed_fit_forgets_what_an_earlier_in_memory_fit_recorded(tmp_path):
    X, y = _data(n=120)
    est = GPClassifier(method="ep", n_inducing=5, max_iter=2, random_state=0).fit(X, y)
    assert est._row_keys_ is not None
    est.set_params(method="sep", batch_size=40).fit(stream.NpySource(X, y, block_rows=40))
    assert est._row_keys_ is None
    est.save(tmp_path / "m.pt")
    assert "row_keys" not in torch.load(tmp_path / "m.pt", weights_only=True)


def test_streamed_fit_starts_from_the_in_memory_length_scales():
    # as for arrays (estimator.initial_lengthscales): a rarely lit feature is floored at its largest deviation
    # / 20 (√D·std alone would isolate the row that lights it), a constant one gets √D (not 0)
    X, y = _data(n=1000)
    X[:, 1] = 4.0
    X[:, 2] = 0.0
    X[7, 2] = 1.0                                   # std 0.032, largest deviation 0.999: the floor binds
    clf = GPClassifier(method="vi", n_inducing=5, batch_size=50, max_iter=0,
                       random_state=0).fit(stream.NpySource(X, y, block_rows=250))
    ls = clf.model_.kernel.lengthscale.detach()[0].numpy()
    np.testing.assert_allclose(ls, initial_lengthscales(X, X.std(0)), rtol=1e-10)
    np.testing.assert_allclose(ls[1:], [3 ** 0.5, 3 ** 0.5 * 0.999 / 20], rtol=1e-10)


def test_predict_from_a_source_equals_predict_on_arrays(tmp_path):
    X, y = _data(n=300)
    clf = _clf().fit(X, y)
    np.save(tmp_path / "X.npy", X)
    lp = clf.predict_log_proba(X)
    np.testing.assert_allclose(clf.predict_log_proba(str(tmp_path / "X.npy")), lp, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(clf.predict_log_proba(stream.ParquetSource(_write(tmp_path, X, y), "label")), lp,
                               rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="feature column"):
        clf.predict_log_proba(str(_write(tmp_path, X, y)))           # the label column is not a feature


def test_streamed_checkpoint_resume_is_exact(tmp_path):
    X, y = _data(n=300)
    src = stream.NpySource(X, y, block_rows=50)
    ck = str(tmp_path / "ck.pt")
    full = _clf("sep", max_iter=20).fit(src)
    _clf("sep", max_iter=13).fit(src, checkpoint_path=ck, checkpoint_every=13)      # 13: mid-epoch
    resumed = _clf("sep", max_iter=20).fit(src, checkpoint_path=ck, checkpoint_every=0, resume=True)
    for k, v in full.model_.state_dict().items():
        torch.testing.assert_close(resumed.model_.state_dict()[k], v, rtol=0, atol=0)
    torch.testing.assert_close(resumed.state_.Lam, full.state_.Lam, rtol=0, atol=0)
    assert resumed.history_["objective"] == full.history_["objective"]
    # the position counts batches: under another batch size the epoch would skip or repeat rows
    from sgpc.persist import CheckpointError
    with pytest.raises(CheckpointError, match="batch_size=32, this fit uses 20"):
        _clf("sep", max_iter=20, batch_size=20).fit(src, checkpoint_path=ck, resume=True)


def test_streaming_errors(tmp_path):
    X, y = _data(n=100)
    src = stream.NpySource(X, y)
    with pytest.raises(ValueError, match="per-point state"):
        _clf("ep").fit(src)
    with pytest.raises(ValueError, match="batch_size"):         # the default "auto" streams in minibatches of 256
        GPClassifier(method="vi", batch_size=None).fit(src)
    with pytest.raises(ValueError, match="carries its labels"):
        _clf().fit(src, y)
    with pytest.raises(ValueError, match=".npy"):
        _clf().fit(str(tmp_path / "X.csv"), y)
    with pytest.raises(ValueError, match="no labels"):
        _clf().fit(stream.NpySource(X))
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"a": ["u", "v"], "label": [0, 1]}), tmp_path / "s.parquet")
    with pytest.raises(ValueError, match="not numeric"):
        stream.ParquetSource(tmp_path / "s.parquet", target="label")
    pq.write_table(pa.table({"a": np.linspace(0, 1, 8), "label": ["u", "v"] * 4}), tmp_path / "t.parquet")
    with pytest.raises(ValueError, match=r"if 'label' is the label, name it: ParquetSource\(path, target='label'\)"):
        _clf().fit(tmp_path / "t.parquet", "label").predict_proba(str(tmp_path / "t.parquet"))
    with pytest.raises(ValueError, match="no label column"):
        stream.ParquetSource(tmp_path / "s.parquet", target="zzz")
    # a missing label is an error, not a class: as strings it became "None", as integers a bare KeyError
    for labels in (["a", None, "b", "a"], [0, None, 1, 0]):
        pq.write_table(pa.table({"x": [0.1, 0.2, 0.3, 0.4], "label": labels}), tmp_path / "n.parquet")
        src = stream.ParquetSource(tmp_path / "n.parquet", target="label")
        with pytest.raises(ValueError, match="label column 'label' has 1 missing value"):
            src.read(0)
        with pytest.raises(ValueError, match="missing value"):
            _clf().fit(src)


def test_streamed_labels_are_checked_as_for_arrays(tmp_path):
    X, _ = _data(n=60)
    # a NaN label: each NaN was its own dict key and the class count lookup raised a bare KeyError
    y = np.where(X[:, 0] > 0, 1.0, 0.0)
    y[7] = np.nan
    with pytest.raises(ValueError, match="non-finite value nan in row 7 .block 0."):
        stream.statistics(stream.NpySource(X, y, block_rows=16))
    with pytest.raises(ValueError, match="non-finite"):
        _clf().fit(stream.NpySource(X, y, block_rows=16))
    # a continuous label column (e.g. the last column picked by default) is refused as for arrays,
    # instead of becoming one class per distinct value
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        _clf().fit(stream.NpySource(X, X[:, 1].copy()))
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        _clf().fit(X, X[:, 1])
    # a list is an array-like like any other
    src = stream.NpySource(X.tolist(), (X[:, 0] > 0).astype(int).tolist())
    assert (src.n_rows, src.n_features) == X.shape
    with pytest.raises(ValueError, match="must be 2-D"):
        stream.NpySource([1.0, 2.0])
    # the label is not also a feature
    path = _write(tmp_path, X, np.where(X[:, 0] > 0, "a", "b"))
    with pytest.raises(ValueError, match="also listed as a feature"):
        stream.ParquetSource(path, "label", features=["x0", "label"])


def test_streamed_string_labels_are_stripped_as_load_file_strips_them(tmp_path):
    # " a" and "a " were two classes when streamed but one in load_file: the streamed labels of a file
    # were not the classes of a model fitted on the same file in memory
    import pyarrow as pa
    import pyarrow.parquet as pq
    from sgpc import datasets
    path = tmp_path / "spaces.parquet"
    pq.write_table(pa.table({"x": [1.0, 2.0, 3.0], "label": ["a ", " a", "b"]}), path)
    y = stream.ParquetSource(path, "label").read(0)[1]
    np.testing.assert_array_equal(y, datasets.load_file(path, target="label").y)
    assert y.tolist() == ["a", "a", "b"]


def test_a_pickled_npy_source_carries_paths_not_rows(tmp_path):
    import pickle
    X, y = _data(n=5000)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    src = stream.NpySource(tmp_path / "X.npy", tmp_path / "y.npy", block_rows=512)
    blob = pickle.dumps(src)
    assert len(blob) < 2000 < X.nbytes             # before, the map was pickled with all its rows
    back = pickle.loads(blob)
    assert isinstance(back.X, np.memmap) and back.block_sizes == src.block_sizes
    np.testing.assert_array_equal(back.read(3)[0], src.read(3)[0])
    np.testing.assert_array_equal(back.read(3)[1], src.read(3)[1])
    arr = pickle.loads(pickle.dumps(stream.NpySource(X, y)))        # arrays travel as arrays
    np.testing.assert_array_equal(arr.read(0)[0], X)


def test_cli_fit_stream_and_predict(tmp_path, capsys):
    from sgpc import cli
    X, y = _data(n=300)
    path = _write(tmp_path, X, y, rows=64)
    model = str(tmp_path / "m.pt")
    assert cli.main(["fit", str(path), "--stream", "--batch-size", "32", "--max-iter", "5", "--n-inducing", "4",
                     "--method", "sep", "-o", model]) == 0
    assert "streaming" in capsys.readouterr().out
    np.save(tmp_path / "X.npy", X)
    feats = tmp_path / "X.csv"
    np.savetxt(feats, X, delimiter=",", header="x0,x1,x2", comments="")
    assert cli.main(["predict", model, str(feats), "-o", str(tmp_path / "p.csv")]) == 0
    P = np.loadtxt(tmp_path / "p.csv", delimiter=",", skiprows=1, usecols=(1, 2, 3))  # 0: the predicted label
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=1e-9)
    assert cli.main(["fit", str(path), "--stream", "--method", "ep", "--batch-size", "32", "-o", model]) == 2
    assert "per-point state" in capsys.readouterr().err


def test_a_nan_in_a_streamed_prediction_is_reported_at_its_row_in_the_file():
    # the row was counted from the start of its block (row 37 with 16-row blocks was reported as 5)
    X, y = _data(n=100)
    clf = _clf().fit(X, y)
    Xp = X[:50].copy()
    Xp[37, 1] = np.nan
    with pytest.raises(ValueError, match=r"1 row\(s\), first: 37;"):
        clf.predict(stream.NpySource(Xp, block_rows=16))


def test_a_parquet_text_label_column_has_the_same_classes_in_memory_and_streamed(tmp_path):
    # "1"/"2"/"3" as a string column: in memory they became int64 1, 2, 3, streamed they stay text,
    # so a model fitted one way predicted labels that never equal the other way's (accuracy 0)
    from sgpc import datasets
    X, y = _data(n=90)
    y = np.array([{"a": "1", "b": "2", "c": "3"}[v] for v in y])
    path = _write(tmp_path, X, y, rows=30)
    ds = datasets.load_file(path, target="label")
    streamed = stream.statistics(stream.ParquetSource(path, target="label"))
    assert ds.y.dtype.kind == "U" and streamed.classes.dtype.kind == "U"
    np.testing.assert_array_equal(np.unique(ds.y), streamed.classes)
    clf = _clf().fit(path, "label")
    assert np.mean(clf.predict(ds.X) == ds.y) > 0.8
