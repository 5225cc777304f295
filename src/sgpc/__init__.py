"""sgpc: scalable Gaussian-process classification in PyTorch.

Multi-class and binary GP classifiers with inducing points: VI today; EP, SEP, Power EP and the
other methods of DESIGN.md as they land. Start with ``sgpc.GPClassifier``.
"""
from .estimator import GPClassifier

__version__ = "0.1.0"
__all__ = ["GPClassifier", "__version__"]
