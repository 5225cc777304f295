"""Out-of-core data: minibatches streamed from Parquet files and NumPy memory maps, shuffled by blocks.

A *source* is anything with
    ``n_rows`` (int), ``n_features`` (int), ``block_sizes`` (list of rows per block) and
    ``read(block) -> (X [n,D] float64, y [n])``,
where a block is the unit read at once (a Parquet row group, a row range of a memory map). Only
the blocks being consumed are in memory, so training memory is O(k·block + B·D) whatever N is.

Shuffling by blocks (``Minibatches``): each epoch draws a random order of the blocks from the fit's
``torch.Generator``, reads them k at a time (a *window* of ``buffer_blocks`` blocks), permutes the
rows inside the window, and cuts consecutive minibatches of B rows from the concatenation of the
permuted windows (a batch may straddle two windows; the epoch's last incomplete batch is dropped,
as in ``train._IndexStream``). A row's position is random within its window, not within the data set —
the usual compromise of out-of-core SGD; write row groups in random order (or of mixed content)
when the file is sorted by something the label depends on.

The iterator's position is two numbers: the generator state at the start of the epoch and the
number of batches already produced in it. ``state_dict``/``load_state_dict`` save and restore it;
a restored stream replays the epoch's random draws without reading the skipped windows, so a
resumed fit sees exactly the batches an uninterrupted one would have.

``statistics`` makes one streaming pass for what a fit needs up front: N, the class labels and their
counts, per-feature mean and standard deviation (Chan et al.'s pairwise merge of block moments,
float64), and a uniform random sample of at most ``sample_size`` rows (bottom-k of random keys) for
the k-means initialisation of the inducing inputs. ``Standardized`` applies (x − mean)/std on the fly;
``LabelEncoded`` maps labels to 0 … C−1.

What this module does not do: any model computation, or engines with per-point state (ep, pep,
gfitc index every data point and need the data in memory).
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["ParquetSource", "NpySource", "Standardized", "LabelEncoded", "Minibatches", "Statistics",
           "statistics", "standardized", "is_source", "iter_rows", "write_parquet"]


def is_source(obj) -> bool:
    """True for objects that follow the source protocol (``n_rows``, ``block_sizes``, ``read``)."""
    return all(hasattr(obj, a) for a in ("n_rows", "n_features", "block_sizes", "read"))


class ParquetSource:
    """Rows of a Parquet file, one block per row group, read with pyarrow.

    Args:
        path: the .parquet file.
        target: the label column, or None for an unlabelled file (prediction).
        features: feature columns (default: every column but ``target``); all must be numeric.
    """

    def __init__(self, path: str | os.PathLike, target: str | None, features: list[str] | None = None):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ImportError("streaming Parquet files needs pyarrow: pip install sgpc[parquet]") from None
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"{self.path} not found")
        self._file = pq.ParquetFile(self.path)
        names = self._file.schema_arrow.names
        if target is not None and target not in names:
            raise ValueError(f"{self.path}: no label column {target!r}; columns: {names}")
        self.target = target
        self.features = [c for c in names if c != target] if features is None else list(features)
        if target is not None and target in self.features:
            raise ValueError(f"{self.path}: the label column {target!r} is also listed as a feature")
        missing = [c for c in self.features if c not in names]
        if missing:
            raise ValueError(f"{self.path}: no feature column(s) {missing}; columns: {names}")
        if not self.features:
            raise ValueError(f"{self.path}: no feature columns")
        schema = self._file.schema_arrow
        import pyarrow.types as pt
        bad = [c for c in self.features if not (pt.is_integer(schema.field(c).type) or pt.is_floating(schema.field(c).type)
                                               or pt.is_boolean(schema.field(c).type) or pt.is_decimal(schema.field(c).type))]
        if bad:
            hint = (f"; if {bad[0]!r} is the label, name it: ParquetSource(path, target={bad[0]!r})"
                    if target is None else "")
            raise ValueError(f"{self.path}: feature column(s) {bad} are not numeric; encode them as numbers first{hint}")
        meta = self._file.metadata
        self.block_sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        self.n_rows = int(sum(self.block_sizes))
        self.n_features = len(self.features)

    def read(self, block: int):
        """Row group ``block``: (X [n,D] float64, y [n] or None)."""
        import pyarrow as pa

        cols = self.features + ([self.target] if self.target is not None else [])
        t = self._file.read_row_group(block, columns=cols)
        X = np.empty((t.num_rows, self.n_features), dtype=np.float64)
        for j, c in enumerate(self.features):
            col = t.column(c)
            if col.null_count:
                raise ValueError(f"{self.path}: column {c!r} has missing values in row group {block}")
            X[:, j] = col.cast(pa.float64()).to_numpy() if pa.types.is_decimal(col.type) else col.to_numpy()
        if self.target is None:
            return X, None
        label = t.column(self.target)
        if label.null_count:      # as strings a null would become a class named "None"
            raise ValueError(f"{self.path}: label column {self.target!r} has {label.null_count} missing value(s) "
                             f"in row group {block}")
        y = label.to_numpy()               # a ChunkedArray: always a copy (no zero_copy_only before pyarrow 13)
        # string labels as a fixed-width array, not Python objects: a kept sample of object labels
        # would pin the interpreter's memory arenas of every block it came from; stripped, as
        # tabular.load_file strips them, so that " a" and "a" are one class either way
        if y.dtype == bool:           # as tabular.load_file reads it: classes 0 and 1, not False and True
            return X, y.astype(np.int64)
        return X, np.char.strip(y.astype(str)) if y.dtype == object else y

    def __getstate__(self):          # ParquetFile holds an open handle: re-open after unpickling
        return {"path": self.path, "target": self.target, "features": self.features}

    def __setstate__(self, d):
        self.__init__(d["path"], d["target"], d["features"])


class NpySource:
    """Rows of .npy files (or arrays) read through NumPy memory maps, in blocks of ``block_rows`` rows.

    Args:
        X: path of an [N,D] .npy file (opened with ``mmap_mode="r"``) or an array / memmap.
        y: path or array of [N] labels, or None (prediction).
        block_rows: rows per block.
    """

    def __init__(self, X, y=None, block_rows: int = 65536):
        self._paths = (X if isinstance(X, (str, os.PathLike)) else None,
                       y if isinstance(y, (str, os.PathLike)) else None)
        self.X = np.load(X, mmap_mode="r") if self._paths[0] is not None else _array(X, "X")
        self.y = None if y is None else np.load(y, mmap_mode="r") if self._paths[1] is not None else _array(y, "y")
        if self.X.ndim != 2:
            raise ValueError(f"X must be 2-D [N,D], got shape {self.X.shape}")
        if self.y is not None and self.y.shape != (self.X.shape[0],):
            raise ValueError(f"y must have shape ({self.X.shape[0]},), got {self.y.shape}")
        if not (isinstance(block_rows, (int, np.integer)) and block_rows >= 1):
            raise ValueError(f"block_rows must be a positive integer, got {block_rows!r}")
        self.n_rows, self.n_features = map(int, self.X.shape)
        self.block_rows = int(block_rows)
        full, rest = divmod(self.n_rows, self.block_rows)
        self.block_sizes = [self.block_rows] * full + ([rest] if rest else [])

    def __getstate__(self):
        # a memory-mapped file travels as its path, or as the file and layout of a map the caller opened
        # (pickling the map copies every row into the pickle, and into each process of a data-parallel
        # fit); arrays travel as they are
        X = self._paths[0] if self._paths[0] is not None else _map_or_array(self.X)
        y = self._paths[1] if self._paths[1] is not None else _map_or_array(self.y)
        return {"X": X, "y": y, "block_rows": self.block_rows}

    def __setstate__(self, d):
        X, y = (np.memmap(v[1], dtype=v[2], mode="r", offset=v[3], shape=v[4], order=v[5])
                if isinstance(v, tuple) and v and v[0] == "memmap" else v for v in (d["X"], d["y"]))
        self.__init__(X, y, d["block_rows"])

    def read(self, block: int):
        """Rows [block·block_rows, …) as (X [n,D] float64, y [n] or None); copies only this block."""
        a = block * self.block_rows
        b = a + self.block_sizes[block]
        X = np.asarray(self.X[a:b], dtype=np.float64)
        return X, None if self.y is None else np.asarray(self.y[a:b])


def _map_or_array(a):
    """A read-only or read-write memmap over a whole file region as ("memmap", file, dtype, offset, shape,
    order) — reopened read-only by ``NpySource.__setstate__`` — else the array itself."""
    # a slice's base is its parent, not the map; a copy-on-write map ("c") may hold edits the file lacks
    if isinstance(a, np.memmap) and getattr(a, "filename", None) and isinstance(a.base, mmap.mmap) \
            and getattr(a, "mode", None) in ("r", "r+") and (a.flags.c_contiguous or a.flags.f_contiguous):
        return ("memmap", a.filename, a.dtype.str, int(a.offset), a.shape, "C" if a.flags.c_contiguous else "F")
    return a


def _array(a, name: str) -> np.ndarray:
    """An array-like as an array (a memmap stays a memmap)."""
    if isinstance(a, np.ndarray):
        return a
    try:
        return np.asarray(a)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a .npy path or an array, got {type(a).__name__}: {exc}") from None


class Standardized:
    """A source whose features are (x − mean) / std; mean and std [D] as from ``statistics``."""

    def __init__(self, source, mean: np.ndarray, std: np.ndarray):
        self.source, self.mean, self.std = source, np.asarray(mean, np.float64), np.asarray(std, np.float64)
        if self.mean.shape != (source.n_features,) or self.std.shape != (source.n_features,):
            raise ValueError(f"mean and std must have shape ({source.n_features},)")
        if not (self.std > 0).all():
            raise ValueError("std must be positive")
        self.n_rows, self.n_features, self.block_sizes = source.n_rows, source.n_features, source.block_sizes

    def read(self, block: int):
        """The source's block, standardised."""
        X, y = self.source.read(block)
        return (X - self.mean) / self.std, y


