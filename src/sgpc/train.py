"""The fit loop shared by every engine: update → loss → backward → optimiser step.

An engine (``engine.Engine``: vi, the EP family, gfitc, rmgpc) provides ``init``, ``update`` (closed-form site
step, a no-op for VI), ``loss`` (minibatch estimate of −objective, already scaled by N/|B|; both receive the
minibatch rows X, y, the data-set size N and the rows' indices ``idx`` into the data set), ``posterior`` and
``trainable``, and declares what else it can do (``engine.Capabilities``). This module owns what is common:
minibatch order from one ``torch.Generator`` (index minibatches of in-memory tensors, or block-shuffled
minibatches streamed from a ``stream`` source, for streamable engines), the optimiser (Adam, the papers'
sign-adaptive rule, or L-BFGS for full-batch fits), a history of the objective/time/validation metrics, a
progress bar (tqdm), and checkpoints that can be resumed (written and read by ``persist``).

The optimiser minimises loss / N (per-datum scale, so learning rates and L-BFGS tolerances do
not depend on N; with row weights, N is their sum W, the rows of the data they stand for); the history records
the objective itself (= −loss).

A step that goes too far — the next K_uu or q does not factorise, or the objective is not finite — is
rejected, not fatal: the parameters go back to the last ones with a finite objective, every learning
rate is halved, and the rejection is an event in the history (``History.events``, key "rejected").
After 20 rejections in a row the fit stops with a ``FloatingPointError`` that says so.

Data-parallel training (``comm``, a ``distributed.Communicator``): every rank draws the same global
minibatch from the same generator and processes its shard; the engine's closed-form step and the
gradients are all-reduced (see ``distributed``), so every rank takes the same optimiser step.

What this module does not do: any maths of a particular method, label encoding, or file formats.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import nn

from . import quadrature
from .engine import Engine, write_constants
from .gaussian import NotPositiveDefiniteError
from .hyperprior import LogNormalPrior
from .persist import CheckpointError, load_checkpoint, load_state, save_checkpoint, state_to_dict

__all__ = ["TrainSettings", "History", "Convergence", "SignAdaptive", "fit", "refresh", "record_engine_events"]

OPTIMIZERS = ("adam", "lbfgs", "adaptive", "rprop")
# Rprop's step-size factors (shrink at a sign flip, grow while the sign holds) and the bounds of a step: torch's
# defaults, except the largest step, 1 (softplus-constrained parameters: a step of 1 is a factor ~e in a length-scale)
RPROP_ETAS, RPROP_STEP_SIZES = (0.5, 1.2), (1e-6, 1.0)
COMPILE_MODES = (None, "default", "reduce-overhead")
# the minibatch stopping rule (``Convergence``): a check is the mean objective of a pass over the data, but of at
# least MINIBATCH_MIN_CHECK_STEPS and at most MINIBATCH_CHECK_STEPS steps; the rule is met when the least-squares
# slope through the last n_iter_no_change checks is within tol plus TREND_Z of its standard errors. Windows of one
# step (2 000 rows in minibatches of 1 024) stopped chess-krvk after 22 steps at a test NLL 6% above the full
# batch's; windows of 8 steps, 6% below it (docs/design-notes.md, 'Many classes at 1 000-4 000 rows').
MINIBATCH_CHECK_STEPS = 50
MINIBATCH_MIN_CHECK_STEPS = 8
TREND_Z = 2.0
# Adam's fused CPU kernel exists from torch 2.4; on 2.3 (the floor) Adam takes torch's default, the same arithmetic
# up to rounding
_FUSED_ADAM = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 4)


class SignAdaptive(torch.optim.Optimizer):
    """Gradient descent with one learning rate per parameter element, adapted by the gradient's sign.

    The batch rule of scalable-ep App. G (and alpha App. A): a rate grows by 2% while its gradient
    keeps its sign between consecutive steps and halves when the sign flips.
    """

    def __init__(self, params, lr: float = 1e-3, increase: float = 1.02, decrease: float = 0.5):
        super().__init__(params, dict(lr=lr, increase=increase, decrease=decrease))

    @torch.no_grad()
    def step(self, closure=None):
        """One step; ``closure`` (if given) re-evaluates the loss and is called with gradients enabled."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "rate" not in st:
                    st["rate"] = torch.full_like(p, group["lr"])
                    st["prev"] = torch.zeros_like(p)
                same = torch.sign(p.grad) * torch.sign(st["prev"]) >= 0
                st["rate"].mul_(torch.where(same, group["increase"], group["decrease"]))
                p.sub_(st["rate"] * p.grad)
                st["prev"].copy_(p.grad)
        return loss


