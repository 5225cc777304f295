"""warm_start for the site-based methods: sites follow their rows (ep, pep, gfitc), the tied site
follows the slot counts (sep), the tied factor stays (apep); row keys; persistence of the keys."""
import numpy as np
import pytest
import torch

from sgpc import GPClassifier, fitting
from sgpc.warm_start import row_keys


def _blobs(n_per=15, C=3, seed=0):
    g = np.random.default_rng(seed)
    centres = 3.0 * np.stack([np.cos(2 * np.pi * np.arange(C) / C), np.sin(2 * np.pi * np.arange(C) / C)], 1)
    X = np.concatenate([c + g.normal(size=(n_per, 2)) for c in centres])
    return X, np.repeat(np.arange(C), n_per)


def test_row_keys_tell_rows_apart_bit_for_bit():
    X = np.random.default_rng(0).normal(size=(50, 7))
    y = np.arange(50) % 3
    k = row_keys(X, y)
    assert k.dtype == np.uint64 and len(np.unique(k)) == 50
    assert np.array_equal(row_keys(X[::-1], y[::-1]), k[::-1])           # a row's key is its own
    X2 = X.copy()
    X2[3, 5] = np.nextafter(X2[3, 5], np.inf)                              # one ulp in one feature
    assert (row_keys(X2, y) != k).tolist() == [i == 3 for i in range(50)]
    y2 = y.copy()
    y2[7] = (y2[7] + 1) % 3                                                # same features, other label
    assert (row_keys(X, y2) != k).tolist() == [i == 7 for i in range(50)]
    wide = np.random.default_rng(1).normal(size=(3, 5000))                 # more features than multipliers
    assert len(np.unique(row_keys(wide, np.zeros(3, int)))) == 3


@pytest.mark.parametrize("method", ["ep", "pep"])
def test_ep_sites_follow_their_rows(method):
    X, y = _blobs()
    est = GPClassifier(method=method, n_inducing=8, max_iter=40, random_state=0).fit(X, y)
    old = est.state_
    perm = np.random.default_rng(1).permutation(len(X))
    new_x = np.array([[0.1, -0.2]])
    X2, y2 = np.r_[X[perm][5:], new_x], np.r_[y[perm][5:], 1]              # shuffled, 5 dropped, 1 added
    engine = est._make_engine()
    st = fitting.carried_state(est, engine, est._tensor(X2), torch.as_tensor(y2), row_keys(X2, y2))
    src = torch.as_tensor(perm[5:])
    assert torch.equal(st.c1[:-1], old.c1[src]) and torch.equal(st.V[:-1], old.V[src])
    assert st.c1[-1].abs().sum() == 0 and st.c2[-1].abs().sum() == 0    # the new row's site is zero
    # θ̃ is the sum of the kept sites: the dropped rows' sites are taken out of q
    dropped = torch.as_tensor(perm[:5])
    full = engine.carry(est.model_, old, None, torch.as_tensor(y), torch.arange(len(X)))
    assert torch.allclose(full.Lam, old.Lam, atol=1e-8) and torch.allclose(full.h, old.h, atol=1e-8)
    only_dropped = engine.carry(est.model_, old, None, torch.as_tensor(y[perm[:5]]), dropped)
    assert torch.allclose(st.Lam + only_dropped.Lam, old.Lam, atol=1e-8)
    assert torch.allclose(st.h + only_dropped.h, old.h, atol=1e-8)


def test_warm_ep_refit_starts_at_the_previous_posterior():
    # after a fit run to near convergence, a warm refit on the same rows with no hyper-parameter step
    # (max_iter=0: only the final site refresh) keeps q; a cold start with the same hyper-parameters is
    # still near the prior after that one damped sweep
    X, y = _blobs()
    est = GPClassifier(method="ep", n_inducing=8, max_iter=150, random_state=0).fit(X, y)
    q0 = est.posterior_
    est.set_params(warm_start=True, max_iter=0).fit(X[::-1], y[::-1])      # rows in another order
    scale = float(q0.mean.abs().max())
    assert (est.posterior_.mean - q0.mean).abs().max() < 0.05 * scale
    engine, Xt, yt = est._make_engine(), est._tensor(X), torch.as_tensor(y)
    cold = engine.update(est.model_, engine.init(est.model_, Xt, yt, None), Xt, yt, len(X))
    assert (engine.posterior(est.model_, cold).mean - q0.mean).abs().max() > 0.3 * scale