class LabelEncoded:
    """A source whose labels are the indices 0 … C−1 of ``classes`` (sorted, as ``np.unique`` gives)."""

    def __init__(self, source, classes: np.ndarray):
        self.source, self.classes = source, np.asarray(classes)
        self.n_rows, self.n_features, self.block_sizes = source.n_rows, source.n_features, source.block_sizes

    def read(self, block: int):
        """The source's block with labels as int64 codes; unknown labels raise ValueError."""
        X, y = self.source.read(block)
        if y is None:
            raise ValueError("the source has no labels (target=None); training needs them")
        y = np.asarray(y)
        code = np.clip(np.searchsorted(self.classes, y), 0, len(self.classes) - 1)
        unknown = self.classes[code] != y
        if unknown.any():
            raise ValueError(f"labels {np.unique(y[unknown])[:5].tolist()} are not among the classes "
                             f"{self.classes.tolist()}")
        return X, code.astype(np.int64)


@dataclass(frozen=True)
class Statistics:
    """What one streaming pass learns: n_rows, mean [D], std [D] (1 where a feature is constant),
    classes [C] (sorted), class_counts [C], and a uniform sample X_sample [S,D], y_sample [S]."""

    n_rows: int
    mean: np.ndarray
    std: np.ndarray
    classes: np.ndarray | None
    class_counts: np.ndarray | None
    X_sample: np.ndarray
    y_sample: np.ndarray | None


