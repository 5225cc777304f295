"""A log-normal prior on the kernel hyper-parameters: the fit maximises log Z + log p(ξ) (MAP-II) instead of
the evidence log Z alone (ML-II, the papers' choice).

Each ARD length-scale ℓ_ld and each amplitude σ²_l gets an independent log-normal prior centred on the value
the fit starts from (the data-driven initial length-scales of ``initialization.initial_lengthscales`` and the
initial amplitude, 1 unless set):

    −log p(ξ) = Σ (log ξ − log ξ₀)² / (2 s²) + const,   s = ``scale``.

Why: the evidence of a classifier is flat along directions that do not change its predictions much — the
length-scale of an irrelevant feature, the amplitude of a class that is already separated — and it keeps
rising slowly along them towards infinity. A fit then never becomes stationary, and the large amplitudes
make test probabilities overconfident. With the prior the objective has a finite optimum, a fit reaches it
in about 3× fewer steps, and the suite's test NLL was as good or better (docs/design-notes.md, "Defaults").

The latent-noise variance has no prior (it is a jitter-like term the papers keep small), nor do the inducing
inputs or likelihood parameters.

What this module does not do: choose the scale (``registry.Method.prior_scale``) or add the term to the
objective (``train.fit``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["LogNormalPrior"]


@dataclass(frozen=True)
class LogNormalPrior:
    """Independent log-normal priors on every ``lengthscale`` and ``variance`` of a kernel (and of each term
    of a ``Sum`` kernel), centred on their values when the prior was made (``around``).

    Attributes:
        scale: s, the standard deviation of log ξ (1: a factor e either way is one standard deviation).
        centres: (kernel-module name, "lengthscale" or "variance", log ξ₀) triples.
    """

    scale: float
    centres: tuple[tuple[str, str, torch.Tensor], ...]

    @classmethod
    def around(cls, kernel: nn.Module, scale: float) -> "LogNormalPrior":
        """The prior centred on ``kernel``'s current hyper-parameters."""
        if not (isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale > 0):
            raise ValueError(f"the hyper-parameter prior's scale must be a number > 0 (or None for no prior), "
                             f"got {scale!r}")
        centres = []
        for name, module in kernel.named_modules():
            for what in ("lengthscale", "variance"):
                if hasattr(module, "raw_" + what):
                    with torch.no_grad():
                        centres.append((name, what, torch.log(getattr(module, what)).detach().clone()))
        return cls(float(scale), tuple(centres))

    def recentred(self, log_centres) -> "LogNormalPrior":
        """The same prior centred on ``log_centres`` (one tensor per entry of ``centres``, of its shape): the
        centres a checkpoint saved. A ValueError when they do not match."""
        if not isinstance(log_centres, (list, tuple)) or len(log_centres) != len(self.centres) or any(
                not torch.is_tensor(new) or new.shape != old.shape
                for (_, _, old), new in zip(self.centres, log_centres)):
            raise ValueError("its hyper-parameter prior's centres do not match the model's hyper-parameters")
        return LogNormalPrior(self.scale, tuple((name, what, new.detach().clone())
                                                for (name, what, _), new in zip(self.centres, log_centres)))

    def neg_log_density(self, kernel: nn.Module) -> torch.Tensor:
        """−log p(ξ) up to a constant, differentiable in the kernel's raw parameters."""
        modules = dict(kernel.named_modules())
        total = 0.0
        for name, what, log_centre in self.centres:
            log_value = torch.log(getattr(modules[name], what))
            total = total + ((log_value - log_centre.to(log_value)) ** 2).sum()
        return total / (2.0 * self.scale ** 2)
