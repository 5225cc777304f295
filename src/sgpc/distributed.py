"""Data-parallel training with ``torch.distributed``: every rank processes its shard of each minibatch.

All ranks hold the same model and draw the same global minibatch B from generators seeded alike
(``train.fit`` does this unchanged); rank r keeps the contiguous shard B_r of B (``torch.tensor_split``
of the rows). Two things are then all-reduced (summed over ranks):

* Gradients. An engine's loss on a shard is scaled by N/|B_r| (its minibatch estimate), so the
  global minibatch estimate is the weighted mean  Σ_r (|B_r|/|B|) · loss_r = c + (N/|B|) Σ_{i∈B} ℓ_i,
  where c is the data-independent part (KL, g(θ) terms) — exactly the single-process loss on B.
  Each rank therefore backpropagates (|B_r|/|B|)·loss_r / N and the gradients are summed.
* SEP site increments. SEP's step θ̃ ← θ̃ + ρ[Σ_{B} θ_new − (n_B/n) θ̃] needs the sums over the whole
  minibatch; ``SEP.increment`` returns them for a shard, they are summed, and every rank applies the
  same step, so every rank holds the same tied factor. Engines whose update is a no-op (vi, apep,
  arpep, rpapep) need nothing more; engines with per-point state (ep, pep, gfitc) are refused.

Every rank ends with identical parameters (up to the order of floating-point sums), and the same
parameters as a single process fed the same global minibatches — tested in tests/test_distributed.py.

Launch: ``torchrun --nproc-per-node 2 script.py`` with ``comm = sgpc.distributed.init()`` in the
script (reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or ``launch(fn, nproc)`` (spawns local
processes, rendezvous through a temporary file), which ``sgpc fit --nproc N`` uses. Backends: gloo
on CPU, NCCL for CUDA tensors (each rank on its own GPU, ``device=f"cuda:{local_rank}"``).

What this module does not do: model parallelism, or sharding the data files (each rank reads the
global minibatch and keeps its shard; with streaming, every rank reads the same blocks).
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["Communicator", "init", "launch"]


@dataclass(frozen=True)
class Communicator:
    """This process's place in the process group: ``rank`` in 0 … ``world_size`` − 1."""

    rank: int
    world_size: int

    def shard(self, X: torch.Tensor, y: torch.Tensor, idx: torch.Tensor | None):
        """This rank's rows of a global minibatch: (X_r, y_r, idx_r or None, weight |B_r|/|B|)."""
        B = X.shape[0]
        if B < self.world_size:
            raise ValueError(f"a minibatch of {B} rows cannot be shared by {self.world_size} processes; "
                             "use batch_size >= the number of processes")
        rows = torch.tensor_split(torch.arange(B), self.world_size)[self.rank]
        a, b = int(rows[0]), int(rows[-1]) + 1
        return X[a:b], y[a:b], None if idx is None else idx[a:b], (b - a) / B

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """Σ over ranks of t (in place; returns t)."""
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def update(self, engine, model, state, X, y, n_total: int, idx, geometry=None):
        """The engine's closed-form step over the global minibatch, from this rank's shard.

        An engine whose step is additive over shards (``capabilities.increment``: SEP) sums the shards'
        increments before the step (every rank holds the same state, so restores it the same way); an
        engine without a closed-form step (vi, apep, arpep, rpapep) needs nothing; any other keeps per-point
        state, which a rank does not hold for the other shards: refused."""
        caps = engine.capabilities
        if caps.increment:
            return engine.update(model, state, X, y, n_total, idx, geometry=geometry, reduce=self.reduce_increment)
        if caps.closed_form_update:
            raise ValueError(f"{type(engine).__name__} keeps per-point state updated in closed form; data-parallel "
                             "training supports the streamable methods (vi, sep, apep, arpep, rpapep)")
        return engine.update(model, state, X, y, n_total, idx, geometry=geometry)

    def reduce_increment(self, increment) -> None:
        """Sum every tensor field of an engine's increment (a dataclass) over ranks, in place."""
        for f in dataclasses.fields(increment):
            self.all_reduce(getattr(increment, f.name))

    def reduce(self, params: list, loss: torch.Tensor) -> torch.Tensor:
        """Sum every parameter's gradient and the (weighted) loss over ranks, in one flat buffer."""
        with_grad = [p for p in params if p.grad is not None]
        flat = torch.cat([p.grad.reshape(-1) for p in with_grad] + [loss.reshape(1).to(params[0].dtype)])
        self.all_reduce(flat)
        start = 0
        for p in with_grad:
            n = p.numel()
            p.grad.copy_(flat[start:start + n].view_as(p.grad))
            start += n
        return flat[-1]


