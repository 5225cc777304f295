"""
Quick start
===========

Fit a multi-class Gaussian-process classifier, read its class probabilities, score them, and look at
the training history and a reliability diagram.

``GPClassifier`` is a scikit-learn estimator: it fits in a pipeline, is cloned by ``GridSearchCV`` and
scored by ``score``. The data here are scikit-learn's wine set (178 rows, 13 features, 3 classes); the
settings are small so that the page builds in seconds.
"""

# %%
# Fit
# ---
# The method is named explicitly (``method="vi"``: a free Gaussian q(u) fitted by maximising the ELBO);
# :doc:`../choosing` says when another method is the better choice. ``n_inducing`` is M, the inducing
# points per latent function; ``max_iter`` caps the optimiser steps (the fit stops earlier once the
# objective has converged).
import warnings

import matplotlib.pyplot as plt
from sklearn.datasets import load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sgpc import GPClassifier, metrics
from sgpc.plot import ReliabilityDisplay, plot_history

# The iteration budgets are deliberately small (the page must build in seconds): the
# fits stop at max_iter before the objective has settled, which sgpc reports as a
# ConvergenceWarning.
warnings.filterwarnings("ignore", category=ConvergenceWarning)

X, y = load_wine(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(
    X, y, test_size=0.3, random_state=0, stratify=y
)

scaler = StandardScaler().fit(X_train)
gp = GPClassifier(method="vi", n_inducing=20, max_iter=150, random_state=0)
gp.fit(
    scaler.transform(X_train), y_train, X_val=scaler.transform(X_test), y_val=y_test
)  # optional: a validation curve in history_

# %%
# Predict
# -------
# ``predict_proba`` returns one row per point and one column per class (``gp.classes_``); rows sum to one.
proba = gp.predict_proba(scaler.transform(X_test))
print("classes:", gp.classes_)
print("first rows:\n", proba[:3].round(3))
print(f"accuracy: {gp.score(scaler.transform(X_test), y_test):.3f}")

# %%
# ``sgpc.metrics`` scores probabilistic predictions: error, negative log-likelihood (NLL), Brier score and
# the top-label expected calibration error (ECE). They take class *indices*; ``class_indices`` maps labels.
scores = metrics.evaluate(metrics.class_indices(y_test, gp.classes_), proba)
print({k: round(v, 4) for k, v in scores.items()})

# %%
# In a pipeline
# -------------
# The same model inside a scikit-learn pipeline, so that standardisation travels with it:
pipe = make_pipeline(
    StandardScaler(),
    GPClassifier(method="vi", n_inducing=20, max_iter=150, random_state=0),
)
pipe.fit(X_train, y_train)
print(f"pipeline accuracy: {pipe.score(X_test, y_test):.3f}")

# %%
# Plots
# -----
# ``plot_history`` draws the training objective and, because ``fit`` was given validation
# data, the validation NLL against training time.
plot_history(gp)
plt.show()

# %%
# ``ReliabilityDisplay`` compares each confidence bin's accuracy with its confidence; its
# legend gives the ECE. On 54 test points with 5 bins it is a coarse picture.
fig, ax = plt.subplots(figsize=(6, 5), layout="constrained")
ReliabilityDisplay.from_estimator(pipe, X_test, y_test, n_bins=5, name="GP (vi)", ax=ax)
ax.set_title("wine, test split")
plt.show()