@dataclass(frozen=True)
class TrainSettings:
    """How to run the fit loop.

    Attributes:
        optimizer: "adam", "lbfgs" (full batch only), "adaptive" (sign-adapted per-parameter
            rates, the papers' batch rule; see ``SignAdaptive``) or "rprop" (full batch only: torch's ``Rprop``,
            steps of one size per parameter element along the gradient's sign, ×1.2 while the sign holds,
            ×0.5 when it flips; ``RPROP_ETAS``, ``RPROP_STEP_SIZES``).
        learning_rate: Adam step size (L-BFGS: initial step, 1.0 recommended; Rprop: initial step size).
        max_iter: optimiser steps; ``n_epochs`` overrides it with ⌊N / batch⌋ · n_epochs (an epoch drops its
            incomplete last batch).
        batch_size: minibatch size |B|; None = full batch.
        checkpoint_path / checkpoint_every: write a resumable checkpoint every K steps (0 = never).
        eval_every: steps between validation evaluations (when a validation function is given).
        progress: show a progress bar.
        max_time: stop after this many seconds of training (validation excluded); None = no limit.
        lr_decay: Adam only: the learning rate is multiplied by this factor per pass over the data
            (by lr_decay^(1/⌊N/|B|⌋) after every step), in (0, 1]; 1 keeps it constant. Minibatch noise puts
            a floor under what a constant rate reaches; a decaying rate goes below it.
        inducing_learning_rate: the inducing inputs' own step size (Adam's rate, Rprop's initial step, the sign
            rule's initial rate; decayed and halved on a rejected step as the others are), for a fit whose
            inducing inputs are trained; None: ``learning_rate``. Not with L-BFGS (one line search moves all).
        model_structure: what the caller's settings make of the model beyond its modules (the estimator's
            method, likelihood and its constants, priors, ...): a checkpoint resumes only a fit with the
            same one.
        tol, n_iter_no_change: stop when the fit has converged by ``Convergence``'s rule and the engine's inner
            EP run, if it has one, converged (``Engine.converged``): in a full-batch fit, n_iter_no_change
            consecutive steps whose objective per datum moved by at most tol; with minibatches, no trend in the
            mean objective of the last n_iter_no_change windows (a pass, within ``MINIBATCH_MIN_CHECK_STEPS`` and
            ``MINIBATCH_CHECK_STEPS`` steps) beyond tol per pass and the noise; with a ``monitor``,
            n_iter_no_change checks without an improvement on its best by more than tol. ``max_iter``/``n_epochs``
            are then a ceiling. tol None: run to the ceiling (``History.converged`` still says whether the rule was
            met at the end).
        compile: None (eager, the default) or a ``torch.compile`` mode for the engine's loss: "default"
            (fused kernels) or "reduce-overhead" (also replays CUDA graphs), for minibatch steps on a GPU,
            where a step is bound by kernel launches (measured gains per method: docs/). The first step
            compiles; the closed-form site updates of sep/apep stay eager.
    """

    optimizer: str = "adam"
    learning_rate: float = 0.01
    max_iter: int = 1000
    n_epochs: int | None = None
    batch_size: int | None = None
    checkpoint_path: str | None = None
    checkpoint_every: int = 0
    eval_every: int = 50
    progress: bool = False
    max_time: float | None = None
    lr_decay: float = 1.0
    inducing_learning_rate: float | None = None
    model_structure: str = ""
    compile: str | None = None
    tol: float | None = None
    n_iter_no_change: int = 10

    def __post_init__(self):
        # NumPy scalars (a grid search over np.logspace) as Python numbers: the rates go into the optimiser's
        # param groups, which a checkpoint holds, and a checkpoint is read back with plain values only
        for name in ("learning_rate", "lr_decay", "inducing_learning_rate", "max_time", "tol"):
            v = getattr(self, name)
            if isinstance(v, np.floating) or (isinstance(v, np.integer) and not isinstance(v, np.bool_)):
                object.__setattr__(self, name, float(v))
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
        for name in ("max_iter", "n_epochs", "batch_size", "checkpoint_every", "eval_every"):
            v = getattr(self, name)
            if (v is not None and not isinstance(v, (int, np.integer))) or isinstance(v, bool):
                raise ValueError(f"{name} must be an integer, got {v!r}")
        if self.max_iter < 0 or (self.n_epochs is not None and self.n_epochs < 0):
            raise ValueError("max_iter and n_epochs must be non-negative")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {self.batch_size}")
        if self.checkpoint_every < 0:
            raise ValueError(f"checkpoint_every must be >= 0 (0: no checkpoints), got {self.checkpoint_every}")
        if self.checkpoint_every and not self.checkpoint_path:
            raise ValueError(f"checkpoint_every={self.checkpoint_every} needs checkpoint_path (where to write them)")
        if self.eval_every < 1:
            raise ValueError(f"eval_every must be >= 1, got {self.eval_every}")
        if self.optimizer == "lbfgs" and self.batch_size is not None:
            raise ValueError("optimizer='lbfgs' needs full-batch training (batch_size=None); use 'adam' for minibatches")
        if self.optimizer == "rprop" and self.batch_size is not None:
            # a minibatch gradient's sign is noise near the optimum: the steps halve at each flip, as above
            raise ValueError("optimizer='rprop' needs full-batch training (batch_size=None): minibatch gradients "
                             "flip sign from step to step and its step sizes collapse; use 'adam' for minibatches")
        if self.optimizer == "adaptive" and self.batch_size is not None:
            # minibatch noise flips gradient signs about every other step: each flip halves a rate, so the
            # rates underflow towards 0 and the parameters freeze without any error
            raise ValueError("optimizer='adaptive' is the papers' full-batch rule (batch_size=None): with minibatch "
                             "gradients its rates halve at every sign flip and the fit stalls; use 'adam' for minibatches")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.compile not in COMPILE_MODES:
            raise ValueError(f"unknown compile mode {self.compile!r}; valid: {', '.join(map(repr, COMPILE_MODES))}")
        if self.compile is not None and self.optimizer == "lbfgs":
            raise ValueError("compile needs optimizer='adam' or 'adaptive' (L-BFGS re-evaluates the loss in its line "
                             "search, where a compiled step saves nothing)")
        if self.tol is not None and not (isinstance(self.tol, (int, float)) and math.isfinite(self.tol)
                                         and self.tol >= 0):
            raise ValueError(f"tol must be a finite number >= 0 or None (run to max_iter), got {self.tol!r}")
        if isinstance(self.n_iter_no_change, bool) or not isinstance(self.n_iter_no_change, (int, np.integer)) \
                or self.n_iter_no_change < 1:
            raise ValueError(f"n_iter_no_change must be a positive integer, got {self.n_iter_no_change!r}")
        if not 0.0 < self.lr_decay <= 1.0:
            raise ValueError(f"lr_decay must be in (0, 1], got {self.lr_decay}")
        if self.lr_decay != 1.0 and self.optimizer != "adam":
            raise ValueError(f"lr_decay applies to optimizer='adam', not {self.optimizer!r}")
        if self.inducing_learning_rate is not None:
            if not self.inducing_learning_rate > 0:
                raise ValueError(f"the inducing inputs' learning rate must be > 0, got {self.inducing_learning_rate}")
            if self.optimizer == "lbfgs":
                raise ValueError("optimizer='lbfgs' takes one step for every parameter (its line search moves them "
                                 "together): drop the inducing inputs' own learning rate, or use 'adam'")

    def n_steps(self, n_rows: int) -> int:
        """Total optimiser steps for a data set of ``n_rows``."""
        if self.n_epochs is None:
            return self.max_iter
        # the batch streams drop an epoch's incomplete last batch, so an epoch is ⌊N/B⌋ steps
        per_epoch = 1 if self.batch_size is None else n_rows // min(self.batch_size, n_rows)
        return per_epoch * self.n_epochs


@dataclass
class History:
    """Per-step record: objective (the engine's −loss), training wall time since the start (validation
    excluded), and sparse validation rows."""

    iteration: list = field(default_factory=list)
    objective: list = field(default_factory=list)
    time: list = field(default_factory=list)
    validation: list = field(default_factory=list)   # dicts: {"iteration", "time", metric: value, ...}
    events: list = field(default_factory=list)       # dicts: engine reports (skipped site updates, jitter, ...)
    converged: bool = False                          # the stopping rule was met (``TrainSettings.tol``)
    monitored: list = field(default_factory=list)    # dicts: {"iteration", "value"} at each convergence check

    def as_dict(self) -> dict:
        """A JSON-serialisable copy."""
        return dataclasses.asdict(self)


