"""T2 explorer: the discrepancy model's stability map before and after T2, and its gamma sweep
(chapter 09).

The model is chapter 06's discrepancy toy model,
:func:`pipemare_lite.analysis.theory.discrepancy_matrix`
with ``lam = 1`` (so the step is ``alpha * lambda``) and the backward at the current weights
(``tau_b = 0``). Sliders: the step alpha, the delay tau, the backward sensitivity s and T2's
gamma. Three pictures: the stability map (step vs delay) without T2 and with T2 at gamma,
side by side, the current setting marked on both; and the gamma sweep, the largest stable
step at the current tau and s for every gamma of :data:`GAMMAS`, beside the step without T2
(above that line T2 helps, below it T2 hurts) and the step without any discrepancy (a
stash's). A table gives both spectral radii and both largest stable steps.

Everything expensive is cached and recomputed only when its inputs move: the map without
T2 when s moves, the map with T2 when s or gamma move (one batched eigenvalue call per delay,
:func:`~pipemare_lite.analysis.theory.stability_grid`), the gamma sweep when tau or s move; moving
alpha only moves the markers. The figures come from :mod:`pipemare_lite.figures.viz.stability`, the
map's axes from the stability explorer's. Nothing here imports torch.
"""

from __future__ import annotations

import html
import math

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go

from pipemare_lite.analysis.theory import (
    discrepancy_matrix,
    discrepancy_radius,
    stability_bound,
    stability_grid,
)
from pipemare_lite.figures.viz.colors import ROOT_UNSTABLE_COLOR
from pipemare_lite.figures.viz.stability import gamma_sweep_figure, stability_map
from pipemare_lite.figures.widgets._explorer import Explorer, figure_widget, show_plotly_figure
from pipemare_lite.figures.widgets.stability import MAP_TAUS
from pipemare_lite.figures.widgets.static import MAX_STEPS, _slider

#: Steps on the maps' (log) axis: from 0.01 (the stability explorer starts at 0.001 for
#: momentum's small steps; there is no momentum here) at about its resolution.
MAP_ALPHAS = np.geomspace(1e-2, 4.0, 45)
#: Steps the gamma sweep scans for the first unstable one before bisecting.
SWEEP_ALPHAS = MAP_ALPHAS[::2]
#: T2's gammas on the sweep (and the slider's steps): 0, 0.05, ..., 0.95.
GAMMAS = tuple(round(0.05 * k, 2) for k in range(20))
#: Relative precision of the largest stable steps (bisection on the exact radius).
EDGE_TOL = 1e-4
#: Pixels of each map, so that the two fit side by side.
MAP_WIDTH = 520


def _check_setting(alpha, tau, discrepancy, gamma) -> None:
    if not (alpha > 0 and math.isfinite(alpha)):
        raise ValueError(f"the step alpha must be positive, got {alpha}")
    if int(tau) != tau or not 0 <= tau <= MAP_TAUS[-1]:
        raise ValueError(f"the delay tau must be an integer in 0..{MAP_TAUS[-1]}, got {tau}")
    if not -2.0 <= discrepancy <= 2.0:
        raise ValueError(f"the sensitivity s must be in [-2, 2], got {discrepancy}")
    if round(float(gamma), 2) not in GAMMAS:
        raise ValueError(f"T2's gamma must be one of {', '.join(map(str, GAMMAS))}, got {gamma}")


def largest_stable_steps(tau: int, discrepancy: float, gammas=GAMMAS) -> list[float]:
    """Largest stable ``alpha * lambda`` at delay ``tau`` for each gamma (None: without T2).

    The edge of the stability explorer (:func:`~.stability_explorer.stable_edge`:
    the first unstable step of :data:`SWEEP_ALPHAS`, then bisection on the exact radius, here to
    :data:`EDGE_TOL`), for every gamma at once: the transition matrix is affine in alpha, so
    each round of the search is one stacked eigenvalue call over all the gammas. Equal to
    :func:`pipemare_lite.analysis.theory.t2_stable_steps` within the tolerance, when the edge lies
    inside the map's steps.
    """
    def matrices(alpha):
        return np.stack([discrepancy_matrix(alpha, 1.0, tau, discrepancy, gamma=g)
                         for g in gammas])

    at_zero = matrices(0.0)
    slope = matrices(1.0) - at_zero

    def radii(alphas):  # alphas: (gammas, k) -> spectral radii (gammas, k)
        stack = at_zero[:, None] + alphas[:, :, None, None] * slope[:, None]
        return np.abs(np.linalg.eigvals(stack)).max(axis=-1)

    alphas = SWEEP_ALPHAS
    unstable = radii(np.broadcast_to(alphas, (len(gammas), len(alphas)))) >= 1.0
    first = np.where(unstable.any(axis=1), unstable.argmax(axis=1), len(alphas))
    low = np.where(first > 0, alphas[np.maximum(first - 1, 0)], alphas[0])
    high = alphas[np.minimum(first, len(alphas) - 1)]
    edge = (first > 0) & (first < len(alphas))  # the others: below or above the map
    while edge.any() and np.any((high - low)[edge] > EDGE_TOL * high[edge]):
        middle = 0.5 * (low + high)
        stable = radii(middle[:, None])[:, 0] < 1.0
        low = np.where(edge & stable, middle, low)
        high = np.where(edge & ~stable, middle, high)
    return [float(x) for x in np.where(first == len(alphas), alphas[-1], low)]


