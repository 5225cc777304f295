"""Contract tests over every entry of the method registry: every method fits, predicts, saves and loads, streams
if it declares it can, warm-starts, and passes scikit-learn's estimator checks; guards fail when a new engine or
method is not covered."""
import copy
import importlib
import inspect
import pkgutil
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import sgpc
from sgpc import GPClassifier, stream
from sgpc.engine import Engine, EngineProtocol
from sgpc import fitting, persist, registry, validation
from sgpc.registry import (INDUCING_OPTIONS, KERNEL_OPTIONS, KERNELS, LIKELIHOOD_OPTIONS, LIKELIHOODS, METHOD_OPTIONS,
                           METHODS, OPTIMIZER_OPTIONS, make_engine, make_kernel, method_table, resolve)
from support import weighting_xfails

README = Path(__file__).resolve().parents[1] / "README.md"


def options(method: str, **extra) -> dict:
    """Small, fast settings that every method accepts (full-batch EP methods on L-BFGS with its unit step)."""
    kw = dict(method=method, n_inducing=6, max_iter=4, random_state=0)
    if METHODS[method].capabilities.full_batch_only:
        kw.update(optimizer="lbfgs", learning_rate=1.0, max_iter=2)
    return {**kw, **extra}


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    keep = np.arange(0, 150, 3)                      # 50 rows, all three classes
    return X[keep], y[keep]


def _expected_failures(est) -> dict:
    # bsvm predicts with the SVM's rule, argmax_c of the posterior mean of f*_c (multiclass-bayesian-svm §3),
    # which is not always the argmax of predict_proba that this check requires; weighted rows: weighting_xfails
    if est.method == "bsvm":
        return {"check_classifiers_train": "bsvm's predict is argmax E[f*], not argmax predict_proba",
                **weighting_xfails(est)}
    return weighting_xfails(est)


@parametrize_with_checks([GPClassifier(**options(m)) for m in METHODS if m not in ("vi", "ep", "sep", "gfitc")],
                         expected_failed_checks=_expected_failures)
def test_sklearn_contract_of_the_other_methods(estimator, check):
    # test_estimator runs the checks for vi, ep, sep and gfitc; here every other registry entry
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # n_inducing clamped on the checks' tiny data sets
        check(estimator)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_fits_predicts_saves_and_loads(iris, method, tmp_path):
    X, y = iris
    est = GPClassifier(**options(method)).fit(X, y)
    P = est.predict_proba(X)
    assert P.shape == (len(X), 3) and np.all(np.isfinite(P))
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=0, atol=1e-12)
    assert est.n_iter_ >= 1 and est.score(X, y) > 0.4          # chance is 1/3; a few steps already beat it
    est.save(tmp_path / "m.pt")
    back = GPClassifier.load(tmp_path / "m.pt")
    np.testing.assert_array_equal(back.predict_proba(X), P)    # the same tensors: bitwise the same predictions


@pytest.mark.parametrize("method", METHODS)
def test_every_method_warm_starts(iris, method):
    X, y = iris
    est = GPClassifier(**options(method, warm_start=True)).fit(X[:-6], y[:-6])
    assert not est.warm_started_
    est.fit(X, y)
    assert est.warm_started_
    assert np.all(np.isfinite(est.predict_proba(X)))


@pytest.mark.parametrize("method", METHODS)
def test_streaming_follows_the_declared_capability(iris, method, tmp_path):
    X, y = iris
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    source = stream.NpySource(str(tmp_path / "X.npy"), str(tmp_path / "y.npy"))
    est = GPClassifier(**options(method, batch_size=10) if not METHODS[method].capabilities.full_batch_only
                       else options(method))
    if METHODS[method].capabilities.streamable:
        est.fit(source)
        assert np.all(np.isfinite(est.predict_proba(X)))
    else:
        with pytest.raises(ValueError, match=f"method={method!r} .*; streaming supports"):
            est.fit(source)


@pytest.mark.parametrize("method", METHODS)
def test_feature_extractor_follows_the_declared_capability(iris, method):
    X, y = iris
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3, affine=False))
    est = GPClassifier(**options(method, feature_extractor=net))
    if METHODS[method].capabilities.free_gaussian:
        est.fit(X, y)
        assert np.all(np.isfinite(est.predict_proba(X)))
    else:
        with pytest.raises(ValueError, match="feature_extractor needs a free-Gaussian method"):
            est.fit(X, y)