def _fingerprint(model: nn.Module, engine, X, y: torch.Tensor | None, settings: "TrainSettings",
                 sample_weight: torch.Tensor | None = None) -> dict:
    """What a checkpoint must have been written for: the model's structure (module classes, a Matérn's ν,
    the engine and its α), the engine's settings and the caller's model structure (``model``), the
    optimiser and its rate schedule (``training``: the checkpoint carries the optimiser's state, which
    only the same optimiser can continue, and its own rates), and the data (rows and features; in memory
    also a hash of X, y and the rows' weights, so that other or reordered rows — whose per-row sites would
    attach to the wrong rows — or other weights are refused on resume)."""
    parts = [type(engine).__name__, str(getattr(engine, "alpha", None))]
    for name, mod in model.named_modules():
        parts.append(f"{name}:{type(mod).__name__}:{getattr(mod, 'nu', '')}")
    if y is None:                                   # a stream source: its shape only (hashing is a full pass)
        data = {"n_rows": int(X.n_rows), "n_features": int(X.n_features)}
    else:
        h = hashlib.blake2b(digest_size=16)
        h.update(np.ascontiguousarray(X.detach().cpu().numpy()).tobytes())
        h.update(np.ascontiguousarray(y.detach().cpu().numpy()).tobytes())
        if sample_weight is not None:
            h.update(b"sample_weight")
            h.update(np.ascontiguousarray(sample_weight.detach().cpu().double().numpy()).tobytes())
        data = {"n_rows": int(X.shape[0]), "n_features": int(X.shape[-1]), "hash": h.hexdigest()}
    return {"structure": "|".join(parts), "data": data, "model": f"{engine!r}|{settings.model_structure}",
            "training": {"optimizer": settings.optimizer, "learning_rate": float(settings.learning_rate),
                         "lr_decay": float(settings.lr_decay),
                         "inducing_learning_rate": None if settings.inducing_learning_rate is None
                         else float(settings.inducing_learning_rate)}}


class _IndexStream:
    """In-memory minibatches: the full batch, or epoch after epoch a fresh permutation of the rows cut into
    batches (an epoch's incomplete last batch is dropped). Its position — the epoch's permutation and the
    next batch's offset — is part of a checkpoint, so a fit resumed mid-epoch sees the rows it would have."""

    def __init__(self, X, y, batch_size, generator):
        self.X, self.y, self.generator = X, y, generator
        n = X.shape[0]
        self.batch_size = None if batch_size is None or batch_size >= n else batch_size
        self.perm, self.pos = None, 0

    def __next__(self):
        n = self.X.shape[0]
        if self.batch_size is None:
            idx = torch.arange(n)
        else:
            if self.perm is None or self.pos + self.batch_size > n:
                self.perm, self.pos = torch.randperm(n, generator=self.generator), 0
            idx = self.perm[self.pos:self.pos + self.batch_size]
            self.pos += self.batch_size
        return self.X[idx], self.y[idx], idx

    def state_dict(self) -> dict:
        return {"perm": self.perm, "pos": self.pos, "batch_size": self.batch_size}

    def load_state_dict(self, d: dict) -> None:
        perm = d["perm"]
        if perm is not None and (perm.dim() != 1 or perm.numel() != self.X.shape[0]):
            raise ValueError(f"the checkpoint's epoch permutation has {perm.numel()} rows, the data {self.X.shape[0]}")
        if "batch_size" in d and d["batch_size"] != self.batch_size:
            # another batch size would skip or repeat rows of the epoch in progress (as streamed fits refuse)
            raise ValueError(f"it was written with batch_size={d['batch_size']}, this fit has {self.batch_size}; "
                             "resume with the same batch_size")
        self.perm, self.pos = perm, int(d["pos"])


class _SourceStream:
    """Streamed minibatches of a source, as tensors of the model's dtype/device (indices: None)."""

    def __init__(self, source, batch_size, generator, like: torch.Tensor, buffer_blocks: int):
        from .stream import Minibatches
        self.batches = Minibatches(source, batch_size, generator, buffer_blocks)
        self.like = like

    def __next__(self):
        Xb, yb = next(self.batches)
        return (torch.as_tensor(Xb, dtype=self.like.dtype, device=self.like.device),
                torch.as_tensor(yb, dtype=torch.long, device=self.like.device), None)


def refresh(model: nn.Module, engine: Engine, state, X: torch.Tensor, y: torch.Tensor, comm=None,
            chunk: int = 4096):
    """One closed-form update of the engine over all rows of X [N,D], y [N] (the sites' final refresh).

    An engine with additive minibatch increments (``capabilities.increment``: ``increment``/``apply``) sums
    them over chunks of ``chunk`` rows (over this rank's shard and then over ranks with ``comm``) and takes
    one step: the same update as on the whole data at once, in memory O(chunk·L·M) instead of O(N·L·M).
    Other engines get ``engine.update`` on all rows (or ``comm.update`` on this rank's shard). The model's
    constants follow the new state (``Engine.model_constants``).
    """
    N = X.shape[0]
    idx = torch.arange(N, device=X.device)
    if comm is not None:
        X, y, idx, _ = comm.shard(X, y, idx)
    if not engine.capabilities.increment:
        state = engine.update(model, state, X, y, N, idx) if comm is None else \
            comm.update(engine, model, state, X, y, N, idx)
        write_constants(model, engine, state)
        return state
    with torch.no_grad():     # as in the update: a hyper-parameter step may have broken the tied site
        state = engine.restore(model, state)
    total = None
    for a in range(0, X.shape[0], chunk):
        inc = engine.increment(model, state, X[a:a + chunk], y[a:a + chunk], idx=idx[a:a + chunk])
        total = inc if total is None else dataclasses.replace(
            total, **{f.name: getattr(total, f.name) + getattr(inc, f.name) for f in dataclasses.fields(inc)})
    if comm is not None:
        comm.reduce_increment(total)
    state = engine.apply(model, state, total)
    write_constants(model, engine, state)
    return state


