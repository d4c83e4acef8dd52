"""Charts as inline SVG, drawn on the server: no JavaScript library, nothing to fetch, and
the page prints and screenshots as it shows. Each mark carries a <title>, which browsers
show as a tooltip, so exact values stay one hover away.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

# Tableau 10: distinguishable, and readable by most colour-blind people
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
STATUS_COLOURS = {"ok": "#59a14f", "breach": "#e15759", "below_min_volume": "#bab0ac",
                  "no_report": "#f28e2b"}
WIDTH = 760  # every chart alike, so their text is the same size side by side
FONT = 'font-family="system-ui, sans-serif" font-size="11" fill="#333"'


def compact(value: float) -> str:
    """12345 -> 12.3k: axis labels must stay short."""
    size = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if size >= limit:
            return f"{value / limit:.1f}{suffix}"
    return f"{value:.2f}" if size < 10 else f"{value:.0f}"


def _nice_max(value: float) -> float:
    """The axis end: four equal steps of a round size (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 x
    10^n), the smallest that reaches value, so grid labels read 6k, 12k, 18k, 24k."""
    if value <= 0:
        return 1.0
    quarter = value / 4
    power = 10 ** math.floor(math.log10(quarter))
    step = next(m * power for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * power >= quarter)
    return 4 * step


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    return (f'<svg class="chart" viewBox="0 0 {width} {height}" width="100%" role="img" '
            f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
            f'<text x="0" y="14" {FONT} font-size="13" font-weight="600">{escape(title)}</text>'
            + "".join(body) + "</svg>")


def _legend(names: Sequence[str], x: float, y: float) -> list[str]:
    out = []
    for i, name in enumerate(names):
        out.append(f'<rect x="{x}" y="{y + i * 16}" width="10" height="10" '
                   f'fill="{PALETTE[i % len(PALETTE)]}"/>'
                   f'<text x="{x + 14}" y="{y + i * 16 + 9}" {FONT}>{escape(name)}</text>')
    return out


def bar_chart(title: str, items: Sequence[tuple[str, float | None]], unit: str = "") -> str:
    """Horizontal bars, one per label (None draws no bar: e.g. ROI without cost)."""
    width, left, row = WIDTH, 150, 22
    height = 30 + row * max(len(items), 1) + 20
    top = max((v for _, v in items if v is not None), default=0.0)
    end = _nice_max(top)
    scale = (width - left - 60) / end
    body = []
    for i, (label, value) in enumerate(items):
        y = 28 + i * row
        body.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end" {FONT}>'
                    f'{escape(label or "(none)")}</text>')
        if value is None:
            body.append(f'<text x="{left + 4}" y="{y + 14}" {FONT}>no cost</text>')
            continue
        length = max(value, 0.0) * scale
        body.append(f'<rect x="{left}" y="{y + 3}" width="{length:.1f}" height="{row - 6}" '
                    f'fill="{PALETTE[0]}"><title>{escape(label)}: {value:,.2f}{unit}</title>'
                    f'</rect><text x="{left + length + 4:.1f}" y="{y + 14}" {FONT}>'
                    f'{compact(value)}{unit}</text>')
    return _svg(width, height, title, body)


def grouped_bars(title: str, categories: Sequence[str],
                 series: Sequence[tuple[str, Sequence[float | None]]]) -> str:
    """Vertical bars per category, one colour per series, with a legend on the right."""
    left, top, plot_h = 48, 28, 200
    plot_w = WIDTH - left - 150
    width, height = WIDTH, top + plot_h + 40
    values = [v for _, vs in series for v in vs if v is not None]
    end = _nice_max(max(values, default=0.0))
    group_w = plot_w / max(len(categories), 1)
    bar_w = max((group_w - 8) / max(len(series), 1), 1.0)
    body = _axis(left, top, plot_w, plot_h, end)
    for c, category in enumerate(categories):
        x0 = left + c * group_w + 4
        body.append(f'<text x="{x0 + (group_w - 8) / 2:.1f}" y="{top + plot_h + 14}" '
                    f'text-anchor="middle" {FONT}>{escape(category or "(none)")}</text>')
        for s, (name, vs) in enumerate(series):
            value = vs[c]
            if value is None:
                continue
            h = max(value, 0.0) / end * plot_h
            body.append(f'<rect x="{x0 + s * bar_w:.1f}" y="{top + plot_h - h:.1f}" '
                        f'width="{bar_w:.1f}" height="{h:.1f}" '
                        f'fill="{PALETTE[s % len(PALETTE)]}"><title>{escape(category)}, '
                        f'{escape(name)}: {value:,.2f}</title></rect>')
    body += _legend([name for name, _ in series], left + plot_w + 16, top)
    return _svg(width, height, title, body)


def _axis(left: float, top: float, plot_w: float, plot_h: float, end: float,
          start: float = 0.0, percent: bool = False) -> list[str]:
    """Horizontal grid lines with labels at five even steps from start to end."""
    out = []
    for i in range(5):
        value = start + (end - start) * i / 4
        y = top + plot_h - plot_h * i / 4
        label = f"{value * 100:+.0f} %" if percent else compact(value)
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="#ddd"/><text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" '
                   f'{FONT}>{label}</text>')
    return out


def line_chart(title: str, x_labels: Sequence[str],
               series: Sequence[tuple[str, Sequence[float]]]) -> str:
    """Lines over ordered x labels (days), one colour per series."""
    left, top, plot_h = 48, 28, 200
    plot_w = WIDTH - left - 150
    width, height = WIDTH, top + plot_h + 40
    end = _nice_max(max((v for _, vs in series for v in vs), default=0.0))
    step = plot_w / max(len(x_labels) - 1, 1)
    body = _axis(left, top, plot_w, plot_h, end)
    every = max(len(x_labels) // 6, 1)  # about six dates on the axis
    for i, label in enumerate(x_labels):
        if i % every == 0:
            body.append(f'<text x="{left + i * step:.1f}" y="{top + plot_h + 14}" '
                        f'text-anchor="middle" {FONT}>{escape(label)}</text>')
    for s, (name, values) in enumerate(series):
        colour = PALETTE[s % len(PALETTE)]
        points = " ".join(f"{left + i * step:.1f},{top + plot_h - v / end * plot_h:.1f}"
                          for i, v in enumerate(values))
        body.append(f'<polyline points="{points}" fill="none" stroke="{colour}" '
                    f'stroke-width="2"/>')
        for i, v in enumerate(values):
            body.append(f'<circle cx="{left + i * step:.1f}" '
                        f'cy="{top + plot_h - v / end * plot_h:.1f}" r="2.5" fill="{colour}">'
                        f'<title>{escape(x_labels[i])}, {escape(name)}: {v:,.2f}</title></circle>')
    body += _legend([name for name, _ in series], left + plot_w + 16, top)
    return _svg(width, height, title, body)


def drift_chart(title: str, days: Sequence[str],
                points: Sequence[tuple[str, float, str, str]], band: float) -> str:
    """Drift per comparison (day, drift, status, label) against the ±band, shaded. Drift
    beyond the axis is drawn on its edge as a triangle, so an outlier cannot hide the band."""
    left, top, plot_h = 48, 28, 200
    plot_w = WIDTH - left - 150
    width, height = WIDTH, top + plot_h + 40
    limit = band * 4 if band > 0 else 0.2  # grid at ±2 and ±4 bands
    step = plot_w / max(len(days) - 1, 1)
    x_of = {day: left + i * step for i, day in enumerate(days)}

    def y_of(d: float) -> float:
        return top + plot_h / 2 - max(min(d, limit), -limit) / limit * plot_h / 2

    body = _axis(left, top, plot_w, plot_h, limit, -limit, percent=True)
    body.append(f'<rect x="{left}" y="{y_of(band):.1f}" width="{plot_w}" '
                f'height="{y_of(-band) - y_of(band):.1f}" fill="#59a14f" fill-opacity="0.12">'
                f'<title>the ±{band * 100:g} % band</title></rect>')
    every = max(len(days) // 6, 1)
    for i, day in enumerate(days):
        if i % every == 0:
            body.append(f'<text x="{x_of[day]:.1f}" y="{top + plot_h + 14}" '
                        f'text-anchor="middle" {FONT}>{escape(day)}</text>')
    for day, drift, status, label in points:
        colour = STATUS_COLOURS.get(status, "#333")
        x, y = x_of[day], y_of(drift)
        tip = (f"<title>{escape(day)} {escape(label)}: {drift * 100:+.2f} % "
               f"({escape(status)})</title>")
        if abs(drift) > limit:
            tip_y = y + (6 if drift < 0 else -6)
            body.append(f'<polygon points="{x - 4:.1f},{y:.1f} {x + 4:.1f},{y:.1f} '
                        f'{x:.1f},{tip_y:.1f}" fill="{colour}">{tip}</polygon>')
        else:
            body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}" '
                        f'fill-opacity="0.8">{tip}</circle>')
    legend = [s for s in STATUS_COLOURS if any(p[2] == s for p in points)]
    for i, status in enumerate(legend):
        y = top + i * 16
        body.append(f'<circle cx="{left + plot_w + 21}" cy="{y + 5}" r="4" '
                    f'fill="{STATUS_COLOURS[status]}"/><text x="{left + plot_w + 30}" '
                    f'y="{y + 9}" {FONT}>{escape(status)}</text>')
    return _svg(width, height, title, body)


def interval_chart(title: str, items: Sequence[tuple[str, float | None, float | None,
                                                     float | None, int]],
                   percent: bool = False, reference: float | None = None) -> str:
    """A row per item (label, value, low, high, colour): the interval as a line with end
    ticks, the value as a dot; a value without bounds is a dot alone, no value is said.
    `reference` draws a dashed vertical line (e.g. 0 for a difference)."""
    width, left, row = WIDTH, 210, 22
    plot_w = width - left - 70
    height = 30 + row * max(len(items), 1) + 24
    values = [v for _, *vs, _ in items for v in vs if v is not None]
    values += [] if reference is None else [reference]
    end = _nice_max(max(values, default=0.0))
    start = -_nice_max(-min(values)) if values and min(values) < 0 else 0.0

    def x_of(v: float) -> float:
        return left + (v - start) / (end - start) * plot_w

    def text(v: float) -> str:
        return f"{v * 100:.1f} %" if percent else f"{v:,.2f}"

    bottom = 28 + row * max(len(items), 1)
    body = []
    for i in range(5):
        v = start + (end - start) * i / 4
        body.append(f'<line x1="{x_of(v):.1f}" x2="{x_of(v):.1f}" y1="26" y2="{bottom}" '
                    f'stroke="#ddd"/><text x="{x_of(v):.1f}" y="{bottom + 14}" '
                    f'text-anchor="middle" {FONT}>'
                    f'{f"{v * 100:.0f} %" if percent else compact(v)}</text>')
    if reference is not None:
        body.append(f'<line x1="{x_of(reference):.1f}" x2="{x_of(reference):.1f}" y1="26" '
                    f'y2="{bottom}" stroke="#888" stroke-dasharray="4 3"/>')
    for i, (label, value, low, high, colour_index) in enumerate(items):
        y = 28 + i * row + row / 2
        colour = PALETTE[colour_index % len(PALETTE)]
        body.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" {FONT}>'
                    f'{escape(label or "(none)")}</text>')
        if value is None:
            body.append(f'<text x="{left + 4}" y="{y + 4:.1f}" {FONT}>no value</text>')
            continue
        tip = escape(f"{label}: {text(value)}" + (
            f" [{text(low)}, {text(high)}]" if low is not None and high is not None else ""))
        if low is not None and high is not None:
            x0, x1 = x_of(low), x_of(high)
            body.append(f'<path d="M{x0:.1f} {y - 5:.1f}v10M{x0:.1f} {y:.1f}H{x1:.1f}'
                        f'M{x1:.1f} {y - 5:.1f}v10" stroke="{colour}" stroke-width="2" '
                        f'fill="none"><title>{tip}</title></path>')
        body.append(f'<circle cx="{x_of(value):.1f}" cy="{y:.1f}" r="4" fill="{colour}">'
                    f'<title>{tip}</title></circle>')
    return _svg(width, height + 6, title, body)