@pytest.mark.parametrize("method", ["gfitc", "rmgpc", "smgpc"])
def test_the_inner_ep_tolerance_reaches_the_engine(method):
    # ep_tol is the engine's tol; the fit loop settles (Engine.settle) only the engines with an inner EP
    assert make_engine(resolve(GPClassifier(method=method).get_params(deep=False))).tol == 1e-2
    params = GPClassifier(method=method, method_params={"ep_tol": 1e-3}).get_params(deep=False)
    engine = make_engine(resolve(params))
    assert engine.tol == 1e-3 and type(engine).settle is not Engine.settle


@pytest.mark.parametrize("method", METHODS)
def test_every_engine_implements_the_protocol(method):
    params = GPClassifier(method=method).get_params(deep=False)
    engine = make_engine(resolve(params))
    assert isinstance(engine, Engine) and isinstance(engine, EngineProtocol)
    caps = METHODS[method].capabilities
    if caps.increment:       # the additive update is overridden, not the base's NotImplementedError
        assert type(engine).increment is not Engine.increment and type(engine).apply is not Engine.apply
    if caps.shared_geometry:
        assert type(engine).geometry is not Engine.geometry
    if caps.per_row_state:   # a warm start must move the sites of kept rows
        assert type(engine).carry is not Engine.carry


def _engine_classes() -> set:
    found = set()
    for info in pkgutil.iter_modules(sgpc.__path__):
        module = importlib.import_module(f"sgpc.{info.name}")
        found |= {obj for _, obj in inspect.getmembers(module, inspect.isclass)
                  if issubclass(obj, Engine) and obj is not Engine}
    return found


def test_guard_every_engine_class_is_a_registered_method():
    # a new engine must get a registry entry (and with it every contract test above)
    registered = {m.engine for m in METHODS.values()}
    assert _engine_classes() == registered


def test_guard_every_method_is_offered_by_the_cli_and_listed_in_the_readme():
    from sgpc.cli import build_parser
    fit = build_parser()._subparsers._group_actions[0].choices["fit"]
    method_action = next(a for a in fit._actions if "--method" in a.option_strings)
    assert tuple(method_action.choices) == ("auto", *METHODS)
    table = method_table()
    readme = README.read_text(encoding="utf-8")
    assert table in readme, ("README's method table is not registry.method_table(); paste the output of "
                             "`python -c 'from sgpc.registry import method_table; print(method_table())'`")
    for name in METHODS:
        assert re.search(rf"^\| `{re.escape(name)}` \|", table, re.M)


def test_likelihood_and_kernel_names_build(iris):
    X, y = iris
    for name in LIKELIHOODS:
        if name == "hinge":                              # bsvm's own, not a likelihood= choice
            continue
        GPClassifier(method="vi", likelihood=name, n_inducing=4, max_iter=1, random_state=0).fit(X, y)
    for name in KERNELS:
        GPClassifier(kernel=name, n_inducing=4, max_iter=1, random_state=0).fit(X, y)


# -- options: method_params, likelihood_params, kernel_params ---------------------------------------------------
class _Recorder(dict):
    """One entry's resolved options that record which keys a factory reads (an undeclared key: KeyError)."""

    def __init__(self, options):
        super().__init__(options)
        self.read = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


@pytest.mark.parametrize("method", METHODS)
def test_guard_a_method_reads_every_option_it_declares_and_no_other(method):
    entry, read = METHODS[method], set()
    for likelihood in entry.likelihoods + entry.binary_likelihoods:     # the settings may depend on the likelihood
        params = resolve(GPClassifier(method=method, likelihood=likelihood).get_params(deep=False))
        params["method_params"] = _Recorder(entry.options)
        make_engine(params)
        read |= params["method_params"].read
    assert read == set(entry.options)
    assert set(entry.options) <= set(METHOD_OPTIONS)


@pytest.mark.parametrize("name", LIKELIHOODS)
def test_guard_a_likelihood_reads_every_option_it_declares_and_no_other(name):
    entry, read = LIKELIHOODS[name], set()
    for C in (2, 3):                       # some options only matter for more than two classes (softmax sampling)
        options = _Recorder(entry.options)
        entry.make(C, options)
        read |= options.read
    assert read == set(entry.options)
    assert set(entry.options) <= set(LIKELIHOOD_OPTIONS)