def statistics(source, sample_size: int = 20000, seed: int = 0) -> Statistics:
    """One pass over the blocks in file order: moments, classes and a random sample (see module doc).

    Moments: for blocks A, B with counts n_A, n_B, means μ_A, μ_B and sums of squared deviations
    S_A, S_B, the union has μ = μ_A + δ n_B/n, S = S_A + S_B + δ² n_A n_B / n with δ = μ_B − μ_A
    (Chan, Golub & LeVeque 1979) — stable where Σx² − nμ² is not. std = sqrt(S / n) (population, as
    ``datasets.standardize``), replaced by 1 for a constant feature.
    Sample: every row gets a uniform key; the rows with the ``sample_size`` smallest keys form a
    uniform sample without replacement (bottom-k sampling), kept in a buffer of that size.
    """
    if sample_size < 1:
        raise ValueError(f"sample_size must be >= 1, got {sample_size}")
    rng = np.random.default_rng(seed)
    D = source.n_features
    n, mean, S = 0, np.zeros(D), np.zeros(D)
    labels: dict = {}
    keys, Xs, ys = np.empty(0), np.empty((0, D)), None
    for b in range(len(source.block_sizes)):
        X, y = source.read(b)
        if not np.isfinite(X).all():
            raise ValueError(f"block {b} of the source contains NaN or infinity; impute or drop those rows")
        nb = X.shape[0]
        if nb == 0:
            continue
        mb = X.mean(0)
        Sb = ((X - mb) ** 2).sum(0)
        delta = mb - mean
        tot = n + nb
        mean = mean + delta * nb / tot
        S = S + Sb + delta ** 2 * n * nb / tot
        n = tot
        if y is not None:
            y = np.asarray(y)
            if y.dtype.kind == "f" and not np.isfinite(y).all():
                bad = int(np.argmax(~np.isfinite(y)))
                raise ValueError(f"the labels have the non-finite value {float(y[bad])!r} in row {n - nb + bad} "
                                 f"(block {b}); every row needs a class label")
            u, c = np.unique(y, return_counts=True)
            for a, k in zip(u.tolist(), c.tolist()):
                labels[a] = labels.get(a, 0) + k
        kb = rng.random(nb)
        keys = np.concatenate([keys, kb])
        Xs = np.concatenate([Xs, X])
        ys = None if y is None else (np.asarray(y) if ys is None else np.concatenate([ys, np.asarray(y)]))
        if len(keys) > sample_size:
            keep = np.argpartition(keys, sample_size - 1)[:sample_size]
            keys, Xs = keys[keep], Xs[keep]
            ys = None if ys is None else ys[keep]
    if n == 0:
        raise ValueError("the source has no rows")
    std = np.sqrt(S / n)
    std = np.where(std > 1e-12 * np.maximum(1.0, np.abs(mean)), std, 1.0)
    classes = counts = None
    if labels:
        classes = np.unique(np.asarray(list(labels)))
        counts = np.array([labels[c.item() if hasattr(c, "item") else c] for c in classes], dtype=np.int64)
    return Statistics(n, mean, std, classes, counts, Xs, ys)


