"""The data behind a matplotlib figure, as the Code Interpreter SDKs' `chart` reads it.

The SDKs type a result's `chart` (their charts.py / charts.d.ts) as one of:
line and scatter (`PointChart`: x/y labels, units, ticks, tick labels, scales,
elements of {label, points}), bar (elements of {label, group, value}), pie
(elements of {label, angle, radius}) and superchart (one chart per axes). This
module builds those dicts from what a figure holds; a figure it does not
recognise (an image, a box plot, a 3D plot, lines mixed with scatter points)
gets no chart, only its PNG.

Runs inside the Python kernel (loaded by python_startup.py) the first time a
figure is displayed; matplotlib is imported only then.
"""

from __future__ import annotations

import math
from typing import Any

from matplotlib import category, dates
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer
from matplotlib.patches import Wedge


def figure_chart(fig) -> dict | None:
    """One chart for the figure: its only chart, or a superchart of its axes' charts."""
    # Tick labels are laid out by drawing; the PNG formatter may not have run yet.
    fig.draw_without_rendering()
    charts = [c for c in (axes_chart(ax) for ax in fig.get_axes() if ax.get_visible()) if c]
    if not charts:
        return None
    if len(charts) == 1:
        return charts[0]
    suptitle = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else ""
    return {"type": "superchart", "title": suptitle, "elements": charts}


def axes_chart(ax) -> dict | None:
    wedges = [p for p in ax.patches if isinstance(p, Wedge)]
    if wedges:
        return _pie(ax, wedges)
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    if bars:
        return _bar(ax, bars)
    lines = [ln for ln in ax.get_lines() if ln.get_visible() and len(ln.get_xdata())]
    points = [c for c in ax.collections if isinstance(c, PathCollection) and len(c.get_offsets())]
    if lines and not points:
        return _point_chart(ax, "line", [(_label(ln), ln.get_xydata()) for ln in lines])
    if points and not lines:
        return _point_chart(ax, "scatter", [(_label(c), c.get_offsets()) for c in points])
    return None


def _pie(ax, wedges) -> dict:
    return {
        "type": "pie",
        "title": ax.get_title(),
        "elements": [
            {"label": w.get_label(), "angle": _num(abs(w.theta2 - w.theta1)), "radius": _num(w.r)} for w in wedges
        ],
    }


def _bar(ax, containers) -> dict:
    elements = []
    for container in containers:
        horizontal = getattr(container, "orientation", "vertical") == "horizontal"
        axis = ax.yaxis if horizontal else ax.xaxis
        names = _tick_names(axis)
        for rect in container.patches:
            if horizontal:
                at, value = rect.get_y() + rect.get_height() / 2, rect.get_width()
            else:
                at, value = rect.get_x() + rect.get_width() / 2, rect.get_height()
            # The SDKs type a bar's label, group and value as strings.
            elements.append({"label": _nearest(names, at), "group": _label(container), "value": _text(value)})
    return {"type": "bar", "title": ax.get_title(), **_labels(ax), "elements": elements}


def _point_chart(ax, kind: str, series) -> dict:
    x_kind, y_kind = _axis_kind(ax.xaxis), _axis_kind(ax.yaxis)
    return {
        "type": kind,
        "title": ax.get_title(),
        **_labels(ax),
        "x_scale": x_kind or ax.get_xscale(),
        "y_scale": y_kind or ax.get_yscale(),
        "x_ticks": [_value(ax.xaxis, x_kind, t) for t in ax.get_xticks()],
        "x_tick_labels": [t.get_text() for t in ax.get_xticklabels()],
        "y_ticks": [_value(ax.yaxis, y_kind, t) for t in ax.get_yticks()],
        "y_tick_labels": [t.get_text() for t in ax.get_yticklabels()],
        "elements": [
            {"label": label, "points": [[_value(ax.xaxis, x_kind, x), _value(ax.yaxis, y_kind, y)] for x, y in xy]}
            for label, xy in series
        ],
    }


def _labels(ax) -> dict:
    return {"x_label": ax.get_xlabel(), "y_label": ax.get_ylabel(), "x_unit": None, "y_unit": None}


def _label(artist) -> str:
    label = artist.get_label() or ""
    # matplotlib names unlabelled artists "_child0", "_nolegend_", ...
    return "" if label.startswith("_") else label


def _axis_kind(axis) -> str | None:
    """'datetime' or 'categorical' when the axis holds dates or strings, else None (numbers)."""
    formatter = axis.get_major_formatter()
    if isinstance(formatter, (dates.AutoDateFormatter, dates.ConciseDateFormatter, dates.DateFormatter)):
        return "datetime"
    if isinstance(formatter, category.StrCategoryFormatter):
        return "categorical"
    return None


def _value(axis, kind: str | None, v: Any) -> Any:
    """A plotted coordinate as the user gave it: a number, an ISO date, or a category."""
    if kind == "datetime":
        return dates.num2date(float(v)).isoformat()
    if kind == "categorical":
        names = {int(pos): name for name, pos in _category_mapping(axis).items()}
        return names.get(int(round(float(v))), _num(v))
    return _num(v)


def _category_mapping(axis) -> dict:
    units = getattr(axis, "units", None)
    return dict(getattr(units, "_mapping", {}) or {})


def _tick_names(axis) -> list[tuple[float, str]]:
    return [
        (float(pos), label.get_text())
        for pos, label in zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=False)
    ]


def _nearest(names: list[tuple[float, str]], at: float) -> str:
    if not names:
        return _text(at)
    pos, name = min(names, key=lambda n: abs(n[0] - at))
    return name if abs(pos - at) < 0.5 and name else _text(at)


def _num(v: Any) -> float | None:
    """A JSON-safe number: NaN and infinities (which JSON has not) become null."""
    f = float(v)
    if not math.isfinite(f):
        return None
    return int(f) if f.is_integer() and abs(f) < 2**53 else f


def _text(v: Any) -> str:
    n = _num(v)
    return "" if n is None else str(n)