@pytest.mark.parametrize("kernel", KERNELS)
def test_guard_a_kernel_reads_every_kernel_option_and_no_other(kernel):
    params = resolve(GPClassifier(kernel=kernel).get_params(deep=False))
    params["kernel_params"] = _Recorder(KERNEL_OPTIONS)
    make_kernel(params, 2, 3, None, torch.float64)
    # prior_scale is the prior on these hyper-parameters, read when the fit builds it (fitting.hyperprior)
    assert params["kernel_params"].read == set(KERNEL_OPTIONS) - {"prior_scale"}


def test_guard_every_option_is_used_and_has_a_value_check():
    # an option in a table that no entry takes is dead; one without a check reaches the engine unchecked
    assert set().union(*(m.options for m in METHODS.values())) == set(METHOD_OPTIONS)
    assert set().union(*(e.options for e in LIKELIHOODS.values())) == set(LIKELIHOOD_OPTIONS)
    assert set(validation._OPTION_CHECKS) == (set(METHOD_OPTIONS) | set(LIKELIHOOD_OPTIONS) | set(KERNEL_OPTIONS)
                                              | set(INDUCING_OPTIONS) | set(OPTIMIZER_OPTIONS))


def test_option_defaults_are_the_documented_ones():
    # the defaults are part of the API: a changed one changes every fit that relies on it
    assert METHOD_OPTIONS == {"alpha": 0.5, "damping": 0.5, "sep_log_z": "local", "outlier_prior_a": 1.0,
                              "outlier_prior_b": 9.0, "natgrad_lr": None, "ep_tol": 1e-2}
    assert LIKELIHOOD_OPTIONS == {"epsilon": 1e-3, "learn_epsilon": False, "noise_variance": None, "delta": 1e-3,
                                  "learn_delta": True, "n_samples_predict": 1024, "softmax_predict": "qmc"}
    assert KERNEL_OPTIONS == {"latent_noise": 1e-3, "init_lengthscale": None, "init_variance": 1.0,
                              "shared_kernel": False, "prior_scale": None}
    # the methods' own defaults (docs/suite.md, design notes): ep and the function-space EP engines fit the full
    # batch on Rprop from 0.05 with a log-normal prior of scale 2, their inducing inputs kept, tol 3e-4
    ep_fit = ("rprop", 2.0, 0.05, False, 3e-4)
    fits = {name: (m.optimizer, m.prior_scale, m.learning_rate, m.learn_inducing, m.tol) for name, m in METHODS.items()}
    assert {name: fit for name, fit in fits.items() if fit != ("adam", None, 0.01, True, 1e-4)} \
        == {"ep": ep_fit, "gfitc": ep_fit, "rmgpc": ep_fit, "smgpc": ep_fit}
    # sep, and vi with robust-max or step, fit the full batch as ep does, but on Adam (Rprop's sign steps did not
    # settle SEP's objective); vi learns robust-max's epsilon
    adam_fit = dict(learning_rate=0.05, learn_inducing=False, prior_scale=2.0, tol=3e-4)
    assert {name: (m.full_batch_fit, m.full_batch_likelihoods) for name, m in METHODS.items() if m.full_batch_fit} == \
        {"sep": ({**adam_fit, "learning_rate": 0.1}, None), "vi": (adam_fit, ("robustmax", "step"))}
    assert [name for name, m in METHODS.items() if m.learn_epsilon] == ["vi"]
    assert INDUCING_OPTIONS == {"init": "kmeans", "learn": True, "shared": False, "learning_rate": None}
    assert OPTIMIZER_OPTIONS == {"lr_decay": 1.0}


def test_resolve_merges_the_dicts_over_the_declared_defaults():
    params = GPClassifier(method="pep", likelihood="probit", method_params={"alpha": 0.3},
                          likelihood_params={"learn_delta": False}, kernel_params={"init_variance": 2.0}).get_params()
    resolved = resolve(params)
    assert resolved["method_params"] == {"alpha": 0.3, "damping": 0.5}
    assert resolved["likelihood_params"] == {"noise_variance": None, "delta": 1e-3, "learn_delta": False}
    assert resolved["kernel_params"] == {**KERNEL_OPTIONS, "init_variance": 2.0}
    assert params["method_params"] == {"alpha": 0.3}                  # the estimator's dicts are not modified
    assert resolve(GPClassifier(method="bsvm").get_params())["likelihood_params"] == {}    # the hinge takes none


