"""The engine protocol: what every inference method provides to the fit loop, and what it declares it can do.

An engine is a frozen settings dataclass (damping, α, ...) whose methods map an explicit state to a new
state (optax's init/update pair, with a differentiable loss beside it):

    state = engine.init(model, X, y, generator, weight=w)    # q = prior, sites at zero, ...
    state = engine.update(model, state, X_B, y_B, N, idx)    # closed-form site step (no-op for VI)
    loss  = engine.loss(model, state, X_B, y_B, N, idx)      # −objective on the minibatch, scaled by N/|B|
    q     = engine.posterior(model, state)                   # InducingPosterior
    θ     = engine.trainable(model, state)                   # what the optimiser steps

What else an engine can do is *declared* in its ``capabilities`` (a ``Capabilities``), never discovered by
probing the object: the fit loop, data-parallel training, streaming, warm starts and the estimator read the
flags. The optional hooks below have defaults in ``Engine`` that are correct for an engine that does not
declare the capability; an engine that declares one overrides the hooks it names.

Shared geometry. The EP-family update and loss both need the Cholesky factor of K_uu and the directions
K_uu⁻¹k_u(x) of the minibatch. ``geometry`` forms them once with autograd on; the fit loop passes the result
to ``update`` (which uses it detached) and to the first evaluation of ``loss`` (which differentiates it) —
explicitly, as an argument: engines keep no caches.

Row weights. A fit may weigh its training rows (``GPClassifier.fit(sample_weight=...)``): w [N], each row's
contribution to the objective multiplied by w_i, as if the row were there w_i times. The weights are data of the
rows, like y: an engine that declares ``weighted`` takes them in ``init`` (and ``carry``) and keeps them in its
state, and ``update``/``loss`` read the minibatch's rows ``idx`` of them. ``weight=None`` means every row weighs 1
(the common case, at no cost); an engine without the capability refuses any other (``refuse_weights``).

Per-row state. An engine with per-row sites (EP, Power EP) stores them as [N, ...] arrays; a minibatch
update replaces B of the N rows. Copying all N rows per step would make a minibatch step O(N), so such an
engine may write the rows of the minibatch into the arrays of the state it is given and return a new state
that shares them: the caller hands the state over (as JAX donates a buffer) and uses only the returned one.
Engines declare this with ``per_row_state``; everything else in a state is replaced, not mutated.

What this module does not do: any maths of a particular method, or choose an engine (``registry`` does).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import torch
from torch import nn

__all__ = ["Capabilities", "Engine", "EngineProtocol", "write_constants", "refuse_weights", "rows_of"]


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do, declared.

    Attributes:
        streamable: the state does not grow with N, so minibatches can be streamed from a file and
            training can run data-parallel (vi, sep, apep, arpep, rpapep).
        per_row_state: one site per training row (ep, pep, gfitc, rmgpc): a warm start matches rows by their
            keys and ``carry`` moves each kept row's site; minibatch updates write the minibatch's rows
            into the state they are given (module docstring).
        full_batch_only: runs EP to convergence on the whole data set (gfitc, rmgpc): no minibatches.
        free_gaussian: q(u) is a free Gaussian trained by gradient (vi, arpep, rpapep, bsvm): a neural
            feature extractor can be trained with it.
        increment: the closed-form update is additive over disjoint shards of a minibatch
            (``increment`` / ``apply``): data-parallel training sums the shards' increments (sep).
        closed_form_update: ``update`` changes the state (site methods); False: it returns the state as is.
        shared_geometry: ``geometry`` returns what ``update`` and ``loss`` share (ep, pep, sep).
        rescalable: a streamed warm start can adapt the state to new class counts (``rescale``, sep).
        weighted: ``init`` and ``carry`` take row weights (module docstring) and the objective weighs each row
            by its own, exactly as repeating the row (vi, ep, sep, apep and the methods built on them).
    """

    streamable: bool = False
    per_row_state: bool = False
    full_batch_only: bool = False
    free_gaussian: bool = False
    increment: bool = False
    closed_form_update: bool = False
    shared_geometry: bool = False
    rescalable: bool = False
    weighted: bool = False


@runtime_checkable
class EngineProtocol(Protocol):
    """The five methods every engine implements (``Engine`` adds the optional hooks' defaults)."""

    capabilities: ClassVar[Capabilities]

    def init(self, model: nn.Module, X: torch.Tensor | None, y: torch.Tensor | None,
             generator: torch.Generator | None, weight: torch.Tensor | None = None): ...

    def update(self, model: nn.Module, state, X: torch.Tensor, y: torch.Tensor, n_total: int,
               idx: torch.Tensor | None = None, *, geometry=None): ...

    def loss(self, model: nn.Module, state, X: torch.Tensor, y: torch.Tensor, n_total: int,
             idx: torch.Tensor | None = None, *, geometry=None) -> torch.Tensor: ...

    def posterior(self, model: nn.Module, state): ...

    def trainable(self, model: nn.Module, state) -> list: ...


