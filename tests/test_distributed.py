"""Data-parallel training (sgpc.distributed): 2 local processes (gloo, file rendezvous) reproduce
the single-process fit on the same global minibatches.

Tolerance: the two runs differ only in the order of floating-point sums (each rank sums its shard,
then the ranks are summed), ~1e-16 relative per step, amplified by at most a few orders over 15
Adam/SEP steps; 1e-9 relative would catch any missing or double-counted term (those change
gradients at the 1e-2 level, see test_a_wrong_reduction_is_detected)."""
import numpy as np
import pytest
import torch

from sgpc import distributed, fitting, stream
from sgpc.estimator import GPClassifier

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


def _data(n=90, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] > 0.3, 2, np.where(X[:, 1] > 0.0, 1, 0))
    return X, y


def _clf(method):
    # batch 31 does not split evenly over 2 ranks: the |B_r|/|B| weights are exercised
    return GPClassifier(method=method, n_inducing=5, batch_size=31, max_iter=15, learning_rate=0.05,
                        random_state=0, inducing_params={"init": "random"})


def _fit(comm, method, streamed):
    X, y = _data()
    data = (stream.NpySource(X, y, block_rows=20), None) if streamed else (X, y)
    est = _clf(method).fit(*data, comm=comm)
    out = {k: v.detach().clone() for k, v in est.model_.state_dict().items()}
    out["q_mean"], out["q_chol"] = est.posterior_.mean.clone(), est.posterior_.chol.clone()
    out["objective"] = torch.tensor(est.history_["objective"], dtype=torch.float64)
    return out


def _fits(comm, cases):
    return [_fit(comm, method, streamed) for method, streamed in cases]


def _check(cases):
    ranks = distributed.launch(_fits, 2, cases)          # one launch for all cases: spawning is slow
    for i, case in enumerate(cases):
        single = _fit(None, *case)
        for r in ranks:
            assert r[i].keys() == single.keys()
            for k in single:
                torch.testing.assert_close(r[i][k], single[k], rtol=1e-9, atol=1e-11, msg=f"{case} {k}")


def test_two_processes_match_one_vi_and_sep():
    _check([("vi", False), ("sep", False)])


@pytest.mark.slow
def test_two_processes_match_one_streamed_and_apep():
    _check([("sep", True), ("vi", True), ("apep", False)])


def _wrong_weights(comm):
    """Every rank scales its shard loss by 1 instead of |B_r|/|B| (gradients summed = twice too large)."""
    class Doubling(distributed.Communicator):
        def shard(self, X, y, idx):
            Xr, yr, ir, _ = super().shard(X, y, idx)
            return Xr, yr, ir, 1.0
    return _fit(Doubling(comm.rank, comm.world_size), "vi", False)


@pytest.mark.slow
def test_a_wrong_reduction_is_detected():
    single = _fit(None, "vi", False)
    wrong = distributed.launch(_wrong_weights, 2)[0]
    assert not torch.allclose(wrong["q_mean"], single["q_mean"], rtol=1e-3)


def test_engines_with_per_point_state_are_refused():
    comm = distributed.Communicator(0, 1)
    X, y = _data()
    with pytest.raises(ValueError, match="per-point state"):
        GPClassifier(method="ep", n_inducing=5, batch_size=30, max_iter=2, random_state=0).fit(X, y, comm=comm)


def test_a_batch_dependent_feature_extractor_is_refused():
    # each rank would normalise with its own shard's statistics (and drift apart in its running ones):
    # so the fit would not be the single-process fit on the same global minibatches (what comm promises)
    X, y = _data()
    comm = distributed.Communicator(0, 2)
    for layer in (torch.nn.BatchNorm1d(3, affine=False), torch.nn.Dropout(0.1)):
        fx = torch.nn.Sequential(torch.nn.Linear(2, 3, dtype=torch.float64), layer)
        est = GPClassifier(method="vi", n_inducing=5, batch_size=30, max_iter=2, feature_extractor=fx)
        with pytest.raises(ValueError, match=f"{type(layer).__name__} in the feature_extractor"):
            est.fit(X, y, comm=comm)


def _stop_on_time(comm):
    """Rank 1's clock runs out long before rank 0's (its budget is 0.3 s, rank 0's 1000 s): every rank must
    stop with it. (Clocks of ranks in lock-step differ by little, but any difference is enough.)"""
    from sgpc import train
    X, y = _data()
    est = _clf("vi")
    engine, data = est._make_engine(), (torch.as_tensor(X), torch.as_tensor(y))
    model = fitting.build_model(fitting.settings(est), 2, 3, torch.as_tensor(X[:5]), np.ones(2))
    state = engine.init(model, *data, torch.Generator().manual_seed(0))
    settings = train.TrainSettings(max_iter=100_000, batch_size=30, optimizer="adam", learning_rate=0.01,
                                   max_time=0.3 if comm.rank == 1 else 1000.0)
    _, history = train.fit(model, engine, state, *data, settings, generator=torch.Generator().manual_seed(0),
                           comm=comm)
    return len(history.iteration)


