"""
Streaming a Parquet file
========================

``fit`` accepts a Parquet file path: the rows are read block by block (row groups), shuffled by blocks
and fed as minibatches, so the data never has to fit in memory. Methods whose memory does not grow with N
stream (``vi``, ``sep``, ``apep``, ``arpep``, ``rpapep``; ``sgpc.registry.METHODS[name].capabilities``);
``predict_proba`` on a path also runs block by block. See :doc:`../scale`.

Here a Parquet file is written from scikit-learn's digits (1 797 rows, 64 pixel features, 10 classes)
into a temporary directory, with small row groups so that the file has several blocks.
"""

import tempfile
import warnings
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning

from sgpc import GPClassifier, metrics, stream

# The iteration budgets are deliberately small (the page must build in seconds): the
# fits stop at max_iter before the objective has settled, which sgpc reports as a
# ConvergenceWarning.
warnings.filterwarnings("ignore", category=ConvergenceWarning)

X, y = load_digits(return_X_y=True)
rng = np.random.default_rng(0)
order = rng.permutation(len(y))
train, test = order[:1400], order[1400:]

tmp = Path(tempfile.mkdtemp(prefix="sgpc-gallery-"))
path = tmp / "digits.parquet"
names = [f"pixel{j}" for j in range(X.shape[1])]
chunks = (
    (X[train][i : i + 200], y[train][i : i + 200]) for i in range(0, len(train), 200)
)
stream.write_parquet(path, chunks, names, target="digit", row_group_size=200)
print(pq.ParquetFile(path).metadata)

# %%
# Fit from the file: ``y`` names the label column (default: the last column). Streaming needs
# minibatches (``batch_size``); ``n_epochs`` counts passes over the file.
gp = GPClassifier(
    method="vi",
    n_inducing=20,
    batch_size=200,
    n_epochs=4,
    learning_rate=0.05,
    random_state=0,
)
gp.fit(str(path), "digit")
print(f"{gp.n_iter_} steps over N = {len(train)} streamed rows; classes {gp.classes_}")

# %%
# Predict from a file too (a file of features only), block by block:
test_path = tmp / "digits_test.parquet"
stream.write_parquet(test_path, [(X[test], None)], names, target=None)
proba = gp.predict_proba(str(test_path))
print(metrics.evaluate(metrics.class_indices(y[test], gp.classes_), proba))

# %%
# The fit's history is there as for in-memory data:
from sgpc.plot import plot_history  # noqa: E402

plot_history(gp)
