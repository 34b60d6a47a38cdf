"""pipemare-lite: a small pipeline-parallel training engine, and the textbook it runs.

The front door (each name is imported on first use, so ``import pipemare_lite`` stays
light and torch-free)::

    import pipemare_lite as pml

    schedule = pml.build_schedule("1f1b", num_ranks=4, num_microbatches=8)
    timeline = pml.simulate(schedule)                  # analysis, no tensors
    history = pml.fit(model, data, method="pipemare", num_stages=4, num_microbatches=8,
                      epochs=3, batch_size=64, lr=0.05)  # train; returns a History

``model``: an ``nn.Sequential``, a list of stage modules, or any ``nn.Module`` that torch's
``pipeline()`` splits at the submodules ``balance`` names (``balance=["layer3"]``).
``data``: a ``DataLoader`` (any re-iterable sequence of ``(inputs, targets)`` batches), a
``TensorDataset`` or the book's ``Dataset``; ``loss_fn`` any loss (targets of any dtype);
``eval_data`` batches or a function ``model -> dict``. README's "The engine alone" shows a
residual network on a regression, trained locally and with one process per stage.

Train:     fit, FitConfig, History, DivergenceError, partition, PartitionedModel
Models:    mlp, small_resnet, tiny_transformer (the book's; seeded builders),
           register_model (a model for the command line's --model, from a --plugin)
Data:      Dataset, digits, signals, sequence_task (the book's data), microbatches
Schedule:  build_schedule, register_schedule, Schedule, Action, validate, ScheduleError
Analyse:   simulate, metrics, OpCosts (per-op times for the simulator)
Methods:   register_method, get_method, method_options, MethodOptions, MethodHooks, StageInfo
Run:       LocalExecutor (one process), DistributedExecutor (one process per rank),
           launch, run_distributed
Compare:   sweep (methods x seeds x settings in parallel processes, resumable; means with
           95 % intervals and each method against the first)

The packages, bottom to top (each imports only those above it in this list;
docs/module-map.md says which chapter introduces each module)::

    schedules/   a schedule is data: builders, validation, weight modes, files   (torch-free)
    analysis/    what a schedule implies: timeline, delays, memory, formulas     (torch-free)
    methods/     what each method does to the weights: T1, T2, stashes, hooks; the
                 method table and the trade-off table   (torch loads on first use)
    engine/      runs a schedule with tensors: stage worker, interpreter, local,
                 one record type from the stage to the history
      distributed/  ... one process per rank: executor, transport, launch, faults
    training/    fit(), partition, data, models, evaluation, history, checkpoints
    interop/     next to PyTorch's torch.distributed.pipelining
    experiments/ the stored results behind the later chapters
    figures/     viz (plotly figures) and widgets (ipywidgets)       (torch-free; the book extra)
    book/        site build, notebook tools, exercises                (the book extra)
    cli/         the command line (``pipemare-lite``)

The engine needs torch, numpy and tqdm only; ``pip install -e ".[book]"`` adds the book (Jupyter,
plotly, widgets, the site). Nothing here imports torch at package import time.
"""

from pipemare_lite._lazy import lazy_exports as _lazy_exports

__version__ = "0.1.0"

#: name -> the module that defines it (read on first use: PEP 562)
_FRONT_DOOR = {
    "fit": "pipemare_lite.training.loop",
    "FitConfig": "pipemare_lite.training.config",
    "History": "pipemare_lite.training.history",
    "DivergenceError": "pipemare_lite.training.history",
    "partition": "pipemare_lite.training.partition",
    "PartitionedModel": "pipemare_lite.training.partition",
    "mlp": "pipemare_lite.training.models",
    "small_resnet": "pipemare_lite.training.models",
    "tiny_transformer": "pipemare_lite.training.models",
    "register_model": "pipemare_lite.training.models",
    "Dataset": "pipemare_lite.training.datasets",
    "digits": "pipemare_lite.training.datasets",
    "signals": "pipemare_lite.training.datasets",
    "sequence_task": "pipemare_lite.training.datasets",
    "microbatches": "pipemare_lite.training.datasets",
    "build_schedule": "pipemare_lite.schedules.registry",
    "register_schedule": "pipemare_lite.schedules.registry",
    "Schedule": "pipemare_lite.schedules.actions",
    "Action": "pipemare_lite.schedules.actions",
    "validate": "pipemare_lite.schedules.validation",
    "ScheduleError": "pipemare_lite.schedules.validation",
    "simulate": "pipemare_lite.analysis.simulate",
    "metrics": "pipemare_lite.analysis.simulate",
    "OpCosts": "pipemare_lite.analysis.simulate",
    "register_method": "pipemare_lite.methods.registry",
    "get_method": "pipemare_lite.methods.registry",
    "method_options": "pipemare_lite.methods.registry",
    "MethodOptions": "pipemare_lite.methods.registry",
    "MethodHooks": "pipemare_lite.methods.hooks",
    "StageInfo": "pipemare_lite.methods.hooks",
    "LocalExecutor": "pipemare_lite.engine.local",
    "DistributedExecutor": "pipemare_lite.engine.distributed.executor",
    "launch": "pipemare_lite.engine.distributed.launch",
    "run_distributed": "pipemare_lite.engine.distributed.jobs",
    "sweep": "pipemare_lite.experiments.sweep",
}

__all__ = ["__version__", *_FRONT_DOOR]

__getattr__, __dir__ = _lazy_exports(__name__, _FRONT_DOOR)
