"""The dashboard's HTML: a page's frame, tables, notices, and charts drawn as inline SVG.

Contract: every function returns markup in which all text that came from records, targets
or the user is escaped (:func:`esc`); nothing here fetches anything, so a page works
offline. The frame links only the package's own ``/static/`` files.

Why by hand and not a template engine: the pages are a few tables and forms; plain
functions keep the dependency list and the start-up short, and escaping in one place.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

__all__ = ["bars", "esc", "lines", "notice", "page", "table"]

NAV = (
    ("/", "GPUs & queue"),
    ("/runs", "Runs"),
    ("/spend", "Spend"),
    ("/plan", "Plan"),
)


def esc(value: object) -> str:
    """Text (``None``: empty) made safe for HTML, quotes included."""
    return "" if value is None else html.escape(str(value), quote=True)


def page(title: str, body: str, here: str = "") -> str:
    """A whole page: the navigation, ``title`` and ``body`` (markup)."""
    links = " ".join(
        f'<a href="{href}"{" class=here" if href == here else ""}>{esc(name)}</a>'
        for href, name in NAV
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{esc(title)} · nodus</title>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        '<link rel=stylesheet href="/static/dashboard.css">'
        '<script src="/static/dashboard.js" defer></script></head><body>'
        f"<nav><b>nodus</b> {links}</nav><main><h1>{esc(title)}</h1>{body}</main>"
        "</body></html>"
    )


def notice(text: str, hint: str | None = None, kind: str = "error") -> str:
    """A box that says what is wrong (and what to do)."""
    more = f"<br><small>{esc(hint)}</small>" if hint else ""
    return f'<p class="notice {kind}">{esc(text)}{more}</p>'


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], css: str = "") -> str:
    """A table whose cells are markup already (escape what you put in them)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def bars(
    points: Sequence[tuple[str, float]],
    unit: str = "",
    width: int = 640,
    height: int = 160,
    label_every: int = 1,
) -> str:
    """A bar chart as inline SVG: one bar per (label, value), each with its value as a
    tooltip; every ``label_every``-th label is written under its bar."""
    if not points:
        return '<p class="empty">nothing to draw yet</p>'
    top = max((v for _, v in points), default=0.0) or 1.0
    step = width / len(points)
    inner = height - 20
    parts = []
    for i, (name, value) in enumerate(points):
        h = max(0.0, value / top * inner)
        x = i * step
        parts.append(
            f'<rect x="{x + step * 0.1:.1f}" y="{inner - h:.1f}" width="{step * 0.8:.1f}" '
            f'height="{h:.1f}"><title>{esc(name)}: {value:g}{esc(unit)}</title></rect>'
        )
        if i % label_every == 0:
            parts.append(
                f'<text x="{x + step / 2:.1f}" y="{height - 5}" text-anchor="middle">'
                f"{esc(name)}</text>"
            )
    peak = f'<text x="2" y="12" class="peak">max {top:g}{esc(unit)}</text>'
    return (
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img">{peak}{"".join(parts)}</svg>'
    )


def lines(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    unit: str = "",
    width: int = 640,
    height: int = 160,
) -> str:
    """A line chart over time as inline SVG: one line per (name, [(seconds, value)]),
    named in a legend; the time axis runs from the first point of any line to the last."""
    drawn = [(name, points) for name, points in series if points]
    if not drawn:
        return '<p class="empty">nothing to draw yet</p>'
    start = min(t for _, points in drawn for t, _ in points)
    took = max(t for _, points in drawn for t, _ in points) - start
    span = took or 1.0
    top = max((v for _, points in drawn for _, v in points), default=0.0) or 1.0
    inner = height - 20
    parts = []
    for i, (name, points) in enumerate(drawn):
        xy = " ".join(
            f"{(t - start) / span * width:.1f},{inner - max(0.0, v) / top * inner:.1f}"
            for t, v in points
        )
        parts.append(
            f'<polyline class="line line-{i % 6}" fill="none" points="{xy}">'
            f"<title>{esc(name)}</title></polyline>"
            f'<text class="legend line-{i % 6}" x="{width - 4}" y="{12 + 12 * i}" '
            f'text-anchor="end">{esc(name)}</text>'
        )
    peak = f'<text x="2" y="12" class="peak">max {top:g}{esc(unit)}</text>'
    axis = f'<text x="2" y="{height - 5}">over {took:.0f} s</text>'
    return (
        f'<svg class="chart timeline" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img">{peak}{axis}{"".join(parts)}</svg>'
    )
