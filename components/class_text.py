"""Text a student or a teacher typed (nicknames, titles), made safe to show in Markdown.

Nicknames are checked when a run joins (`runs.service.challenges.check_nickname`), but a
store can hold rows written some other way, so every place that shows one escapes it:
Markdown here, plotly through `components.figures.plain`, data tables as plain text cells.
"""

from __future__ import annotations

import html
import re

# Characters Markdown (CommonMark and Streamlit's extensions: `:emoji:`, `$math$`,
# `:color[text]`) reads as syntax.
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~:$^=])")


def markdown_text(text: object, limit: int = 200) -> str:
    """`text` (cut to `limit` characters, one line) as Markdown that shows it literally: HTML
    special characters escaped to entities, Markdown syntax characters backslash-escaped."""
    line = " ".join(str(text).split())[:limit]
    return _MARKDOWN.sub(r"\\\1", html.escape(line, quote=False))
