"""The one list of methods, likelihoods and kernels: names → the objects they make.

``METHODS`` maps each ``method=`` name to a ``Method``: the engine class and how its settings follow from the
estimator's parameters, which likelihoods it accepts, and what it can do (the engine class's declared
``capabilities``). ``LIKELIHOODS`` and ``KERNELS`` map the ``likelihood=`` and ``kernel=`` names to
factories. The estimator, the CLI's choices, the docs' method table (``method_table``) and the contract
tests are all derived from these literals: a new method is one engine module and one entry here; a new
likelihood is one class and one entry.

What this module does not do: validate parameter values (the estimator and the engines' settings do) or fit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from . import kernels as K
from .engine import Capabilities, Engine
from .ep import EP
from .fitc_ep import GFITC
from .likelihoods import (AdditiveGaussian, BinaryAdditiveGaussian, BinaryHinge, BinarySoftmax, Likelihood,
                          MulticlassHinge, RobustMax, Softmax)
from .likelihoods.additive import NOISE_VARIANCE
from .rmgpc import RMGPC
from .sep import APEP, SEP
from .vi import VI

__all__ = ["Method", "METHODS", "LIKELIHOODS", "KERNELS", "make_engine", "make_likelihood", "make_kernel",
           "method_table"]

# binary additive-noise likelihoods in the EP family: one site per point on the single latent function (probit
# sites, Φ(s f/√a) mixed with δ); robust-max keeps the pairwise step factors of scalable-ep eq. 6
_EP_BINARY = ("step", "probit", "logit")


def _site_factor(p: dict) -> str:
    return "likelihood" if p["likelihood"] in _EP_BINARY else "pairwise"


@dataclass(frozen=True)
class Method:
    """One ``method=`` entry.

    Attributes:
        engine: the engine class. settings: its settings from the estimator's parameters (a dict of them).
        likelihoods: the ``likelihood=`` names it accepts for any number of classes; binary_likelihoods:
            those it accepts for 2 classes only.
        own_likelihood: a likelihood the method always uses (bsvm: the hinge), whatever ``likelihood=`` says
            (which must then stay at its default).
        shared_inducing: one set of inducing inputs for all latent functions, always (bsvm §3.3).
        full_gp_at_n: with as many inducing inputs as rows the model is the full GP (FITC with Z = X, fixed).
        outlier_model: the engine gives each training label's outlier probability (``outlier_proba``).
        caps: what the method can do, where it is less than its engine can (bsvm does not stream).
        paper, summary: where it comes from and what it is, for the docs' method table and ``--help``.
    """

    engine: type[Engine]
    settings: Callable[[dict], dict]
    likelihoods: tuple[str, ...]
    paper: str
    summary: str
    binary_likelihoods: tuple[str, ...] = ()
    own_likelihood: str | None = None
    shared_inducing: bool = False
    full_gp_at_n: bool = False
    outlier_model: bool = False
    caps: Capabilities | None = None

    @property
    def capabilities(self) -> Capabilities:
        """What the method can do: its engine's declared capabilities, or ``caps`` where it sets them."""
        return self.caps or self.engine.capabilities


_VI_LIKELIHOODS = ("robustmax", "step", "probit", "logit", "softmax")

METHODS: dict[str, Method] = {
    "vi": Method(VI, lambda p: {"natgrad_lr": p["natgrad_lr"]}, _VI_LIKELIHOODS, "Hensman et al. 2015; scalable-ep §3 (eqs. 15–17)",
                 "free Gaussian q(u), ELBO; any likelihood"),
    "ep": Method(EP, lambda p: {"damping": p["damping"], "factor": _site_factor(p)}, ("robustmax",),
                 "scalable-ep §2.2–2.3, App. B–G",
                 "rank-one sites on the pairwise step factors, parallel damped updates, batch or minibatch",
                 binary_likelihoods=_EP_BINARY),
    "sep": Method(SEP, lambda p: {"damping": p["damping"], "factor": _site_factor(p), "log_z": p["sep_log_z"]},
                  ("robustmax",), "scalable-ep §2.3.1", "stochastic EP: sites tied per latent, memory independent of N",
                  binary_likelihoods=_EP_BINARY),
    "gfitc": Method(GFITC, lambda p: {"damping": p["damping"]}, ("robustmax",), "scalable-ep §3 (baseline)",
                    "EP in function space on the FITC prior, exact step likelihood, full batch"),
    "pep": Method(EP, lambda p: {"alpha": p["alpha"], "factor": "likelihood", "damping": p["damping"]},
                  ("robustmax",), "alpha-divergence GPC §3.1, App. A",
                  "Power EP (alpha in (0, 1]) with rank-one sites on the robust-max likelihood",
                  binary_likelihoods=_EP_BINARY),
    "apep": Method(APEP, lambda p: {"alpha": p["alpha"]}, ("robustmax",), "alpha-divergence GPC §3.2",
                   "tied factor optimised by gradient of the Power-EP energy (eq. 8)"),
    "arpep": Method(VI, lambda p: {"alpha": p["alpha"], "natgrad_lr": p["natgrad_lr"]}, ("robustmax",), "alpha-divergence GPC §3.3, eq. 9",
                    "free Gaussian q, (1/α) Σ log E[p^α] − KL"),
    "rpapep": Method(VI, lambda p: {"alpha": p["alpha"], "objective": "rpapep", "natgrad_lr": p["natgrad_lr"]}, ("robustmax",),
                     "alpha-divergence GPC §3.4, eq. 10", "free Gaussian q, the prior as one more factor"),
    "bsvm": Method(VI, lambda p: {"natgrad_lr": p["natgrad_lr"]}, ("robustmax",), "multi-class Bayesian SVM §3",
                   "Crammer–Singer hinge pseudo-likelihood, ELBO eq. 12, inducing inputs shared by all classes",
                   own_likelihood="hinge", shared_inducing=True, caps=Capabilities(free_gaussian=True)),
    "rmgpc": Method(RMGPC, lambda p: {"damping": p["damping"], "outliers": True, "prior_a": float(p["outlier_prior_a"]),
                                      "prior_b": float(p["outlier_prior_b"])}, ("robustmax",),
                    "robust multi-class GPC (NIPS 2011 supplement, eqs. 3–13)",
                    "EP with outlier indicators and a Beta posterior on ρ, full GP or FITC",
                    full_gp_at_n=True, outlier_model=True),
    "smgpc": Method(RMGPC, lambda p: {"damping": p["damping"], "outliers": False, "prior_a": float(p["outlier_prior_a"]),
                                      "prior_b": float(p["outlier_prior_b"])}, ("robustmax",),
                    "robust multi-class GPC supplement (baseline)", "rmgpc without outlier indicators",
                    full_gp_at_n=True, outlier_model=True),
}


