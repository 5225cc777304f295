"""The one list of methods, likelihoods and kernels: names → the objects they make.

``METHODS`` maps each ``method=`` name to a ``Method``: the engine class and how its settings follow from the
estimator's parameters, which likelihoods it accepts, and what it can do (the engine class's declared
``capabilities``). ``LIKELIHOODS`` and ``KERNELS`` map the ``likelihood=`` and ``kernel=`` names to
factories. Each entry declares the options it takes (the keys of the estimator's ``method_params``,
``likelihood_params`` and ``kernel_params``) with their defaults, drawn from one table each:
``METHOD_OPTIONS``, ``LIKELIHOOD_OPTIONS`` and ``KERNEL_OPTIONS``. The estimator, the CLI's choices, the docs' method table (``method_table``) and the contract
tests are all derived from these literals: a new method is one engine module and one entry here; a new
likelihood is one class and one entry.

``kernel=`` and ``likelihood=`` also take objects (as scikit-learn's ``kernel=``): an instance of a class in
``KERNEL_CLASSES`` / ``LIKELIHOOD_CLASSES``, built for the data's dimensions, whose copy is the fit's initial
kernel or likelihood. Each class there declares the constructor arguments that rebuild an instance with its
``state_dict`` (``spec``/``from_spec``: how a model file stores such an argument without pickling it).

What this module does not do: validate parameter values (the estimator and the engines' settings do) or fit.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

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

__all__ = ["Method", "METHODS", "LikelihoodEntry", "LIKELIHOODS", "KERNELS", "METHOD_OPTIONS", "LIKELIHOOD_OPTIONS",
           "KERNEL_OPTIONS", "INDUCING_OPTIONS", "OPTIMIZER_OPTIONS", "OPTION_GROUPS", "likelihood_name", "resolve", "make_engine", "make_likelihood",
           "make_kernel", "method_table", "KERNEL_CLASSES", "LIKELIHOOD_CLASSES", "likelihood_key", "config", "spec", "from_spec",
           "describe"]

# -- options: the keys of the estimator's method_params, likelihood_params and kernel_params, with their defaults;
# each method and likelihood takes some of them (``Method.options``, ``LikelihoodEntry.options``), every kernel all
METHOD_OPTIONS: dict[str, object] = {"alpha": 0.5, "damping": 0.5, "sep_log_z": "local", "outlier_prior_a": 1.0,
                                     "outlier_prior_b": 9.0, "natgrad_lr": None, "ep_tol": 1e-2}
LIKELIHOOD_OPTIONS: dict[str, object] = {"epsilon": 1e-3, "learn_epsilon": False, "noise_variance": None, "delta": 1e-3,
                                         "learn_delta": True, "n_samples_predict": 1024, "softmax_predict": "qmc"}
KERNEL_OPTIONS: dict[str, object] = {"latent_noise": 1e-3, "init_lengthscale": None, "init_variance": 1.0,
                                     "shared_kernel": False, "prior_scale": None}
# the keys of inducing_params (how the inducing inputs Z start and whether they move; every method) and of
# optimizer_params (every optimizer; lr_decay applies to "adam" only, ``train.TrainSettings``)
INDUCING_OPTIONS: dict[str, object] = {"init": "kmeans", "learn": True, "shared": False, "learning_rate": None}
OPTIMIZER_OPTIONS: dict[str, object] = {"lr_decay": 1.0}


def _takes(table: dict, *names: str) -> dict:
    """The options ``names`` of ``table`` with their defaults."""
    return {name: table[name] for name in names}

# binary additive-noise likelihoods in the EP family: one site per point on the single latent function (probit
# sites, Φ(s f/√a) mixed with δ); robust-max keeps the pairwise step factors of scalable-ep eq. 6
_EP_BINARY = ("step", "probit", "logit")


def _site_factor(p: dict) -> str:
    return "likelihood" if likelihood_key(p["likelihood"]) in _EP_BINARY else "pairwise"


@dataclass(frozen=True)
class Method:
    """One ``method=`` entry.

    Attributes:
        engine: the engine class. settings: its settings from the method's resolved options (``options``
            merged with ``method_params``) and the estimator's parameters: ``settings(options, params)``.
        options: the ``method_params`` keys it takes, with their defaults (from ``METHOD_OPTIONS``).
        likelihoods: the ``likelihood=`` names it accepts for any number of classes; binary_likelihoods:
            those it accepts for 2 classes only.
        own_likelihood: a likelihood the method always uses (bsvm: the hinge), whatever ``likelihood=`` says
            (which must then stay at its default).
        shared_inducing: one set of inducing inputs for all latent functions, always (bsvm §3.3).
        full_gp_at_n: with as many inducing inputs as rows the model is the full GP (FITC with Z = X, fixed).
        outlier_model: the engine gives each training label's outlier probability (``outlier_proba``).
        caps: what the method can do, where it is less than its engine can (bsvm does not stream).
        paper, summary: where it comes from and what it is, for the docs' method table and ``--help``.
        learning_rate, learn_inducing, optimizer, prior_scale, tol: the method's defaults for ``learning_rate=None``,
            ``inducing_params["learn"]``, ``optimizer=None`` in a full-batch fit (minibatches: "adam"),
            ``kernel_params["prior_scale"]`` (``hyperprior``; None: no prior, ML-II) and ``tol="auto"`` in a
            full-batch fit (minibatches: 1e-4) — chosen by the real-data suite, docs/suite.md, where it measured them.
        learn_epsilon: the default of ``likelihood_params["learn_epsilon"]`` with the robust-max likelihood.
        full_batch_fit: those of the defaults above that differ in a full-batch fit, by name (``fit_default``),
            with the likelihoods in full_batch_likelihoods (None: any). "sep" fits the full batch as "ep" does, but
            with Adam (docs/design-notes.md, 'method="sep" chosen explicitly'); so does "vi" with the robust-max
            likelihood, whose ε it learns ('`vi` with robust-max: ε learned'), and with the step likelihood
            ('The step likelihood fits the full batch as robust-max does').
        auto_float32: whether ``dtype="auto"`` may pick float32 for it on a large enough problem
            (``fitting.resolve_dtype``): set where the suite measured float32 at the same test NLL in less time
            (docs/design-notes.md); the others keep float64, unmeasured or (the ``vi`` engine) slower in it.
        epsilon_in_objective: whether the robust-max ε enters what the fit optimises. Not for "ep", "sep" and "gfitc":
            their factors are the pairwise step functions of scalable-ep eq. 6 (ε enters the predictions only), so
            ``learn_epsilon`` would leave ε where it started (``validation`` refuses it).
        minibatch_rates: (learning rate, learned inducing inputs' rate) in the minibatches that
            ``batch_size="auto"`` chooses, unless a rate is given (``fitting.auto_minibatch_rates``); None:
            ``fitting.AUTO_MINIBATCH_LEARNING_RATE`` for every parameter. Set where the suite measured it: "sep", the
            default's method there ('Adam at 0.1 in the minibatches, the inducing inputs at 0.05').
    """

    engine: type[Engine]
    settings: Callable[[dict, dict], dict]
    options: dict
    likelihoods: tuple[str, ...]
    paper: str
    summary: str
    binary_likelihoods: tuple[str, ...] = ()
    own_likelihood: str | None = None
    shared_inducing: bool = False
    full_gp_at_n: bool = False
    outlier_model: bool = False
    caps: Capabilities | None = None
    learning_rate: float = 0.01
    learn_inducing: bool = True
    optimizer: str = "adam"
    prior_scale: float | None = None
    tol: float = 1e-4
    learn_epsilon: bool = False
    full_batch_fit: dict = field(default_factory=dict)
    full_batch_likelihoods: tuple[str, ...] | None = None
    auto_float32: bool = False
    epsilon_in_objective: bool = True
    minibatch_rates: tuple[float, float] | None = None

    @property
    def capabilities(self) -> Capabilities:
        """What the method can do: its engine's declared capabilities, or ``caps`` where it sets them."""
        return self.caps or self.engine.capabilities


_VI_LIKELIHOODS = ("robustmax", "step", "probit", "logit", "softmax")
# the full-batch fit of ep, also the one of the function-space EP engines (gfitc, rmgpc, smgpc): Rprop from 0.05 on
# the hyper-parameters under a log-normal prior of scale 2, k-means inducing inputs kept, tol 3e-4. Chosen for ep by
# the suite (README's defaults table); for the other three measured at 1 000 rows x 5 classes and on five small
# suite sets (docs/design-notes.md, "The function-space EP engines' fit")
_EP_FIT = dict(learning_rate=0.05, learn_inducing=False, optimizer="rprop", prior_scale=2.0, tol=3e-4)
# ... and with Adam, the full-batch fit of vi with robust-max or the step likelihood, and of sep at a rate of 0.1
# (docs/design-notes.md)
_EP_FIT_ADAM = dict(learning_rate=0.05, learn_inducing=False, prior_scale=2.0, tol=3e-4)

METHODS: dict[str, Method] = {
    "vi": Method(VI, lambda o, p: {"natgrad_lr": o["natgrad_lr"]}, _takes(METHOD_OPTIONS, "natgrad_lr"),
                 _VI_LIKELIHOODS, "Hensman et al. 2015; scalable-ep §3 (eqs. 15–17)",
                 "free Gaussian q(u), ELBO; any likelihood", learn_epsilon=True, full_batch_fit=_EP_FIT_ADAM,
                 full_batch_likelihoods=("robustmax", "step")),
    "ep": Method(EP, lambda o, p: {"damping": o["damping"], "factor": _site_factor(p)}, _takes(METHOD_OPTIONS, "damping"),
                 ("robustmax",), "scalable-ep §2.2–2.3, App. B–G",
                 "rank-one sites on the pairwise step factors, parallel damped updates, batch or minibatch",
                 binary_likelihoods=_EP_BINARY, auto_float32=True, epsilon_in_objective=False, **_EP_FIT),
    "sep": Method(SEP, lambda o, p: {"damping": o["damping"], "factor": _site_factor(p), "log_z": o["sep_log_z"]},
                  _takes(METHOD_OPTIONS, "damping", "sep_log_z"),
                  ("robustmax",), "scalable-ep §2.3.1", "stochastic EP: sites tied per latent, memory independent of N",
                  binary_likelihoods=_EP_BINARY, auto_float32=True, epsilon_in_objective=False,
                  full_batch_fit={**_EP_FIT_ADAM, "learning_rate": 0.1}, minibatch_rates=(0.1, 0.05)),
    "gfitc": Method(GFITC, lambda o, p: {"damping": o["damping"], "tol": float(o["ep_tol"])},
                    _takes(METHOD_OPTIONS, "damping", "ep_tol"), ("robustmax",),
                    "scalable-ep §3 (baseline)",
                    "EP in function space on the FITC prior, exact step likelihood, full batch",
                    epsilon_in_objective=False, **_EP_FIT),
    "pep": Method(EP, lambda o, p: {"alpha": o["alpha"], "factor": "likelihood", "damping": o["damping"]},
                  _takes(METHOD_OPTIONS, "alpha", "damping"), ("robustmax",), "alpha-divergence GPC §3.1, App. A",
                  "Power EP (alpha in (0, 1]) with rank-one sites on the robust-max likelihood",
                  binary_likelihoods=_EP_BINARY, auto_float32=True),
    "apep": Method(APEP, lambda o, p: {"alpha": o["alpha"]}, _takes(METHOD_OPTIONS, "alpha"), ("robustmax",),
                   "alpha-divergence GPC §3.2", "tied factor optimised by gradient of the Power-EP energy (eq. 8)",
                   auto_float32=True),
    "arpep": Method(VI, lambda o, p: {"alpha": o["alpha"], "natgrad_lr": o["natgrad_lr"]},
                    _takes(METHOD_OPTIONS, "alpha", "natgrad_lr"), ("robustmax",), "alpha-divergence GPC §3.3, eq. 9",
                    "free Gaussian q, (1/α) Σ log E[p^α] − KL"),
    "rpapep": Method(VI, lambda o, p: {"alpha": o["alpha"], "objective": "rpapep", "natgrad_lr": o["natgrad_lr"]},
                     _takes(METHOD_OPTIONS, "alpha", "natgrad_lr"), ("robustmax",),
                     "alpha-divergence GPC §3.4, eq. 10", "free Gaussian q, the prior as one more factor"),
    "bsvm": Method(VI, lambda o, p: {"natgrad_lr": o["natgrad_lr"]}, _takes(METHOD_OPTIONS, "natgrad_lr"), ("robustmax",),
                   "multi-class Bayesian SVM §3",
                   "Crammer–Singer hinge pseudo-likelihood, ELBO eq. 12, inducing inputs shared by all classes",
                   own_likelihood="hinge", shared_inducing=True, caps=Capabilities(free_gaussian=True, weighted=True)),
    "rmgpc": Method(RMGPC, lambda o, p: {"damping": o["damping"], "outliers": True, "prior_a": float(o["outlier_prior_a"]),
                                         "prior_b": float(o["outlier_prior_b"]), "tol": float(o["ep_tol"])},
                    _takes(METHOD_OPTIONS, "damping", "outlier_prior_a", "outlier_prior_b", "ep_tol"), ("robustmax",),
                    "robust multi-class GPC (NIPS 2011 supplement, eqs. 3–13)",
                    "EP with outlier indicators and a Beta posterior on ρ, full GP or FITC",
                    full_gp_at_n=True, outlier_model=True, **_EP_FIT),
    "smgpc": Method(RMGPC, lambda o, p: {"damping": o["damping"], "outliers": False, "prior_a": float(o["outlier_prior_a"]),
                                         "prior_b": float(o["outlier_prior_b"]), "tol": float(o["ep_tol"])},
                    _takes(METHOD_OPTIONS, "damping", "outlier_prior_a", "outlier_prior_b", "ep_tol"), ("robustmax",),
                    "robust multi-class GPC supplement (baseline)", "rmgpc without outlier indicators",
                    full_gp_at_n=True, outlier_model=True, **_EP_FIT),
}


def make_engine(params: dict) -> Engine:
    """The engine of ``params["method"]`` with its settings from the estimator's parameters ``params``, options
    resolved (``resolve``)."""
    method = method_entry(params)
    return method.engine(**method.settings(params["method_params"], params))


# -- likelihoods ----------------------------------------------------------------------------------
# each factory takes the number of classes C and the likelihood's resolved options o
def _robust_max(C: int, o: dict) -> Likelihood:
    return RobustMax(C, epsilon=o["epsilon"], learn_epsilon=o["learn_epsilon"])


def _additive(name: str) -> Callable[[int, dict], Likelihood]:
    def make(C: int, o: dict) -> Likelihood:
        a = NOISE_VARIANCE[name] if o["noise_variance"] is None else float(o["noise_variance"])
        if C == 2:
            return BinaryAdditiveGaussian(a, o["delta"], learn_delta=o["learn_delta"])
        return AdditiveGaussian(C, a, o["delta"], learn_delta=o["learn_delta"])
    return make


def _softmax(C: int, o: dict) -> Likelihood:
    if C == 2:
        return BinarySoftmax()
    return Softmax(C, n_samples_predict=int(o["n_samples_predict"]), predict_rule=o["softmax_predict"])


def _hinge(C: int, o: dict) -> Likelihood:
    return BinaryHinge() if C == 2 else MulticlassHinge(C)


@dataclass(frozen=True)
class LikelihoodEntry:
    """One likelihood name: ``make(C, options)`` builds it for C classes from its resolved options; ``options``:
    the ``likelihood_params`` keys it takes, with their defaults (from ``LIKELIHOOD_OPTIONS``); ``classes``: the
    classes ``make`` builds (a ``likelihood=`` object of one of them follows this entry's method rules)."""

    make: Callable[[int, dict], Likelihood]
    options: dict
    classes: tuple[type[Likelihood], ...]


_ADDITIVE_OPTIONS = ("noise_variance", "delta", "learn_delta")
_ADDITIVE = (AdditiveGaussian, BinaryAdditiveGaussian)

# "hinge" is bsvm's own (``Method.own_likelihood``); "step", "probit" and "logit" differ in their noise variance
# only, and methods take all three or none (an additive-noise object follows their rules)
LIKELIHOODS: dict[str, LikelihoodEntry] = {
    "robustmax": LikelihoodEntry(_robust_max, _takes(LIKELIHOOD_OPTIONS, "epsilon", "learn_epsilon"), (RobustMax,)),
    "step": LikelihoodEntry(_additive("step"), _takes(LIKELIHOOD_OPTIONS, *_ADDITIVE_OPTIONS), _ADDITIVE),
    "probit": LikelihoodEntry(_additive("probit"), _takes(LIKELIHOOD_OPTIONS, *_ADDITIVE_OPTIONS), _ADDITIVE),
    "logit": LikelihoodEntry(_additive("logit"), _takes(LIKELIHOOD_OPTIONS, *_ADDITIVE_OPTIONS), _ADDITIVE),
    "softmax": LikelihoodEntry(_softmax, _takes(LIKELIHOOD_OPTIONS, "n_samples_predict", "softmax_predict"),
                               (Softmax, BinarySoftmax)),
    "hinge": LikelihoodEntry(_hinge, {}, (MulticlassHinge, BinaryHinge)),
}


def likelihood_key(likelihood: str | Likelihood) -> str:
    """The ``LIKELIHOODS`` entry of a ``likelihood=`` value: the name itself, or for an object the entry that builds
    its class — for an additive-noise object the one of its noise variance (``NOISE_VARIANCE``: a probit object
    fits as ``"probit"`` does), the first of them ("step") for a variance none of them has."""
    if isinstance(likelihood, str):
        return likelihood
    names = [name for name, e in LIKELIHOODS.items() if type(likelihood) in e.classes]
    a = getattr(likelihood, "noise_variance", None)
    return next((name for name in names if name in NOISE_VARIANCE and NOISE_VARIANCE[name] == a), names[0])


def likelihood_name(params: dict) -> str:
    """The likelihood that the estimator's parameters ``params`` use: the method's own one, if it has one."""
    return method_entry(params).own_likelihood or likelihood_key(params["likelihood"])


def make_likelihood(params: dict, C: int) -> Likelihood:
    """The likelihood of ``params`` (options resolved, ``resolve``) for C classes: a copy of a ``likelihood=``
    object (the argument is not modified), built for C classes."""
    given = params["likelihood"]
    if not isinstance(given, str) and not method_entry(params).own_likelihood:
        if given.n_classes != C:
            raise ValueError(f"likelihood={type(given).__name__} object is for {given.n_classes} classes; y has {C}: "
                             "build it for the data's classes")
        return copy.deepcopy(given)
    return LIKELIHOODS[likelihood_name(params)].make(C, params["likelihood_params"])


# -- kernels --------------------------------------------------------------------------------------
def _matern(nu: float):
    return lambda D, L, kw: K.Matern(D, L, nu=nu, **kw)


def _matern52_rbf(D: int, L: int, kw: dict) -> torch.nn.Module:
    # additive-noise-gpc Table V / App. D: the RBF term starts at 10× the Matérn length-scale; one latent-noise term
    ls = kw["lengthscale"]
    rbf_ls = None if ls is None else 10.0 * torch.as_tensor(ls, dtype=torch.float64)
    return K.Sum(K.Matern(D, L, nu=2.5, **kw), K.RBF(D, L, **{**kw, "lengthscale": rbf_ls, "noise": None}))


def _rbf_linear(D: int, L: int, kw: dict) -> torch.nn.Module:
    # RBF plus an ARD linear term from the same initial length-scales (each term's amplitude 1); one latent-noise term
    return K.Sum(K.RBF(D, L, **kw), K.Linear(D, L, **{**kw, "noise": None}))


# name -> factory(D, L, keyword arguments of the kernel classes)
KERNELS: dict[str, Callable[[int, int, dict], torch.nn.Module]] = {
    "rbf": lambda D, L, kw: K.RBF(D, L, **kw), "matern12": _matern(0.5), "matern32": _matern(1.5),
    "matern52": _matern(2.5), "linear": lambda D, L, kw: K.Linear(D, L, **kw), "matern52+rbf": _matern52_rbf,
    "rbf+linear": _rbf_linear,
}


def make_kernel(params: dict, D: int, L: int, lengthscale, dtype: torch.dtype) -> torch.nn.Module:
    """The kernel of ``params["kernel"]`` (options resolved, ``resolve``) on D inputs for L latent functions;
    ``lengthscale``: the data-derived initial length-scales, replaced by the option ``init_lengthscale`` when
    that is set. A ``kernel=`` object: a copy (the argument is not modified), with its own initial values."""
    given = params["kernel"]
    if not isinstance(given, str):
        if (given.input_dim, given.n_latent) != (D, L):
            raise ValueError(f"kernel={type(given).__name__} object has input_dim={given.input_dim}, "
                             f"n_latent={given.n_latent}; this fit needs input_dim={D} (the features, or a feature "
                             f"extractor's outputs) and n_latent={L} (the likelihood's latent functions)")
        return copy.deepcopy(given).to(dtype=dtype)
    o = params["kernel_params"]
    if o["init_lengthscale"] is not None:
        lengthscale = float(o["init_lengthscale"])
    kw = dict(shared=o["shared_kernel"], lengthscale=lengthscale, noise=o["latent_noise"],
              variance=float(o["init_variance"]), dtype=dtype)
    return KERNELS[params["kernel"]](D, L, kw)


# -- kernel= and likelihood= objects: the classes accepted, each with the constructor arguments that rebuild an
# instance together with its state_dict (its values: length-scales, ε, δ, ...)
def _kernel_config(k: K.Kernel) -> dict:
    # "noise": the term exists (its value is in the state)
    return {"input_dim": k.input_dim, "n_latent": k.n_latent, "shared": k.shared,
            "ard": k.raw_lengthscale.shape[-1] == k.input_dim, "noise": None if k.raw_noise is None else 1.0}


def _learned(module: nn.Module, name: str) -> bool:
    return isinstance(getattr(module, name), nn.Parameter)


def _likelihood_config(lik: Likelihood) -> dict:
    return {"n_quadrature": lik.n_quadrature, "n_samples": lik.n_samples, "max_grid": lik.max_grid}


def _additive_config(lik) -> dict:
    return {**_likelihood_config(lik), "noise_variance": lik.noise_variance, "learn_delta": _learned(lik, "raw_flip")}


KERNEL_CLASSES: dict[str, tuple[type, Callable[[nn.Module], dict]]] = {
    "RBF": (K.RBF, _kernel_config),
    "Matern": (K.Matern, lambda k: {**_kernel_config(k), "nu": k.nu}),
    "Linear": (K.Linear, _kernel_config),
    "Sum": (K.Sum, lambda k: {"first": k.first, "second": k.second}),
}
LIKELIHOOD_CLASSES: dict[str, tuple[type, Callable[[nn.Module], dict]]] = {
    "RobustMax": (RobustMax, lambda l: {**_likelihood_config(l), "n_classes": l.n_classes,
                                        "learn_epsilon": _learned(l, "raw_epsilon"), "n_points": l.n_points,
                                        "n_points_predict": l.n_points_predict}),
    "AdditiveGaussian": (AdditiveGaussian, lambda l: {**_additive_config(l), "n_classes": l.n_classes,
                                                      "n_points": l.n_points, "n_points_predict": l.n_points_predict}),
    "BinaryAdditiveGaussian": (BinaryAdditiveGaussian, _additive_config),
    "Softmax": (Softmax, lambda l: {**_likelihood_config(l), "n_classes": l.n_classes,
                                    "n_samples_predict": l.n_samples_predict, "predict_rule": l.predict_rule,
                                    "seed": l.seed}),
    "BinarySoftmax": (BinarySoftmax, _likelihood_config),
    "MulticlassHinge": (MulticlassHinge, lambda l: {**_likelihood_config(l), "n_classes": l.n_classes,
                                                    "n_points_predict": l.n_points_predict}),
    "BinaryHinge": (BinaryHinge, _likelihood_config),
}
_CLASSES = {**KERNEL_CLASSES, **LIKELIHOOD_CLASSES}


def _class_name(obj) -> str | None:
    """The name of ``obj``'s class in ``KERNEL_CLASSES``/``LIKELIHOOD_CLASSES`` (the class itself, not a
    subclass, whose constructor may differ), or None."""
    return next((name for name, (cls, _) in _CLASSES.items() if type(obj) is cls), None)


def config(obj: nn.Module) -> dict:
    """The constructor arguments that rebuild a kernel or likelihood object of ``KERNEL_CLASSES`` or
    ``LIKELIHOOD_CLASSES`` together with its state_dict."""
    name = _class_name(obj)
    if name is None:
        raise TypeError(f"{type(obj).__name__} is not a class of KERNEL_CLASSES or LIKELIHOOD_CLASSES")
    return _CLASSES[name][1](obj)


def spec(obj: nn.Module) -> dict:
    """A kernel or likelihood object as plain values and tensors: {"class", "config" (the constructor
    arguments; modules among them as specs), "state" (its state_dict)} — what a model file stores of it."""
    cfg = {k: spec(v) if isinstance(v, nn.Module) else v for k, v in config(obj).items()}
    return {"class": _class_name(obj), "config": cfg,
            "state": {k: v.detach().cpu().clone() for k, v in obj.state_dict().items()}}


def from_spec(s: dict) -> nn.Module:
    """The object that ``spec`` described: its class looked up by name in the tables (nothing from the file is
    executed), built from its constructor arguments, its state loaded."""
    cls = _CLASSES[s["class"]][0]
    obj = cls(**{k: from_spec(v) if isinstance(v, dict) else v for k, v in s["config"].items()})
    obj.load_state_dict(s["state"])
    return obj


def describe(value) -> object:
    """A ``kernel=``/``likelihood=`` value as a comparable, printable description of the model it makes: a name,
    or an object's class, constructor arguments and fixed values (buffers, such as a fixed ε) — not its initial
    values, which a warm start may change."""
    if isinstance(value, str):
        return value
    cfg = {k: describe(v) if isinstance(v, nn.Module) else v for k, v in config(value).items()}
    fixed = tuple((k, tuple(b.detach().cpu().reshape(-1).tolist())) for k, b in value.named_buffers())
    return (_class_name(value), tuple(sorted(cfg.items())), fixed)


# the estimator parameter of each group of options -> what declares the keys it takes, from the parameters
OPTION_GROUPS: dict[str, Callable[[dict], dict]] = {
    "method_params": lambda p: method_entry(p).options,
    "likelihood_params": lambda p: _likelihood_options(p),
    "kernel_params": lambda p: {**KERNEL_OPTIONS, "prior_scale": fit_default(p, "prior_scale")},
    "inducing_params": lambda p: {**INDUCING_OPTIONS, "learn": fit_default(p, "learn_inducing")},
    "optimizer_params": lambda p: OPTIMIZER_OPTIONS,
}


def _likelihood_options(p: dict) -> dict:
    """The options the likelihood takes, with the method's default for ``learn_epsilon`` where it takes that
    (``fit_default``)."""
    options = LIKELIHOODS[likelihood_name(p)].options
    return {**options, "learn_epsilon": fit_default(p, "learn_epsilon")} if "learn_epsilon" in options else options


def resolve(params: dict) -> dict:
    """The estimator's parameters with each group of options (``OPTION_GROUPS``: ``method_params``, ...,
    ``optimizer_params``) resolved: the options that the chosen method, likelihood, kernel, inducing inputs and
    optimizer take, their defaults updated by the dict given (None: all defaults). Keys they do not take are not checked here (``validation.check_params`` does)."""
    rate = params.get("learning_rate")
    return {**params, **{group: {**declared(params), **(params[group] or {})}
                         for group, declared in OPTION_GROUPS.items()},
            "learning_rate": fit_default(params, "learning_rate") if rate is None else rate,
            "optimizer": optimizer_of(params), "tol": tol_of(params), "max_iter": max_iter_of(params)}


def _full_batch(params: dict) -> bool:
    """Whether these parameters fit on the full batch. batch_size "auto" counts as the full batch until a fit
    resolves it for its data (``fitting.resolve_batch_size``, which derives the optimizer and tol again)."""
    return params.get("batch_size") in (None, "auto")


# method="auto": the method of a full-batch fit and of a minibatch or streamed one (``fitting.resolve_method``)
AUTO_FULL_BATCH, AUTO_MINIBATCH = "ep", "sep"


def method_name(params: dict) -> str:
    """``params["method"]``; for "auto" the method it is before a fit has seen the data: ``AUTO_MINIBATCH`` when a
    batch size is given, else ``AUTO_FULL_BATCH`` (a fit chooses again by the data's size,
    ``fitting.resolve_method``)."""
    if params["method"] != "auto":
        return params["method"]
    return AUTO_FULL_BATCH if _full_batch(params) else AUTO_MINIBATCH


def method_entry(params: dict) -> "Method":
    """The registry entry of the method the parameters ``params`` stand for (``method_name``)."""
    return METHODS[method_name(params)]


def tol_of(params: dict) -> float | None:
    """The stopping tolerance a fit with these estimator parameters uses: ``tol``, or for "auto" the method's
    (``Method.tol``) in a full-batch fit and 1e-4 with minibatches."""
    if params.get("tol", "auto") != "auto":
        return params["tol"]
    return fit_default(params, "tol") if _full_batch(params) else 1e-4


def fit_default(params: dict, name: str):
    """The default ``name`` ("learning_rate", "learn_inducing", "prior_scale", "tol", "learn_epsilon") of the method
    these estimator parameters stand for: its ``Method.full_batch_fit`` value in a full-batch fit where it has one, else the
    ``Method``'s attribute."""
    entry = method_entry(params)
    if _full_batch(params) and name in entry.full_batch_fit and (
            entry.full_batch_likelihoods is None or likelihood_name(params) in entry.full_batch_likelihoods):
        return entry.full_batch_fit[name]
    return getattr(entry, name)


# max_iter="auto": the step ceiling of a full-batch fit and of a minibatch one (docs/design-notes.md, "A stopping
# rule minibatch fits can meet"): a minibatch fit needs more steps, and its stopping rule at least
# n_iter_no_change windows of 8 to 50 steps
AUTO_MAX_ITER_FULL_BATCH, AUTO_MAX_ITER_MINIBATCH = 500, 2000


def max_iter_of(params: dict) -> int:
    """The step ceiling a fit with these estimator parameters has: ``max_iter``, or for "auto"
    ``AUTO_MAX_ITER_FULL_BATCH`` in a full-batch fit and ``AUTO_MAX_ITER_MINIBATCH`` with minibatches."""
    if params.get("max_iter", "auto") != "auto":
        return params["max_iter"]
    return AUTO_MAX_ITER_FULL_BATCH if _full_batch(params) else AUTO_MAX_ITER_MINIBATCH


def optimizer_of(params: dict) -> str:
    """The optimizer a fit with these estimator parameters uses: ``optimizer``, or for None the method's
    (``Method.optimizer``) in a full-batch fit and "adam" with minibatches (sign-based Rprop needs exact
    gradients)."""
    if params.get("optimizer") is not None:
        return params["optimizer"]
    return method_entry(params).optimizer if _full_batch(params) else "adam"


def method_table() -> str:
    """The README's and the docs' method table, as Markdown, from ``METHODS``."""
    rows = ["| `method=` | paper | what it is | streams | per-row sites | feature extractor |", "|---|---|---|---|---|---|"]
    yes = {True: "yes", False: "—"}
    for name, m in METHODS.items():
        c = m.capabilities
        rows.append(f"| `{name}` | {m.paper} | {m.summary} | {yes[c.streamable]} | {yes[c.per_row_state]} | "
                    f"{yes[c.free_gaussian]} |")
    return "\n".join(rows)