def record_engine_events(history: History, engine: Engine, state, iteration: int, rejected: int = 0,
                         reason: str | None = None, final: bool = False) -> None:
    """Append an event to the history when a guard counter (``Engine.counters``) changed since the last event,
    so no skipped or re-damped update and no reset latent goes unreported. ``final``: also when the engine's
    last EP run (GFITC/RMGPC, which cap the sweeps per hyper-parameter step and warm-start the next) did
    not converge."""
    now = engine.counters(state)
    last = history.events[-1] if history.events else {}
    unconverged = final and engine.converged(state) is False
    if unconverged or any(last.get(k, 0) != v for k, v in now.items()):
        extra = {"converged": False} if unconverged else {}
        history.events.append({"iteration": iteration, **now, **extra, "rejected": rejected,
                               **({"reason": reason} if reason else {})})


class _Diverged(ArithmeticError):
    """The objective of a step was not finite."""


_MAX_REJECTED = 20      # consecutive rejected steps (learning rates halved each time) before giving up


def _step(opt, loss_fn, model, state, Xb, yb, N, idx, comm, weight, params, extractor=None,
          geometry=None, natural=(), prior=None, per_datum: float | None = None) -> torch.Tensor:
    """One optimiser step on the minibatch; returns the per-datum loss (before the step): the loss divided by
    ``per_datum``, the rows' total weight (N when None). ``loss_fn``: the engine's ``loss`` or its compiled form.

    L-BFGS evaluates the objective up to 25 times in its line search. A feature extractor's forward pass
    moves its batch-normalisation statistics and draws new dropout masks each time: every evaluation
    starts from the statistics and the random state the step began with, so that the line search sees one
    objective and a step moves the statistics once, as a step of the other optimisers does. ``geometry``:
    what the step's update shared with its loss (``Engine.geometry``), used by the first evaluation only (a
    line search's later ones are at other parameters). ``natural``: parameters outside the optimiser whose
    gradients the same backward pass fills (q(u) under natural gradients, ``Engine.natural_step``). ``prior``: a
    ``hyperprior.LogNormalPrior`` whose −log density is added to the loss (once per step: a data-parallel rank
    adds its weight's share)."""
    shared = [geometry]
    replay = None
    if extractor is not None and isinstance(opt, torch.optim.LBFGS):
        replay = ([b.detach().clone() for b in extractor.buffers()], torch.get_rng_state())

    def closure():
        if replay is not None:
            with torch.no_grad():
                for b, v in zip(extractor.buffers(), replay[0]):
                    b.copy_(v)
            torch.set_rng_state(replay[1])
        opt.zero_grad(set_to_none=True)
        for p in natural:
            p.grad = None
        loss = loss_fn(model, state, Xb, yb, N, idx, geometry=shared.pop() if shared else None)
        if prior is not None:
            loss = loss + prior.neg_log_density(model.kernel)
        loss = loss / (N if per_datum is None else per_datum)
        if comm is not None:
            loss = loss * weight
        loss.backward()
        if comm is not None:
            return comm.reduce(params, loss.detach())
        return loss

    return opt.step(closure)


def _compiled(loss: Callable, mode: str) -> Callable:
    """``torch.compile(loss)`` with autograd calls traced into the graph where this torch can: the EP-family
    losses take the derivatives of log Z by ``torch.autograd.grad`` (``gaussian.moment_match``), and each
    call split SEP's compiled loss into more graphs (15 graphs, 8 with them traced: ``torch._dynamo.explain``
    on a satimage batch)."""
    quadrature.prepare_for_compile()
    compiled = torch.compile(loss, mode=mode, dynamic=False)
    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        return compiled

    def run(*args, **kwargs):
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            return compiled(*args, **kwargs)
    return run


def _inducing_step_scale(model: nn.Module, optimizer: str) -> torch.Tensor | None:
    """Per-feature factors ≤ 1 for the steps of Adam and the sign rule in the inducing inputs: min(1, ℓ_d)
    with ℓ the kernel's length-scales when the fit starts (the smallest over latent functions), None when
    every factor is 1 (standardised data, raw pixels: ℓ ≥ 1), Z is fixed, L-BFGS steps it, or Z lives in
    the space of a feature extractor trained alongside (whose features' scale moves during the fit).

    Both optimisers move every coordinate of Z by about the learning rate per step whatever the feature's
    units: on features of spread 1e-3 (ℓ ≈ 1e-3) Z left the data within a few steps and the fit fell back
    to the prior (chance accuracy on three separated blobs). Scaling the step by ℓ_d is Adam on Z/ℓ.
    """
    Z = getattr(model, "Z", None)
    ls = getattr(getattr(model, "kernel", None), "lengthscale", None)
    if optimizer == "lbfgs" or not isinstance(Z, nn.Parameter) or not Z.requires_grad or not torch.is_tensor(ls) \
            or getattr(model, "feature_extractor", None) is not None:
        return None
    scale = ls.detach().reshape(-1, ls.shape[-1]).amin(0).clamp(max=1.0).to(Z.dtype)
    return None if bool((scale >= 1.0).all()) else scale


@torch.no_grad()
def _roll_back(opt: torch.optim.Optimizer, params: list, values: list) -> None:
    """Restore the parameters (and any buffers listed with them) to ``values`` and halve every learning
    rate (for the sign-adaptive rule and Rprop, each per-element rate or step size; L-BFGS also forgets its curvature pairs, which the rejected step polluted).
    Optimiser statistics that the rejected step made non-finite (Adam's moments after a NaN gradient)
    are zeroed, or every later step would be NaN too."""
    for p, v in zip(params, values):
        p.copy_(v)
    for group in opt.param_groups:
        group["lr"] *= 0.5
    if isinstance(opt, torch.optim.LBFGS):
        opt.state.clear()
    for st in opt.state.values():
        for rate in ("rate", "step_size"):       # SignAdaptive's, Rprop's per-element steps
            if rate in st:
                st[rate].mul_(0.5)
        for t in st.values():
            if torch.is_tensor(t) and t.is_floating_point():
                torch.nan_to_num_(t, nan=0.0, posinf=0.0, neginf=0.0)