@pytest.mark.parametrize("kw,msg", [
    (dict(method="vi", method_params={"alpha": 0.3}), r"unknown method_params key 'alpha' for method='vi'; valid: "
                                                      r"'natgrad_lr'"),
    (dict(method="sep", method_params={"sep_log_z": "exact"}), r"unknown sep_log_z 'exact'; valid: 'local', 'tied'"),
    (dict(method="vi", likelihood="softmax", likelihood_params={"epsilon": 0.1}),
     r"unknown likelihood_params key 'epsilon' for likelihood='softmax'; valid: 'n_samples_predict', 'softmax_predict'"),
    (dict(likelihood_params={"epsilon": 1.5}), r"epsilon must be a finite number in \(0, 1\)"),
    (dict(kernel_params="rbf"), "kernel_params must be a dict of options or None, got str"),
    (dict(method="rmgpc", method_params={"damping": 0.5, "outlier_prior_b": 0.0}), "outlier_prior_b must be"),
    (dict(method="gfitc", method_params={"ep_tol": 0.0}), r"ep_tol must be a finite number in \(0, ∞\)"),
    (dict(method="ep", method_params={"ep_tol": 1e-3}), r"unknown method_params key 'ep_tol' for method='ep'"),
    (dict(likelihood_params={"learn_epsilon": True}), r"method='ep' fits the pairwise step factors .* does not "
                                                      r"contain epsilon"),        # "auto": ep (full batch) or sep
    (dict(method="gfitc", likelihood_params={"learn_epsilon": True}), "learn_epsilon=True would leave it where it"),
])
def test_unknown_option_keys_and_bad_values_are_refused(kw, msg):
    with pytest.raises(ValueError, match=msg):
        validation.check_params(GPClassifier(**kw))


def test_option_dicts_follow_get_params_set_params_and_clone(iris):
    from sklearn.base import clone
    from sklearn.utils.estimator_checks import (check_dont_overwrite_parameters, check_estimators_overwrite_params,
                                                check_get_params_invariance, check_set_params)
    est = GPClassifier(method="pep", method_params={"alpha": 0.3}, likelihood_params={"epsilon": 0.01},
                       kernel_params={"latent_noise": None}, n_inducing=5, max_iter=3, random_state=0)
    copy = clone(est)
    assert copy.get_params()["method_params"] == {"alpha": 0.3}
    assert copy.method_params is not est.method_params                 # clone copies the dicts
    copy.set_params(method_params={"alpha": 1.0, "damping": 0.3})
    assert copy._make_engine().alpha == 1.0 and copy._make_engine().damping == 0.3 and est._make_engine().alpha == 0.3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for check in (check_dont_overwrite_parameters, check_estimators_overwrite_params,
                      check_get_params_invariance, check_set_params):
            check("GPClassifier", clone(est))


def _old_format_params(params: dict) -> dict:
    """A model file's parameters as files written before the option dicts held them: every option flat."""
    old = {k: v for k, v in params.items() if k not in ("method_params", "likelihood_params", "kernel_params")}
    old.update({**METHOD_OPTIONS, **LIKELIHOOD_OPTIONS, **KERNEL_OPTIONS})
    for group in ("method_params", "likelihood_params", "kernel_params"):
        old.update(params[group] or {})
    return old


@pytest.mark.parametrize("kw", [dict(method="pep", method_params={"alpha": 0.3}, kernel_params={"init_variance": 2.0}),
                                dict(method="vi", likelihood="probit", likelihood_params={"learn_delta": False}),
                                dict(method="bsvm")])
def test_a_model_file_with_the_old_flat_parameters_loads(iris, tmp_path, kw):
    X, y = iris
    est = GPClassifier(**kw, n_inducing=5, max_iter=3, tol=None, random_state=0).fit(X, y)
    est.save(tmp_path / "new.pt")
    payload = persist.load_model(tmp_path / "new.pt")
    for key in ("format", "version"):
        payload.pop(key)
    payload["params"] = _old_format_params(payload["params"])
    assert "alpha" in payload["params"] and "method_params" not in payload["params"]
    persist.save_model(tmp_path / "old.pt", payload)     # what save wrote before the option dicts
    back = GPClassifier.load(tmp_path / "old.pt")
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))
    assert fitting.structure(fitting.settings(back)) == fitting.structure(fitting.settings(est))
    for group in ("method_params", "likelihood_params", "kernel_params"):
        assert resolve(back.get_params())[group] == resolve(est.get_params())[group]
    assert back.method_params == {k: v for k, v in _old_format_params(est.get_params()).items()
                                  if k in METHODS[est.method].options}


