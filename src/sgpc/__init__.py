"""sgpc: scalable Gaussian-process classification in PyTorch.

Multi-class GP classifiers with inducing points: VI, EP, SEP, GFITC, the α-divergence family (PEP,
APEP, ARPEP, RPAPEP), additive-noise likelihoods (step, probit, logit, softmax), the Bayesian SVM
(with a neural-network feature extractor) and robust multi-class GPC (RMGPC). Start with
``sgpc.GPClassifier``.
"""
from importlib.metadata import PackageNotFoundError, version as _version

from .estimator import GPClassifier

try:
    __version__ = _version("sgpc")       # pyproject.toml's version, the one source of truth
except PackageNotFoundError:             # a source tree on sys.path that was never installed
    __version__ = "0+unknown"
__all__ = ["GPClassifier", "__version__"]
