"""The shared fit loop: settings validation, history, checkpoint and resume."""
import os

import pytest
import numpy as np
import torch

from sgpc import kernels as K
from sgpc.gaussian import NotPositiveDefiniteError
from sgpc.likelihoods import RobustMax
from sgpc.sparse import SparseGP
from sgpc.persist import CheckpointError, load_checkpoint
from sgpc.train import SignAdaptive, TrainSettings, fit
from sgpc.vi import VI

torch.set_default_dtype(torch.float64)


def problem(seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(40, 2, generator=g)
    y = (X[:, 0] > 0).long() + (X[:, 1] > 0.5).long()
    model = SparseGP(K.RBF(2, 3, noise=0.01), RobustMax(3), X[:6].clone())
    return model, X, y


def run(settings, resume=False, model=None, seed=7):
    model_, X, y = problem()
    model = model or model_
    engine = VI()
    state = engine.init(model, X, y, torch.Generator())
    state, hist = fit(model, engine, state, X, y, settings, generator=torch.Generator().manual_seed(seed),
                      resume=resume)
    return model, state, hist


def flat(model, state):
    return torch.cat([p.detach().reshape(-1) for p in list(model.parameters()) + list(state.q.parameters())])


def test_objective_improves_and_history_is_complete():
    vals = {}

    def validate(model, state):
        vals.setdefault("n", 0)
        vals["n"] += 1
        return {"metric": 1.0}

    model, X, y = problem()
    state = VI().init(model, X, y, torch.Generator())
    s = TrainSettings(learning_rate=0.05, max_iter=60, batch_size=10, eval_every=20)
    state, hist = fit(model, VI(), state, X, y, s, generator=torch.Generator().manual_seed(0), validate=validate)
    assert hist.iteration == list(range(1, 61))
    assert len(hist.objective) == len(hist.time) == 60
    assert [r["iteration"] for r in hist.validation] == [20, 40, 60] and vals["n"] == 3
    first, last = sum(hist.objective[:5]) / 5, sum(hist.objective[-5:]) / 5
    assert last > first


def test_epochs_count_minibatches():
    s = TrainSettings(batch_size=10, n_epochs=3)
    assert s.n_steps(40) == 12
    assert TrainSettings(n_epochs=3).n_steps(40) == 3
    # the streams drop an epoch's incomplete last batch: 150 rows in batches of 100 is one batch per pass
    assert TrainSettings(batch_size=100, n_epochs=2).n_steps(150) == 2
    assert TrainSettings(batch_size=500, n_epochs=2).n_steps(150) == 2      # full batch


def test_one_epoch_visits_every_row_once():
    model, X, y = problem()                       # 40 rows, batches of 8: 5 steps, a permutation
    seen = []

    class Recording(VI):
        def update(self, model, state, X, y, n_total, idx=None, *, geometry=None):
            seen.append(idx.clone())
            return state

    engine = Recording()
    fit(model, engine, engine.init(model, X, y, torch.Generator()), X, y,
        TrainSettings(batch_size=8, n_epochs=2), generator=torch.Generator().manual_seed(1))
    assert len(seen) == 10
    for epoch in (seen[:5], seen[5:]):
        assert sorted(torch.cat(epoch).tolist()) == list(range(40))


def test_lr_decay_multiplies_the_rate_per_pass_and_survives_resume(tmp_path):
    ck = str(tmp_path / "ck.pt")
    # 40 rows, batches of 8: 5 steps per pass; after 15 steps, 3 passes: lr = 0.05 · 0.5³
    run(TrainSettings(learning_rate=0.05, lr_decay=0.5, max_iter=15, batch_size=8, checkpoint_path=ck, checkpoint_every=15))
    assert load_checkpoint(ck)["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.05 * 0.5 ** 3, rel=1e-12)
    straight = run(TrainSettings(learning_rate=0.05, lr_decay=0.5, max_iter=30, batch_size=8))
    resumed = run(TrainSettings(learning_rate=0.05, lr_decay=0.5, max_iter=30, batch_size=8, checkpoint_path=ck,
                                checkpoint_every=15), resume=True)
    assert load_checkpoint(ck)["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.05 * 0.5 ** 6, rel=1e-12)
    torch.testing.assert_close(flat(*resumed[:2]), flat(*straight[:2]), rtol=0, atol=0)
    constant = run(TrainSettings(learning_rate=0.05, max_iter=30, batch_size=8))
    assert not torch.allclose(flat(*constant[:2]), flat(*straight[:2]))
    with pytest.raises(ValueError, match="lr_decay"):
        TrainSettings(lr_decay=0.0)
    with pytest.raises(ValueError, match="adam"):
        TrainSettings(optimizer="lbfgs", lr_decay=0.9)


def test_resume_gives_the_same_parameters_as_an_uninterrupted_run(tmp_path):
    ck = str(tmp_path / "ck.pt")
    straight_model, straight_state, h0 = run(TrainSettings(learning_rate=0.05, max_iter=30, batch_size=8))
    run(TrainSettings(learning_rate=0.05, max_iter=15, batch_size=8, checkpoint_path=ck, checkpoint_every=5))
    assert os.path.exists(ck)
    m2, s2, h2 = run(TrainSettings(learning_rate=0.05, max_iter=30, batch_size=8, checkpoint_path=ck,
                                   checkpoint_every=5), resume=True)
    torch.testing.assert_close(flat(m2, s2), flat(straight_model, straight_state), rtol=0, atol=0)
    assert h2.iteration == h0.iteration
    torch.testing.assert_close(torch.tensor(h2.objective), torch.tensor(h0.objective), rtol=0, atol=0)


def test_resume_in_the_middle_of_an_epoch_continues_its_permutation(tmp_path):
    # 40 rows in batches of 8 (5 per epoch), a checkpoint every 3 steps: the one at step 3 falls mid-epoch;
    # the resumed run must see the 4th and 5th batches of that epoch's permutation, then the same epochs
    ck = str(tmp_path / "ck.pt")
    straight_model, straight_state, h0 = run(TrainSettings(learning_rate=0.05, max_iter=12, batch_size=8))
    run(TrainSettings(learning_rate=0.05, max_iter=3, batch_size=8, checkpoint_path=ck, checkpoint_every=3))
    m2, s2, h2 = run(TrainSettings(learning_rate=0.05, max_iter=12, batch_size=8, checkpoint_path=ck,
                                   checkpoint_every=3), resume=True)
    torch.testing.assert_close(torch.tensor(h2.objective), torch.tensor(h0.objective), rtol=0, atol=0)
    torch.testing.assert_close(flat(m2, s2), flat(straight_model, straight_state), rtol=0, atol=0)


def test_corrupt_or_foreign_checkpoints_are_rejected(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="not a readable"):
        load_checkpoint(bad)
    foreign = tmp_path / "foreign.pt"
    torch.save({"something": torch.zeros(2)}, foreign)
    with pytest.raises(CheckpointError, match="not an sgpc checkpoint"):
        load_checkpoint(foreign)
    # a truncated real checkpoint
    ck = str(tmp_path / "ck.pt")
    run(TrainSettings(max_iter=2, checkpoint_path=ck, checkpoint_every=1))
    data = open(ck, "rb").read()
    trunc = tmp_path / "trunc.pt"
    trunc.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError):
        load_checkpoint(trunc)


def test_checkpoint_for_another_model_is_rejected(tmp_path):
    ck = str(tmp_path / "ck.pt")
    run(TrainSettings(max_iter=2, checkpoint_path=ck, checkpoint_every=1))
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 2, generator=g)
    other = SparseGP(K.RBF(2, 3, noise=0.01), RobustMax(3), X[:9].clone())
    with pytest.raises(CheckpointError, match="does not match"):
        run(TrainSettings(max_iter=4, checkpoint_path=ck, checkpoint_every=1), resume=True, model=other)


def test_invalid_settings():
    with pytest.raises(ValueError, match="valid: adam, lbfgs"):
        TrainSettings(optimizer="sgd")
    with pytest.raises(ValueError, match="full-batch"):
        TrainSettings(optimizer="lbfgs", batch_size=10)
    with pytest.raises(ValueError, match="batch_size"):
        TrainSettings(batch_size=0)


def test_adaptive_rule_is_refused_with_minibatches():
    # with noisy gradients the sign rule halves a rate at about every other step: show the stall it prevents
    p = torch.nn.Parameter(torch.zeros(1))
    opt = SignAdaptive([p], lr=0.01)
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        opt.zero_grad()
        ((p - 1.0) ** 2).sum().add(0.5 * torch.randn(1, generator=g) * p).sum().backward()
        opt.step()
    assert opt.state[p]["rate"].item() < 1e-6 and abs(p.item() - 1.0) > 0.05
    with pytest.raises(ValueError, match="adaptive.*full-batch.*adam"):
        TrainSettings(optimizer="adaptive", batch_size=32)
    TrainSettings(optimizer="adaptive")                             # full batch: the papers' rule


def test_lbfgs_full_batch_runs_and_improves():
    _, _, hist = run(TrainSettings(optimizer="lbfgs", learning_rate=1.0, max_iter=15))
    assert hist.objective[-1] > hist.objective[0]


class _Scaled(VI):
    """VI with its loss multiplied by a constant: the same optimum, a per-datum gradient as small as a fit on
    ~10⁷ rows has (the fit loop divides the loss by N)."""

    def loss(self, model, state, X, y, n_total, idx=None, *, geometry=None):
        return 1e-6 * super().loss(model, state, X, y, n_total, idx)


def test_lbfgs_does_not_stall_on_a_small_per_datum_gradient():
    # torch's L-BFGS stops, silently and without a step, when the directional derivative is above
    # −1e-9 or the largest gradient entry is below 1e-7 (absolute tolerances): at this scale every
    # step was a no-op and the parameters never moved
    model, X, y = problem()
    engine = _Scaled()
    state = engine.init(model, X, y, torch.Generator())
    start = flat(model, state)
    state, hist = fit(model, engine, state, X, y, TrainSettings(optimizer="lbfgs", learning_rate=1.0, max_iter=15),
                      generator=torch.Generator())
    assert (flat(model, state) - start).abs().max() > 1e-2
    reference = run(TrainSettings(optimizer="lbfgs", learning_rate=1.0, max_iter=15))[2]
    # the scaled fit climbs its objective as the unscaled one does (same optimum, scale-free steps)
    gain, gain_ref = hist.objective[-1] - hist.objective[0], reference.objective[-1] - reference.objective[0]
    assert gain > 0.5 * 1e-6 * gain_ref > 0


class _NaNAfter(VI):
    """VI whose loss turns into NaN from the third step on, as a diverging fit would."""

    def loss(self, model, state, X, y, n_total, idx=None, *, geometry=None):
        self.calls = getattr(self, "calls", 0) + 1
        out = super().loss(model, state, X, y, n_total, idx)
        return out * float("nan") if self.calls > 2 else out


def test_divergence_raises_a_clear_error():
    model, X, y = problem()
    engine = _NaNAfter()
    state = engine.init(model, X, y, torch.Generator())
    with pytest.raises(FloatingPointError, match="objective became nan.*20 step.*rejected.*learning_rate"):
        fit(model, engine, state, X, y, TrainSettings(max_iter=100), generator=torch.Generator())


class _NaNOnce(VI):
    """VI whose loss is NaN at its third evaluation only (one bad minibatch)."""

    def loss(self, model, state, X, y, n_total, idx=None, *, geometry=None):
        self.calls = getattr(self, "calls", 0) + 1
        out = super().loss(model, state, X, y, n_total, idx)
        return out * float("nan") if self.calls == 3 else out


@pytest.mark.parametrize("optimizer", ["adam", "adaptive"])
def test_one_nan_step_is_rejected_and_the_fit_recovers(optimizer):
    # the NaN gradient also reaches the optimiser's statistics (Adam's moments): unless they are cleaned,
    # every later step is NaN and the fit ends after 20 rejections
    model, X, y = problem()
    engine = _NaNOnce()
    state = engine.init(model, X, y, torch.Generator())
    state, hist = fit(model, engine, state, X, y, TrainSettings(optimizer=optimizer, max_iter=12),
                      generator=torch.Generator())
    assert [e["rejected"] for e in hist.events] == [1] and len(hist.iteration) == 11
    assert torch.isfinite(flat(model, state)).all() and all(torch.isfinite(torch.tensor(hist.objective)))


class _FailsOnce(VI):
    """VI whose update raises NotPositiveDefiniteError at one step (as K_uu does after too long a
    hyper-parameter step); records the length-scales each loss is evaluated at."""

    def __init__(self, fail_at):
        super().__init__()
        object.__setattr__(self, "fail_at", fail_at)
        object.__setattr__(self, "seen", [])

    def update(self, model, state, X, y, n_total, idx=None, *, geometry=None):
        self.seen.append(model.kernel.raw_lengthscale.detach().clone())
        if len(self.seen) == self.fail_at:
            raise NotPositiveDefiniteError("K_uu is not positive definite (injected)")
        return state


@pytest.mark.parametrize("optimizer", ["adam", "adaptive", "lbfgs"])
def test_a_step_that_breaks_the_factorisation_is_rolled_back_not_fatal(optimizer):
    model, X, y = problem()
    engine = _FailsOnce(fail_at=4)
    state = engine.init(model, X, y, torch.Generator())
    state, hist = fit(model, engine, state, X, y, TrainSettings(optimizer=optimizer, learning_rate=0.05, max_iter=8),
                      generator=torch.Generator())
    # the failing 4th iteration is not in the history; the 5th starts from the parameters of the 3rd
    assert hist.iteration == [1, 2, 3, 5, 6, 7, 8]
    assert torch.equal(engine.seen[4], engine.seen[2]) and not torch.equal(engine.seen[3], engine.seen[2])
    assert [e["rejected"] for e in hist.events] == [1] and "injected" in hist.events[0]["reason"]
    # the retried step is shorter: the learning rates were halved
    first = (engine.seen[3] - engine.seen[2]).abs().max()
    retried = (engine.seen[5] - engine.seen[4]).abs().max()
    if optimizer == "adam":            # Adam's first steps have size ≈ lr per element
        assert retried < 0.75 * first
    assert all(torch.isfinite(torch.tensor(hist.objective)))


def test_max_time_stops_the_loop_and_validates_the_last_step():
    model, X, y = problem()
    state = VI().init(model, X, y, torch.Generator())
    rows = []
    s = TrainSettings(max_iter=1000, max_time=0.0, eval_every=7)
    state, hist = fit(model, VI(), state, X, y, s, generator=torch.Generator(),
                      validate=lambda m, st: rows.append(1) or {"x": 1.0})
    assert hist.iteration == [1] and rows == [1] and hist.validation[0]["iteration"] == 1


def test_resume_on_other_rows_or_another_kernel_is_refused(tmp_path):
    # EP's per-row sites were reused for other (or reordered) rows, and a kernel swap went unnoticed
    from sgpc import GPClassifier
    g = np.random.default_rng(0)
    X = g.normal(size=(60, 3))
    y = np.arange(60) % 3
    ck = str(tmp_path / "ck.pt")
    kw = dict(method="ep", n_inducing=10, random_state=0)
    run = dict(checkpoint_path=ck, checkpoint_every=2)
    GPClassifier(max_iter=4, **kw).fit(X, y, **run)
    for Xr, yr in ((X[:50], y[:50]), (X[::-1], y[::-1])):
        with pytest.raises(CheckpointError, match="other data"):
            GPClassifier(max_iter=8, **kw).fit(Xr, yr, **run, resume=True)
    with pytest.raises(CheckpointError, match="another model"):
        GPClassifier(max_iter=8, kernel="matern52", **kw).fit(X, y, **run, resume=True)
    with pytest.raises(CheckpointError, match="another model"):         # another objective: log Z_q + log p(ξ)
        GPClassifier(max_iter=8, kernel_params={"prior_scale": None}, **kw).fit(X, y, **run, resume=True)
    GPClassifier(max_iter=8, **kw).fit(X, y, **run, resume=True)          # the same rows resume


def test_lr_decay_is_per_pass_when_the_batch_does_not_divide_the_rows(tmp_path):
    # 40 rows in batches of 12: a pass is 3 steps (the incomplete last batch is dropped), so 9 steps are 3
    # passes and lr = 0.05 · 0.5³; the factor 0.5^(12/40) per step gave 0.05 · 0.5^2.7
    ck = str(tmp_path / "ck.pt")
    run(TrainSettings(learning_rate=0.05, lr_decay=0.5, max_iter=9, batch_size=12, checkpoint_path=ck, checkpoint_every=9))
    assert load_checkpoint(ck)["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.05 * 0.5 ** 3, rel=1e-12)


class _NaNAtCall(VI):
    """VI whose loss is NaN at one given evaluation (counted from 1; 0: never)."""

    def __init__(self, bad):
        super().__init__()
        object.__setattr__(self, "bad", bad)
        object.__setattr__(self, "calls", 0)

    def loss(self, model, state, X, y, n_total, idx=None, *, geometry=None):
        object.__setattr__(self, "calls", self.calls + 1)
        out = super().loss(model, state, X, y, n_total, idx)
        return out * float("nan") if self.calls == self.bad else out


def test_a_resumed_fit_rolls_back_a_bad_first_step_as_the_uninterrupted_one_does(tmp_path):
    # the rollback point was not in the checkpoint: a NaN at the first step after resuming raised
    # FloatingPointError where the uninterrupted fit rejected the step and carried on
    def go(engine, settings, resume=False):
        model, X, y = problem()
        state = engine.init(model, X, y, torch.Generator())
        state, hist = fit(model, engine, state, X, y, settings, generator=torch.Generator().manual_seed(7),
                          resume=resume)
        return flat(model, state), hist

    ck = str(tmp_path / "ck.pt")
    straight, h0 = go(_NaNAtCall(6), TrainSettings(max_iter=10, batch_size=8, learning_rate=0.05))
    go(_NaNAtCall(0), TrainSettings(max_iter=5, batch_size=8, learning_rate=0.05, checkpoint_path=ck, checkpoint_every=5))
    resumed, h1 = go(_NaNAtCall(1), TrainSettings(max_iter=10, batch_size=8, learning_rate=0.05, checkpoint_path=ck,
                                                   checkpoint_every=5), resume=True)
    assert h0.iteration == [1, 2, 3, 4, 5, 7, 8, 9, 10] and h1.iteration == h0.iteration
    assert h1.events == h0.events and "iteration 6" in h0.events[0]["reason"]
    torch.testing.assert_close(resumed, straight, rtol=0, atol=0)


def test_resuming_an_in_memory_fit_with_another_batch_size_is_refused(tmp_path):
    # it skipped or repeated rows of the epoch in progress (streamed fits already refused)
    ck = str(tmp_path / "ck.pt")
    run(TrainSettings(learning_rate=0.05, max_iter=3, batch_size=8, checkpoint_path=ck, checkpoint_every=3))
    with pytest.raises(CheckpointError, match="batch_size=8, this fit has 10"):
        run(TrainSettings(learning_rate=0.05, max_iter=6, batch_size=10, checkpoint_path=ck, checkpoint_every=3),
            resume=True)


def test_a_sum_kernel_steps_the_inducing_inputs_in_its_smaller_length_scales():
    # matern52+rbf (``kernels.Sum``) had no length-scales to read, so its Z was stepped in raw units: on features
    # of spread 1e-5 Z left the data within 4 steps, and 10 of the 14 fits that ended at the prior in the
    # 1 000-problem fuzz (benchmarks/perf/fuzz.py) were this kernel's
    import warnings
    from sgpc import GPClassifier
    from sgpc.train import _inducing_step_scale
    _, X, y = problem()
    kern = K.Sum(K.Matern(2, 3, nu=2.5, lengthscale=[2e-3, 5.0]), K.RBF(2, 3, lengthscale=[2e-2, 0.5]))
    model = SparseGP(kern, RobustMax(3), 1e-3 * X[:6].clone())
    torch.testing.assert_close(_inducing_step_scale(model, "adam"), torch.tensor([2e-3, 0.5]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = GPClassifier(method="vi", kernel="matern52+rbf", n_inducing=6, learning_rate=0.05, max_iter=20,
                           random_state=0).fit(1e-5 * X.numpy(), y.numpy())
    assert not est.at_prior_
    assert float(est.model_.Z.detach().abs().max()) < 3e-5 * float(X.abs().max())     # Z stays among the data


def test_inducing_inputs_step_in_length_scales_on_small_features(tmp_path):
    # Adam moves each coordinate of Z by ~learning_rate per step whatever the units: on features of spread
    # 1e-3 Z left the data in a few steps and the fit stayed at the prior. Its steps are now scaled by
    # min(1, ℓ_d) at the start; standardised data (ℓ ≥ 1) are stepped as before.
    from sgpc.train import _inducing_step_scale
    model, X, y = problem()
    assert _inducing_step_scale(model, "adam") is None                          # ℓ = √2: unchanged
    small = SparseGP(K.RBF(2, 3, noise=0.01, lengthscale=[2e-3, 5.0]), RobustMax(3), 1e-3 * X[:6].clone())
    torch.testing.assert_close(_inducing_step_scale(small, "adam"), torch.tensor([2e-3, 1.0]))
    assert _inducing_step_scale(small, "lbfgs") is None

    def go(settings, resume=False):
        m = SparseGP(K.RBF(2, 3, noise=0.01, lengthscale=2e-3), RobustMax(3), 1e-3 * X[:6].clone())
        engine = VI()
        state = engine.init(m, 1e-3 * X, y, torch.Generator())
        state, _ = fit(m, engine, state, 1e-3 * X, y, settings, generator=torch.Generator().manual_seed(7),
                       resume=resume)
        return m, state

    m, state = go(TrainSettings(learning_rate=0.05, max_iter=30))
    # Z stays among the data (it moved ~0.05 per step before: 30 steps took it ~260 spreads away)
    assert float((m.Z.detach() / 1e-3).abs().max()) < 3 * float(X.abs().max())
    ck = str(tmp_path / "ck.pt")
    go(TrainSettings(learning_rate=0.05, max_iter=15, checkpoint_path=ck, checkpoint_every=15))
    m2, state2 = go(TrainSettings(learning_rate=0.05, max_iter=30, checkpoint_path=ck, checkpoint_every=15), resume=True)
    torch.testing.assert_close(flat(m2, state2), flat(m, state), rtol=0, atol=0)      # resumes exactly


def test_the_inducing_inputs_step_at_their_own_rate_and_everything_else_at_the_fits():
    # At q's prior (VI's start) the first step's gradient in Z is 0, so Z first moves at step 2, from the same
    # state in both fits: Adam's step is proportional to its rate, so Z moves 4 times as far at 4 times the rate,
    # and every other parameter as it does at the fit's own rate
    def two_steps(z_rate):
        model, _, _ = problem()
        Z0 = model.Z.detach().clone()
        model, state, _ = run(TrainSettings(learning_rate=0.05, inducing_learning_rate=z_rate, max_iter=2),
                              model=model)
        rest = torch.cat([p.detach().reshape(-1) for n, p in model.named_parameters() if n != "Z"])
        return model.Z.detach() - Z0, torch.cat([rest, *[p.detach().reshape(-1) for p in state.q.parameters()]])
    dZ_fast, rest_fast = two_steps(0.2)
    dZ_same, rest_same = two_steps(0.05)
    assert dZ_same.abs().min() > 1e-4
    torch.testing.assert_close(dZ_fast, 4 * dZ_same, rtol=1e-9, atol=0)
    torch.testing.assert_close(rest_fast, rest_same, rtol=0, atol=0)
    # a rate equal to the fit's is the single-group fit, bit for bit
    same = run(TrainSettings(learning_rate=0.05, inducing_learning_rate=0.05, max_iter=20, batch_size=8))
    one = run(TrainSettings(learning_rate=0.05, max_iter=20, batch_size=8))
    torch.testing.assert_close(flat(*same[:2]), flat(*one[:2]), rtol=0, atol=0)
    slow = run(TrainSettings(learning_rate=0.05, inducing_learning_rate=0.01, max_iter=20, batch_size=8))
    assert not torch.allclose(flat(*slow[:2]), flat(*one[:2]))


def test_the_inducing_inputs_rate_decays_and_resumes_with_the_others(tmp_path):
    ck = str(tmp_path / "ck.pt")
    kw = dict(learning_rate=0.05, inducing_learning_rate=0.1, lr_decay=0.5, batch_size=8)
    run(TrainSettings(**kw, max_iter=15, checkpoint_path=ck, checkpoint_every=15))
    groups = load_checkpoint(ck)["optimizer"]["param_groups"]
    assert [g["lr"] for g in groups] == pytest.approx([0.05 * 0.5 ** 3, 0.1 * 0.5 ** 3], rel=1e-12)
    straight = run(TrainSettings(**kw, max_iter=30))
    resumed = run(TrainSettings(**kw, max_iter=30, checkpoint_path=ck, checkpoint_every=15), resume=True)
    torch.testing.assert_close(flat(*resumed[:2]), flat(*straight[:2]), rtol=0, atol=0)
    # a checkpoint continues its own rates: another inducing rate is refused, not silently mixed
    with pytest.raises(CheckpointError, match="inducing_learning_rate=0.1"):
        run(TrainSettings(**{**kw, "inducing_learning_rate": 0.2}, max_iter=30, checkpoint_path=ck,
                          checkpoint_every=15), resume=True)


def test_an_inducing_rate_without_trained_inducing_inputs_or_under_lbfgs_is_refused():
    with pytest.raises(ValueError, match="> 0"):
        TrainSettings(inducing_learning_rate=0.0)
    with pytest.raises(ValueError, match="lbfgs"):
        TrainSettings(optimizer="lbfgs", inducing_learning_rate=0.1)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 2, generator=g)
    model = SparseGP(K.RBF(2, 3, noise=0.01), RobustMax(3), X[:6].clone(), learn_inducing=False)
    with pytest.raises(ValueError, match="does not train them"):
        run(TrainSettings(inducing_learning_rate=0.1, max_iter=2), model=model)


def test_rprop_starts_the_inducing_inputs_at_their_own_step_size():
    # Rprop's first move of an element is its initial step size along the gradient's sign; Z's gradient is 0 at
    # q's prior (step 1), so at step 2 every coordinate of Z moves by exactly the inducing inputs' rate
    model, _, _ = problem()
    Z0 = model.Z.detach().clone()
    run(TrainSettings(optimizer="rprop", learning_rate=0.05, inducing_learning_rate=0.02, max_iter=2), model=model)
    dZ = (model.Z.detach() - Z0).abs()
    torch.testing.assert_close(dZ, torch.full_like(dZ, 0.02), rtol=1e-12, atol=0)
