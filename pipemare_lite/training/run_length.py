"""Resuming with another length: when a checkpoint may continue as a longer (or shorter) run.

Introduced in chapter 11 (checkpoints). A checkpoint records the settings of the run that
wrote it, and a resume refuses every other setting but ``epochs``. The length may change
(a finished run extended, a run cut short) where nothing already computed depended on it;
the resumed run is then bitwise equal to a run asked for the new length from the start.
Two things can depend on the length, and both are checked:

- **The schedule.** The whole run is one schedule, so for every rank the actions it ran
  before the checkpoint must be the first actions of the new length's schedule
  (:func:`first_difference`). Methods that flush after each minibatch (gpipe, 1f1b,
  interleaved, zb-h1) always pass. A schedule that does not flush (pipedream, 2bw, async,
  pipemare, ...) drains its pipeline at the run's end, so its finished run cannot
  continue; a checkpoint saved before the drain (``checkpoint_every``) can.
- **A horizon** (:func:`horizon_refusal`). ``lr_schedule="constant"`` and ``"step"`` (a
  decay every ``lr_step_size`` updates, by default one epoch's) have none, with or without
  ``lr_warmup``: they continue. ``"cosine"`` anneals to 0 over the run's length
  (``T_max = epochs x steps per epoch - lr_warmup``): its horizon is the length, every lr
  of the run depends on it, and a finished cosine run stands at lr 0, so a cosine run's
  length cannot change and is refused. T1 (``t1``, and pipemare-m's momentum-aware T1)
  anneals over the whole run unless ``t1_anneal_updates`` fixes K: refused without it.
"""

from __future__ import annotations

from itertools import islice

#: Built-in methods whose own hooks anneal over the run as T1 does
#: (pipemare_lite.methods.momentum_rescheduling).
_ANNEALS_LIKE_T1 = ("pipemare-m",)


def horizon_refusal(config: dict, old_steps: int, new_steps: int) -> str | None:
    """Why a run of ``config`` cannot change its length from ``old_steps`` to ``new_steps``
    steps because something anneals over the length (None: nothing does)."""
    if (config.get("lr_schedule") or "constant") == "cosine":
        return (f"--lr-schedule cosine anneals over the run's length ({old_steps} updates "
                f"there, {new_steps} now): every lr of the run depends on it (and a finished "
                "cosine run stands at lr 0), so its length cannot change; start a new run "
                f"with epochs={config['epochs']} (constant and step schedules can be extended)")
    anneals = config.get("t1") or config.get("method") in _ANNEALS_LIKE_T1
    if anneals and config.get("t1_anneal_updates") is None:
        return (f"T1 anneals over the whole run ({old_steps} updates there, {new_steps} now) "
                "when --t1-anneal-updates is not given, so this run's length cannot change; "
                "give both runs the same --t1-anneal-updates K, or start a new run")
    return None


def first_difference(old, new, positions) -> tuple[int, int, object, object] | None:
    """The first action a rank ran under the ``old`` schedule that the ``new`` one has
    otherwise: ``(rank, index, old action, new action)`` (new action None past its end),
    comparing each rank's first ``positions[rank]`` actions; None when every rank's run
    part is the new schedule's beginning."""
    for rank, position in enumerate(positions):
        ran = islice(old.row(rank), position)
        ahead = islice(new.row(rank), position)
        for index, action in enumerate(ran):
            other = next(ahead, None)
            if other != action:
                return rank, index, action, other
    return None
