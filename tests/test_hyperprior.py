"""The log-normal prior on kernel hyper-parameters (``hyperprior``) and the Rprop optimizer that the default
``ep`` fit pairs it with (``train``, ``registry.optimizer_of``)."""
import math
import warnings

import numpy as np
import pytest
import torch

from sgpc import GPClassifier, kernels
from sgpc.hyperprior import LogNormalPrior
from sgpc.registry import optimizer_of, resolve
from sgpc.train import TrainSettings, _optimizer, _roll_back


def _kernel():
    torch.manual_seed(0)
    k = kernels.RBF(3, 2, lengthscale=torch.tensor([0.5, 2.0, 4.0], dtype=torch.float64), variance=1.5)
    return k.double()


def test_density_is_the_log_normal_formula_and_zero_at_its_centre():
    k = _kernel()
    prior = LogNormalPrior.around(k, 2.0)
    assert prior.neg_log_density(k).item() == 0.0
    ls0, var0 = k.lengthscale.detach().numpy().copy(), k.variance.detach().numpy().copy()
    with torch.no_grad():
        k.raw_lengthscale.add_(torch.tensor([[0.3, -0.7, 1.1], [0.2, 0.0, -0.4]], dtype=torch.float64))
        k.raw_variance.add_(torch.tensor([0.5, -0.25], dtype=torch.float64))
    ls, var = k.lengthscale.detach().numpy(), k.variance.detach().numpy()
    brute = (np.sum(np.log(ls / ls0) ** 2) + np.sum(np.log(var / var0) ** 2)) / (2 * 2.0 ** 2)
    assert float(prior.neg_log_density(k)) == pytest.approx(brute, rel=1e-12)


def test_recentred_is_the_prior_around_other_values_and_refuses_a_mismatch():
    # what a resumed fit rebuilds from its checkpoint's centres (train.fit)
    k = _kernel()
    first = LogNormalPrior.around(k, 2.0)
    with torch.no_grad():
        k.raw_lengthscale.add_(0.3)
        k.raw_variance.add_(-0.2)
    moved = LogNormalPrior.around(k, 2.0)
    back = moved.recentred([c for _, _, c in first.centres])
    assert float(back.neg_log_density(k)) == float(first.neg_log_density(k)) > 0.0
    assert float(moved.neg_log_density(k)) == 0.0
    with pytest.raises(ValueError, match="centres do not match"):
        moved.recentred([c for _, _, c in first.centres][:1])
    with pytest.raises(ValueError, match="centres do not match"):
        moved.recentred([c[..., :1] for _, _, c in first.centres])


def test_gradient_matches_finite_differences():
    k = _kernel()
    prior = LogNormalPrior.around(k, 0.7)
    with torch.no_grad():
        k.raw_lengthscale.mul_(1.3)
        k.raw_variance.add_(0.4)
    params = [k.raw_lengthscale, k.raw_variance]
    grads = torch.autograd.grad(prior.neg_log_density(k), params)
    for p, g in zip(params, grads):
        for i in range(p.numel()):
            with torch.no_grad():
                flat = p.view(-1)
                flat[i] += 1e-6
                up = float(prior.neg_log_density(k))
                flat[i] -= 2e-6
                down = float(prior.neg_log_density(k))
                flat[i] += 1e-6
            assert g.view(-1)[i].item() == pytest.approx((up - down) / 2e-6, rel=1e-6, abs=1e-9)


def test_a_sum_kernel_has_a_prior_on_both_terms():
    k = kernels.Sum(kernels.Matern(2, 1, nu=2.5, lengthscale=1.0), kernels.RBF(2, 1, lengthscale=10.0)).double()
    prior = LogNormalPrior.around(k, 1.0)
    assert sorted((name, what) for name, what, _ in prior.centres) == [
        ("first", "lengthscale"), ("first", "variance"), ("second", "lengthscale"), ("second", "variance")]
    with torch.no_grad():
        k.second.raw_variance.add_(1.0)
    assert float(prior.neg_log_density(k)) > 0.0


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), "2", True])
def test_scale_must_be_positive(scale):
    with pytest.raises(ValueError, match="scale must be a number > 0"):
        LogNormalPrior.around(_kernel(), scale)