def _check_checkpoint_path(settings: TrainSettings, resume: bool) -> None:
    """Before any training: a checkpoint folder that does not exist (found at the first checkpoint, the
    steps before it were lost), and settings under which checkpoints do nothing, said up front."""
    path = settings.checkpoint_path
    if path is None:
        if resume:
            warnings.warn("resume=True without checkpoint_path: there is nothing to resume from; fitting afresh",
                          UserWarning, stacklevel=3)
        return
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"the folder of checkpoint_path {os.fspath(path)!r} does not exist; create it first")
    if settings.checkpoint_every and not os.access(folder, os.W_OK):
        raise PermissionError(f"the folder of checkpoint_path {os.fspath(path)!r} is not writable")
    if not settings.checkpoint_every and not os.path.exists(path):
        warnings.warn(f"checkpoint_path {os.fspath(path)!r} with checkpoint_every=0: no checkpoint will be written "
                      "(and there is none to resume from); set checkpoint_every", UserWarning, stacklevel=3)


def _optimizer(settings: TrainSettings, params: list, inducing: torch.Tensor | None = None) -> torch.optim.Optimizer:
    """The optimiser of ``settings.optimizer`` over ``params``; with ``settings.inducing_learning_rate``, the
    inducing inputs ``inducing`` (one of ``params``) in a parameter group of that rate, the others in one of
    ``settings.learning_rate``."""
    if settings.inducing_learning_rate is not None:
        if not any(p is inducing for p in params):
            raise ValueError("the inducing inputs have their own learning rate, but this fit does not train them "
                             "(inducing_params={'learn': False}): drop the rate, or let them learn")
        params = [{"params": [p for p in params if p is not inducing]},
                  {"params": [inducing], "lr": settings.inducing_learning_rate}]
    if settings.optimizer == "adam":
        # fused: one pass over each parameter per step (torch's CPU default loops over parameters with 7
        # element-wise operators each); the arithmetic is the same up to rounding (docs/design-notes.md)
        return torch.optim.Adam(params, lr=settings.learning_rate, fused=_FUSED_ADAM or None)
    if settings.optimizer == "adaptive":
        return SignAdaptive(params, lr=settings.learning_rate)
    if settings.optimizer == "rprop":
        return torch.optim.Rprop(params, lr=settings.learning_rate, etas=RPROP_ETAS, step_sizes=RPROP_STEP_SIZES)
    # torch's stopping tolerances are absolute (no step when the directional derivative is above −1e-9 or every
    # gradient entry is below 1e-7), and our loss is per datum (÷ N): on a large N or a flat objective every step
    # was silently a no-op. The loop decides when to stop; one iteration and 25 evaluations per step bound the
    # work, and a zero gradient still takes no step.
    return torch.optim.LBFGS(params, lr=settings.learning_rate, max_iter=1, max_eval=25, history_size=20,
                             line_search_fn="strong_wolfe", tolerance_grad=0.0, tolerance_change=0.0)


def _check_fingerprint(where: str, written_for, fingerprint: dict) -> None:
    """A ``CheckpointError`` unless the checkpoint was written for this model, engine, data and optimiser."""
    if written_for is None:                       # checkpoints written before it existed lack it
        return
    if not isinstance(written_for, dict):
        raise CheckpointError(f"{where} is damaged (its fingerprint is a {type(written_for).__name__})")
    if written_for.get("structure") != fingerprint["structure"]:
        raise CheckpointError(f"{where} was written for another model "
                              f"(kernel, likelihood or method differ): {written_for.get('structure')!r}")
    if written_for.get("model", fingerprint["model"]) != fingerprint["model"]:
        raise CheckpointError(f"{where} was written for another model or engine setting: "
                              f"{written_for['model']!r}; this fit: {fingerprint['model']!r}")
    if written_for.get("data") != fingerprint["data"]:
        raise CheckpointError(f"{where} was written for other data "
                              f"({written_for.get('data')}; this fit: {fingerprint['data']}); resume on the same "
                              "rows in the same order, with the same sample weights, or start afresh (resume=False)")
    if "training" in written_for:
        changed = {k: v for k, v in written_for["training"].items() if fingerprint["training"].get(k) != v}
        if changed:
            raise CheckpointError(
                f"{where} was written with " + ", ".join(f"{k}={v!r}" for k, v in changed.items()) + "; this fit has "
                + ", ".join(f"{k}={fingerprint['training'][k]!r}" for k in changed) + ": a checkpoint continues its "
                "own optimiser and learning-rate schedule; resume with the settings it was started with, or "
                "start afresh (resume=False)")


@dataclass
class _Resumed:
    """What a checkpoint restores besides the model and optimiser (which it loads in place)."""

    state: object
    history: History
    start: int
    checkpoint: dict


def _resume(path, model, engine, state, opt, generator, fingerprint: dict, n_steps: int) -> _Resumed:
    """Load the checkpoint at ``path`` into the model, engine state, optimiser and generator, after checking
    that it was written for this fit (``CheckpointError`` otherwise)."""
    ck = load_checkpoint(path)
    where = f"checkpoint {path}"
    _check_fingerprint(where, ck.get("fingerprint"), fingerprint)
    try:
        model.load_state_dict(ck["model"])
        state = load_state(state, ck["engine"])
        opt.load_state_dict(ck["optimizer"])
        generator.set_state(ck["generator"])
        history = History(**ck["history"])
        start = int(ck["iteration"])
    except Exception as exc:        # a damaged or foreign entry: many types (KeyError, TypeError, ...)
        raise CheckpointError(f"{where} does not match this model or is damaged: "
                              f"{type(exc).__name__}: {exc}") from None
    if start > n_steps:
        raise CheckpointError(f"{where} is at iteration {start}, beyond this fit's {n_steps} "
                              "(max_iter or n_epochs): resuming would return a model trained longer than asked; "
                              "raise max_iter, or start afresh (resume=False)")
    return _Resumed(state, history, start, ck)