def make_engine(params: dict) -> Engine:
    """The engine of ``params["method"]`` with its settings from the estimator's parameters ``params``."""
    method = METHODS[params["method"]]
    return method.engine(**method.settings(params))


# -- likelihoods ----------------------------------------------------------------------------------
def _robust_max(C: int, p: dict) -> Likelihood:
    return RobustMax(C, epsilon=p["epsilon"], learn_epsilon=p["learn_epsilon"])


def _additive(name: str) -> Callable[[int, dict], Likelihood]:
    def make(C: int, p: dict) -> Likelihood:
        a = NOISE_VARIANCE[name] if p["noise_variance"] is None else float(p["noise_variance"])
        if C == 2:
            return BinaryAdditiveGaussian(a, p["delta"], learn_delta=p["learn_delta"])
        return AdditiveGaussian(C, a, p["delta"], learn_delta=p["learn_delta"])
    return make


def _softmax(C: int, p: dict) -> Likelihood:
    if C == 2:
        return BinarySoftmax()
    return Softmax(C, n_samples_predict=int(p["n_samples_predict"]), predict_rule=p["softmax_predict"])


def _hinge(C: int, p: dict) -> Likelihood:
    return BinaryHinge() if C == 2 else MulticlassHinge(C)


# name -> factory(C, estimator parameters); "hinge" is bsvm's own (``Method.own_likelihood``)
LIKELIHOODS: dict[str, Callable[[int, dict], Likelihood]] = {
    "robustmax": _robust_max, "step": _additive("step"), "probit": _additive("probit"),
    "logit": _additive("logit"), "softmax": _softmax, "hinge": _hinge,
}


def make_likelihood(params: dict, C: int) -> Likelihood:
    """The likelihood of ``params`` for C classes (the method's own one, if it has one)."""
    name = METHODS[params["method"]].own_likelihood or params["likelihood"]
    return LIKELIHOODS[name](C, params)


# -- kernels --------------------------------------------------------------------------------------
def _matern(nu: float):
    return lambda D, L, kw: K.Matern(D, L, nu=nu, **kw)


def _matern52_rbf(D: int, L: int, kw: dict) -> torch.nn.Module:
    # additive-noise-gpc Table V / App. D: the RBF term starts at 10× the Matérn length-scale; one latent-noise term
    ls = kw["lengthscale"]
    rbf_ls = None if ls is None else 10.0 * torch.as_tensor(ls, dtype=torch.float64)
    return K.Sum(K.Matern(D, L, nu=2.5, **kw), K.RBF(D, L, **{**kw, "lengthscale": rbf_ls, "noise": None}))


# name -> factory(D, L, keyword arguments of the kernel classes)
KERNELS: dict[str, Callable[[int, int, dict], torch.nn.Module]] = {
    "rbf": lambda D, L, kw: K.RBF(D, L, **kw), "matern12": _matern(0.5), "matern32": _matern(1.5),
    "matern52": _matern(2.5), "linear": lambda D, L, kw: K.Linear(D, L, **kw), "matern52+rbf": _matern52_rbf,
}


def make_kernel(params: dict, D: int, L: int, lengthscale, dtype: torch.dtype) -> torch.nn.Module:
    """The kernel of ``params["kernel"]`` on D inputs for L latent functions; ``lengthscale``: the data-derived
    initial length-scales, replaced by ``params["init_lengthscale"]`` when that is set."""
    if params["init_lengthscale"] is not None:
        lengthscale = float(params["init_lengthscale"])
    kw = dict(shared=params["shared_kernel"], lengthscale=lengthscale, noise=params["latent_noise"],
              variance=float(params["init_variance"]), dtype=dtype)
    return KERNELS[params["kernel"]](D, L, kw)


def method_table() -> str:
    """The README's and the docs' method table, as Markdown, from ``METHODS``."""
    rows = ["| `method=` | paper | what it is | streams | per-row sites | feature extractor |", "|---|---|---|---|---|---|"]
    yes = {True: "yes", False: "—"}
    for name, m in METHODS.items():
        c = m.capabilities
        rows.append(f"| `{name}` | {m.paper} | {m.summary} | {yes[c.streamable]} | {yes[c.per_row_state]} | "
                    f"{yes[c.free_gaussian]} |")
    return "\n".join(rows)