def test_warm_gfitc_starts_ep_from_the_converged_sites():
    X, y = _blobs(10)
    est = GPClassifier(method="gfitc", n_inducing=6, max_iter=5, optimizer="lbfgs", learning_rate=1.0,
                       inducing_params={"learn": True}, kernel_params={"prior_scale": None}, random_state=0).fit(X, y)
    old = est.state_
    X2, y2 = np.r_[X, [[0.0, 0.0]]], np.r_[y, 2]
    engine, Xt, yt = est._make_engine(), est._tensor(X2), torch.as_tensor(y2)
    carried = fitting.carried_state(est, engine, Xt, yt, row_keys(X2, y2))
    assert torch.equal(carried.tau_k[:-1], old.tau_k) and torch.equal(carried.nu_y[:-1], old.nu_y)
    assert float(carried.tau_k[-1].abs().sum() + carried.nu_k[-1].abs().sum()) == 0.0
    # EP from the carried sites converges in fewer sweeps than from zero sites (same hyper-parameters)
    warm = engine.update(est.model_, carried, Xt, yt, len(X2))
    cold = engine.update(est.model_, engine.init(est.model_, Xt, yt, None), Xt, yt, len(X2))
    assert warm.converged and warm.sweeps < cold.sweeps
    est.set_params(warm_start=True, max_iter=0).fit(X2, y2)
    assert est.state_.tau_y.shape[0] == len(X2)


def test_sep_tied_site_follows_the_slot_counts():
    X, y = _blobs()
    est = GPClassifier(method="sep", n_inducing=8, max_iter=30, random_state=0).fit(X, y)
    old = est.state_
    engine = est._make_engine()
    X2, y2 = np.r_[X, X], np.r_[y, y]                                      # every row twice
    st = engine.carry(est.model_, old, est._tensor(X2), torch.as_tensor(y2), None)
    assert torch.allclose(st.counts, 2 * old.counts)
    assert torch.allclose(st.Lam, 2 * old.Lam) and torch.allclose(st.h, 2 * old.h)
    assert st.step == 0.0


def test_apep_and_sep_warm_refit_continue():
    X, y = _blobs()
    for method in ("apep", "sep"):
        est = GPClassifier(method=method, n_inducing=8, max_iter=60, random_state=0).fit(X, y)
        Z = est.model_.Z.detach().clone()
        err = np.mean(est.predict(X) != y)
        est.set_params(warm_start=True, max_iter=1).fit(X[1:], y[1:])
        assert torch.allclose(est.model_.Z, Z, atol=0.05)                 # one step from the old Z, not k-means anew
        assert np.mean(est.predict(X) != y) <= err + 0.05


def test_warm_start_needs_the_same_classes():
    X, y = _blobs()
    est = GPClassifier(method="ep", n_inducing=8, max_iter=20, random_state=0, inducing_params={"learn": True}).fit(X, y)
    Z = est.model_.Z.detach().clone()
    est.set_params(warm_start=True, max_iter=0).fit(X, np.array(["a", "b", "c"])[y])   # other class labels
    assert not torch.allclose(est.model_.Z, Z, atol=1e-3)                 # a cold start: Z from k-means again
    assert list(est.classes_) == ["a", "b", "c"]
    est.set_params(max_iter=20).fit(X, y)                                  # Z moves away from k-means
    Z = est.model_.Z.detach().clone()
    est.set_params(method="pep", max_iter=0).fit(X, y)                     # another method: a cold start
    assert not torch.allclose(est.model_.Z, Z, atol=1e-3) and est.state_.c1.shape[1:] == (1, 3)


def test_rmgpc_carries_gaussian_and_indicator_sites():
    X, y = _blobs(10)
    y = y.copy()
    y[:2] = 2                                                             # two flipped labels: outliers
    est = GPClassifier(method="rmgpc", n_inducing=6, max_iter=3, optimizer="lbfgs", learning_rate=1.0,
                       random_state=0).fit(X, y)
    old = est.state_
    X2, y2 = np.r_[X[5:], [[0.0, 0.0]]], np.r_[y[5:], 1]
    engine, Xt, yt = est._make_engine(), est._tensor(X2), torch.as_tensor(y2)
    st = fitting.carried_state(est, engine, Xt, yt, row_keys(X2, y2))
    fresh = engine.init(est.model_, Xt, yt, None)
    for name in ("tau_y", "nu_k", "q_lik", "q_prior", "a_site", "b_site", "log_Z_site"):
        assert torch.equal(getattr(st, name)[:-1], getattr(old, name)[5:]), name
        assert torch.equal(getattr(st, name)[-1], getattr(fresh, name)[-1]), name
    est.set_params(warm_start=True, max_iter=0).fit(X2, y2)
    assert est.outlier_proba_.shape == (len(X2),)


