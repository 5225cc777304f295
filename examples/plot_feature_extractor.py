"""
A small CNN feature extractor with a GP head
============================================

Any method with a free Gaussian q(u) (``vi``, ``arpep``, ``rpapep``, ``bsvm``) can sit on a
``torch.nn.Module`` that maps the inputs to features; the network and the GP are trained jointly by the
same optimiser, and the inducing inputs live in feature space (multiclass-bayesian-svm §3.4). End the
network with ``nn.BatchNorm1d(D', affine=False)``, so that the features keep a fixed scale while the
kernel's length-scales are learned.

The images are scikit-learn's 8×8 digits; the network is two convolutions and a linear layer to
D' = 16 features. ``fit`` trains a copy of the module (the argument is not modified); the trained copy is
``model_.feature_extractor``.
"""

import warnings

import matplotlib.pyplot as plt
import torch
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from torch import nn

from sgpc import GPClassifier, metrics
from sgpc.plot import ReliabilityDisplay

# The iteration budgets are deliberately small (the page must build in seconds): the
# fits stop at max_iter before the objective has settled, which sgpc reports as a
# ConvergenceWarning.
warnings.filterwarnings("ignore", category=ConvergenceWarning)

X, y = load_digits(return_X_y=True)
X = X / 16.0  # pixel intensities in [0, 1]
X_train, X_test, y_train, y_test = train_test_split(
    X, y, test_size=0.25, random_state=0, stratify=y
)

torch.manual_seed(0)  # the network's initial weights
cnn = nn.Sequential(
    nn.Unflatten(1, (1, 8, 8)),
    nn.Conv2d(1, 8, kernel_size=3, padding=1),
    nn.ReLU(),
    nn.Conv2d(8, 16, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),  # 16 × 4 × 4
    nn.Flatten(),
    nn.Linear(16 * 4 * 4, 16),
    nn.BatchNorm1d(16, affine=False),
)

gp = GPClassifier(
    method="vi",
    n_inducing=20,
    batch_size=128,
    n_epochs=6,
    learning_rate=0.01,
    feature_extractor=cnn,
    random_state=0,
)
gp.fit(X_train, y_train)
proba = gp.predict_proba(X_test)
print(metrics.evaluate(metrics.class_indices(y_test, gp.classes_), proba))

# %%
# The learned features of the test images (the first two of 16), coloured by digit:
extractor = gp.model_.feature_extractor.eval()
with torch.no_grad():
    F = extractor(torch.as_tensor(X_test, dtype=torch.float64)).numpy()

fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
points = left.scatter(F[:, 0], F[:, 1], c=y_test, cmap="tab10", s=10)
fig.colorbar(points, ax=left, label="digit")
left.set_xlabel("feature 1")
left.set_ylabel("feature 2")
left.set_title("CNN features of the test images")
ReliabilityDisplay.from_predictions(
    y_test, proba, classes=gp.classes_, n_bins=10, name="CNN + GP", ax=right
)
right.set_title("reliability on the test images")
plt.show()