class T2Explorer(Explorer):
    """The widget returned by :func:`t2_explorer` (see there)."""

    def __init__(self, alpha, tau, discrepancy, gamma) -> None:
        style = {"description_width": "initial"}
        controls = {
            "alpha": widgets.FloatLogSlider(value=alpha, base=10, min=-2, max=math.log10(4),
                                            step=0.01, description="step alpha*lambda",
                                            readout_format=".3g", style=style),
            "tau": widgets.IntSlider(value=tau, min=0, max=MAP_TAUS[-1], description="delay tau",
                                     style=style),
            "discrepancy": widgets.FloatSlider(value=discrepancy, min=-2.0, max=2.0, step=0.1,
                                               description="sensitivity s", style=style),
            "gamma": widgets.FloatSlider(value=gamma, min=GAMMAS[0], max=GAMMAS[-1], step=0.05,
                                         description="T2 gamma", style=style),
        }
        self.before = figure_widget()
        self.after = figure_widget()
        self.sweep = figure_widget()
        self.summary = widgets.HTML()
        self.radius_before: float | None = None
        self.radius_after: float | None = None
        self.stable_before: float | None = None
        self.stable_after: float | None = None
        self.sweep_steps: list[float] = []
        self._grids: dict = {}  # (s, gamma or None) -> map
        self._sweeps: dict = {}  # (tau, s) -> (steps per gamma, step without T2)
        self._sweep_drawn = None  # the (tau, s) whose curve the sweep figure shows
        c = controls
        super().__init__(controls, [
            widgets.HBox([c["alpha"], c["tau"], c["discrepancy"], c["gamma"]]),
            widgets.HBox([self.before, self.after]), self.sweep, self.summary])
        self.update()

    def _grid(self, discrepancy, gamma):
        key = (discrepancy, gamma)
        if key not in self._grids:
            if len(self._grids) > 64:  # a long session: forget the oldest maps
                self._grids.pop(next(iter(self._grids)))
            self._grids[key] = stability_grid(MAP_ALPHAS, MAP_TAUS, sensitivity=discrepancy,
                                              gamma=gamma)
        return self._grids[key]

    def _draw_map(self, target, grid, alpha, tau, title) -> None:
        if not target.data:  # the first drawing builds the figure
            figure = stability_map(
                grid, MAP_ALPHAS, MAP_TAUS, bound=stability_bound, alpha_axis="log",
                point=(alpha, tau), alpha_title="step size alpha * lambda (log)",
                bound_name="no discrepancy: 2 sin(pi/(2(2 tau+1)))", title=title)
            figure.update_layout(width=MAP_WIDTH)
            show_plotly_figure(target, figure)
            return
        with target.batch_update():  # later ones set values: much faster
            target.data[0].z = grid
            target.data[-1].x = [alpha]
            target.data[-1].y = [MAP_TAUS.index(tau)]
            target.layout.title.text = title

    def _redraw(self, alpha, tau, discrepancy, gamma) -> None:
        _check_setting(alpha, tau, discrepancy, gamma)
        gamma, s = round(float(gamma), 2), round(float(discrepancy), 6)
        self._draw_map(self.before, self._grid(s, None), alpha, tau,
                       f"without T2: s={s:g}")
        self._draw_map(self.after, self._grid(s, gamma), alpha, tau,
                       f"with T2, gamma={gamma:g}: s={s:g}")
        if (tau, s) not in self._sweeps:
            without, *steps = largest_stable_steps(tau, s, (None, *GAMMAS))
            self._sweeps[(tau, s)] = (steps, without)
        self.sweep_steps, self.stable_before = self._sweeps[(tau, s)]
        self.stable_after = self.sweep_steps[GAMMAS.index(gamma)]
        self.radius_before = discrepancy_radius(alpha, 1.0, tau, s)
        self.radius_after = discrepancy_radius(alpha, 1.0, tau, s, gamma=gamma)
        if self._sweep_drawn != (tau, s):  # a new curve
            show_plotly_figure(self.sweep, gamma_sweep_figure(
                GAMMAS, self.sweep_steps, without=self.stable_before,
                no_discrepancy=stability_bound(tau), current=gamma,
                title=f"gamma sweep at tau={tau}, s={s:g}: largest stable step with T2"))
            self._sweep_drawn = (tau, s)
        else:  # only gamma moved: move the marker
            with self.sweep.batch_update():
                self.sweep.data[-1].x, self.sweep.data[-1].y = [gamma], [self.stable_after]
        self.summary.value = self._summary_html(alpha, tau)

    def _summary_html(self, alpha, tau) -> str:
        def verdict(radius):
            return "stable" if radius < 1 else "unstable"

        change = self.stable_after - self.stable_before
        effect = ("T2 helps here" if change > EDGE_TOL * self.stable_before
                  else "T2 hurts here" if change < -EDGE_TOL * self.stable_before
                  else "no change")
        rows = [
            (f"spectral radius at alpha*lambda = {alpha:.3g}, tau = {tau}",
             f"{self.radius_before:.4f} ({verdict(self.radius_before)})",
             f"{self.radius_after:.4f} ({verdict(self.radius_after)})"),
            ("largest stable step alpha*lambda", f"{self.stable_before:.4g}",
             f"{self.stable_after:.4g} ({effect})"),
            ("no discrepancy (stash): 2 sin(pi/(2(2 tau+1)))", f"{stability_bound(tau):.4g}",
             ""),
        ]
        body = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td>"
                       f"<td>{html.escape(c)}</td></tr>" for a, b, c in rows)
        return ('<table style="border-collapse:collapse" border="1" cellpadding="4">'
                "<tr><th>quantity</th><th>without T2</th><th>with T2</th></tr>"
                + body + "</table>")