class Engine:
    """Base of every engine: the optional hooks, with the defaults of an engine that declares nothing.

    Subclasses are frozen dataclasses of settings; they implement the five methods of
    ``EngineProtocol`` and override the hooks their ``capabilities`` declare.
    """

    capabilities: ClassVar[Capabilities] = Capabilities()

    def geometry(self, model: nn.Module, X: torch.Tensor):
        """What ``update`` and ``loss`` share for the minibatch X, formed once with autograd on; None when
        the engine shares nothing (``shared_geometry`` False)."""
        return None

    def restore(self, model: nn.Module, state, Lk: torch.Tensor | None = None):
        """Make q proper again after a hyper-parameter step (site methods); by default q always is."""
        return state

    def carry(self, model: nn.Module, state, X: torch.Tensor, y: torch.Tensor, keep: torch.Tensor,
              weight: torch.Tensor | None = None):
        """The state for a new training set X, y (row weights ``weight`` [N'] or None) sharing rows with the old
        one (a warm start). ``keep`` [N']: for each new row the old row whose site it takes over, or −1. By default
        the state carries over as it is (its size does not depend on the rows; no weights: ``refuse_weights``)."""
        refuse_weights(self, weight)
        return state

    def rescale(self, state, counts: torch.Tensor):
        """The state for new per-latent counts (``counts_from_classes`` of a streamed warm start's class
        counts; ``rescalable``); by default unchanged."""
        return state

    def counts_from_classes(self, class_counts: torch.Tensor):
        """The engine's per-latent counts from the per-class row counts [C] (a streamed fit's init); None
        when the engine keeps none."""
        return None

    def increment(self, model: nn.Module, state, X: torch.Tensor, y: torch.Tensor, Lk: torch.Tensor | None = None, *,
                  idx: torch.Tensor | None = None):
        """The additive contribution of the minibatch X, y (rows ``idx`` of the data set, for their weights) to the
        closed-form step (``capabilities.increment``)."""
        raise NotImplementedError(f"{type(self).__name__} has no additive update (capabilities.increment)")

    def apply(self, model: nn.Module, state, increment, Lk: torch.Tensor | None = None):
        """The step from a (summed) ``increment`` (``capabilities.increment``)."""
        raise NotImplementedError(f"{type(self).__name__} has no additive update (capabilities.increment)")

    def natural_parameters(self, model: nn.Module, state) -> list:
        """Parameters of q(u) that ``natural_step`` moves by natural gradient instead of the optimiser (the
        fit loop keeps them out of it); none by default."""
        return []

    def natural_step(self, model: nn.Module, state, n_total: float):
        """A natural-gradient step of q(u) from the gradients that the step's one backward pass left on
        ``natural_parameters`` (of the per-datum loss ℓ = −F/n_total, n_total the rows' total weight: N
        unweighted); by default nothing to do."""
        return state

    def model_constants(self, state) -> dict[str, float]:
        """Constants of the model that the state determines, by buffer name (RMGPC: the robust-max ε = E[ρ]);
        the fit loop writes them into the model after each update. None by default."""
        return {}

    def counters(self, state) -> dict[str, int]:
        """The state's cumulative guard counters (skipped and re-damped site updates, latents reset), for the
        fit history; zeros for an engine without guards."""
        return {"skipped": 0, "redamped": 0}

    def converged(self, state) -> bool | None:
        """Whether the engine's last inner EP run converged (gfitc, rmgpc); None for engines without one."""
        return None

    def settle(self, model: nn.Module, state, X: torch.Tensor, y: torch.Tensor, n_total: int,
               idx: torch.Tensor | None = None):
        """The state after running the inner EP (gfitc, rmgpc) at the current hyper-parameters until it converges,
        with a larger sweep cap than ``update``'s. The fit loop calls it once the outer rule has become met while
        ``converged`` is False: the hyper-parameters are then stationary, and only the sites lag. Default: the
        state unchanged (engines without an inner run)."""
        return state


@torch.no_grad()
def write_constants(model: nn.Module, engine: Engine, state) -> None:
    """Write ``engine.model_constants(state)`` into the model's buffers (what the fit loop does after each
    update, and what a caller of ``update`` outside the loop does before predicting)."""
    constants = engine.model_constants(state)
    if not constants:                     # most engines: nothing to write (this runs after every update)
        return
    buffers = dict(model.named_buffers())
    for name, value in constants.items():
        buf = buffers[name]
        buf.copy_(torch.tensor(value, dtype=buf.dtype))


def refuse_weights(engine, weight: torch.Tensor | None) -> None:
    """A ValueError for row weights given to an engine that does not declare ``weighted`` (None: every row 1)."""
    if weight is not None:
        raise ValueError(f"{type(engine).__name__} takes no row weights (its capabilities do not declare weighted)")


def rows_of(weight: torch.Tensor | None, idx: torch.Tensor | None) -> torch.Tensor | None:
    """The weights [B] of the minibatch's rows ``idx`` (all rows when idx is None) from a state's row weights [N],
    or None when the rows are unweighted."""
    if weight is None:
        return None
    return weight if idx is None else weight[idx]
