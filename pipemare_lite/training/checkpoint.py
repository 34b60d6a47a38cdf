"""Checkpoints that survive a crash and load without running code (introduced in chapter 11).

A training checkpoint is one dict of tensors and plain values (numbers, strings, None,
lists, dicts): model and optimizer state, the executor's state (including microbatches
still in flight in an asynchronous pipeline), the random states (torch, numpy, Python,
and the generator that orders the data), and the history so far. Two rules make it safe:

- **Atomic writes** (:func:`pipemare_lite.files.atomic_write`). The file is written to a
  temporary file in the same directory, flushed and ``fsync``-ed, then moved over the old
  one with ``os.replace`` (atomic on POSIX and Windows), and the directory is ``fsync``-ed.
  A crash at any moment leaves either the old checkpoint or the new one, never half of one.
- **No pickled objects.** :func:`save_checkpoint` refuses anything but tensors and plain
  values, and :func:`load_checkpoint` reads with ``torch.load(..., weights_only=True)``,
  which cannot execute code hidden in a file.

An executor's state holds tuples, tuple-keyed dicts and small records (``ParamRef``), which
``weights_only=True`` would refuse: :func:`encode_state` spells them out as plain values and
:func:`decode_state` builds them back, rebuilding only the record classes it lists.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

from pipemare_lite.files import atomic_write

_PLAIN = (bool, int, float, str, type(None))


def check_plain(value, where: str = "checkpoint") -> None:
    """Raise TypeError naming the first value that is not a tensor, plain value, list or dict."""
    if isinstance(value, torch.Tensor) or isinstance(value, _PLAIN):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, _PLAIN):
                raise TypeError(f"{where} has a key of type {type(key).__name__}: {key!r}")
            check_plain(item, f"{where}[{key!r}]")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_plain(item, f"{where}[{i}]")
        return
    raise TypeError(
        f"{where} is a {type(value).__name__}; checkpoints hold only tensors, numbers, "
        "strings, None, lists and dicts (so they load with weights_only=True)"
    )


def save_checkpoint(path: str | os.PathLike, state: dict) -> Path:
    """Write ``state`` to ``path`` atomically (:func:`pipemare_lite.files.atomic_write`)."""
    check_plain(state)
    return atomic_write(path, lambda handle: torch.save(state, handle))


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint` (``weights_only=True``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return torch.load(path, map_location="cpu", weights_only=True)


def rng_state() -> dict:
    """The global random states of torch, numpy and Python, as plain values."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
    }


def set_rng_state(state: dict) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        (
            n["kind"],
            n["keys"].numpy().astype(np.uint32),
            n["pos"],
            n["has_gauss"],
            n["cached_gaussian"],
        )
    )
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))


# Executor states hold tuples, tuple-keyed dicts and ParamRef records. Checkpoints may hold
# only plain values (so they load with weights_only=True), so we spell those out and build
# them back; only the classes listed here are ever rebuilt.


def _record_classes() -> dict:
    from pipemare_lite.methods.versions import ParamRef

    return {"ParamRef": ParamRef}


def encode_state(value):
    """An executor state as tensors, numbers, strings, None, lists and str-keyed dicts.

    Tuples become ``{"__tuple__": [...]}``, dicts with other keys ``{"__items__": [[k, v],
    ...]}`` and listed records ``{"__record__": name, "fields": {...}}``.
    """
    if isinstance(value, (torch.Tensor, bool, int, float, str, type(None))):
        return value
    if isinstance(value, list):
        return [encode_state(v) for v in value]
    if isinstance(value, tuple):
        return {"__tuple__": [encode_state(v) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode_state(v) for k, v in value.items()}
        return {"__items__": [[encode_state(k), encode_state(v)] for k, v in value.items()]}
    name = type(value).__name__
    if name in _record_classes() and hasattr(value, "__dataclass_fields__"):
        fields = {f: encode_state(getattr(value, f)) for f in value.__dataclass_fields__}
        return {"__record__": name, "fields": fields}
    raise TypeError(f"cannot store a {name} in a checkpoint: {value!r}")


def decode_state(value):
    """Inverse of :func:`encode_state`."""
    if isinstance(value, list):
        return [decode_state(v) for v in value]
    if isinstance(value, dict):
        if "__tuple__" in value:
            return tuple(decode_state(v) for v in value["__tuple__"])
        if "__items__" in value:
            return {_hashable(decode_state(k)): decode_state(v) for k, v in value["__items__"]}
        if "__record__" in value:
            cls = _record_classes()[value["__record__"]]
            return cls(**{k: decode_state(v) for k, v in value["fields"].items()})
        return {k: decode_state(v) for k, v in value.items()}
    return value


def _hashable(key):
    """A decoded dict key: lists (tuples spelled out) back to tuples, at any depth."""
    return tuple(_hashable(k) for k in key) if isinstance(key, (list, tuple)) else key
