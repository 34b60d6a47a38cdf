"""Stability explorer: delayed gradient descent on a quadratic, live (chapter 06).

Sliders for the step alpha, the delay tau, the curvature lambda, heavy-ball momentum, the
backward sensitivity s of the discrepancy model and T2's gamma; three pictures: the
iterates ``w[t]`` (beside the same run without delay), the characteristic roots against
the unit circle, and the stability map (step vs delay) with the current setting marked.
A table gives the spectral radius, the closed-form bound of the plain model and the
largest stable step measured for the current model.

The model is :func:`pipemare_lite.analysis.theory.discrepancy_matrix` (with ``tau_b = 0``: the
backward reads the current weights); with ``s = 0`` and T2 off it is plain (heavy-ball)
delayed GD, ``w[t+1] = w[t] - alpha lam w[t-tau] + m (w[t] - w[t-1])``. Moving alpha or
tau only moves the marked point: the map is recomputed (one batched eigenvalue call per
delay, :func:`~pipemare_lite.analysis.theory.stability_grid`) only when lambda, momentum, s or T2
change. Nothing here imports torch.
"""

from __future__ import annotations

import html
import math

import ipywidgets as widgets
import numpy as np

from pipemare_lite.analysis.theory import (
    discrepancy_radius,
    discrepancy_roots,
    simulate_discrepancy_gd,
    stability_bound,
    stability_grid,
)
from pipemare_lite.figures.viz.stability import roots_figure, stability_map, trajectory_figure
from pipemare_lite.figures.widgets._explorer import Explorer, figure_widget, show_plotly_figure

#: Steps on the map's (log) axis and the delays on its rows.
MAP_ALPHAS = np.geomspace(1e-3, 4.0, 90)
MAP_TAUS = tuple(range(0, 17))
#: Updates simulated for the trajectory.
STEPS = 150
#: Pixels of the trajectory figure, so that it and the roots figure fit side by side.
TRAJECTORY_WIDTH = 560


def _check_setting(alpha, tau, lam, momentum, gamma) -> None:
    if not alpha > 0:
        raise ValueError(f"the step alpha must be positive, got {alpha}")
    if not lam > 0:
        raise ValueError(f"the curvature lambda must be positive, got {lam}")
    if int(tau) != tau or not 0 <= tau <= MAP_TAUS[-1]:
        raise ValueError(f"the delay tau must be an integer in 0..{MAP_TAUS[-1]}, got {tau}")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    if gamma is not None and not 0 <= gamma < 1:
        raise ValueError(f"T2's gamma must be in [0, 1), got {gamma}")


def stable_edge(row: np.ndarray, radius_of, alphas=MAP_ALPHAS, tol: float = 1e-6):
    """Largest stable step along one map row: the first unstable grid step, then bisection.

    ``row`` holds the radii at ``alphas`` (increasing); ``radius_of(alpha)`` is the exact
    radius. Returns ``(value, note)``: ``note`` is ``""`` for a found edge, ``"below"`` when
    even the smallest step is unstable, ``"above"`` when every step of the map is stable.
    """
    unstable = np.flatnonzero(row >= 1.0)
    if unstable.size == 0:
        return float(alphas[-1]), "above"
    first = int(unstable[0])
    if first == 0:
        return float(alphas[0]), "below"
    low, high = float(alphas[first - 1]), float(alphas[first])
    while high - low > tol * high:
        middle = 0.5 * (low + high)
        low, high = (middle, high) if radius_of(middle) < 1.0 else (low, middle)
    return low, ""