@pytest.mark.slow
def test_max_time_stops_every_rank_at_the_same_step():
    # before, rank 1 left the loop alone and rank 0 waited in the next all-reduce (until gloo's timeout)
    steps = distributed.launch(_stop_on_time, 2)
    assert steps[0] == steps[1] < 100_000


def test_bad_launch_arguments():
    with pytest.raises(ValueError, match="nproc"):
        distributed.launch(_fit, 0, "vi", False)
    comm = distributed.Communicator(0, 4)
    with pytest.raises(ValueError, match="cannot be shared"):
        comm.shard(torch.zeros(3, 1), torch.zeros(3), None)


def _raise_in_rank_1(comm):
    if comm.rank == 1:
        raise ValueError("bad option in rank 1")
    return comm.rank


class _TwoArgError(Exception):
    """Pickles, but does not unpickle (its __init__ needs two arguments)."""

    def __init__(self, step, detail):
        super().__init__(f"step {step}: {detail}")


def _raise_unpicklable(comm):
    raise _TwoArgError(3, "diverged")


def _sleep_and_record(comm, folder):
    import os
    import pathlib
    import time
    pathlib.Path(folder, f"pid{comm.rank}").write_text(str(os.getpid()))
    time.sleep(120)


@pytest.mark.slow   # ~35 s of process start-up and a timed termination (`make test-slow`)
def test_a_rank_error_is_raised_as_itself_and_a_terminated_launcher_stops_its_ranks(tmp_path):
    # a ValueError in a rank reached the CLI as torch's ProcessRaisedException (a traceback instead of
    # "sgpc fit: error: ..."); a launcher killed with SIGTERM left its ranks training to the end
    import os
    import signal
    import subprocess
    import sys
    import time
    with pytest.raises(ValueError, match="bad option in rank 1"):
        distributed.launch(_raise_in_rank_1, 2)
    # one that does not unpickle: torch's exception with the traceback, not a TypeError from unpickling
    from torch.multiprocessing.spawn import ProcessRaisedException
    with pytest.raises(ProcessRaisedException, match="step 3: diverged"):
        distributed.launch(_raise_unpicklable, 1)
    code = ("import sys; sys.path.insert(0, sys.argv[2]); import test_distributed as t; "
            "from sgpc import distributed; distributed.launch(t._sleep_and_record, 2, sys.argv[1])")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), os.path.dirname(__file__)])
    try:
        deadline = time.time() + 60
        while len(list(tmp_path.glob("pid*"))) < 2 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        pids = [int(p.read_text()) for p in tmp_path.glob("pid*")]
        assert len(pids) == 2, "the ranks did not start"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 128 + signal.SIGTERM
        deadline = time.time() + 15

        def alive(pid):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            return True
        while any(alive(p) for p in pids) and time.time() < deadline:
            time.sleep(0.2)
        assert not any(alive(p) for p in pids)
    finally:
        proc.kill()


@pytest.mark.slow
def test_cli_fit_nproc_2_matches_one_process(tmp_path):
    from sgpc import cli
    X, y = _data()
    data = tmp_path / "d.csv"
    np.savetxt(data, np.column_stack([X, y]), delimiter=",", header="a,b,label", comments="")
    args = ["fit", str(data), "--method", "sep", "--batch-size", "30", "--max-iter", "6", "--n-inducing", "4"]
    assert cli.main([*args, "-o", str(tmp_path / "one.pt")]) == 0
    assert cli.main([*args, "--nproc", "2", "-o", str(tmp_path / "two.pt")]) == 0
    one, two = GPClassifier.load(tmp_path / "one.pt"), GPClassifier.load(tmp_path / "two.pt")
    torch.testing.assert_close(two.posterior_.mean, one.posterior_.mean, rtol=1e-9, atol=1e-11)


def test_chunked_refresh_equals_one_update_on_all_rows():
    """train.refresh sums SEP's additive increments over chunks: the same step as one update on all
    rows (the sums differ only in order: 1e-12 relative)."""
    from sgpc.train import refresh
    X, y = _data(n=200)
    est = GPClassifier(method="sep", n_inducing=5, batch_size=40, max_iter=5, random_state=0,
                       inducing_params={"init": "random"}).fit(X, y)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(np.searchsorted(est.classes_, y))
    engine = est._make_engine()
    whole = engine.update(est.model_, est.state_, Xt, yt, 200, torch.arange(200))
    chunked = refresh(est.model_, engine, est.state_, Xt, yt, chunk=33)
    torch.testing.assert_close(chunked.Lam, whole.Lam, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(chunked.h, whole.h, rtol=1e-12, atol=1e-14)
    assert (chunked.step, chunked.skipped) == (whole.step, whole.skipped)