def _separable(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (X[:, 0] > 0).astype(int)
    X[:, 0] += np.where(y == 1, 3.0, -3.0)      # far apart: the evidence keeps rising with the amplitude
    return X, y


def test_the_prior_keeps_an_irrelevant_features_length_scale_near_its_start():
    X, y = _separable()           # feature 1 says nothing about y: the evidence keeps rising with its length-scale
    kw = dict(method="ep", n_inducing=10, max_iter=150, tol=None, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        free = GPClassifier(**kw, kernel_params={"prior_scale": None}).fit(X, y)
        tight = GPClassifier(**kw, kernel_params={"prior_scale": 0.1}).fit(X, y)
    ls_free = float(free.model_.kernel.lengthscale[0, 1])
    ls_tight = float(tight.model_.kernel.lengthscale[0, 1])
    ls_start = math.sqrt(2) * X[:, 1].std()      # initialization.initial_lengthscales: √D × the spread
    assert ls_free > 20 * ls_start               # ML-II: the length-scale runs away
    assert abs(math.log(ls_tight / ls_start)) < 0.3     # s = 0.1 holds it within a few s of its start
    # the objective in the history is log Z + log p(ξ): below the free fit's log Z
    assert tight.history_["objective"][-1] < free.history_["objective"][-1]


def test_a_very_wide_prior_is_no_prior():
    X, y = _separable(40, seed=1)
    kw = dict(method="ep", n_inducing=8, max_iter=30, tol=None, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = GPClassifier(**kw, kernel_params={"prior_scale": None}).fit(X, y)
        b = GPClassifier(**kw, kernel_params={"prior_scale": 1e9}).fit(X, y)
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X), rtol=0, atol=1e-9)


def test_the_default_optimizer_is_the_methods_in_full_batch_and_adam_for_minibatches():
    assert optimizer_of(GPClassifier().get_params()) == "rprop"
    assert optimizer_of(GPClassifier(batch_size=64).get_params()) == "adam"
    assert optimizer_of(GPClassifier(method="vi").get_params()) == "adam"
    assert optimizer_of(GPClassifier(optimizer="lbfgs").get_params()) == "lbfgs"
    assert resolve(GPClassifier().get_params())["kernel_params"]["prior_scale"] == 2.0
    assert resolve(GPClassifier(method="sep").get_params())["kernel_params"]["prior_scale"] == 2.0   # full batch
    assert resolve(GPClassifier(method="sep", batch_size=64).get_params())["kernel_params"]["prior_scale"] is None
    for method in ("gfitc", "rmgpc", "smgpc"):       # ep's full-batch fit (registry._EP_FIT)
        p = resolve(GPClassifier(method=method).get_params())
        assert optimizer_of(GPClassifier(method=method).get_params()) == "rprop"
        assert p["kernel_params"]["prior_scale"] == 2.0 and p["inducing_params"]["learn"] is False


def test_rprop_refuses_minibatches_with_a_reason():
    with pytest.raises(ValueError, match="optimizer='rprop' needs full-batch training"):
        TrainSettings(optimizer="rprop", batch_size=10)
    X, y = _separable(30)
    with pytest.raises(ValueError, match="optimizer='rprop' needs full-batch training"):
        GPClassifier(optimizer="rprop", batch_size=10, n_inducing=5).fit(X, y)


def test_a_rejected_step_halves_rprops_step_sizes():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = _optimizer(TrainSettings(optimizer="rprop", learning_rate=0.05), [p])
    for _ in range(3):                       # the same gradient sign three times: each size grows ×1.2
        opt.zero_grad()
        (p ** 2).sum().backward()
        opt.step()
    sizes = opt.state[p]["step_size"].clone()
    np.testing.assert_allclose(sizes.numpy(), 0.05 * 1.2 ** 2)
    _roll_back(opt, [p], [torch.tensor([1.0, -2.0], dtype=torch.float64)])
    np.testing.assert_allclose(opt.state[p]["step_size"].numpy(), sizes.numpy() / 2)
    np.testing.assert_array_equal(p.detach().numpy(), [1.0, -2.0])


def test_rprop_finds_the_minimum_of_a_quadratic():
    p = torch.nn.Parameter(torch.tensor([3.0, -1.0, 0.2], dtype=torch.float64))
    opt = _optimizer(TrainSettings(optimizer="rprop", learning_rate=0.05), [p])
    target = torch.tensor([0.5, 0.25, -2.0], dtype=torch.float64)
    for _ in range(200):
        opt.zero_grad()
        ((p - target) ** 2 * torch.tensor([1.0, 100.0, 0.01])).sum().backward()
        opt.step()
    np.testing.assert_allclose(p.detach().numpy(), target.numpy(), atol=1e-4)
