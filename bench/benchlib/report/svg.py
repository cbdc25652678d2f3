"""Inline SVG charts drawn in Python (no scripts, no external assets): a horizontal bar chart and a
grouped vertical bar chart with a linear or log-10 axis. Every bar is a <rect class="bar"> with
data-series / data-group attributes and a <title> tooltip holding its exact value."""
import math
from html import escape

FONT = "font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;font-size:12px"
PALETTE = ["#2563eb", "#f59e0b", "#10b981", "#8b5cf6", "#ef4444", "#0ea5e9", "#84cc16", "#ec4899"]
REFERENCE_GREY = "#9ca3af"


def _nice_linear_ticks(hi, count=5):
    if hi <= 0:
        return [0, 1]
    raw = hi / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(math.ceil(hi / step)) + 1)]


def _fmt_tick(v):
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:g}"
    return f"{v:.3g}"


class _Axis:
    """Maps values to pixel heights, linear from 0 or log-10 over whole decades."""

    def __init__(self, values, log, span):
        values = [v for v in values if v is not None and v > 0] or [1.0]
        self.log = log
        self.span = span
        if log:
            self.lo = math.floor(math.log10(min(values)))
            self.hi = math.ceil(math.log10(max(values)))
            if self.hi == self.lo:
                self.hi += 1
            self.ticks = [10.0 ** e for e in range(self.lo, self.hi + 1)]
        else:
            self.ticks = _nice_linear_ticks(max(values))
            self.lo, self.hi = 0.0, self.ticks[-1]

    def __call__(self, v):
        """Pixel length of a bar of value v (0 .. span)."""
        if v is None or v <= 0:
            return 0.0
        if self.log:
            frac = (math.log10(v) - self.lo) / (self.hi - self.lo)
        else:
            frac = (v - self.lo) / (self.hi - self.lo)
        return max(1.0, min(1.0, frac) * self.span)


def grouped_bars(title, groups, series, unit="", log=False, ref_line=None, from_ref=False, fmt=_fmt_tick, width=760,
                 height=340, chart_id=None, flagged=frozenset()):
    """groups: x labels; series: [(name, color, {group: value or None})]. A missing value leaves a gap
    (with an 'n/a' mark). ref_line: a value drawn as a dashed horizontal line (e.g. 1 for ratios); with from_ref,
    bars start at that line instead of the axis floor. flagged: {(series name, group)} drawn pale with a
    red outline (e.g. answers that differ from the reference)."""
    left, right, top, bottom = 64, 12, 30, 58
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for _, _, d in series for v in d.values() if v]
    if ref_line:
        values.append(ref_line)
    axis = _Axis(values, log, plot_h)
    base_y = top + plot_h
    out = [_open(width, height, title, chart_id),
           f'<text x="{width / 2:.1f}" y="16" text-anchor="middle" font-weight="600">{escape(title)}</text>']
    for t in axis.ticks:
        y = base_y - axis(t) if t > 0 else base_y
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#4b5563">{escape(_fmt_tick(t))}</text>')
    out.append(f'<text transform="translate(14 {top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle" '
               f'fill="#4b5563">{escape(unit)}{" (log scale)" if log else ""}</text>')
    slot = plot_w / max(1, len(groups))
    bar_w = min(40.0, slot * 0.8 / max(1, len(series)))
    for gi, g in enumerate(groups):
        x0 = left + gi * slot + (slot - bar_w * len(series)) / 2
        out.append(f'<text x="{left + gi * slot + slot / 2:.1f}" y="{base_y + 16:.1f}" text-anchor="middle">{escape(g)}</text>')
        for si, (name, color, data) in enumerate(series):
            v = data.get(g)
            x = x0 + si * bar_w
            if v is None or v <= 0:
                out.append(f'<text class="na" x="{x + bar_w / 2:.1f}" y="{base_y - 3:.1f}" text-anchor="middle" '
                           f'font-size="9" fill="#9ca3af">n/a</text>')
                continue
            h = axis(v)
            y_top, bar_h = base_y - h, h
            if ref_line and from_ref:  # ratio bars grow up or down from the reference line
                r = axis(ref_line)
                y_top, bar_h = base_y - max(h, r), max(1.0, abs(h - r))
            bad = (name, g) in flagged
            style = ' fill-opacity="0.35" stroke="#b91c1c" stroke-width="1.5"' if bad else ""
            out.append(f'<rect class="bar{" flagged" if bad else ""}" data-series="{escape(name)}" data-group="{escape(g)}" '
                       f'x="{x:.1f}" y="{y_top:.1f}" width="{bar_w - 1:.1f}" height="{bar_h:.1f}" fill="{color}"{style}>'
                       f'<title>{escape(name)} · {escape(g)}: {escape(fmt(v))} {escape(unit)}'
                       f'{" — answer differs from the reference" if bad else ""}</title></rect>')
    if ref_line:
        y = base_y - axis(ref_line)
        out.append(f'<line class="ref" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#111827" '
                   f'stroke-dasharray="5 4"/>')
    out.append(f'<line x1="{left}" x2="{width - right}" y1="{base_y}" y2="{base_y}" stroke="#6b7280"/>')
    out.append(_legend([(n, c) for n, c, _ in series], left, height - 14))
    out.append("</svg>")
    return "".join(out)


def hbars(title, items, unit="", fmt=_fmt_tick, width=760, chart_id=None):
    """items: [(label, value, color)], drawn top to bottom on a linear axis from 0."""
    left, right, top, row = 240, 90, 30, 26
    height = top + row * len(items) + 30
    plot_w = width - left - right
    axis = _Axis([v for _, v, _ in items], False, plot_w)
    out = [_open(width, height, title, chart_id),
           f'<text x="{width / 2:.1f}" y="16" text-anchor="middle" font-weight="600">{escape(title)}</text>']
    for t in axis.ticks:
        x = left + axis(t) if t > 0 else left
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + row * len(items)}" stroke="#e5e7eb"/>'
                   f'<text x="{x:.1f}" y="{top + row * len(items) + 14}" text-anchor="middle" fill="#4b5563">'
                   f'{escape(_fmt_tick(t))}</text>')
    for i, (label, v, color) in enumerate(items):
        y = top + i * row + 4
        out.append(f'<text x="{left - 8}" y="{y + 13}" text-anchor="end">{escape(label)}</text>')
        if v is None or v <= 0:
            out.append(f'<text class="na" x="{left + 4}" y="{y + 13}" fill="#9ca3af">n/a</text>')
            continue
        w = axis(v)
        out.append(f'<rect class="bar" data-series="{escape(label)}" data-group="{escape(title)}" x="{left}" y="{y}" '
                   f'width="{w:.1f}" height="{row - 8}" fill="{color}"><title>{escape(label)}: {escape(fmt(v))} '
                   f'{escape(unit)}</title></rect>'
                   f'<text x="{left + w + 6:.1f}" y="{y + 13}" fill="#374151">{escape(fmt(v))} {escape(unit)}</text>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + row * len(items)}" stroke="#6b7280"/></svg>')
    return "".join(out)


def _open(width, height, title, chart_id):
    ident = f' id="{escape(chart_id)}"' if chart_id else ""
    return (f'<svg class="chart"{ident} xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" style="{FONT}">')


def _legend(entries, x, y):
    out, cx = [], x
    for name, color in entries:
        out.append(f'<rect x="{cx}" y="{y - 9}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{cx + 14}" y="{y}">{escape(name)}</text>')
        cx += 24 + 7 * len(name)
    return "".join(out)
