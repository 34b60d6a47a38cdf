"""pipemare-lite: the engine and helpers of a textbook on pipeline-parallel training.

The packages, from the idea to the book (docs/module-map.md says which chapter introduces
each module)::

    schedules/   a schedule is data: builders, validation, weight modes, files   (torch-free)
    analysis/    what a schedule implies: timeline, delays, memory, formulas     (torch-free)
    methods/     what each method does to the weights: T1, T2, stashes, hooks
    engine/      runs a schedule with tensors: stage worker, interpreter, local
      dist/      ... one process per rank: transport, launcher, torchrun, faults
    training/    fit(), partition, data, models, evaluation, history, checkpoints
    interop/     next to PyTorch's torch.distributed.pipelining
    figures/     viz (plotly figures) and widgets (ipywidgets)               (torch-free)
    experiments/ the stored results behind the later chapters
    book/        site build, notebook tools, exercises;  cli/  the command line

Nothing here imports torch at package import time.
"""

__version__ = "0.1.0"