def standardized(source, seed: int = 0) -> tuple[Standardized, Statistics]:
    """The source standardised with statistics from one streaming pass, and those statistics."""
    st = statistics(source, seed=seed)
    return Standardized(source, st.mean, st.std), st


class Minibatches:
    """Endless block-shuffled minibatches of ``batch_size`` rows from a source (see module doc).

    Args:
        source: a source (``is_source``); batch_size: B (clamped to N);
        generator: the fit's ``torch.Generator`` (block orders and in-window permutations);
        buffer_blocks: k, blocks shuffled together.
    Yields (X [B,D] float64, y [B]) NumPy arrays.
    """

    def __init__(self, source, batch_size: int, generator: torch.Generator, buffer_blocks: int = 4):
        if not is_source(source):
            raise TypeError(f"{type(source).__name__} is not a source (needs n_rows, n_features, block_sizes, read)")
        if batch_size is None or batch_size < 1:
            raise ValueError("streaming needs a minibatch size (batch_size >= 1)")
        if buffer_blocks < 1:
            raise ValueError(f"buffer_blocks must be >= 1, got {buffer_blocks}")
        if source.n_rows < 1:
            raise ValueError("the source has no rows")
        self.source, self.generator = source, generator
        self.batch_size = min(int(batch_size), source.n_rows)
        self.buffer_blocks = int(buffer_blocks)
        self._epoch_rng = generator.get_state()
        self._batch = 0
        self._it = None

    def state_dict(self) -> dict:
        """Position: generator state at the start of the current epoch and batches produced in it, with
        what gives those draws their rows (batch size, block sizes, blocks per window)."""
        return {"epoch_rng": self._epoch_rng.clone(), "batch": int(self._batch), "batch_size": self.batch_size,
                "block_sizes": list(map(int, self.source.block_sizes)), "buffer_blocks": self.buffer_blocks}

    def load_state_dict(self, d: dict) -> None:
        """Continue from a ``state_dict``: the next batch is the one that followed it. The position counts
        batches of block-shuffled windows, so it holds only for the batch size, block layout (row groups,
        ``block_rows``) and ``buffer_blocks`` it was written with: anything else is a ValueError (the
        resumed epoch repeated a quarter of its rows and skipped as many)."""
        if d.get("batch_size", self.batch_size) != self.batch_size:
            raise ValueError(f"the stream position was saved with batch_size={d['batch_size']}, this fit uses "
                             f"{self.batch_size}: the epoch would skip or repeat rows; resume with the same batch_size")
        sizes = list(map(int, self.source.block_sizes))
        if "block_sizes" in d and list(d["block_sizes"]) != sizes:   # positions written before it was saved lack it
            raise ValueError(f"the stream position was saved for {len(d['block_sizes'])} blocks of sizes "
                             f"{_sizes_text(d['block_sizes'])}, this source has {len(sizes)} of {_sizes_text(sizes)}: "
                             "the epoch would skip or repeat rows; resume on the same file (row groups) or block_rows")
        if d.get("buffer_blocks", self.buffer_blocks) != self.buffer_blocks:
            raise ValueError(f"the stream position was saved with buffer_blocks={d['buffer_blocks']}, this fit uses "
                             f"{self.buffer_blocks}: the epoch would skip or repeat rows; resume with the same value")
        self.generator.set_state(d["epoch_rng"])
        self._it = self._epoch(int(d["batch"]))

    def __iter__(self):
        return self

    def __next__(self):
        if self._it is None:
            self._it = self._epoch(0)
        while True:
            try:
                return next(self._it)
            except StopIteration:
                self._it = self._epoch(0)

    def _epoch(self, skip: int):
        """One epoch's batches, the first ``skip`` of them drawn but not read."""
        gen, B, sizes = self.generator, self.batch_size, self.source.block_sizes
        self._epoch_rng, self._batch = gen.get_state(), skip
        order = torch.randperm(len(sizes), generator=gen).tolist()
        first, pos = skip * B, 0            # rows of the epoch's order before `first` are skipped
        bufX, bufy = [], []
        for w in range(0, len(order), self.buffer_blocks):
            blocks = order[w:w + self.buffer_blocks]
            n_w = sum(sizes[b] for b in blocks)
            perm = torch.randperm(n_w, generator=gen).numpy()
            if pos + n_w <= first:
                pos += n_w
                continue
            parts = [self.source.read(b) for b in blocks]
            Xw = np.concatenate([p[0] for p in parts])[perm]
            yw = np.concatenate([p[1] for p in parts])[perm]
            cut = max(first - pos, 0)
            pos += n_w
            bufX.append(Xw[cut:])
            bufy.append(yw[cut:])
            have = sum(len(a) for a in bufX)
            if have < B:
                continue
            Xc, yc = np.concatenate(bufX), np.concatenate(bufy)
            start = 0
            while have - start >= B:
                self._batch += 1
                yield Xc[start:start + B], yc[start:start + B]
                start += B
            bufX, bufy = [Xc[start:]], [yc[start:]]


