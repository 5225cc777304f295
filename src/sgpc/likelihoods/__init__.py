"""Likelihoods p(y | f) for C classes through L latent functions: every likelihood of sgpc lives here.

* ``base``: the ``Likelihood`` base class (one required method, ``log_prob``; generic quadrature /
  Monte Carlo defaults for every expectation) and shared numerics (``log1mexp``).
* ``robust_max``: ``RobustMax``, the label-noise argmax likelihood of the EP-family papers.
* ``additive``: the additive-noise family — ``AdditiveGaussian``, ``BinaryAdditiveGaussian``,
  ``Softmax``, ``BinarySoftmax`` (additive-noise-gpc).
* ``hinge``: the Crammer–Singer and binary hinge pseudo-likelihoods of the Bayesian SVM,
  ``MulticlassHinge``, ``BinaryHinge`` (multiclass-bayesian-svm).

What this package does not do: hold data, inducing points or posteriors (``sparse``), or run an
inference engine (``vi``, ``ep``, ...).
"""
from .additive import AdditiveGaussian, BinaryAdditiveGaussian, BinarySoftmax, Softmax
from .base import Likelihood
from .hinge import BinaryHinge, MulticlassHinge
from .robust_max import RobustMax

__all__ = ["Likelihood", "RobustMax", "AdditiveGaussian", "BinaryAdditiveGaussian", "Softmax", "BinarySoftmax",
           "MulticlassHinge", "BinaryHinge"]