def test_a_model_file_with_the_old_inducing_optimizer_and_run_arguments_loads(iris, tmp_path):
    # files written before inducing_params/optimizer_params held inducing_init, learn_inducing, shared_inducing
    # and lr_decay as arguments, and eval_every, checkpoint_path, checkpoint_every (now arguments of fit)
    X, y = iris
    kw = dict(inducing_params={"init": "random", "learn": False, "shared": True}, optimizer_params={"lr_decay": 0.9},
              batch_size=25)
    est = GPClassifier(**kw, n_inducing=5, max_iter=3, tol=None, random_state=0).fit(X, y)
    est.save(tmp_path / "new.pt")
    payload = persist.load_model(tmp_path / "new.pt")
    for key in ("format", "version"):
        payload.pop(key)
    params = {k: v for k, v in payload["params"].items() if k not in ("inducing_params", "optimizer_params")}
    payload["params"] = {**params, "inducing_init": "random", "learn_inducing": False, "shared_inducing": True,
                         "lr_decay": 0.9, "eval_every": 7, "checkpoint_path": None, "checkpoint_every": 0}
    persist.save_model(tmp_path / "old.pt", payload)     # what save wrote before
    back = GPClassifier.load(tmp_path / "old.pt")
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))
    assert back.get_params() == est.get_params()


# -- kernel= and likelihood= objects ---------------------------------------------------------------------------
def _object_cases():
    """(estimator arguments with objects, the same model by name and options, binary data?)."""
    from sgpc import kernels as K
    from sgpc.likelihoods import AdditiveGaussian, BinaryAdditiveGaussian, RobustMax, Softmax
    return [
        (dict(kernel=K.RBF(4, 3, lengthscale=2.0, noise=1e-3)), dict(kernel_params={"init_lengthscale": 2.0}), False),
        (dict(kernel=K.Matern(4, 3, nu=1.5, lengthscale=1.5, variance=2.0, noise=None, shared=True)),
         dict(kernel="matern32", kernel_params={"init_lengthscale": 1.5, "init_variance": 2.0, "latent_noise": None,
                                                "shared_kernel": True}), False),
        (dict(kernel=K.Sum(K.Matern(4, 3, nu=2.5, lengthscale=1.5, noise=1e-3), K.RBF(4, 3, lengthscale=15.0))),
         dict(kernel="matern52+rbf", kernel_params={"init_lengthscale": 1.5}), False),
        (dict(kernel=K.Sum(K.RBF(4, 3, lengthscale=1.5, noise=1e-3), K.Linear(4, 3, lengthscale=1.5, noise=None))),
         dict(kernel="rbf+linear", kernel_params={"init_lengthscale": 1.5}), False),
        (dict(method="vi", likelihood=RobustMax(3, epsilon=0.01, learn_epsilon=True)),
         dict(method="vi", likelihood_params={"epsilon": 0.01, "learn_epsilon": True}), False),
        (dict(method="vi", likelihood=AdditiveGaussian(3, 1.0, 1e-3)), dict(method="vi", likelihood="probit"), False),
        (dict(method="vi", likelihood=AdditiveGaussian(3, 0.0, 1e-3)), dict(method="vi", likelihood="step"), False),
        (dict(method="vi", likelihood=Softmax(3)), dict(method="vi", likelihood="softmax"), False),
        (dict(method="ep", likelihood=BinaryAdditiveGaussian(2.897, 0.01, learn_delta=False)),
         dict(method="ep", likelihood="logit", likelihood_params={"delta": 0.01, "learn_delta": False}), True),
        (dict(method="pep", likelihood=RobustMax(2), kernel=K.Linear(4, 2, lengthscale=3.0, noise=None)),
         dict(method="pep", kernel="linear", kernel_params={"init_lengthscale": 3.0, "latent_noise": None}), True),
    ]


