"""Markdown from the LLM or the web, made safe to show: python-markdown, then nh3's allow-list.

Citations `[n]` become links to the report's sources list; with `citation_marks`, each link also
shows the citation check's verdict for it.
"""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import markdown as md
import nh3
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

ALLOWED_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6",
    "hr", "i", "li", "ol", "p", "pre", "strong", "sub", "sup", "table", "tbody", "td", "th", "thead",
    "tr", "ul",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title", "class", "id"}, "li": {"id"}, "th": {"align"}, "td": {"align"}}
CITATION = re.compile(r"\[(\d{1,3})\](?!\()")


@dataclass(frozen=True)
class CitationMark:
    """How one citation link is shown: a CSS modifier, the link's title, and a visible flag
    after it ("" for none)."""

    kind: str
    title: str
    flag: str = ""


def render_markdown(
    text: str,
    *,
    source_count: int = 0,
    anchor_prefix: str = "source",
    citation_marks: Sequence[CitationMark | None] = (),
) -> SafeString:
    """Safe HTML for untrusted Markdown; `[n]` with 1 ≤ n ≤ source_count links to #source-n.

    `citation_marks` gives each such citation, in reading order, its mark. The links are found
    again after sanitising by a one-time token in their title, which the text itself cannot know.
    """
    token = secrets.token_hex(8) if citation_marks else ""
    clean = _sanitised(text, source_count, anchor_prefix, token)
    if token:
        clean = _marked(clean, token, citation_marks)
    return mark_safe(clean)  # noqa: S308 — nh3 has just removed everything not on the allow-list


@dataclass(frozen=True)
class Prepared:
    """Markdown rendered once (when a report is saved), ready to be marked on each page view:
    the safe HTML whose citation links carry `token` in their title, and the token."""

    html: str
    token: str


def prepared_markdown(text: str, *, source_count: int, anchor_prefix: str = "source") -> Prepared:
    """`render_markdown`'s costly part, done once: every citation link tagged for `with_marks`."""
    token = secrets.token_hex(8)
    return Prepared(_sanitised(text, source_count, anchor_prefix, token), token)


def with_marks(prepared: Prepared, citation_marks: Sequence[CitationMark | None]) -> SafeString:
    """The prepared HTML with each citation link marked (one linear pass over the HTML)."""
    return mark_safe(_marked(prepared.html, prepared.token, citation_marks))  # noqa: S308 — nh3's output


def _sanitised(text: str, source_count: int, anchor_prefix: str, token: str) -> str:
    if source_count:
        counter = itertools.count()
        text = CITATION.sub(lambda m: _citation(m, source_count, anchor_prefix, token, counter), text)
    html = md.markdown(text, extensions=["tables", "sane_lists", "fenced_code"], output_format="html")
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )


def _citation(match: re.Match, count: int, prefix: str, token: str, counter: itertools.count) -> str:
    n = int(match.group(1))
    if not 1 <= n <= count:
        return match.group(0)
    title = f"{prefix} {n} {token}-{next(counter)}" if token else f"{prefix} {n}"
    # A Markdown link whose text keeps the brackets: "[[n]](#source-n)".
    return f'[\\[{n}\\]](#{prefix}-{n} "{title}")'


def _marked(html: str, token: str, marks: Sequence[CitationMark | None]) -> str:
    link = re.compile(rf'<a ([^>]*?)title="([^"]*?) {token}-(\d+)"([^>]*)>(.*?)</a>', re.S)

    def mark(match: re.Match) -> str:
        before, plain_title, index, after, inner = match.groups()
        found = marks[int(index)] if int(index) < len(marks) else None
        if found is None:
            return f'<a {before}title="{plain_title}"{after}>{inner}</a>'
        flag = (
            f'<span class="citation-flag citation-flag-{found.kind}">{escape(found.flag)}</span>'
            if found.flag
            else ""
        )
        attributes = f'{before}title="{escape(found.title)}" class="citation citation-{found.kind}"{after}'
        return f"<a {attributes}>{inner}</a>{flag}"

    return link.sub(mark, html)
