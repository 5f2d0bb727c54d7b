"""The owner page's HTML: server-rendered, read-only, no external assets — inline
CSS and inline SVG charts only, so it works offline and under ``Content-Security-Policy:
default-src 'none'``. Pure: data in, text out; every value from the ledger or the config is
HTML-escaped (statements are analysts' SQL text)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Set as AbstractSet
from html import escape

__all__ = ["render_page", "bar_chart", "spend_chart"]

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2430;background:#fafbfc}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dde4}
table{border-collapse:collapse;margin:6px 0;background:#fff}td,th{border:1px solid #d8dde4;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#e4e8ee}td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:12px}.muted{color:#667085}svg{background:#fff;border:1px solid #d8dde4}
"""
_COLORS = ["#3b6fd8", "#d8793b", "#2e9e5b", "#a23bd8", "#c9a227", "#d83b6f", "#3bb5d8", "#6b7280"]


def _n(x: float) -> str:
    return f"{x:.4g}"


def bar_chart(rows: list[dict]) -> str:
    """Horizontal bars, one per role: spent (filled) within the budget (outline)."""
    width, left, bar_h, gap = 640, 110, 18, 10
    h = max(1, len(rows)) * (bar_h + gap) + 30
    top = max([r["budget"] for r in rows] + [1e-12])
    out = [
        f'<svg id="budgets" role="img" aria-label="budget per role" width="{width}" height="{h}" '
        f'viewBox="0 0 {width} {h}" xmlns="http://www.w3.org/2000/svg">'
    ]
    span = width - left - 150
    for i, r in enumerate(rows):
        y = 10 + i * (bar_h + gap)
        full = span * r["budget"] / top
        used = min(full, span * r["spent"] / top)
        out.append(
            f'<text x="4" y="{y + 13}" font-size="12">{escape(r["role"])}</text>'
            f'<rect x="{left}" y="{y}" width="{full:.1f}" height="{bar_h}" fill="#eef1f5" stroke="#98a2b3"/>'
            f'<rect class="spent" x="{left}" y="{y}" width="{used:.1f}" height="{bar_h}" fill="{_COLORS[i % 8]}"/>'
            f'<text x="{left + full + 6:.1f}" y="{y + 13}" font-size="12">{_n(r["spent"])} of '
            f"{_n(r['budget'])} / {escape(r['period'])}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def spend_chart(
    series: dict[str, list[tuple[float, float]]],
    now: float,
    days: int = 30,
    units: dict[str, str] | None = None,
) -> str:
    """Cumulative ε released per role over the last ``days`` days: one polyline per role (``units``:
    a role's unit when it is not ε — ρ on a zCDP tier)."""
    width, height, pad = 640, 220, 36
    t0 = now - days * 86400
    top = max([v for pts in series.values() for _, v in pts] + [1e-12])
    out = [
        f'<svg id="spend" role="img" aria-label="spend over time per role" width="{width}" '
        f'height="{height + 20 * max(1, len(series))}" xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - 10}" y2="{height - pad}" stroke="#98a2b3"/>',
        f'<line x1="{pad}" y1="10" x2="{pad}" y2="{height - pad}" stroke="#98a2b3"/>',
        f'<text x="2" y="16" font-size="11">{_n(top)}</text><text x="2" y="{height - pad}" font-size="11">0</text>',
        f'<text x="{pad}" y="{height - pad + 16}" font-size="11">{dt.datetime.fromtimestamp(t0, dt.UTC).date()}</text>',
        f'<text x="{width - 80}" y="{height - pad + 16}" font-size="11">'
        f"{dt.datetime.fromtimestamp(now, dt.UTC).date()}</text>",
    ]

    def xy(t: float, v: float) -> str:
        x = pad + (width - 10 - pad) * max(0.0, (t - t0)) / (now - t0)
        y = height - pad - (height - pad - 10) * v / top
        return f"{x:.1f},{y:.1f}"

    for i, (role, pts) in enumerate(series.items()):  # the roles' order and colours of the bar chart
        col = _COLORS[i % 8]
        path, level = [xy(t0, 0.0)], 0.0
        for t, v in pts:  # a step at each release
            path += [xy(t, level), xy(t, v)]
            level = v
        path.append(xy(now, level))
        out.append(
            f'<polyline class="role" fill="none" stroke="{col}" stroke-width="2" points="{" ".join(path)}"/>'
        )
        out.append(
            f'<text x="{pad}" y="{height + 14 + 20 * i}" font-size="12" fill="{col}">'
            f"■ {escape(role)}: {(units or {}).get(role, 'ε')} {_n(pts[-1][1] if pts else 0.0)} released in "
            f"{days} days</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _table(head: list[str], rows: list[list], numeric: AbstractSet[int] = frozenset(), cls: str = "") -> str:
    h = "".join(f"<th>{escape(c)}</th>" for c in head)
    body = []
    for r in rows:
        body.append(
            "<tr>"
            + "".join(
                f'<td class="n">{escape(str(v))}</td>' if i in numeric else f"<td>{escape(str(v))}</td>"
                for i, v in enumerate(r)
            )
            + "</tr>"
        )
    empty = f'<tr><td colspan="{len(head)}" class="muted">none yet</td></tr>' if not rows else ""
    return f'<table class="{cls}"><tr>{h}</tr>{"".join(body)}{empty}</table>'


def _eps_delta(role: str, v) -> str:
    e, d = v if isinstance(v, tuple) else (v, 0.0)
    return f"{role} ε {_n(e)}" + (f", δ {_n(d)}" if d else "")


def render_page(data: dict) -> str:
    """``data``: database, now (epoch s), budgets [{role, tier, epsilon, spent, budget, period,
    delta_spent, delta_budget}],
    series {role: [(t, cumulative ε)]}, releases [{role, created, statement, epsilon, mechanism}],
    coalition [(ladder, statement, dv, tiers, loss, independent)], tables [(name, kind, source?,
    comment, [(column, type, comment)])], unreleased (ε, δ) per role."""
    now = data["now"]
    when = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    parts = [
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>dpgate — '
        f"{escape(data['database'])}</title><style>{_CSS}</style></head><body>",
        f"<h1>dpgate owner page — {escape(data['database'])}</h1>",
        f'<div class="muted">read-only; {escape(when)}; signed in as {escape(data["user"])}</div>',
        "<h2>Roles and budgets</h2>",
        bar_chart(data["budgets"]),
        _table(
            [
                "role",
                "tier",
                "ε (ρ) per query",
                "spent",
                "remaining",
                "budget",
                "δ spent",
                "δ remaining",
                "δ budget",
                "period",
            ],
            [
                [
                    b["role"],
                    b["tier"],
                    _n(b["epsilon"]) + (" ρ" if b.get("accounting") == "zcdp" else ""),
                    _n(b["spent"]) + (f" ρ, {b['reading']}" if b.get("accounting") == "zcdp" else ""),
                    _n(b["budget"] - b["spent"]),
                    _n(b["budget"]),
                    _n(b.get("delta_spent", 0.0)),
                    _n(b.get("delta_budget", 0.0) - b.get("delta_spent", 0.0)),
                    _n(b.get("delta_budget", 0.0)),
                    b["period"],
                ]
                for b in data["budgets"]
            ],
            {2, 3, 4, 5, 6, 7, 8},
            "budgets",
        ),
        "<h2>Spend over time</h2>",
        spend_chart(
            data["series"],
            now,
            units={b["role"]: "ρ" for b in data["budgets"] if b.get("accounting") == "zcdp"},
        ),
    ]
    if data.get("unreleased"):
        parts.append(
            '<p class="muted">charged with no answer (timed out, cancelled or failed after the scan '
            "started): " + escape(", ".join(_eps_delta(r, v) for r, v in data["unreleased"].items())) + "</p>"
        )
    parts += [
        "<h2>Recent releases</h2>",
        _table(
            ["released at", "role", "ε", "mechanism", "statement"],
            [
                [
                    dt.datetime.fromtimestamp(r["created"], dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
                    r["role"],
                    _n(r["epsilon"]),
                    r["mechanism"],
                    r["statement"],
                ]
                for r in data["releases"]
            ],
            {2},
            "releases",
        ),
        "<h2>Coalitions (multi-tier ladders)</h2>",
        '<p class="muted">per query: what the tiers of a ladder learn together (max ε) against '
        "independent releases (Σε)</p>",
        _table(
            ["ladder", "data version", "coalition ε", "Σε", "tiers released", "statement"],
            [[c[0], c[2], _n(c[4]), _n(c[5]), c[3] or "(none yet)", c[1]] for c in data["coalition"]],
            {1, 2, 3},
            "coalition",
        ),
        "<h2>Tables and policies</h2>",
    ]
    for name, kind, source, comment, cols in data["tables"]:
        parts.append(
            f'<h3>{escape(name)} <span class="muted">({escape(kind)}; source '
            f"<code>{escape(source)}</code>)</span></h3><p>{escape(comment)}</p>"
        )
        parts.append(_table(["column", "type", "DP facts"], [list(c) for c in cols], cls="columns"))
    parts.append("</body></html>")
    return "\n".join(parts)