@pytest.mark.parametrize("case", range(len(_object_cases())))
def test_kernel_and_likelihood_objects_fit_as_their_names_save_load_and_clone(iris, case, tmp_path):
    from sklearn.base import clone
    X, y = iris
    X = X[:, :4]
    with_objects, by_name, binary = _object_cases()[case]
    if binary:
        y = (y > 0).astype(int)
    kw = dict(n_inducing=6, max_iter=6, tol=None, random_state=0)
    given = {k: v for k, v in with_objects.items() if k in ("kernel", "likelihood")}
    before = {k: (copy.deepcopy(v.state_dict()), {a: b for a, b in vars(v).items() if not a.startswith("_")})
              for k, v in given.items()}
    est = GPClassifier(**with_objects, **kw).fit(X, y)
    expected = GPClassifier(**by_name, **kw).fit(X, y)
    np.testing.assert_array_equal(est.predict_proba(X), expected.predict_proba(X))     # bitwise: the same fit
    for k, obj in given.items():                                       # the arguments were not trained in place
        assert getattr(est, k) is obj
        state, attrs = before[k]
        assert state.keys() == obj.state_dict().keys()
        assert all(torch.equal(state[n], obj.state_dict()[n]) for n in state)
        assert {a: b for a, b in vars(obj).items() if not a.startswith("_")}.keys() == attrs.keys()
        assert getattr(est.model_, k) is not obj
    twin = clone(est)
    for k, obj in given.items():
        assert getattr(twin, k) is not obj and registry.describe(getattr(twin, k)) == registry.describe(obj)
    np.testing.assert_array_equal(twin.fit(X, y).predict_proba(X), est.predict_proba(X))
    est.save(tmp_path / "m.pt")
    back = GPClassifier.load(tmp_path / "m.pt")
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))
    for k, obj in given.items():
        assert type(getattr(back, k)) is type(obj) and registry.describe(getattr(back, k)) == registry.describe(obj)
        assert all(torch.equal(v, getattr(back, k).state_dict()[n]) for n, v in obj.state_dict().items())
    np.testing.assert_array_equal(back.fit(X, y).predict_proba(X), est.predict_proba(X))   # it refits the same
    est.set_params(warm_start=True).fit(X, y)                          # the same objects: the fit continues
    assert est.warm_started_


def test_kernel_and_likelihood_objects_that_do_not_fit_are_refused(iris):
    from sgpc import kernels as K
    from sgpc.likelihoods import MulticlassHinge, RobustMax, Softmax

    class MyRBF(K.RBF):
        pass
    X, y = iris
    refused = [
        (dict(kernel=RobustMax(3)), "kernel must be a name .* or an object of a class of sgpc.kernels"),
        (dict(kernel=MyRBF(4, 3)), "kernel must be a name .* got MyRBF"),
        (dict(likelihood=K.RBF(4, 3)), "likelihood must be a name .* or an object of a class of sgpc.likelihoods"),
        (dict(likelihood=MulticlassHinge(3)), "likelihood must be a name"),        # bsvm's own
        (dict(method="bsvm", likelihood=RobustMax(3)), "method='bsvm' always uses its own hinge likelihood"),
        (dict(method="ep", likelihood=Softmax(3)), "works with method='vi'"),
        (dict(kernel=K.RBF(4, 3), kernel_params={"init_variance": 2.0}), "pass kernel_params=None"),
        (dict(likelihood=RobustMax(3), likelihood_params={"epsilon": 0.1}), "pass likelihood_params=None"),
        (dict(method="rmgpc", optimizer="lbfgs", likelihood=RobustMax(3, learn_epsilon=True)),
         "leave likelihood_params\\['learn_epsilon'\\] False"),
    ]
    for kw, msg in refused:
        with pytest.raises(ValueError, match=msg):
            validation.check_params(GPClassifier(**kw))
    with pytest.raises(ValueError, match="input_dim=2, n_latent=3; this fit needs input_dim=4"):
        GPClassifier(kernel=K.RBF(2, 3), n_inducing=4, max_iter=1).fit(X, y)
    with pytest.raises(ValueError, match="is for 4 classes; y has 3"):
        GPClassifier(likelihood=RobustMax(4), n_inducing=4, max_iter=1).fit(X, y)


