"""sgpc: scalable Gaussian-process classification in PyTorch.

Multi-class GP classifiers with inducing points: VI, EP, SEP, GFITC, and the α-divergence family
(PEP, APEP, ARPEP, RPAPEP); the remaining methods of DESIGN.md as they land. Start with
``sgpc.GPClassifier``.
"""
from .estimator import GPClassifier

__version__ = "0.1.0"
__all__ = ["GPClassifier", "__version__"]
