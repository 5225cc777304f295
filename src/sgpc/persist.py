"""Files: training checkpoints and the model file format, their digests, and atomic writes.

Both kinds of file are plain dictionaries of tensors, numbers and strings written with ``torch.save`` and read
back with ``torch.load(weights_only=True)``: reading one never executes code from it. Each carries a
``format`` tag, and a ``checksum`` (``digest`` of everything else), so a truncated, altered or foreign file is
refused with a message that says which, never unpickled and never half-loaded. Writes go to a temporary file
that is renamed over the target, so an interrupted write loses nothing.

Engine states (dataclasses of tensors, numbers and modules) become plain dictionaries with ``state_to_dict``
and go back into a freshly initialised state of the same engine with ``load_state``.

A model file holds the estimator's parameters and fitted attributes (``model_payload``); ``read_model`` gives
them back with the parameters of files written by older sgpc translated to today's arguments
(``current_params``).

What this module does not do: rebuild a model from a file (``fitting.restore``) or decide when to checkpoint
(``train.fit``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle

import numpy as np
import torch
from torch import nn

from .registry import KERNEL_OPTIONS, LIKELIHOOD_OPTIONS, METHOD_OPTIONS, OPTION_GROUPS, from_spec

__all__ = ["CheckpointError", "ModelFileError", "digest", "atomic_save", "save_checkpoint", "load_checkpoint",
           "save_model", "load_model", "model_payload", "read_model", "current_params", "check_model_version",
           "check_plain", "file_error_detail", "check_structure", "check_model_payload", "state_to_dict", "load_state",
           "MODEL_FORMAT",
           "MODEL_VERSION", "CHECKPOINT_FORMAT"]

MODEL_FORMAT = "sgpc-model"
MODEL_VERSION = 1
CHECKPOINT_FORMAT = "sgpc-checkpoint"


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, foreign or does not match the model."""


class ModelFileError(ValueError):
    """A model file is missing, truncated, corrupt or not an sgpc model."""