def _sizes_text(sizes) -> str:
    """Block sizes for a message: the distinct sizes, e.g. '40 (×5), 3'."""
    u, c = np.unique(np.asarray(sizes), return_counts=True)
    return ", ".join(f"{int(a)} (×{int(k)})" if k > 1 else f"{int(a)}" for a, k in zip(u[::-1], c[::-1]))


def iter_rows(source, batch_size: int = 65536):
    """The source's rows in file order, in chunks of at most ``batch_size`` rows: (X [n,D], y [n] or None)."""
    for b in range(len(source.block_sizes)):
        X, y = source.read(b)
        for a in range(0, X.shape[0], batch_size):
            yield X[a:a + batch_size], None if y is None else y[a:a + batch_size]


def write_parquet(path: str | os.PathLike, chunks, names: list[str], target: str | None = "y",
                  row_group_size: int = 65536) -> int:
    """Write (X [n,D], y [n]) chunks to a Parquet file without holding more than one chunk; returns N.

    Columns ``names`` (float64) and ``target`` (the labels as given). Each chunk becomes row groups of
    at most ``row_group_size`` rows (the blocks of a ``ParquetSource`` reading the file back), so
    chunks of exactly that size give equal blocks.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer, n = None, 0
    try:
        for X, y in chunks:
            cols = {name: X[:, j] for j, name in enumerate(names)}
            if target is not None:
                cols[target] = y
            table = pa.table(cols)
            if writer is None:
                writer = pq.ParquetWriter(os.fspath(path), table.schema)
            writer.write_table(table, row_group_size=row_group_size)
            n += X.shape[0]
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        raise ValueError("no rows to write")
    return n


def as_source(X, y=None, *, labelled: bool = True):
    """A ``stream`` source from a source, a .parquet path or a .npy path (see ``fit``)."""
    if is_source(X):
        if y is not None:
            raise ValueError("a stream source carries its labels: pass y=None")
        return X
    path = os.fspath(X)
    if path.endswith((".parquet", ".pq")):
        if y is None and labelled:
            import pyarrow.parquet as pq
            y = pq.ParquetFile(path).schema_arrow.names[-1]
        if y is not None and not isinstance(y, str):
            raise ValueError(f"for a Parquet file, y is the label column's name, got {type(y).__name__}")
        return ParquetSource(path, target=y)
    if path.endswith(".npy"):
        if y is None and labelled:
            raise ValueError(f"{path}: pass the labels as y (a .npy path or an array)")
        return NpySource(path, y)
    raise ValueError(f"{path}: streaming reads .parquet/.pq and .npy files; load other formats with "
                     "sgpc.datasets.load_file")
