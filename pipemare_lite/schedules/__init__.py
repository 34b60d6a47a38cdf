"""Pipeline schedules as data (chapters 01-05, 07): builders, validation, import/export.

Torch-free. See :mod:`pipemare_lite.schedules.actions` for the data model.
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
)

__all__ = [
    "Action",
    "Schedule",
    "KINDS",
    "WEIGHT_MODES",
    "FORWARD",
    "BACKWARD",
    "INPUT_GRAD",
    "WEIGHT_GRAD",
    "UPDATE",
]
