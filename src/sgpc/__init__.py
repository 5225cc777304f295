"""sgpc: scalable Gaussian-process classification in PyTorch.

Multi-class GP classifiers with inducing points: VI, EP, SEP, GFITC, the α-divergence family (PEP,
APEP, ARPEP, RPAPEP), additive-noise likelihoods (step, probit, logit, softmax), the Bayesian SVM
(with a neural-network feature extractor) and robust multi-class GPC (RMGPC). Start with
``sgpc.GPClassifier``.
"""
from .estimator import GPClassifier

__version__ = "0.1.0"
__all__ = ["GPClassifier", "__version__"]
