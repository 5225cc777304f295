"""Derived-feature Parquet files of flights-3m for the scale benchmarks, written without loading the data set.

The features and labels are those of ``sgpc.datasets`` (``_load_flights_3m``): month, day of month,
day of week (0 = Monday), departure time in hours, distance, origin and destination as codes in one
shared airport table sorted by IATA code; labels from ``datasets._delay_classes`` ("late" > 5 min,
"early" < −5 min, else "on-time"). The file's row order is kept; the last 10 000 rows are the test set.

Pass 1 collects the airport table from the origin/destination columns (row group by row group);
pass 2 derives the features of each row group and writes them in row groups of 65 536 rows.
``check`` compares the first rows with ``datasets.load("flights-3m")`` (which loads everything).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sgpc import datasets, stream

NAMES = ["month", "day_of_month", "day_of_week", "dep_time_hours", "distance", "origin", "destination"]
N_TEST = 10_000
ROW_GROUP = 65_536


def _flights_path() -> Path:
    return Path(datasets.data_dir()) / "flights" / "flights-3m.parquet"


def _row_groups(path):
    import pyarrow.parquet as pq
    f = pq.ParquetFile(path)
    for i in range(f.num_row_groups):
        yield f.read_row_group(i)


def _features(table, airports):
    import pyarrow as pa
    import pyarrow.compute as pc
    date = table["date"]
    hours = pc.add(pc.hour(date), pc.divide(pc.cast(pc.minute(date), pa.float64()), 60.0))
    cols = [pc.month(date), pc.day(date), pc.day_of_week(date), hours, table["distance"]]
    cols = [np.asarray(c.to_numpy(), dtype=np.float64) for c in cols]
    for c in ("origin", "destination"):
        cols.append(np.searchsorted(airports, np.asarray(table[c].to_numpy(), dtype=str)).astype(np.float64))
    return np.stack(cols, 1), datasets._delay_classes(table["delay"].to_numpy())


def write_derived(out_dir: str | os.PathLike, n_train: list[int]) -> dict:
    """Write test.parquet (last 10 000 rows) and train_<N>.parquet (first N rows) for each N; returns paths."""
    src = _flights_path()
    airports = np.unique(np.concatenate([np.unique(np.concatenate([
        np.asarray(t["origin"].to_numpy(), dtype=str), np.asarray(t["destination"].to_numpy(), dtype=str)]))
        for t in _row_groups(src)]))
    import pyarrow.parquet as pq
    total = pq.ParquetFile(src).metadata.num_rows
    n_trainable = total - N_TEST
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"test": out_dir / "test.parquet", **{n: out_dir / f"train_{n}.parquet" for n in n_train}}
    if all(p.exists() for p in paths.values()):
        return paths
    for n in n_train:
        if n > n_trainable:
            raise ValueError(f"N={n} exceeds the {n_trainable} training rows")

    def chunks(lo, hi):      # rows [lo, hi) of the derived table, in ROW_GROUP pieces
        start = 0
        pend_X, pend_y = [], []
        for t in _row_groups(src):
            a, b = max(lo - start, 0), min(hi - start, t.num_rows)
            start += t.num_rows
            if a >= b:
                continue
            X, y = _features(t.slice(a, b - a), airports)
            pend_X.append(X)
            pend_y.append(y)
            Xc, yc = np.concatenate(pend_X), np.concatenate(pend_y)
            k = (len(Xc) // ROW_GROUP) * ROW_GROUP
            for s in range(0, k, ROW_GROUP):
                yield Xc[s:s + ROW_GROUP], yc[s:s + ROW_GROUP]
            pend_X, pend_y = [Xc[k:]], [yc[k:]]
        if pend_X and len(pend_X[0]):
            yield pend_X[0], pend_y[0]

    stream.write_parquet(paths["test"], chunks(total - N_TEST, total), NAMES, target="label", row_group_size=ROW_GROUP)
    for n in n_train:
        stream.write_parquet(paths[n], chunks(0, n), NAMES, target="label", row_group_size=ROW_GROUP)
    return paths


def check(path, n: int = 5000) -> None:
    """The first n rows of a derived file equal datasets.load("flights-3m") (loads the whole set once)."""
    ds = datasets.load("flights-3m")
    src = stream.ParquetSource(path, target="label")
    X, y = next(stream.iter_rows(src, n))
    np.testing.assert_array_equal(X, ds.X[:n])
    np.testing.assert_array_equal(y, ds.y[:n])
