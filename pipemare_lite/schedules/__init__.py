"""Pipeline schedules as data (chapters 01-05, 07): builders, validation, import/export.

Torch-free. See :mod:`pipemare_lite.schedules.actions` for the data model (a long run's rows
are :class:`~pipemare_lite.schedules.rows.PeriodicRow`: :mod:`pipemare_lite.schedules.repeat`),
:mod:`pipemare_lite.schedules.weight_modes` for what each weight mode's F and B read, and
:func:`build_schedule` for the one entry point; each family has its own file
(``gpipe.py``, ``one_f_one_b.py``, ``interleaved.py``, ``zero_bubble.py``,
``zero_bubble_v.py``, ``dualpipe.py``, ``pipedream.py``, ``async_pipeline.py``) with one
short builder a chapter can show.
"""

from pipemare_lite.schedules.actions import (
    BACKWARD,
    FORWARD,
    INPUT_GRAD,
    KINDS,
    UPDATE,
    WEIGHT_GRAD,
    WEIGHT_MODES,
    Action,
    Schedule,
    placement_named,
    round_robin_placement,
    v_placement,
)
from pipemare_lite.schedules.builders.async_pipeline import async_pipeline
from pipemare_lite.schedules.builders.common import on_placement
from pipemare_lite.schedules.builders.dualpipe import dualpipe_v
from pipemare_lite.schedules.builders.gpipe import gpipe
from pipemare_lite.schedules.builders.interleaved import interleaved
from pipemare_lite.schedules.builders.naive import naive
from pipemare_lite.schedules.builders.one_f_one_b import one_f_one_b
from pipemare_lite.schedules.builders.pipedream import pipedream, two_bw
from pipemare_lite.schedules.builders.zero_bubble import zb_h1, zb_h2
from pipemare_lite.schedules.builders.zero_bubble_v import zb_v
from pipemare_lite.schedules.names import ALIASES
from pipemare_lite.schedules.registry import ASYNC_NAMES, SCHEDULE_NAMES, build_schedule
from pipemare_lite.schedules.rows import PeriodicRow
from pipemare_lite.schedules.validation import ScheduleError, execution_order, validate
from pipemare_lite.schedules.weight_modes import WeightMode, get_weight_mode

__all__ = [
    "Action", "Schedule", "PeriodicRow", "KINDS", "WEIGHT_MODES", "WeightMode", "get_weight_mode",
    "FORWARD", "BACKWARD", "INPUT_GRAD", "WEIGHT_GRAD", "UPDATE",
    "SCHEDULE_NAMES", "ALIASES", "ASYNC_NAMES", "build_schedule",
    "naive", "gpipe", "one_f_one_b", "interleaved", "zb_h1", "zb_h2", "zb_v", "dualpipe_v",
    "pipedream", "two_bw", "round_robin_placement", "v_placement", "placement_named",
    "on_placement",
    "async_pipeline", "validate", "execution_order", "ScheduleError",
]