def test_saved_model_keeps_its_row_keys(tmp_path):
    X, y = _blobs()
    est = GPClassifier(method="ep", n_inducing=8, max_iter=30, random_state=0).fit(X, y)
    est.save(tmp_path / "m.pt")
    back = GPClassifier.load(tmp_path / "m.pt")
    assert np.array_equal(back._row_keys_, est._row_keys_)
    back.set_params(warm_start=True, max_iter=0).fit(X, y)
    # the sites were carried (not restarted at zero): one damped refresh leaves them near the saved ones
    assert torch.allclose(back.state_.c1, est.state_.c1, atol=0.5 * float(est.state_.c1.abs().max()))
    assert float(back.state_.c1.abs().sum()) > 0.5 * float(est.state_.c1.abs().sum())


@pytest.mark.parametrize("change", [dict(kernel="matern52"), dict(kernel_params={"latent_noise": None}),
                                    dict(kernel_params={"shared_kernel": True}),
                                    dict(inducing_params={"shared": True}), dict(dtype="float32"),
                                    dict(inducing_params={"learn": True}),          # vi's full batch: False
                                    dict(likelihood_params={"learn_epsilon": False}),  # vi: True
                                    dict(likelihood_params={"epsilon": 0.05, "learn_epsilon": False})])
def test_a_structural_change_starts_afresh_and_the_saved_file_rebuilds_it(change, tmp_path):
    # a warm start used to keep the old kernel (the file then named the new one: load built a Matérn from RBF
    # weights, probabilities off by 0.29), made unloadable files (latent noise, sharing), crashed (dtype) or
    # silently kept Z / ε fixed or learnable as before
    X, y = _blobs()
    est = GPClassifier(method="vi", n_inducing=8, max_iter=10, random_state=0, warm_start=True, learning_rate=0.05).fit(X, y)
    est.set_params(**change).fit(X, y)
    assert not est.warm_started_
    fresh = GPClassifier(method="vi", n_inducing=8, max_iter=10, random_state=0, learning_rate=0.05, **change).fit(X, y)
    np.testing.assert_allclose(est.predict_proba(X), fresh.predict_proba(X), rtol=0, atol=1e-12)
    est.save(tmp_path / "m.pt")
    loaded = GPClassifier.load(tmp_path / "m.pt")
    np.testing.assert_array_equal(loaded.predict_proba(X), est.predict_proba(X))
    assert est.model_.Z.requires_grad == (est.inducing_params or {}).get("learn", False)


def test_initial_values_and_engine_settings_do_not_stop_a_warm_start():
    X, y = _blobs()
    est = GPClassifier(n_inducing=8, max_iter=10, random_state=0, warm_start=True).fit(X, y)
    est.set_params(learning_rate=0.02, kernel_params={"latent_noise": 0.1, "init_lengthscale": 2.0}, max_iter=5).fit(X, y)
    assert est.warm_started_


def test_a_checkpoint_resumes_only_the_fit_it_was_written_for(tmp_path):
    # the fingerprint held the engine class and α only: arpep -> rpapep (both VI), probit -> logit and a new
    # fixed ε resumed silently (ε then came from the checkpoint); another optimiser failed later with a bare
    # KeyError, another learning rate was ignored; a checkpoint past max_iter returned an over-trained model
    from sgpc.persist import CheckpointError
    X, y = _blobs(10)
    ck = str(tmp_path / "ck.pt")
    base = dict(n_inducing=5, random_state=0, max_iter=4)
    run = dict(checkpoint_path=ck, checkpoint_every=4)
    half = {"alpha": 0.5}
    GPClassifier(method="arpep", method_params=half, learning_rate=0.05, **base).fit(X, y, **run)
    changes = [dict(method="rpapep", method_params=half, learning_rate=0.05),
               dict(method="arpep", method_params=half, learning_rate=0.05, likelihood_params={"epsilon": 0.1}),
               dict(method="arpep", method_params=half, learning_rate=0.05, optimizer="adaptive"),
               dict(method="arpep", method_params=half, learning_rate=0.1)]
    for change, message in zip(changes, ["another model", "another model", "optimizer='adam'", "learning_rate=0.05"]):
        with pytest.raises(CheckpointError, match=message):
            GPClassifier(**{**base, "max_iter": 8, **change}).fit(X, y, **run, resume=True)
    with pytest.raises(CheckpointError, match="iteration 4, beyond this fit's 2"):
        GPClassifier(method="arpep", method_params=half, learning_rate=0.05, **{**base, "max_iter": 2}).fit(
            X, y, **run, resume=True)
    yb = (y > 0).astype(int)
    GPClassifier(method="vi", likelihood="probit", learning_rate=0.05, **base).fit(X, yb, **run)
    with pytest.raises(CheckpointError, match="another model"):
        GPClassifier(method="vi", likelihood="logit", learning_rate=0.05, **{**base, "max_iter": 8}).fit(X, yb, **run,
                                                                                                         resume=True)


