"""
Decision boundary, inducing points and predictive uncertainty
=============================================================

On two-dimensional inputs, :class:`sgpc.plot.BoundaryDisplay` shades the predictive entropy of
p(y* | x*) over a grid, draws the boundaries where the most probable class changes, and marks the
inducing inputs Z that summarise the training data (one set per latent function, coloured by its class).

Far from the data the GP reverts to its prior: every class becomes equally likely and the entropy
approaches log C. With few inducing points the posterior is a coarser summary, and the boundaries and the
uncertainty follow the inducing inputs rather than the individual points.
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from sgpc import GPClassifier
from sgpc.plot import BoundaryDisplay

# The iteration budgets are deliberately small (the page must build in seconds): the
# fits stop at max_iter before the objective has settled, which sgpc reports as a
# ConvergenceWarning.
warnings.filterwarnings("ignore", category=ConvergenceWarning)

rng = np.random.default_rng(0)
centres = np.array([[-2.0, 0.0], [2.0, 0.0], [0.0, 2.5]])
y = np.repeat([0, 1, 2], 50)
X = centres[y] + rng.normal(scale=0.9, size=(len(y), 2))

fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), layout="constrained")
for ax, M in zip(axes, (3, 12)):
    gp = GPClassifier(
        method="vi", n_inducing=M, max_iter=200, learning_rate=0.05, random_state=0
    ).fit(X, y)
    BoundaryDisplay.from_estimator(gp, X, y, grid_resolution=60, eps=2.0, ax=ax)
    ax.set_title(f"M = {M} inducing points per class, accuracy {gp.score(X, y):.2f}")
plt.show()

# %%
# The variation ratio 1 − max_c p_c is another measure of the same uncertainty; it is 0 where one class
# is certain and (C − 1)/C where all are equally likely.
disp = BoundaryDisplay.from_estimator(
    gp, X, y, uncertainty="variation_ratio", grid_resolution=60, eps=2.0
)
disp.ax_.set_title("variation ratio of the M = 12 model")
plt.show()
