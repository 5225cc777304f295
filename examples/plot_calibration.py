"""
Calibration against logistic regression and ``CalibratedClassifierCV``
=======================================================================

A classifier is calibrated when, among the points it gives confidence p, a fraction p is classified
correctly. The reliability diagram (:class:`sgpc.plot.ReliabilityDisplay`) bins the test points by their
top-label confidence and draws each bin's accuracy; the expected calibration error (ECE) is the
count-weighted mean gap between accuracy and confidence (``sgpc.metrics.ece``, 10 bins here).

Four models on the same synthetic 4-class problem: GP classifiers fitted by stochastic EP (``sep``) and by
variational inference (``vi``), multinomial logistic regression, and a random forest recalibrated by
``CalibratedClassifierCV`` (isotonic regression, 3-fold).
The numbers printed come from this one small run: for measured comparisons on real data see
:doc:`../suite`.
"""

import warnings

import matplotlib.pyplot as plt
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sgpc import GPClassifier, metrics
from sgpc.plot import ReliabilityDisplay

# The iteration budgets are deliberately small (the page must build in seconds): the
# fits stop at max_iter before the objective has settled, which sgpc reports as a
# ConvergenceWarning.
warnings.filterwarnings("ignore", category=ConvergenceWarning)

X, y = make_classification(
    n_samples=900,
    n_features=6,
    n_informative=4,
    n_redundant=0,
    n_classes=4,
    n_clusters_per_class=1,
    class_sep=1.0,
    random_state=1,
)
X_train, X_test, y_train, y_test = train_test_split(
    X, y, test_size=0.5, random_state=0, stratify=y
)


def gp(method):
    return make_pipeline(
        StandardScaler(),
        GPClassifier(
            method=method,
            n_inducing=20,
            max_iter=150,
            learning_rate=0.05,
            random_state=0,
        ),
    )


models = {
    "GP classifier (sep)": gp("sep"),
    "GP classifier (vi)": gp("vi"),
    "logistic regression": make_pipeline(
        StandardScaler(), LogisticRegression(max_iter=1000)
    ),
    "random forest + isotonic": CalibratedClassifierCV(
        RandomForestClassifier(n_estimators=100, random_state=0),
        method="isotonic",
        cv=3,
    ),
}

fig, axes = plt.subplots(
    2, 2, figsize=(11, 9.5), layout="constrained", sharex=True, sharey=True
)
for ax, (name, model) in zip(axes.ravel(), models.items()):
    model.fit(X_train, y_train)
    ReliabilityDisplay.from_estimator(
        model, X_test, y_test, n_bins=10, name=name, ax=ax
    )
    ax.set_title(name)
    idx = metrics.class_indices(y_test, model.classes_)
    s = metrics.evaluate(idx, model.predict_proba(X_test), n_bins=10)
    print(f"{name:26s}", "  ".join(f"{k} {v:.3f}" for k, v in s.items()))
plt.show()

# %%
# Reading the diagrams: bars below the diagonal are over-confident bins, bars above it under-confident
# ones. The two GP fits share the model and differ only in the approximation: the ELBO of ``vi`` fits
# E_q[log p(y | f)], while EP's objective is closer to log E_q[p(y | f)], the predictive log-likelihood
# (scalable-ep §4.1) — the pattern :doc:`../choosing` reports on real data. The ECE summarises the gaps but
# depends on the binning and is noisy on a few hundred points; the NLL and the Brier score are proper
# scoring rules and rank the models by the quality of their probabilities as a whole.