def t2_explorer(alpha: float = 0.3, tau: int = 4, discrepancy: float = -1.0,
                gamma: float = 0.3) -> T2Explorer:
    """A widget comparing the discrepancy model with and without T2.

    Controls (``w.controls[name]``): ``alpha`` (the step alpha * lambda), ``tau`` (the
    forward's delay in updates, 0..16), ``discrepancy`` (the backward sensitivity s, in
    [-2, 2]: the gradient is ``lam w[t-tau] + s (b[t] - w[t-tau])``) and ``gamma`` (T2's
    decay, one of :data:`GAMMAS`). Attributes: ``before``, ``after`` and ``sweep``
    (FigureWidgets), ``summary`` (the table), ``radius_before``/``radius_after``,
    ``stable_before``/``stable_after`` (largest stable steps), ``sweep_steps`` (one per
    gamma of :data:`GAMMAS`), ``message`` and ``error``.
    """
    _check_setting(alpha, tau, discrepancy, gamma)
    return T2Explorer(alpha, tau, discrepancy, gamma)


def t2_explorer_static(tau: int = 4, discrepancy: float = -1.0,
                       gammas=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)):
    """The explorer for the HTML book: the map with T2, one slider step per gamma.

    One figure: the map (step vs delay) with T2 at each gamma of ``gammas`` (one hidden
    heatmap per step), overlaid with the largest stable step per delay *without* T2 (a red
    line: where the stable region ended before T2) and without any discrepancy (black). Each
    step's title gives the largest stable step at ``tau`` with and without T2.
    """
    gammas = [round(float(g), 2) for g in gammas]
    if not gammas or len(gammas) > MAX_STEPS:
        raise ValueError(f"gammas must hold 1..{MAX_STEPS} values, got {len(gammas)}")
    for g in gammas:
        _check_setting(1.0, tau, discrepancy, g)
    without = [largest_stable_steps(t, discrepancy, (None,))[0] for t in MAP_TAUS]
    at_tau = largest_stable_steps(tau, discrepancy, gammas)
    fig = stability_map(stability_grid(MAP_ALPHAS, MAP_TAUS, sensitivity=discrepancy,
                                       gamma=gammas[0]),
                        MAP_ALPHAS, MAP_TAUS, bound=stability_bound, alpha_axis="log",
                        alpha_title="step size alpha * lambda (log)",
                        bound_name="no discrepancy: 2 sin(pi/(2(2 tau+1)))")
    for g in gammas[1:]:
        heat = go.Heatmap(fig.data[0])  # same colours, hover and colour bar; hidden at first
        heat.z, heat.visible = (
            stability_grid(MAP_ALPHAS, MAP_TAUS, sensitivity=discrepancy, gamma=g), False)
        fig.add_trace(heat)
    fig.add_trace(go.Scatter(name="largest stable step without T2", x=without,
                             y=list(range(len(MAP_TAUS))), mode="lines",
                             line={"color": ROOT_UNSTABLE_COLOR, "width": 3, "dash": "dash"},
                             hovertemplate="without T2: %{x:.4g}<extra></extra>"))
    k = len(gammas)
    titles = [f"s={discrepancy:g}, T2 gamma={g:g}: at tau={tau} the largest stable step is "
              f"{before:.3f} without T2, {after:.3f} with it"
              for g, before, after in zip(gammas, [without[tau]] * k, at_tau)]
    # trace indices: heatmap of gammas[0] first, the bound second (stability_map's order),
    # then the heatmaps of the other gammas, then the line without T2
    heatmaps, lines = [0, *range(2, k + 1)], [1, k + 1]
    steps = [{"label": f"{g:g}", "method": "update",
              "args": [{"visible": [j == i for j in range(k)] + [True, True]},
                       {"title.text": title}, heatmaps + lines]}
             for i, (g, title) in enumerate(zip(gammas, titles))]
    fig.update_layout(title={"text": titles[0]}, height=520,
                      sliders=[_slider(steps, "T2 gamma = ")])
    return fig