def test_guard_every_kernel_and_likelihood_class_rebuilds_from_its_spec():
    # a class missing from the tables cannot be a kernel=/likelihood= object; a config that misses a constructor
    # argument rebuilds another object from a model file
    from sgpc import kernels as K, likelihoods as Lk
    exported = {n for n in K.__all__ if isinstance(getattr(K, n), type) and n != "Kernel"}
    assert exported == set(registry.KERNEL_CLASSES)
    assert {n for n in Lk.__all__ if n != "Likelihood"} == set(registry.LIKELIHOOD_CLASSES)
    odd = dict(n_quadrature=7, n_samples=99, max_grid=77)           # non-default values of every argument
    examples = [K.RBF(3, 2, shared=True, lengthscale=0.7, variance=2.0, noise=None, ard=False),
                K.Matern(3, 2, nu=0.5, lengthscale=[0.5, 1.0, 2.0], noise=0.2), K.Linear(3, 1, variance=3.0),
                K.Sum(K.Matern(3, 2, nu=1.5), K.RBF(3, 2, noise=None)),
                Lk.RobustMax(4, 0.2, learn_epsilon=True, n_points=9, n_points_predict=11, **odd),
                Lk.AdditiveGaussian(4, 0.5, 0.3, learn_delta=False, n_points=9, n_points_predict=11, **odd),
                Lk.BinaryAdditiveGaussian(0.5, 0.2, learn_delta=False, **odd),
                Lk.Softmax(4, n_samples_predict=17, predict_rule="mc", seed=5, **odd), Lk.BinarySoftmax(**odd),
                Lk.MulticlassHinge(4, n_points_predict=13, **odd), Lk.BinaryHinge(**odd)]
    assert {type(e).__name__ for e in examples} == set(registry.KERNEL_CLASSES) | set(registry.LIKELIHOOD_CLASSES)
    for obj in examples:
        back = registry.from_spec(registry.spec(obj))
        assert type(back) is type(obj) and registry.describe(back) == registry.describe(obj)
        assert {k: v for k, v in vars(back).items() if not isinstance(v, dict)} == \
            {k: v for k, v in vars(obj).items() if not isinstance(v, dict)}
        assert dict(back.named_parameters()).keys() == dict(obj.named_parameters()).keys()
        assert all(torch.equal(v, back.state_dict()[k]) for k, v in obj.state_dict().items())


def test_learn_epsilon_is_refused_exactly_where_the_objective_has_no_epsilon(iris):
    # ep, sep and gfitc fit the pairwise step factors (scalable-ep eq. 6): ε enters their predictions only, and a
    # learned ε stayed where it started (fits of 30 steps on iris, ε from 0.05: 0.05 for the three, 0.038-0.065
    # for the others); the methods whose objective has ε move it
    from sgpc.likelihoods import RobustMax
    X, y = iris
    for name, method in METHODS.items():
        kw = dict(method=name, likelihood_params={"learn_epsilon": True, "epsilon": 0.05})
        if not method.epsilon_in_objective:
            with pytest.raises(ValueError, match="does not contain epsilon"):
                validation.check_params(GPClassifier(**kw))
            with pytest.raises(ValueError, match="does not contain epsilon"):      # the same as an object
                validation.check_params(GPClassifier(method=name, likelihood=RobustMax(3, 0.05, learn_epsilon=True)))
        elif name in ("vi", "pep"):
            est = GPClassifier(**kw, n_inducing=10, max_iter=30, random_state=0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(X, y)
            assert abs(float(est.model_.likelihood.epsilon) - 0.05) > 1e-3, name
    assert {n for n, m in METHODS.items() if not m.epsilon_in_objective} == {"ep", "sep", "gfitc"}


def test_an_additive_noise_object_is_the_likelihood_of_its_noise_variance():
    """``likelihood_key``: the name of an additive-noise object decides its method's defaults (a full-batch ``vi``
    fit takes the prior and fixed inducing inputs with "step" only), so it is the name of its noise variance."""
    from sgpc.likelihoods import AdditiveGaussian, BinaryAdditiveGaussian, RobustMax
    from sgpc.registry import likelihood_key
    assert [likelihood_key(AdditiveGaussian(3, a)) for a in (0.0, 1.0, 2.897, 0.5)] == ["step", "probit", "logit", "step"]
    assert likelihood_key(BinaryAdditiveGaussian(1.0)) == "probit" and likelihood_key(RobustMax(3)) == "robustmax"
    assert likelihood_key("logit") == "logit"