def _batch_source(X, y, settings: TrainSettings, generator, like: torch.Tensor, buffer_blocks: int,
                  resumed: _Resumed | None):
    """In-memory or streamed minibatches, positioned where a resumed fit left off."""
    path = settings.checkpoint_path
    if y is None:
        batches = _SourceStream(X, settings.batch_size, generator, like, buffer_blocks)
        if resumed is not None and resumed.start:
            if "stream" not in resumed.checkpoint:
                raise CheckpointError(f"checkpoint {path} was not written by a streamed fit")
            try:
                batches.batches.load_state_dict(resumed.checkpoint["stream"])
            except ValueError as exc:
                raise CheckpointError(f"checkpoint {path}: {exc}") from None
        return batches
    batches = _IndexStream(X, y, settings.batch_size, generator)
    if resumed is not None and resumed.start and "batches" in resumed.checkpoint:   # older ones lack it
        try:
            batches.load_state_dict(resumed.checkpoint["batches"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {path} does not match this data: {exc}") from None
    return batches


class Convergence:
    """The stopping rule of ``TrainSettings.tol`` / ``n_iter_no_change``.

    Full batch, the training objective: stationarity. A check (every step) compares the value v (the objective
    per datum) with the previous check's: |v − v_prev| ≤ tol raises the count of quiet checks, a larger change
    resets it; the rule is met once the count reaches ``patience``. (Not "no improvement on the best so far",
    scikit-learn's MLP rule: the EP-family objective log Z_q falls while the sites absorb the data, and that rule
    stopped SEP after n_iter_no_change + 1 steps; see docs/design-notes.md.)

    Minibatches, the training objective: no trend the noise cannot explain. A minibatch's objective is noisy (on
    pendigits a step's per-datum objective scatters by 0.04–0.08 about its trend), so no two checks are ever
    within a tol of 1e-4. A check is the mean over a window of ``steps_per_check`` steps (a pass over the data, at
    least ``MINIBATCH_MIN_CHECK_STEPS`` and at most ``MINIBATCH_CHECK_STEPS``). The rule fits a line to the last
    ``patience`` window means (at least 3) and is met when its slope per check is within tol · (steps per check /
    steps per pass) — tol is per pass — plus ``TREND_Z`` standard errors of the slope, estimated from the residuals
    about the line (so the window means' own scatter and correlation set it): the objective's trend over the last
    ``patience`` windows is flat to within what a minibatch estimate can resolve. See docs/design-notes.md ("A
    stopping rule minibatch fits can meet").

    A ``monitor`` (held-out log-likelihood, early stopping): no improvement on the best so far by more than tol
    for ``patience`` checks — a value that got worse counts, as it should when the model starts to overfit. In
    a minibatch fit its check is one pass over the data.
    """

    def __init__(self, tol: float | None, patience: int, steps_per_check: int, steps_per_pass: int | None = None):
        """steps_per_pass None: a full-batch fit (or a monitor), whose checks are compared one with the next; else
        a minibatch fit of that many steps per pass, whose checks are window means tested for a trend."""
        self.tol, self.patience, self.steps_per_check = tol, patience, max(1, steps_per_check)
        self.steps_per_pass = steps_per_pass
        self.best, self.last, self.count, self.pending, self.recent = -math.inf, None, 0, [], []

    @classmethod
    def of_fit(cls, settings: TrainSettings, N: int, monitored: bool) -> Convergence:
        """The rule of a fit of N rows with these settings, monitored (early stopping) or on its objective."""
        if settings.batch_size is None:
            return cls(settings.tol, settings.n_iter_no_change, 1)
        per_pass = max(1, N // min(settings.batch_size, N))
        if monitored:
            return cls(settings.tol, settings.n_iter_no_change, per_pass)
        window = min(max(per_pass, MINIBATCH_MIN_CHECK_STEPS), MINIBATCH_CHECK_STEPS)
        return cls(settings.tol, settings.n_iter_no_change, window, per_pass)

    def observe(self, value: float, monitor: Callable[[], float] | None = None) -> float | None:
        """Add one step's objective per datum; when a check is due, check and return the value checked (the
        window's mean objective, or ``monitor()`` when given), else None."""
        self.pending.append(value)
        if len(self.pending) < self.steps_per_check:
            return None
        v = math.fsum(self.pending) / len(self.pending) if monitor is None else float(monitor())
        self.pending = []
        tol = 0.0 if self.tol is None else self.tol
        if monitor is not None:
            quiet = not v > self.best + tol
        elif self.steps_per_pass is None:
            quiet = self.last is not None and abs(v - self.last) <= tol
        else:
            self.recent = (self.recent + [v])[-max(3, self.patience):]
            quiet = self._flat(tol * self.steps_per_check / self.steps_per_pass)
        self.count = self.count + 1 if quiet else 0
        self.best, self.last = max(self.best, v), v
        return v

    def _flat(self, tol_per_check: float) -> bool:
        """Whether the least-squares line through the last ``patience`` window means has a slope within
        tol_per_check + ``TREND_Z`` standard errors (too few windows yet: False)."""
        K = max(3, self.patience)
        if len(self.recent) < K:
            return False
        x = np.arange(K, dtype=np.float64) - (K - 1) / 2
        y = np.asarray(self.recent, dtype=np.float64)
        slope = float(x @ y) / float(x @ x)
        residual = y - y.mean() - slope * x
        se = math.sqrt(float(residual @ residual) / (K - 2) / float(x @ x))
        return abs(slope) <= tol_per_check + TREND_Z * se

    @property
    def met(self) -> bool:
        """Whether the rule is met: the last ``patience`` checks were quiet (full batch, monitor), or the last
        check found no trend (minibatches)."""
        return self.count >= (1 if self.steps_per_pass is not None else self.patience)

    @property
    def settling_due(self) -> bool:
        """Whether the last check made a full-batch rule met (the quiet count has just reached ``patience``): the
        moment the fit loop lets an engine's inner EP run to convergence (``Engine.settle``)."""
        return self.steps_per_pass is None and self.count == self.patience

    def state_dict(self) -> dict:
        return {"best": self.best, "last": self.last, "count": self.count, "pending": list(self.pending),
                "recent": list(self.recent)}

    def load_state_dict(self, d: dict) -> None:
        self.best, self.count, self.pending = float(d["best"]), int(d["count"]), list(d["pending"])
        self.last = None if d.get("last") is None else float(d["last"])
        self.recent = [float(v) for v in d.get("recent", [])]


class _Rollback:
    """The guard against a step that goes too far: what a rejected step rolls back to, and how many in a row.

    It tracks the parameters and a hybrid model's batch-normalisation statistics (which move with every
    forward pass: they went to inf with a diverging step and stayed there)."""

    def __init__(self, params: list, extractor: nn.Module | None):
        self.tracked = params + ([] if extractor is None else list(extractor.buffers()))
        self.last_good, self.rejected, self.in_a_row = None, 0, 0

    def snapshot(self) -> list:
        return [t.detach().clone() for t in self.tracked]

    def accept(self, before: list) -> None:
        self.last_good, self.in_a_row = before, 0

    def reject(self, exc: Exception, opt: torch.optim.Optimizer) -> None:
        """Go back to the last parameters whose objective was finite and halve the learning rates, or raise
        ``FloatingPointError`` after ``_MAX_REJECTED`` rejections in a row (or before any good step)."""
        self.in_a_row += 1
        if self.last_good is None or self.in_a_row > _MAX_REJECTED:
            raise FloatingPointError(f"{exc}; {self.in_a_row - 1} step(s) rejected and retried with halved learning "
                                     "rates; lower learning_rate or use dtype='float64'") from exc
        _roll_back(opt, self.tracked, self.last_good)
        self.rejected += 1

    def state_dict(self) -> dict:
        return {"last_good": self.last_good, "rejected": self.rejected}

    def load_state_dict(self, ck: dict) -> None:
        if ck.get("last_good") is not None:    # where the uninterrupted fit would roll back to
            self.last_good = [t.to(p.device, p.dtype) for t, p in zip(ck["last_good"], self.tracked, strict=True)]
            self.rejected = int(ck["rejected"])


def _validation_row(validate, model, state, step: int, history: History) -> None:
    """Evaluate the validation function and append its row at ``step`` to the history."""
    row = {"iteration": step, "time": history.time[-1]}
    row.update(validate(model, state))
    history.validation.append(row)


def _out_of_time(settings: TrainSettings, history: History, comm, model: nn.Module) -> bool:
    """Whether the time budget is spent; with ``comm``, on any rank (a rank that stops alone leaves the others
    waiting in the next all-reduce)."""
    out = settings.max_time is not None and history.time[-1] >= settings.max_time
    if comm is not None and settings.max_time is not None:
        flag = torch.tensor([float(out)], dtype=torch.float64,
                            device=next(model.parameters()).device)      # NCCL reduces on the GPU
        out = bool(comm.all_reduce(flag).item() > 0)
    return out


def fit(model: nn.Module, engine: Engine, state, X, y: torch.Tensor | None, settings: TrainSettings, *,
        generator: torch.Generator, validate: Callable[[nn.Module, object], dict] | None = None,
        resume: bool = False, callback: Callable[[int, float], None] | None = None, comm=None,
        buffer_blocks: int = 4, monitor: Callable[[nn.Module, object], float] | None = None,
        prior: LogNormalPrior | None = None, sample_weight: torch.Tensor | None = None):
    """Optimise the engine's objective over the model's hyper-parameters and the engine state, until the
    stopping rule (``TrainSettings.tol``, ``Convergence``) is met or the step budget is spent.

    Args:
        model: the ``SparseGP``; engine/state: an engine and its ``init`` state.
        X [N,D], y [N] (int64): training data on the model's device and dtype; or X a ``stream``
            source with labels already encoded as 0 … C−1 (``stream.LabelEncoded``) and y None:
            minibatches are streamed (needs ``settings.batch_size`` and a ``streamable`` engine; engines get
            ``idx=None``).
        settings: ``TrainSettings``.
        generator: the only source of randomness (minibatch order).
        validate: optional ``f(model, state) -> {metric: value}`` run every ``eval_every`` steps.
        resume: continue from ``settings.checkpoint_path`` if it exists.
        callback: optional ``f(step, objective)`` after each step.
        comm: a ``distributed.Communicator`` for data-parallel training, or None.
        buffer_blocks: blocks shuffled together when streaming (``stream.Minibatches``).
        monitor: optional ``f(model, state) -> value`` (higher is better, e.g. −NLL on held-out rows) that the
            stopping rule checks instead of the training objective (early stopping).
        prior: optional ``hyperprior.LogNormalPrior`` on the kernel's hyper-parameters: the loop maximises the
            engine's objective + log p(ξ) (the objective in the history includes it).
        sample_weight: the rows' weights [N] that the engine's state was initialised with (``engine``: row
            weights), or None (1 each): the checkpoints' fingerprint covers them, and their sum W replaces N as
            the per-datum scale of the loss and of the objective the stopping rule checks.
    Returns:
        (state, History); ``History.converged`` says whether the stopping rule was met.
    """
    _check_checkpoint_path(settings, resume)
    N = _n_rows(X, y, settings)
    n_steps = settings.n_steps(N)
    per_datum = float(N) if sample_weight is None else float(sample_weight.sum())   # the rows the data stand for
    natural = engine.natural_parameters(model, state)
    params = [p for p in engine.trainable(model, state) if all(p is not n for n in natural)]
    if natural and settings.optimizer == "lbfgs":
        raise ValueError("natural-gradient steps of q need optimizer='adam' or 'adaptive' for the hyper-parameters "
                         "(L-BFGS's line search would move q along with them)")
    opt = _optimizer(settings, params, getattr(model, "Z", None))
    history, start, resumed = History(), 0, None
    z_scale = _inducing_step_scale(model, settings.optimizer)   # a resumed fit scales as its first part did
    fingerprint = _fingerprint(model, engine, X, y, settings, sample_weight) if settings.checkpoint_path else None
    if resume and settings.checkpoint_path and os.path.exists(settings.checkpoint_path):
        resumed = _resume(settings.checkpoint_path, model, engine, state, opt, generator, fingerprint, n_steps)
        state, history, start = resumed.state, resumed.history, resumed.start
        if "z_scale" in resumed.checkpoint:      # the inducing step scale of the fit's start (a warm start's model)
            zs = resumed.checkpoint["z_scale"]
            z_scale = None if zs is None else zs.to(model.Z.device, model.Z.dtype)
        if prior is not None and resumed.checkpoint.get("prior_centres") is not None:
            # the prior's centres are the values the fit started from: a warm start's, which the estimator resuming
            # it may no longer hold (it moved on, or it is a new one)
            try:
                prior = prior.recentred(resumed.checkpoint["prior_centres"])
            except (TypeError, ValueError) as exc:
                raise CheckpointError(f"checkpoint {settings.checkpoint_path} is damaged: {exc}") from None
    batches = _batch_source(X, y, settings, generator, model.Z, buffer_blocks, resumed)
    t0 = time.perf_counter() - (history.time[-1] if history.time else 0.0)
    bar = _progress_bar(settings, n_steps, start, engine)

    model.train()   # a hybrid model's batch normalisation/dropout in training mode (validation switches to eval)
    z_index = next((i for i, p in enumerate(params) if p is getattr(model, "Z", None)), None)
    extractor = getattr(model, "feature_extractor", None)
    guard = _Rollback(params + natural, extractor)
    rule = Convergence.of_fit(settings, N, monitored=monitor is not None)
    if resumed is not None and start:
        try:
            guard.load_state_dict(resumed.checkpoint)
            if "convergence" in resumed.checkpoint:
                rule.load_state_dict(resumed.checkpoint["convergence"])
            if "torch_rng" in resumed.checkpoint:      # dropout draws from torch's global generator
                torch.set_rng_state(resumed.checkpoint["torch_rng"])
        except Exception as exc:
            raise CheckpointError(f"checkpoint {settings.checkpoint_path} is damaged: "
                                  f"{type(exc).__name__}: {exc}") from None
    # per-step factor of the learning-rate decay: lr_decay per pass over the data, i.e. per ⌊N/|B|⌋ steps (an
    # epoch drops its incomplete last batch; the factor lr_decay^(|B|/N) fell short of lr_decay per pass
    # whenever |B| does not divide N). The rate lives in the optimiser's state, so a resumed fit continues
    # the schedule (and a rejected step's halving composes with it).
    decay_per_step = settings.lr_decay ** (1.0 / max(1, N // min(settings.batch_size or N, N)))
    # the shapes of a step never change (an epoch drops its incomplete last batch): the same graphs every step.
    # A compiled loss forms its own geometry (its graph's inputs stay the data and the state).
    loss_fn = engine.loss if settings.compile is None else _compiled(engine.loss, settings.compile)
    share_geometry = engine.capabilities.shared_geometry and settings.compile is None
    for step in range(start, n_steps):
        Xb, yb, idx = next(batches)
        try:
            weight = 1.0
            if comm is not None:     # this rank's shard of the global minibatch; loss weight |B_r|/|B| (distributed)
                Xb, yb, idx, weight = comm.shard(Xb, yb, idx)
            geometry = engine.geometry(model, Xb) if share_geometry else None
            if comm is None:
                state = engine.update(model, state, Xb, yb, N, idx, geometry=geometry)
            else:
                state = comm.update(engine, model, state, Xb, yb, N, idx, geometry=geometry)
            write_constants(model, engine, state)
            before = guard.snapshot()
            per_datum_loss = _step(opt, loss_fn, model, state, Xb, yb, N, idx, comm, weight, params + natural,
                                   extractor, geometry, natural, prior, per_datum)
            if natural:
                state = engine.natural_step(model, state, per_datum)
            if z_scale is not None and z_index is not None:
                with torch.no_grad():
                    Z, Z0 = params[z_index], before[z_index]
                    Z.copy_(Z0 + (Z - Z0) * z_scale)
            objective = -float(per_datum_loss.detach()) * per_datum
            if not math.isfinite(objective):
                raise _Diverged(f"the objective became {objective} at iteration {step + 1}")
        except (NotPositiveDefiniteError, _Diverged) as exc:
            # The hyper-parameter step before this one went too far (K_uu or q no longer factorises, or the
            # objective is not finite): back to the last parameters whose objective was finite, learning rates
            # halved, and on; every rejection is an event in the history.
            guard.reject(exc, opt)
            history.events.append({"iteration": step + 1, **engine.counters(state), "rejected": guard.rejected,
                                   "reason": str(exc).split(";")[0][:200]})
            continue
        guard.accept(before)
        if decay_per_step != 1.0:
            for group in opt.param_groups:
                group["lr"] *= decay_per_step
        record_engine_events(history, engine, state, step + 1, guard.rejected)
        history.iteration.append(step + 1)
        history.objective.append(objective)
        history.time.append(time.perf_counter() - t0)
        if validate is not None and ((step + 1) % settings.eval_every == 0 or step + 1 == n_steps):
            t_eval = time.perf_counter()
            _validation_row(validate, model, state, step + 1, history)
            t0 += time.perf_counter() - t_eval      # training time excludes validation
        t_check = time.perf_counter()
        checked = rule.observe(objective / per_datum, None if monitor is None else lambda: monitor(model, state))
        if monitor is not None:
            t0 += time.perf_counter() - t_check     # as validation: not training time
        if checked is not None:
            history.monitored.append({"iteration": step + 1, "value": checked})
        if rule.settling_due and monitor is None and settings.tol is not None and engine.converged(state) is False:
            # the hyper-parameters have just become stationary and only the inner EP lags: run it to convergence
            # now rather than one capped run per step until it gets there (Engine.settle)
            state = engine.settle(model, state, Xb, yb, N, idx)
            write_constants(model, engine, state)
            record_engine_events(history, engine, state, step + 1, guard.rejected)
        converged = rule.met and engine.converged(state) is not False
        if bar is not None:
            bar.update(1)
            bar.set_postfix(objective=f"{objective:.4g}", refresh=False)
        if callback is not None:
            callback(step + 1, objective)
        stop = _out_of_time(settings, history, comm, model) or (converged and settings.tol is not None)
        if stop and validate is not None and \
                (not history.validation or history.validation[-1]["iteration"] != step + 1):
            _validation_row(validate, model, state, step + 1, history)
        if settings.checkpoint_path and settings.checkpoint_every and (step + 1) % settings.checkpoint_every == 0 \
                and (comm is None or comm.rank == 0):
            save_checkpoint(settings.checkpoint_path, {
                "iteration": step + 1, "fingerprint": fingerprint,
                "model": model.state_dict(), "engine": state_to_dict(state),
                "optimizer": opt.state_dict(), "generator": generator.get_state(),
                "history": history.as_dict(), **guard.state_dict(),
                "torch_rng": torch.get_rng_state(), "z_scale": z_scale, "convergence": rule.state_dict(),
                "prior_centres": None if prior is None else [c for _, _, c in prior.centres],
                **({"stream": batches.batches.state_dict()} if y is None else {"batches": batches.state_dict()}),
            })
        if stop:
            break
    history.converged = bool(rule.met and engine.converged(state) is not False)
    if bar is not None:
        bar.close()
    model.eval()
    return state, history


def _n_rows(X, y, settings: TrainSettings) -> int:
    """N of in-memory tensors, or of a stream source (y None), checked for what streaming needs."""
    if y is not None:
        return X.shape[0]
    from .stream import is_source
    if not is_source(X):
        raise TypeError(f"fit needs tensors X, y or a stream source with y=None, got {type(X).__name__}")
    if settings.batch_size is None:
        raise ValueError("streaming from a source needs minibatches: set batch_size")
    return X.n_rows


def _progress_bar(settings: TrainSettings, n_steps: int, start: int, engine: Engine):
    """A tqdm bar when ``settings.progress``, else None."""
    if not settings.progress:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=n_steps, initial=start, desc=f"fit {type(engine).__name__}", unit="it",
                dynamic_ncols=True, leave=True)
