"""``fit()`` over one process per rank, started from Python (chapter 11).

Every rank runs the same ``fit()`` loop with ``executor="dist"``
(:func:`pipemare_lite.training.executors.dist_executor`: the
:class:`~pipemare_lite.engine.distributed.executor.DistributedExecutor` with the local
executor's contract). :func:`fit_worker` is that process body, for
:func:`pipemare_lite.engine.distributed.launch.launch` (``torchrun`` runs ``python -m
pipemare_lite.training`` directly).
"""

from __future__ import annotations

from pipemare_lite.training.loop import fit


def fit_worker(info, fit_kwargs: dict) -> dict:
    """Process body: ``fit(**fit_kwargs, executor="dist")`` on every rank (chapter 11).

    ``fit_kwargs`` holds ``model`` as a picklable recipe ``(builder, kwargs)`` (e.g.
    ``(pipemare_lite.training.models.mlp, {...})``) and ``data`` as ``(loader, kwargs)``;
    returns the history as a dict.
    """
    kwargs = dict(fit_kwargs)
    builder, model_kwargs = kwargs.pop("model")
    loader, data_kwargs = kwargs.pop("data")
    history = fit(builder(**model_kwargs), loader(**data_kwargs), executor="dist", **kwargs)
    return history.to_dict()
