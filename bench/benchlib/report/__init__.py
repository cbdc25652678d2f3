"""The reports rendered from results.json: `markdown.render` (summary.md, also printed) and
`html.render` (report.html: static, opens from disk, charts as inline SVG). `model` holds what both
show; `svg` draws the charts."""
