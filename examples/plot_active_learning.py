"""
Active learning with the variation ratio
========================================

Pool-based active learning (multiclass-bayesian-svm §4.3.1; alpha-divergence-multiclass-gpc §5.6): start
from one labelled point per class, and in each round label the pool point the model is least sure about,
then refit. :func:`sgpc.uncertainty.active_learning` runs the loop; refits are warm-started from the
previous model.

The variation ratio of a point is 1 − F/S, where F is how often the most frequent label appears among
the labels of S posterior samples of the latent functions (eq. 13 of the Bayesian-SVM paper): 0 when
the samples agree, large where the posterior is unsure. It is compared with choosing points at random.
Small pool, few rounds and few refit steps keep the page fast; the curves are one run each.
"""

import warnings

import matplotlib.pyplot as plt
from sklearn.datasets import load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from sgpc import GPClassifier
from sgpc.uncertainty import active_learning

# The refits are deliberately short (the page must build in seconds): they stop at
# their step budget before the objective has settled (a ConvergenceWarning).
warnings.filterwarnings("ignore", category=ConvergenceWarning)

X, y = load_iris(return_X_y=True)
X = StandardScaler().fit_transform(X)
X_pool, X_test, y_pool, y_test = train_test_split(
    X, y, test_size=0.4, random_state=0, stratify=y
)

gp = GPClassifier(
    method="vi", n_inducing=8, max_iter=40, learning_rate=0.05, random_state=0
)
runs = {
    acq: active_learning(
        gp,
        X_pool,
        y_pool,
        X_test,
        y_test,
        n_queries=8,
        acquisition=acq,
        n_samples=30,
        refit_max_iter=15,
        random_state=0,
    )
    for acq in ("variation_ratio", "random")
}

fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
for acq, run in runs.items():
    axes[0].plot(run["n_labelled"], run["error"], "o-", label=acq)
    axes[1].plot(run["n_labelled"], run["nll"], "o-", label=acq)
axes[0].set_ylabel("test error")
axes[1].set_ylabel("test NLL")
for ax in axes:
    ax.set_xlabel("labelled points")
    ax.legend()
plt.show()

# %%
# The queried rows, in order (pool indices), and their classes:
run = runs["variation_ratio"]
print(run["queried"])
print(y_pool[run["queried"]])
