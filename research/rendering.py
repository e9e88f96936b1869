"""Markdown from the LLM or the web, made safe to show: python-markdown, then nh3's allow-list.

Citations `[n]` become links to the report's sources list.
"""

from __future__ import annotations

import re

import markdown as md
import nh3
from django.utils.safestring import SafeString, mark_safe

ALLOWED_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6",
    "hr", "i", "li", "ol", "p", "pre", "strong", "sub", "sup", "table", "tbody", "td", "th", "thead",
    "tr", "ul",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title", "class", "id"}, "li": {"id"}, "th": {"align"}, "td": {"align"}}
CITATION = re.compile(r"\[(\d{1,3})\](?!\()")


def render_markdown(text: str, *, source_count: int = 0, anchor_prefix: str = "source") -> SafeString:
    """Safe HTML for untrusted Markdown; `[n]` with 1 ≤ n ≤ source_count links to #source-n."""
    if source_count:
        text = CITATION.sub(lambda m: _citation(m, source_count, anchor_prefix), text)
    html = md.markdown(text, extensions=["tables", "sane_lists", "fenced_code"], output_format="html")
    clean = nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
    return mark_safe(clean)  # noqa: S308 — nh3 has just removed everything not on the allow-list


def _citation(match: re.Match, count: int, prefix: str) -> str:
    n = int(match.group(1))
    if not 1 <= n <= count:
        return match.group(0)
    # A Markdown link whose text keeps the brackets: "[[n]](#source-n)".
    return f'[\\[{n}\\]](#{prefix}-{n} "{prefix} {n}")'