def digest(payload: dict) -> str:
    """blake2b of a saved file's content: every tensor (key path, dtype, shape, bytes) and every other value
    (its repr), in key order — a flipped bit in any weight, site or optimiser moment changes it."""
    h = hashlib.blake2b(digest_size=16)

    def walk(obj, path: str) -> None:
        if isinstance(obj, dict):
            for k in sorted(obj, key=str):
                walk(obj[k], f"{path}/{k}")
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, f"{path}/{i}")
        elif isinstance(obj, torch.Tensor):
            t = obj.detach().cpu().contiguous()
            h.update(f"{path}:{t.dtype}:{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            h.update(f"{path}={obj!r}".encode())

    walk(payload, "")
    return h.hexdigest()


def atomic_save(path: str | os.PathLike, payload: dict) -> None:
    """Write ``payload`` with ``torch.save`` atomically (temporary file + rename), so an interrupted write
    loses nothing and a failed one leaves no temporary file behind."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a directory; a file path is needed, e.g. {os.path.join(path, 'model.pt')}")
    tmp = path + ".tmp"
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _looks_like_text(path: str) -> bool:
    """Whether the first 4 KiB of ``path`` decode as UTF-8 text without NUL bytes (a CSV, JSON, ... file)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
        head.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return b"\0" not in head


def file_error_detail(exc: Exception, path: str | os.PathLike | None = None) -> str:
    """Why torch could not read a model or checkpoint file, as the likely cause in our words: torch's and the
    system's own messages (and torch's advice to load a file unsafely, ``weights_only=False``) are not shown."""
    if isinstance(exc, IsADirectoryError):
        return "it is a directory, not a file"
    if isinstance(exc, PermissionError):
        return "permission to read it was denied"
    if isinstance(exc, OSError):
        return "the system could not read it (a device, a pipe, or a path it cannot open)"
    if path is not None:
        path = os.fspath(path)
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            return "it is empty"
        if _looks_like_text(path):
            return "it is a text file (CSV, JSON, ...), not a file written by sgpc's save"
    if isinstance(exc, pickle.UnpicklingError):
        return ("it holds objects other than tensors and plain values (not written by sgpc, or altered); "
                "sgpc never unpickles such objects")
    if isinstance(exc, EOFError):
        return "it ends early (truncated: an interrupted copy or download?)"
    return "it is not a file written by sgpc's save (another kind of file, or a truncated or corrupted one)"


def _read(path: str | os.PathLike, error: type[ValueError], what: str) -> dict:
    """``torch.load(weights_only=True)`` of a file, with any failure but a missing file as ``error``."""
    try:
        return torch.load(os.fspath(path), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as exc:  # truncated, corrupt or foreign files raise many different types
        raise error(f"{path} is not a readable sgpc {what}: {file_error_detail(exc, path)}") from None


# -- checkpoints ------------------------------------------------------------------------------------
def save_checkpoint(path: str | os.PathLike, payload: dict) -> None:
    """Write a checkpoint ``payload`` atomically (``atomic_save``), with its ``digest`` as "checksum"."""
    atomic_save(path, {"format": CHECKPOINT_FORMAT, **payload, "checksum": digest({"format": CHECKPOINT_FORMAT,
                                                                                    **payload})})


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint written by ``save_checkpoint`` without executing code (weights_only)."""
    d = _read(path, CheckpointError, "checkpoint")
    if not isinstance(d, dict) or d.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not an sgpc checkpoint")
    stored = d.pop("checksum", None)          # checkpoints written before it existed lack it
    if stored is not None and stored != digest(d):
        raise CheckpointError(f"{path} is damaged: its content does not match its checksum")
    return d


# -- model files ------------------------------------------------------------------------------------
def save_model(path: str | os.PathLike, payload: dict) -> None:
    """Write a model ``payload`` (plain values and tensors) with its format tag and version, the sgpc and torch
    versions that wrote it ("sgpc_version", "torch_version") and its checksum."""
    payload = {"format": MODEL_FORMAT, "version": MODEL_VERSION, **_written_with(), **payload}
    payload["checksum"] = digest(payload)
    atomic_save(path, payload)


def load_model(path: str | os.PathLike) -> dict:
    """Read a model file written by ``save_model``: a ``ModelFileError`` for anything that is not one, is of
    another format version, or was altered after it was written."""
    d = _read(path, ModelFileError, "model file")
    if not isinstance(d, dict) or d.get("format") != MODEL_FORMAT:
        raise ModelFileError(f"{path} is not an sgpc model file")
    check_model_version(path, d)
    stored = d.pop("checksum", None)        # files written before checksums were added have none
    if stored is not None and stored != digest(d):
        raise ModelFileError(f"{path} was altered or corrupted after it was written (its checksum does not match "
                             "its content); refit or restore the file from a copy")
    return d


def model_payload(est, params: dict) -> dict:
    """What ``GPClassifier.save`` writes for the fitted estimator ``est``: its parameters ``params`` (plain values,
    ``validation.plain_value``) and its fitted attributes as tensors and plain values."""
    payload = {
        "params": params,
        "has_feature_extractor": est.model_.feature_extractor is not None,
        "classes": est.classes_.tolist(), "classes_dtype": est.classes_.dtype.str,
        "n_features_in": int(est.n_features_in_),
        "model": {k: v.detach().cpu() for k, v in est.model_.state_dict().items()},
        "state": state_to_dict(est.state_),
        "posterior": {"mean": est.posterior_.mean.detach().cpu(), "chol": est.posterior_.chol.detach().cpu()},
        "history": est.history_, "n_iter": int(est.n_iter_), "dtype": str(est.dtype_),
        "method": str(getattr(est, "method_", est.method)),       # what method="auto" chose
        # what batch_size="auto" chose (None: the full batch)
        "batch_size": None if getattr(est, "batch_size_", None) is None else int(est.batch_size_),
        "warm_started": bool(getattr(est, "warm_started_", False)),
        "diagnostics": {"at_prior": bool(getattr(est, "at_prior_", False)),
                        "stalled": bool(getattr(est, "stalled_", False)),
                        "prior_distance": float(getattr(est, "prior_distance_", float("nan")))},
    }
    if hasattr(est, "feature_names_in_"):
        payload["feature_names_in"] = [str(c) for c in est.feature_names_in_]
    if getattr(est, "_full_gp_", False):   # Z = X held fixed: not a parameter setting, so say it
        payload["full_gp"] = True
    if getattr(est, "_row_keys_", None) is not None:    # what a warm start matches sites by
        payload["row_keys"] = torch.as_tensor(est._row_keys_.view(np.int64))
    return payload


# estimator arguments of older files -> (the dict that holds them now, its key)
_MOVED = {"inducing_init": ("inducing_params", "init"), "learn_inducing": ("inducing_params", "learn"),
          "shared_inducing": ("inducing_params", "shared"), "lr_decay": ("optimizer_params", "lr_decay")}
# estimator arguments of older files that are arguments of ``fit`` now (they describe a run, not the model)
_NOW_FIT_ARGUMENTS = ("eval_every", "checkpoint_path", "checkpoint_every")


def current_params(params: dict) -> dict:
    """A model file's parameters as today's estimator arguments: the inducing and optimizer settings of files
    written before ``inducing_params``/``optimizer_params`` moved into them, the per-run settings that are
    arguments of ``fit`` now dropped, and the options that files written before ``method_params``,
    ``likelihood_params`` and ``kernel_params`` held flat (``alpha``, ``epsilon``, ...) moved into those dicts:
    the ones the method, likelihood and kernel take (such a file held every option). A ``class_weight`` dict is
    stored as [label, weight] pairs (its labels may be numbers, ``validation.plain_value``): a dict again."""
    params = {k: v for k, v in params.items() if k not in _NOW_FIT_ARGUMENTS}
    if isinstance(params.get("class_weight"), list):
        params["class_weight"] = {label: weight for label, weight in params["class_weight"]}
    for old, (group, key) in _MOVED.items():
        if old in params:
            params[group] = {**(params.get(group) or {}), key: params.pop(old)}
    flat = {k: params.pop(k) for k in (*METHOD_OPTIONS, *LIKELIHOOD_OPTIONS, *KERNEL_OPTIONS) if k in params}
    if flat:
        for group in ("method_params", "likelihood_params", "kernel_params"):
            params[group] = {k: flat[k] for k in OPTION_GROUPS[group](params) if k in flat}
    return params


def read_model(path: str | os.PathLike) -> dict:
    """A model file's content (``load_model``) with its parameters as today's estimator arguments
    (``current_params``); a ``ModelFileError`` when they are not a mapping or do not rebuild.
    A kernel or likelihood argument stored as a ``registry.spec`` is rebuilt (``registry.from_spec``: its class
    from the registry's tables, never code from the file)."""
    d = load_model(path)
    params = d.get("params", {})
    if not isinstance(params, dict):
        raise ModelFileError(f"{path} is damaged: its parameters are a {type(params).__name__}, not a mapping")
    params = current_params(params)
    try:
        for key in ("kernel", "likelihood"):
            if isinstance(params.get(key), dict):
                params[key] = from_spec(params[key])
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as exc:
        raise ModelFileError(f"{path} is damaged or from an incompatible sgpc: its {key} argument does not rebuild "
                             f"({type(exc).__name__}: {exc})") from None
    d["params"] = params
    return d


def check_plain(value, name: str) -> None:
    """A ``TypeError`` unless ``value`` is made of plain values only (dicts with string keys, lists, tuples,
    strings, numbers, booleans, None): what a model file may hold besides tensors and still load with
    ``weights_only``."""
    if value is None or type(value) in (str, int, float, bool):
        return
    if type(value) in (list, tuple):
        for i, v in enumerate(value):
            check_plain(v, f"{name}[{i}]")
    elif type(value) is dict:
        for k, v in value.items():
            if type(k) is not str:
                raise TypeError(f"{name} has the key {k!r} of type {type(k).__name__}; keys must be strings")
            check_plain(v, f"{name}[{k!r}]")
    else:
        raise TypeError(f"{name} is a {type(value).__name__}; a model file holds plain values only (dicts with "
                        "string keys, lists, strings, numbers, booleans, None): convert it (e.g. .tolist(), float())")


def _written_with() -> dict:
    """The versions of sgpc and torch that write a model file (for the reader's messages; not checked)."""
    from . import __version__       # at call time: the package imports this module while it initialises
    # str(): torch.__version__ is a TorchVersion, which a weights_only load refuses
    return {"sgpc_version": __version__, "torch_version": str(torch.__version__)}


def check_model_version(path: str | os.PathLike, d: dict) -> None:
    """A ``ModelFileError`` unless ``d`` (a model file's content) is in the format version this sgpc reads.

    A file of a newer format was written by a newer sgpc: the message names it (files from before the
    versions were recorded lack "sgpc_version") and says to upgrade."""
    from . import __version__
    version = d.get("version")
    if version == MODEL_VERSION:
        return
    if isinstance(version, int) and not isinstance(version, bool) and version > MODEL_VERSION:
        writer = d.get("sgpc_version")
        by = f"sgpc {writer}" if isinstance(writer, str) else "a newer sgpc"
        raise ModelFileError(f"{path} was written by {by} in model format version {version}; this sgpc "
                             f"({__version__}) reads format version {MODEL_VERSION}: upgrade sgpc "
                             "(pip install -U sgpc) to load it")
    raise ModelFileError(f"{path} has model format version {version!r}, this sgpc reads version {MODEL_VERSION} "
                         "(not a version any sgpc wrote: the file was altered)")


# -- the structure of a model file's tensors ---------------------------------------------------------
def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).replace('torch.', '')} tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def check_structure(path, part: str, saved, expected, rows: dict) -> None:
    """ModelFileError unless ``saved`` (a model file's ``part``: its model weights, engine state or posterior) has
    the keys, tensor shapes and dtypes of ``expected`` (the same part of a model freshly built from the
    parameters, classes and features the file records). A leading axis of size 0 in ``expected`` is a per-row
    axis (sites of the training rows): any size, the same in every tensor (kept in ``rows["n"]``). A field that
    is None in ``expected`` is set by the first update and is not checked."""
    if isinstance(expected, dict):
        if not isinstance(saved, dict):
            raise ModelFileError(f"{path} does not match the model it records: {part} is {_describe(saved)}, "
                                 "not a mapping; the file was not written by this sgpc's save")
        missing = [k for k in expected if k not in saved]
        extra = [k for k in saved if k not in expected]
        if missing or extra:
            what = "; ".join(x for x in (f"missing {missing}" if missing else "",
                                         f"unexpected {extra}" if extra else "") if x)
            raise ModelFileError(f"{path} does not match the model it records: {part} has other entries ({what})")
        for k, v in expected.items():
            check_structure(path, f"{part}/{k}", saved[k], v, rows)
        return
    if expected is None:
        return
    if isinstance(expected, torch.Tensor):
        ok = isinstance(saved, torch.Tensor) and saved.dtype == expected.dtype and saved.ndim == expected.ndim
        want = tuple(expected.shape)
        if ok and expected.ndim and want[0] == 0:               # a per-row axis
            n = rows.setdefault("n", saved.shape[0])
            want = (n, *want[1:])
        if not ok or tuple(saved.shape) != want:
            shape = "(N, " + ", ".join(map(str, want[1:])) + ")" if expected.ndim and expected.shape[0] == 0 \
                and "n" not in rows else str(want)
            raise ModelFileError(f"{path} does not match the model it records: {part} is {_describe(saved)}, the "
                                 f"model needs a {str(expected.dtype).replace('torch.', '')} tensor of shape {shape}")
        return
    number = (int, float, bool)
    if isinstance(expected, number) and not isinstance(saved, number):
        raise ModelFileError(f"{path} does not match the model it records: {part} is {_describe(saved)}, "
                             f"the model needs a {type(expected).__name__}")


def check_model_payload(path, payload: dict, model: nn.Module, fresh_state) -> None:
    """``check_structure`` of a model file's weights, engine state, posterior and row keys against ``model`` and
    ``fresh_state`` (an engine's ``init``), both built from the parameters, classes and features the file
    records: the posterior is mean [L,M] and chol [L,M,M]; the row keys, one int64 per training row (as many
    rows as the per-row sites, when the state has them)."""
    rows: dict = {}
    check_structure(path, "model", payload.get("model"), dict(model.state_dict()), rows)
    check_structure(path, "state", payload.get("state"), state_to_dict(fresh_state), rows)
    like = next(iter(model.state_dict().values()))
    L, M = model.n_latent, model.n_inducing
    check_structure(path, "posterior", payload.get("posterior"),
                    {"mean": like.new_zeros(L, M), "chol": like.new_zeros(L, M, M)}, rows)
    if "row_keys" in payload:
        check_structure(path, "row_keys", payload["row_keys"], torch.zeros(0, dtype=torch.int64), rows)


# -- engine state <-> plain dictionaries ------------------------------------------------------------
def state_to_dict(state) -> dict:
    """An engine state as a dictionary of detached tensor copies, module state dicts and plain values."""
    out = {}
    for f in dataclasses.fields(state):
        v = getattr(state, f.name)
        if isinstance(v, nn.Module):
            out[f.name] = {k: t.detach().clone() for k, t in v.state_dict().items()}
        elif isinstance(v, torch.Tensor):
            out[f.name] = v.detach().clone()
        else:
            out[f.name] = v
    return out


def load_state(state, d: dict):
    """``state`` (a fresh ``init`` of the same engine) with every field replaced by the one in ``d``
    (tensors moved to the state's device and dtype; modules loaded in place)."""
    changes = {}
    for f in dataclasses.fields(state):
        if f.name not in d:
            if f.default is not dataclasses.MISSING:      # a counter added since the file was written
                continue
            raise CheckpointError(f"checkpoint has no engine field {f.name!r}")
        v = getattr(state, f.name)
        if isinstance(v, nn.Module):
            v.load_state_dict(d[f.name])
        elif isinstance(v, torch.Tensor):
            changes[f.name] = d[f.name].to(v.device, v.dtype)
        else:
            changes[f.name] = d[f.name]
    return dataclasses.replace(state, **changes) if changes else state
