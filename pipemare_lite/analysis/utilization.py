"""Measured utilization of a real run next to the simulator's, for the same op costs
(introduced in chapter 11).

Feed the simulator the median durations a measured trace shows; what is left between the
two utilizations is what the real run lost to communication, waiting and noise.
"""

from __future__ import annotations

from statistics import median

from pipemare_lite.analysis.simulate import OpCosts, metrics, simulate
from pipemare_lite.analysis.timeline import Timeline
from pipemare_lite.schedules.actions import BACKWARD, FORWARD, INPUT_GRAD, UPDATE, WEIGHT_GRAD


def measured_costs(trace: Timeline) -> OpCosts:
    """:class:`~pipemare_lite.analysis.simulate.OpCosts` read off a measured trace (chapter 11).

    Per kind, the median duration over all stages; ``stage_multipliers`` from each
    stage's median forward relative to the overall median (imbalanced stages). A kind the
    trace lacks is never simulated either; the simulator still wants every compute cost
    positive, so a missing B is I + W and a missing I or W is half a B.
    """
    by_kind: dict[str, list[float]] = {}
    forwards: dict[int, list[float]] = {}
    for e in trace.entries:
        by_kind.setdefault(e.action.kind, []).append(e.duration)
        if e.action.kind == FORWARD:
            forwards.setdefault(e.action.stage, []).append(e.duration)

    def cost(kind):
        return float(median(by_kind[kind])) if kind in by_kind else 0.0

    forward = cost(FORWARD)
    multipliers = None
    if forward > 0 and forwards:
        S = trace.schedule.num_virtual_stages
        multipliers = tuple(max(median(forwards.get(s, [forward])) / forward, 1e-6)
                            for s in range(S))
    backward, input_grad, weight_grad = cost(BACKWARD), cost(INPUT_GRAD), cost(WEIGHT_GRAD)
    backward = backward or input_grad + weight_grad
    return OpCosts(forward=forward, backward=backward, input_grad=input_grad or backward / 2,
                   weight_grad=weight_grad or backward / 2, update=cost(UPDATE),
                   stage_multipliers=multipliers)


def utilization_report(trace: Timeline) -> dict:
    """Measured utilization next to the simulator's, for the same op costs (chapter 11).

    Returns ``{"measured": u, "simulated": u_sim, "measured_per_rank": [...],
    "simulated_per_rank": [...], "costs": OpCosts}``: the simulator is fed the median
    durations measured in ``trace`` (:func:`measured_costs`), so the gap between the two
    numbers is what the real run loses to communication, waiting and noise.
    """
    costs = measured_costs(trace)
    measured = metrics(trace)
    simulated = metrics(simulate(trace.schedule, costs))
    return {
        "measured": measured.utilization,
        "simulated": simulated.utilization,
        "measured_per_rank": list(measured.utilization_per_rank),
        "simulated_per_rank": list(simulated.utilization_per_rank),
        "costs": costs,
    }
