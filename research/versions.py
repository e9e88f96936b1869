"""Versions of a topic, and what changed from one to the next.

*Research again* on a completed topic (or its schedule, `research/schedules.py`) makes a new
version: a copy that runs the same approved plan, keeping every row of its own run (report,
sources, verdicts, cost). The versions of a topic share its first version's id as `series`, and
each points at the one it was made from (`previous_version`).

When a version's run completes, its report is compared with the previous version's
(`compare`): sources added and dropped (by address), and claims — a sentence with the sources it
cites — added, removed or changed. Claims are matched across versions by meaning (the embedding
model that indexes documents) or, failing that, by their words; a matched claim whose numbers
differ is *changed*, a reworded one is the same claim. The result is stored on the report
(`Report.changes`) once, so a page view never computes it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import Any

import numpy as np
from django.db.models import Q, QuerySet

from research.models import Citation, Report, Topic
from research.pipeline import citecheck

log = logging.getLogger(__name__)

# Two claims say the same when their embeddings are this close (multilingual-e5-small, where
# rewordings of one fact measure 0.93–0.98 and different facts on one subject 0.80–0.90), or
# when most of their words are shared.
SAME_MEANING = 0.925
SAME_WORDS = 0.6
_WORD = re.compile(r"\w+", re.UNICODE)
# A claim shorter than this is not marked in the report (its words could stand anywhere).
MARKED_MIN_CHARS = 12

Embed = Callable[[list[str]], list[list[float]]]


# --- Versions -------------------------------------------------------------------------------------


def series_of(topic: Topic) -> int:
    return topic.series or topic.pk


def versions_of(topic: Topic) -> QuerySet[Topic]:
    """Every version of the topic, oldest first (its owner's: a series never crosses owners)."""
    root = series_of(topic)
    return Topic.objects.filter(Q(pk=root) | Q(series=root), owner_id=topic.owner_id).order_by(
        "created_at", "pk"
    )


def latest_of(topic: Topic) -> Topic:
    """The newest version of the topic (itself when there is none newer)."""
    return versions_of(topic).last() or topic


def version_list(topic: Topic) -> list[dict[str, Any]]:
    """The versions for a page or the API: number, id, status, when, and which one this is."""
    return [
        {
            "number": number,
            "id": version.pk,
            "status": version.status,
            "created_at": version.created_at,
            "finished_at": version.finished_at,
            "current": version.pk == topic.pk,
        }
        for number, version in enumerate(versions_of(topic), start=1)
    ]


# --- What changed -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    text: str
    sources: tuple[str, ...]  # the addresses (or titles) of the sources it cites
    passage: str  # the passage of its first source the citation check found closest


def claims_of(report: Report) -> list[Claim]:
    sources = [_source_key(source) for source in report.sources]
    passages = {
        (row.sentence_index, row.n): row.passage
        for row in Citation.objects.filter(report=report).only("sentence_index", "n", "passage")
    }
    found = []
    for claim in citecheck.claims(report.markdown, len(sources)):
        cited = tuple(sources[n - 1] for n in claim.sources)
        passage = next(
            (passages[(claim.index, n)] for n in claim.sources if (claim.index, n) in passages), ""
        )
        found.append(Claim(claim.text, cited, passage))
    return found


def _source_key(source: dict[str, Any]) -> str:
    return str(source.get("url") or source.get("title") or "")


def compare(old: Report, new: Report, embed: Embed | None = None) -> dict[str, Any]:
    """What `new` says that `old` did not, and the reverse (see the module's docstring)."""
    old_sources = {_source_key(s): s for s in old.sources if _source_key(s)}
    new_sources = {_source_key(s): s for s in new.sources if _source_key(s)}
    before, after = claims_of(old), claims_of(new)
    pairs = match(before, after, embed)
    matched_old = {i for i, _j in pairs}
    matched_new = {j for _i, j in pairs}
    changed = [
        {"before": _claim_row(before[i]), "after": _claim_row(after[j])}
        for i, j in pairs
        if citecheck.numbers(before[i].text) != citecheck.numbers(after[j].text)
    ]
    changes = {
        "since": old.created_at.isoformat(),
        "previous_topic": old.topic_id,
        "sources": {
            "added": [_source_row(s) for key, s in new_sources.items() if key not in old_sources],
            "dropped": [_source_row(s) for key, s in old_sources.items() if key not in new_sources],
        },
        "claims": {
            "added": [_claim_row(c) for j, c in enumerate(after) if j not in matched_new],
            "removed": [_claim_row(c) for i, c in enumerate(before) if i not in matched_old],
            "changed": changed,
        },
    }
    changes["empty"] = not count(changes)
    return changes


def count(changes: dict[str, Any] | None) -> int:
    """How many things changed (0 for none, or for a first version)."""
    if not changes:
        return 0
    parts = (changes["sources"]["added"], changes["sources"]["dropped"], *changes["claims"].values())
    return sum(len(part) for part in parts)


def _claim_row(claim: Claim) -> dict[str, Any]:
    return {"text": claim.text, "sources": list(claim.sources), "passage": claim.passage}


def _source_row(source: dict[str, Any]) -> dict[str, str]:
    return {"title": str(source.get("title") or ""), "url": str(source.get("url") or "")}


def match(
    before: Sequence[Claim], after: Sequence[Claim], embed: Embed | None = None
) -> list[tuple[int, int]]:
    """Pairs (i, j) of a claim of `before` and one of `after` that say the same, each claim in
    at most one pair, the closest pairs first."""
    if not before or not after:
        return []
    similarity = _similarity([c.text for c in before], [c.text for c in after], embed)
    candidates = sorted(
        ((similarity[i][j], i, j) for i in range(len(before)) for j in range(len(after))), reverse=True
    )
    pairs, used_old, used_new = [], set(), set()
    for score, i, j in candidates:
        if score < SAME_MEANING and _word_overlap(before[i].text, after[j].text) < SAME_WORDS:
            continue
        if i in used_old or j in used_new:
            continue
        pairs.append((i, j))
        used_old.add(i)
        used_new.add(j)
    return pairs


def _similarity(before: list[str], after: list[str], embed: Embed | None) -> list[list[float]]:
    """Cosine similarity of every pair; zeros (words alone decide) when no embedding is had."""
    try:
        vectors = np.asarray((embed or _default_embed)(before + after), dtype=np.float32)
    except Exception:  # the embedding model is unavailable: words alone decide
        log.warning("claims compared by their words only: no embeddings", exc_info=True)
        return [[0.0] * len(after) for _ in before]
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return (vectors[: len(before)] @ vectors[len(before) :].T).tolist()


def _default_embed(texts: list[str]) -> list[list[float]]:
    from retrieval.embeddings import embed

    return embed(texts)


def _word_overlap(a: str, b: str) -> float:
    left, right = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
    if not left or not right:
        return 0.0
    return len(left & right) / len(left | right)


def record_changes(topic: Topic) -> dict[str, Any] | None:
    """Compare a completed version's report with the previous version's and store the result
    on its report; None for a first version, or when either report is missing."""
    previous = topic.previous_version
    report = Report.objects.filter(topic=topic).first()
    old = Report.objects.filter(topic=previous).first() if previous is not None else None
    if report is None or old is None:
        return None
    report.changes = compare(old, report)
    report.save(update_fields=["changes"])
    return report.changes


def changes_context(changes: dict[str, Any] | None) -> dict[str, Any]:
    """What a page or an e-mail needs to show the changes: the dict, its count, its date."""
    changes = changes or {}
    since = changes.get("since")
    return {
        "changes": changes,
        "count": count(changes),
        "since": datetime.fromisoformat(since) if since else None,
    }


def mark_new_claims(html: str, changes: Any) -> str:
    """The marked view of a later version: its report's HTML with each claim new since the version
    before wrapped in `<ins class="claim-new">` and each changed one in `<ins class="claim-changed">`
    (the claim's words up to its citations, where the HTML has them in one run of text)."""
    claims = changes.get("claims") if isinstance(changes, dict) else None
    if not isinstance(claims, dict):
        return html
    wanted = [("claim-new", claim) for claim in claims.get("added") or []]
    wanted += [
        ("claim-changed", pair.get("after")) for pair in claims.get("changed") or [] if isinstance(pair, dict)
    ]
    for css, claim in wanted:
        text = claim.get("text") if isinstance(claim, dict) else None
        if not isinstance(text, str):
            continue
        words = escape(text.strip().rstrip(".!?…").strip(), quote=False)
        at = _text_at(html, words) if len(words) >= MARKED_MIN_CHARS else -1
        if at >= 0:
            html = f'{html[:at]}<ins class="{css}">{words}</ins>{html[at + len(words) :]}'
    return html


def _text_at(html: str, words: str) -> int:
    """Where `words` stand in the HTML's text (not inside a tag or already marked), or -1."""
    start = 0
    while (at := html.find(words, start)) >= 0:
        outside = html.rfind("<", 0, at) <= html.rfind(">", 0, at)
        if outside and not html[:at].endswith(('"claim-new">', '"claim-changed">')):
            return at
        start = at + 1
    return -1


def newest_reported(topic: Topic) -> Topic:
    """The newest completed version with a report (what a share link that is not pinned shows);
    the topic itself when no version has one."""
    newest = (
        versions_of(topic)
        .filter(status=Topic.Status.COMPLETED, report__isnull=False)
        .select_related("report")
        .defer("report__rendering")  # megabytes a page reads one string of (presenters.stored_html)
        .last()
    )
    return newest or topic


# --- What changed, in a file ----------------------------------------------------------------------


def changes_markdown(changes: dict[str, Any] | None) -> str:
    """The "since <date>" summary of a later version for its Markdown and DOCX files, in the
    active language (the report's, `export.report_markdown`), every text from the report and
    its sources written as literal Markdown; "" for a first version."""
    from django.utils.formats import date_format
    from django.utils.translation import gettext as _
    from django.utils.translation import ngettext

    from research.pipeline.stages.answer.report_writer import _escape, _plain

    context = changes_context(changes)
    if context["since"] is None:
        return ""
    when = date_format(context["since"], "DATETIME_FORMAT")
    if not context["count"]:
        return "**" + _("Nothing has changed since %(date)s.") % {"date": when} + "**\n"
    sources, claims = changes["sources"], changes["claims"]  # type: ignore[index]

    def counted(singular: str, plural: str, items: list[Any]) -> str:
        return ngettext(singular, plural, len(items)) % {"n": len(items)}

    summary = (
        f"{counted('%(n)s new source', '%(n)s new sources', sources['added'])}, "
        f"{counted('%(n)s dropped', '%(n)s dropped', sources['dropped'])}; "
        f"{counted('%(n)s new claim', '%(n)s new claims', claims['added'])}, "
        f"{counted('%(n)s changed', '%(n)s changed', claims['changed'])}, "
        f"{counted('%(n)s no longer made', '%(n)s no longer made', claims['removed'])}."
    )
    lines = ["## " + _("Since %(date)s:") % {"date": _plain(when)}, "", summary]

    def cited(claim: dict[str, Any]) -> str:
        return "".join(f" <{url}>" for url in claim.get("sources", []) if _web(url))

    if claims["added"]:
        lines += ["", "### " + _("New"), ""]
        for claim in claims["added"]:
            lines.append(f"- {_plain(_one_line(claim['text']))}{cited(claim)}")
            if claim.get("passage"):
                lines.append(f"  > {_plain(_one_line(claim['passage'])[:400])}")
    if claims["changed"]:
        lines += ["", "### " + _("Changed"), ""]
        for pair in claims["changed"]:
            before, after = (
                _plain(_one_line(pair["before"]["text"])),
                _plain(_one_line(pair["after"]["text"])),
            )
            lines.append(f"- ~~{before}~~ → {after}{cited(pair['after'])}")
    if claims["removed"]:
        lines += ["", "### " + _("No longer in the report"), ""]
        lines += [f"- ~~{_plain(_one_line(claim['text']))}~~{cited(claim)}" for claim in claims["removed"]]
    if sources["added"] or sources["dropped"]:
        lines += ["", "### " + _("Sources"), ""]
        for source in sources["added"]:
            title = source.get("title") or source.get("url") or ""
            if _web(source.get("url")):
                lines.append(f"- \\+ [{_escape(_one_line(title))}]({source['url']})")
            else:
                lines.append(f"- \\+ {_plain(_one_line(title))}")
        for source in sources["dropped"]:
            title = source.get("title") or source.get("url") or ""
            lines.append(f"- − ~~{_plain(_one_line(title))}~~")
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _web(url: Any) -> bool:
    return isinstance(url, str) and url.lower().startswith(("http://", "https://")) and " " not in url