class StabilityExplorer(Explorer):
    """The widget returned by :func:`stability_explorer` (see there)."""

    def __init__(self, alpha, tau, lam, momentum, discrepancy, t2, gamma) -> None:
        style = {"description_width": "initial"}
        controls = {
            "alpha": widgets.FloatLogSlider(value=alpha, base=10, min=-3, max=math.log10(4),
                                            step=0.01, description="step alpha",
                                            readout_format=".3g", style=style),
            "tau": widgets.IntSlider(value=tau, min=0, max=MAP_TAUS[-1], description="delay tau",
                                     style=style),
            "lam": widgets.FloatLogSlider(value=lam, base=10, min=-0.6, max=0.6, step=0.01,
                                          description="curvature lambda", readout_format=".3g",
                                          style=style),
            "momentum": widgets.FloatSlider(value=momentum, min=0.0, max=0.95, step=0.05,
                                            description="momentum m", style=style),
            "discrepancy": widgets.FloatSlider(value=discrepancy, min=-2.0, max=2.0, step=0.1,
                                               description="discrepancy s", style=style),
            "t2": widgets.Checkbox(value=t2, description="T2 correction"),
            "gamma": widgets.FloatSlider(value=gamma, min=0.0, max=0.95, step=0.05,
                                         description="T2 gamma", style=style),
        }
        self.trajectory = figure_widget()
        self.roots = figure_widget()
        self.map = figure_widget()
        self.summary = widgets.HTML()
        self.radius: float | None = None
        self.largest_stable: float | None = None
        self._map_key = None
        self._edges: dict = {}
        self._grid = None
        c = controls
        super().__init__(
            controls,
            [
                widgets.VBox([
                    widgets.HBox([c["alpha"], c["tau"], c["lam"]]),
                    widgets.HBox([c["momentum"], c["discrepancy"], c["t2"], c["gamma"]]),
                ]),
                widgets.HBox([self.trajectory, self.roots]),
                self.map,
                self.summary,
            ],
        )
        self.update()

    def _redraw(self, alpha, tau, lam, momentum, discrepancy, t2, gamma) -> None:
        g = gamma if t2 else None
        _check_setting(alpha, tau, lam, momentum, g)
        self.controls["gamma"].disabled = not t2
        model = dict(lam=lam, momentum=momentum, sensitivity=discrepancy, gamma=g)
        key = tuple(model.values())
        if key != self._map_key:  # lambda, m, s or T2 moved: a new map
            self._grid = stability_grid(MAP_ALPHAS, MAP_TAUS, **model)
            self._edges = {}
            title = (f"stability map: lambda={lam:.3g}, m={momentum:g}, s={discrepancy:g}, "
                     f"T2 {'off' if g is None else f'gamma={g:g}'}")
            if not self.map.data:  # the first drawing builds the figure
                show_plotly_figure(self.map, stability_map(
                    self._grid, MAP_ALPHAS, MAP_TAUS, bound=lambda t: stability_bound(t) / lam,
                    alpha_axis="log", point=(alpha, tau), alpha_title="step size alpha (log)",
                    bound_name="plain model's bound 2 sin(pi/(2(2 tau+1))) / lambda",
                    title=title))
            else:  # later ones set the values of its three traces: much faster
                heat, line, _ = self.map.data
                with self.map.batch_update():
                    heat.z = self._grid
                    line.x = [stability_bound(t) / lam for t in MAP_TAUS]
                    self.map.layout.title.text = title
            self._map_key = key
        with self.map.batch_update():  # the marked point
            self.map.data[-1].x = [alpha]
            self.map.data[-1].y = [MAP_TAUS.index(tau)]
        if tau not in self._edges:
            self._edges[tau] = stable_edge(
                self._grid[tau],
                lambda a: discrepancy_radius(a, lam, tau, discrepancy, gamma=g,
                                             momentum=momentum))
        roots = discrepancy_roots(alpha, lam, tau, discrepancy, gamma=g, momentum=momentum)
        self.radius = float(np.max(np.abs(roots)))
        self.largest_stable = self._edges[tau][0]
        runs = {
            f"tau = {tau}": simulate_discrepancy_gd(alpha, lam, tau, discrepancy, STEPS,
                                                    gamma=g, momentum=momentum),
            "no delay (tau = 0)": simulate_discrepancy_gd(alpha, lam, 0, 0.0, STEPS,
                                                          momentum=momentum),
        }
        end = abs(runs[f"tau = {tau}"][-1])
        show_plotly_figure(self.trajectory, trajectory_figure(
            runs, width=TRAJECTORY_WIDTH,
            title=f"w[t]: alpha={alpha:.3g}, lambda={lam:.3g}, tau={tau}; "
                  f"|w[{STEPS}]| = {end:.3g}"))
        show_plotly_figure(self.roots, roots_figure(
            roots, title=f"roots: largest |z| = {self.radius:.4f} "
                         f"({'stable' if self.radius < 1 else 'unstable'})"))
        self.summary.value = self._summary_html(alpha, tau, lam, momentum, discrepancy, g)

    def _summary_html(self, alpha, tau, lam, momentum, discrepancy, gamma) -> str:
        plain = momentum == 0 and discrepancy == 0 and gamma is None
        edge, note = self._edges[tau]
        measured = {"": f"{edge:.4g}", "below": f"below {edge:.3g} (the map's smallest step)",
                    "above": f"above {edge:.3g} (the map's largest step)"}[note]
        closed = stability_bound(tau) / lam
        applies = ("applies: plain model" if plain
                   else "for the plain model only (m = 0, s = 0, T2 off)")
        rows = [
            ("spectral radius (largest |root|)", f"{self.radius:.4f}",
             "stable" if self.radius < 1 else "unstable: |w[t]| grows"),
            ("largest stable step alpha, measured (roots, this model)", measured, ""),
            ("closed form 2 sin(pi/(2(2 tau+1))) / lambda", f"{closed:.4g}", applies),
            ("alpha * lambda", f"{alpha * lam:.4g}", ""),
        ]
        if momentum:
            rows.append(("effective step alpha / (1 - m)", f"{alpha / (1 - momentum):.4g}",
                         "what heavy ball takes per update in the long run"))
        body = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td>"
                       f"<td>{html.escape(c)}</td></tr>" for a, b, c in rows)
        return ('<table style="border-collapse:collapse" border="1" cellpadding="4">'
                "<tr><th>quantity</th><th>value</th><th>note</th></tr>" + body + "</table>")


def stability_explorer(
    alpha: float = 0.3,
    tau: int = 4,
    lam: float = 1.0,
    momentum: float = 0.0,
    discrepancy: float = 0.0,
    *,
    t2: bool = False,
    gamma: float = 0.5,
) -> StabilityExplorer:
    """A widget to explore delayed gradient descent on a quadratic.

    Controls (``w.controls[name]``): ``alpha`` (step), ``tau`` (delay in updates, 0..16),
    ``lam`` (curvature lambda), ``momentum`` (heavy ball m), ``discrepancy`` (the backward
    sensitivity s: the gradient is ``lam w[t-tau] + s (w[t] - w[t-tau])``), ``t2`` (T2 on or
    off) and ``gamma`` (T2's averaging constant). Attributes: ``trajectory``, ``roots``,
    ``map`` (FigureWidgets), ``summary`` (the table), ``radius`` and ``largest_stable`` (the
    current numbers), ``message`` and ``error``. ``w.update()`` redraws; ``w.set(...)``
    moves several controls with one redraw.
    """
    _check_setting(alpha, tau, lam, momentum, gamma if t2 else None)
    return StabilityExplorer(alpha, tau, lam, momentum, discrepancy, t2, gamma)