def test_a_resumed_warm_start_equals_the_uninterrupted_one_on_small_scale_features(tmp_path):
    # the inducing step scale min(1, ℓ) was recomputed from the model being resumed, not the one the
    # warm-started fit began from: |ΔP| = 0.015 on features of spread 0.01
    X, y = _blobs(10)
    X = X * 0.01
    ck = str(tmp_path / "ck.pt")
    # the same held for the hyper-parameter prior's centres (vi's full-batch default has the prior): |ΔP| = 9e-4
    base = dict(method="vi", n_inducing=5, random_state=0, learning_rate=0.05)
    assert fitting_prior_scale(base) == 2.0
    start = lambda: GPClassifier(max_iter=5, **base).fit(X, y)
    whole = start().set_params(warm_start=True, max_iter=8).fit(X, y)
    cut = start().set_params(warm_start=True, max_iter=4).fit(X, y, checkpoint_path=ck, checkpoint_every=4)
    first_part = torch.load(ck, weights_only=True)
    cut.set_params(max_iter=8).fit(X, y, checkpoint_path=ck, checkpoint_every=4, resume=True)
    np.testing.assert_array_equal(cut.predict_proba(X), whole.predict_proba(X))
    # and a new estimator (another process) resuming the warm-started fit's checkpoint
    torch.save(first_part, ck)
    anew = GPClassifier(max_iter=8, warm_start=True, **base).fit(X, y, checkpoint_path=ck, checkpoint_every=4,
                                                                 resume=True)
    np.testing.assert_array_equal(anew.predict_proba(X), whole.predict_proba(X))


def fitting_prior_scale(params: dict):
    from sgpc import fitting
    return fitting.settings(GPClassifier(**params))["kernel_params"]["prior_scale"]


def test_damaged_checkpoints_and_model_files_are_refused_clearly(tmp_path):
    # a flipped bit in a checkpoint's tensors resumed silently; malformed entries raised bare TypeError/
    # KeyError/AttributeError; a model file's malformed entries likewise; warm_started_ was lost by load
    from sgpc.estimator import ModelFileError
    from sgpc.persist import CheckpointError, digest
    X, y = _blobs(10)
    ck = tmp_path / "ck.pt"
    run = dict(checkpoint_path=str(ck), checkpoint_every=4)
    est = GPClassifier(method="vi", n_inducing=5, random_state=0, max_iter=4, learning_rate=0.05).fit(X, y, **run)
    d = torch.load(ck, weights_only=True)
    d["model"]["Z"][0, 0, 0] += 1e-3
    torch.save(d, ck)
    resume = lambda: GPClassifier(**{**est.get_params(), "max_iter": 8}).fit(X, y, **run, resume=True)
    with pytest.raises(CheckpointError, match="does not match its checksum"):
        resume()
    for key, value in (("generator", 1), ("history", []), ("last_good", [torch.zeros(1)]), ("fingerprint", "x")):
        est.fit(X, y, **run)                             # a fresh, valid checkpoint
        d = torch.load(ck, weights_only=True)
        d.pop("checksum")
        d[key] = value
        torch.save(d, ck)
        with pytest.raises(CheckpointError):
            resume()
    warm = GPClassifier(method="vi", n_inducing=5, random_state=0, max_iter=2, warm_start=True).fit(X, y).fit(X, y)
    warm.save(tmp_path / "m.pt")
    assert GPClassifier.load(tmp_path / "m.pt").warm_started_ is True
    d = torch.load(tmp_path / "m.pt", weights_only=True)
    d["posterior"]["mean"] = 1.0
    d["checksum"] = digest({k: v for k, v in d.items() if k != "checksum"})
    torch.save(d, tmp_path / "m.pt")
    with pytest.raises(ModelFileError, match="damaged"):
        GPClassifier.load(tmp_path / "m.pt")