def init(backend: str | None = None) -> Communicator:
    """Join the process group described by the environment (torchrun, or MASTER_ADDR/MASTER_PORT/
    RANK/WORLD_SIZE set by hand on each machine). backend: "gloo" (CPU), "nccl" (GPU); default gloo,
    and where CUDA is available "cpu:gloo,cuda:nccl", which reduces each tensor on its own device (plain
    NCCL cannot reduce the CPU tensors of a model trained on the CPU of a machine that has a GPU)."""
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            raise ValueError(f"environment variable {var} is not set: launch with torchrun, or set RANK, "
                             "WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
    if backend is None:
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, init_method="env://")
    return Communicator(dist.get_rank(), dist.get_world_size())


def _die_with_parent() -> None:
    """Linux: the kernel sends this process SIGTERM when the launching process dies (a launcher killed
    with SIGKILL left its ranks training to the end, their results in a directory nobody removes)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))     # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _worker(rank: int, world_size: int, init_file: str, out_dir: str, backend: str, threads: int | None, fn, args):
    """One spawned process: join the group, run fn(comm, *args), each rank pickles its result (or the
    exception it raised, for ``launch`` to raise in the caller)."""
    _die_with_parent()
    if threads is not None:
        torch.set_num_threads(threads)
    dist.init_process_group(backend=backend, init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        try:
            result = fn(Communicator(rank, world_size), *args)
        except Exception as exc:
            try:
                blob = pickle.dumps(exc)
                pickle.loads(blob)      # some exceptions pickle but do not unpickle (extra __init__ arguments)
                with open(os.path.join(out_dir, f"error{rank}.pkl"), "wb") as f:
                    f.write(blob)
            except Exception:           # then torch's ProcessRaisedException, with the traceback, is raised
                pass
            raise
        with open(os.path.join(out_dir, f"result{rank}.pkl"), "wb") as f:
            pickle.dump(result, f)
        # every rank is past its last collective before any tears the group down: without this gloo
        # occasionally aborted a rank at exit ("terminate called without an active exception")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def launch(fn, nproc: int, *args, backend: str = "gloo", threads: int | None = 1) -> list:
    """Run ``fn(comm, *args)`` in ``nproc`` local processes; returns their results, by rank.

    ``fn`` must be importable (a module-level function). Rendezvous through a temporary file;
    ``threads``: torch threads per process (None: torch's default). An exception raised by ``fn`` in a
    rank is raised here as itself (a ValueError stays a ValueError). When this process is interrupted
    or terminated (SIGTERM), or dies, the ranks are stopped too.
    """
    if not (isinstance(nproc, int) and nproc >= 1):
        raise ValueError(f"nproc must be a positive integer, got {nproc!r}")
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessRaisedException

    main_thread = threading.current_thread() is threading.main_thread()
    with tempfile.TemporaryDirectory(prefix="sgpc-dist-") as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
        ctx = mp.start_processes(_worker, args=(nproc, init_file, tmp, backend, threads, fn, args), nprocs=nproc,
                                 join=False, start_method="spawn")
        try:
            while not ctx.join():
                pass
        except ProcessRaisedException as exc:
            # the rank torch reports may be one that failed only because another rank's fn raised and left
            # (its barrier's connection reset): the error of the rank whose fn raised is the one to report
            written = [os.path.join(tmp, f"error{r}.pkl") for r in [exc.error_index, *range(nproc)]]
            err = next((e for e in written if os.path.exists(e)), "")
            if err:
                try:
                    with open(err, "rb") as f:                             # our own file, written just now
                        original = pickle.load(f)
                except Exception:
                    original = None
                if isinstance(original, BaseException):
                    raise original from None
            raise
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            for p in ctx.processes:
                p.join(10)
            if main_thread:
                signal.signal(signal.SIGTERM, previous)
        out = []
        for r in range(nproc):
            with open(os.path.join(tmp, f"result{r}.pkl"), "rb") as f:   # our own files, written just now
                out.append(pickle.load(f))
    return out
