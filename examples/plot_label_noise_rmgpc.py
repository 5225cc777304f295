"""
Label noise and outlier probabilities with RMGPC
================================================

Robust multi-class GP classification (``method="rmgpc"``, Hernández-Lobato et al., NIPS 2011) gives each
training label a binary indicator z_i: with z_i = 1 the label was drawn at random instead of from the
argmax of the latent functions. The fraction ρ of such labels has a Beta prior, and EP returns a posterior
probability q(z_i = 1) for every training row (``outlier_proba_``) and the posterior mean E[ρ].

Here 8% of the labels of a 3-class problem are changed on purpose. The rows whose labels were changed
should have the largest outlier probabilities; :class:`sgpc.plot.OutlierDisplay` sorts the rows by that
probability and colours the corrupted ones.
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from sgpc import GPClassifier
from sgpc.plot import BoundaryDisplay, OutlierDisplay

# The iteration budgets are deliberately small (the page must build in seconds): the
# fits stop at max_iter before the objective has settled, which sgpc reports as a
# ConvergenceWarning.
warnings.filterwarnings("ignore", category=ConvergenceWarning)

rng = np.random.default_rng(1)
centres = np.array([[-2.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
y_clean = np.repeat([0, 1, 2], 40)
X = centres[y_clean] + rng.normal(scale=0.8, size=(len(y_clean), 2))

flipped = np.zeros(len(y_clean), dtype=bool)
flipped[rng.choice(len(y_clean), size=int(0.08 * len(y_clean)), replace=False)] = True
y = y_clean.copy()
y[flipped] = (y[flipped] + rng.integers(1, 3, size=flipped.sum())) % 3  # another class

# FITC prior with M = 15 inducing inputs (with n_inducing >= the number of rows it is the full GP)
gp = GPClassifier(method="rmgpc", n_inducing=15, max_iter=30, random_state=0).fit(X, y)

k = flipped.sum()
top = np.argsort(-gp.outlier_proba_)[:k]  # the k rows most likely to be outliers
found = np.isin(top, np.flatnonzero(flipped)).sum()
print(f"{k} labels changed; {found} of them are among the {k} most likely outliers")
print(f"E[rho] = {gp.model_.likelihood.epsilon.item():.3f}")

fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), layout="constrained")
OutlierDisplay.from_estimator(gp, flipped=flipped, ax=left)
left.set_title("outlier probability of each training label")
BoundaryDisplay.from_estimator(
    gp, X, y, grid_resolution=50, show_inducing=False, ax=right
)
right.scatter(
    X[flipped, 0],
    X[flipped, 1],
    s=120,
    facecolors="none",
    edgecolors="red",
    linewidths=1.5,
    label="label changed",
)
right.legend(loc="upper right", fontsize="small")
right.set_title("rmgpc: boundaries and predictive entropy")
plt.show()

# %%
# Because a changed label can be explained as an outlier, the boundaries are not pulled towards the
# mislabelled points, and the predictive probabilities are (1 − E[ρ]) P(argmax) + E[ρ]/C: never below
# E[ρ]/C for any class.
