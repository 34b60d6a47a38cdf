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

And one rule makes it honest: **a checksum of the content** (:func:`state_digest`, SHA-256
over every tensor's bytes and every plain value) is stored beside it, so a file changed
after it was written (one flipped bit on a disk or in a copy) is refused instead of
resuming a run from wrong numbers. Every file that cannot be used (missing, empty,
truncated, not written by ``torch.save``, holding pickled objects, not a dict, checksum
wrong) raises :class:`CheckpointError` naming the file and what is wrong with it.

An executor's state holds tuples, tuple-keyed dicts and small records (``ParamRef``), which
``weights_only=True`` would refuse: :func:`encode_state` spells them out as plain values and
:func:`decode_state` builds them back, rebuilding only the record classes it lists.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import re
from pathlib import Path

import numpy as np
import torch

from pipemare_lite.files import atomic_write_bytes

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


#: The key under which a checkpoint file stores :func:`state_digest` of the rest.
CHECKSUM_KEY = "sha256"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; the message names the file and the fault."""


def state_digest(state) -> str:
    """SHA-256 (hex) of a checkpoint's content: every tensor's dtype, shape and bytes and
    every plain value, walked in order. Equal content gives an equal digest on any machine
    that stores the same bytes; any change of a value changes it."""
    digest = hashlib.sha256()

    def feed(value) -> None:
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            digest.update(f"T{t.dtype}{tuple(t.shape)};".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy())
        elif isinstance(value, dict):
            digest.update(f"D{len(value)};".encode())
            for key, item in value.items():
                feed(key)
                feed(item)
        elif isinstance(value, (list, tuple)):
            digest.update(f"{type(value).__name__[0]}{len(value)};".encode())
            for item in value:
                feed(item)
        else:
            text = f"{type(value).__name__}:{value!r}".encode()
            digest.update(f"V{len(text)};".encode() + text)

    feed(state)
    return digest.hexdigest()


def save_checkpoint(path: str | os.PathLike, state: dict) -> Path:
    """Write ``state`` and its checksum to ``path`` atomically
    (:func:`pipemare_lite.files.atomic_write`)."""
    check_plain(state)
    if not isinstance(state, dict):
        raise TypeError(f"a checkpoint is a dict, got a {type(state).__name__}")
    if CHECKSUM_KEY in state:
        raise TypeError(f"checkpoint key {CHECKSUM_KEY!r} is reserved for the file's checksum")
    stored = {**state, CHECKSUM_KEY: state_digest(state)}
    # serialized in memory first: torch.save writing straight to a full disk reports only
    # "unexpected pos"; a plain write reports the disk's own error, with the file named
    buffer = io.BytesIO()
    torch.save(stored, buffer)
    return atomic_write_bytes(path, buffer.getbuffer())


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint` (``weights_only=True``) and
    check its checksum; raises :class:`CheckpointError` (FileNotFoundError when missing)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes): not a checkpoint")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a hostile or broken file may fail in any way torch.load can
        text = str(exc)
        wanted = re.search(r"GLOBAL (\S+)", text)
        if wanted:  # torch's own text goes on to advise weights_only=False: never repeat it
            raise CheckpointError(
                f"checkpoint {path} holds a pickled object ({wanted.group(1)}) that only "
                "running code could rebuild; it was refused unread (pipemare-lite "
                "checkpoints hold only tensors and plain values, so this file was not "
                "written by it or was altered)"
            ) from None
        detail = re.search(r"WeightsUnpickler error:\s*(.+)", text)
        lines = [line for line in text.strip().splitlines() if line.strip()]
        reason = detail.group(1).strip() if detail else (lines[0].split(". ")[0] if lines else "")
        if "weights_only" in reason:
            reason = ""
        raise CheckpointError(
            f"checkpoint {path} cannot be read ({type(exc).__name__}"
            + (f": {reason[:200]}" if reason else "")
            + "): it is truncated, corrupt, or not a file written by torch.save"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(
            f"checkpoint {path} holds a {type(state).__name__}, not the dict that "
            "pipemare-lite writes"
        )
    stored = state.pop(CHECKSUM_KEY, None)
    if stored is None:
        raise CheckpointError(
            f"checkpoint {path} has no {CHECKSUM_KEY!r} checksum: it was not written by "
            "save_checkpoint (or by a version before checksums)"
        )
    actual = state_digest(state)
    if stored != actual:
        raise CheckpointError(
            f"checkpoint {path} fails its checksum (stored {str(stored)[:16]}..., content "
            f"{actual[:16]}...): the file changed after it was written (a damaged disk or "
            "copy); use an intact copy"
        )
    return state


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


def model_layout(stages) -> list[list[list]]:
    """Each stage's state as ``[name, dtype, shape]`` entries: what decides whether a
    checkpoint of these stages can be loaded into others (width, depth, layer kinds)."""
    return [
        [[name, str(t.dtype).removeprefix("torch."), list(t.shape)]
         for name, t in stage.state_dict().items()]
        for stage in stages
    ]


def check_model_layout(path, saved: list, now: list) -> None:
    """Raise CheckpointError naming the first difference between a checkpoint's model
    layout (:func:`model_layout`) and this run's."""
    if saved == now:
        return
    where = f"checkpoint {path} was written for another model"
    hint = "; resume with the model (width, depth, layers) that wrote it"
    if len(saved) != len(now):
        raise CheckpointError(f"{where}: {len(saved)} stages, this run has {len(now)}{hint}")
    for s, (old, new) in enumerate(zip(saved, now)):
        if old == new:
            continue
        old_by_name = {e[0]: e for e in old}
        new_by_name = {e[0]: e for e in new}
        for name, dtype, shape in new:
            if name not in old_by_name:
                raise CheckpointError(f"{where}: stage {s} has no {name!r} there{hint}")
            if old_by_name[name] != [name, dtype, shape]:
                _, old_dtype, old_shape = old_by_name[name]
                raise CheckpointError(
                    f"{where}: stage {s} {name!r} is {old_dtype} {old_shape} there, "
                    f"{dtype} {shape} now{hint}"
                )
        extra = [e[0] for e in old if e[0] not in new_by_name]
        raise CheckpointError(f"{where}: stage {s} also has {', '.join(extra)} there{hint}")
