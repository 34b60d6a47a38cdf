"""The schedule builders, one file per family (chapters 01-05).

Each file holds one short builder a chapter can show: :mod:`.naive`, :mod:`.gpipe`,
:mod:`.one_f_one_b`, :mod:`.interleaved`, :mod:`.zero_bubble`, :mod:`.pipedream` (with 2BW)
and :mod:`.async_pipeline`; :mod:`.common` has the helpers they share. The functions are
exported by :mod:`pipemare_lite.schedules` (``from pipemare_lite.schedules import gpipe``);
this package exports nothing, so no module here is shadowed by a function of its name.
Torch-free.
"""
