"""What the topic pages show, gathered in one place for the full page, its fragments and the
websocket (which re-renders fragments as the run goes on)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from functools import partial
from typing import Any, TypeGuard

from django.conf import settings
from django.db.models import Case, IntegerField, Q, Value, When
from django.db.models.fields.json import KT, KeyTransform
from django.template.loader import render_to_string
from django.utils import translation
from django.utils.functional import Promise
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext, ngettext

from research import estimate, fragments, usage
from research.forms import ShareLinkForm
from research.models import (
    Citation,
    Document,
    FollowUp,
    Hit,
    LLMCall,
    Report,
    ReportDraft,
    RunEvent,
    SearchQuery,
    Topic,
)
from research.pipeline import citecheck, passages
from research.pipeline.followup import report_sections
from research.pipeline.stage import StageName
from research.pipeline.stages import deep
from research.pipeline.stages.answer.report_writer import SOURCES_HEADING
from research.rendering import CitationMark, Prepared, prepared_markdown, render_markdown, with_marks
from research.versions import mark_new_claims

# The progress bars, in run order; every stage's label is StageName's.
STAGES = [
    (name.value, name.label)
    for name in (
        StageName.PLAN,
        StageName.QUERIES,
        StageName.SEARCH,
        StageName.SCORE_HITS,
        StageName.READ,
        StageName.SUMMARISE,
        StageName.SCORE_SUMMARIES,
        StageName.ANSWER,
    )
]
STAGE_LABELS = dict(StageName.choices)


# The event log shows the latest lines; the API pages through all of them (`since`, `limit`).
EVENT_PAGE = 300


def recent_events(topic: Topic) -> dict[str, Any]:
    """The last EVENT_PAGE events, oldest first, and how many earlier ones are not shown."""
    events = list(topic.events.order_by("-seq")[:EVENT_PAGE])[::-1]
    hidden = topic.events.filter(seq__lt=events[0].seq).count() if len(events) == EVENT_PAGE else 0
    return {"events": events, "events_hidden": hidden}


def topic_context(topic: Topic, **extra: Any) -> dict[str, Any]:
    context = panel_context(topic, {"status", "plan", "progress", "hits", "documents", "report"})
    context.update(recent_events(topic), share_links=list(topic.share_links.all()), **extra)
    context.update(thread_context(topic, shared=True))
    return context


# The read-only panels of the topic page: the costly part of it (queries, Markdown, tables),
# kept in the fragment cache (research/fragments.py). Panels with forms are never cached.
CACHED_PANELS = ("progress", "events", "report", "documents", "hits")


def topic_page_context(topic: Topic, **extra: Any) -> dict[str, Any]:
    """The topic page: the panels with forms (status, plan, sharing) rendered per request, the
    others from the fragment cache."""
    context = panel_context(topic, {"status", "plan", "thread"})
    context.update(
        panels=cached_panels(topic, CACHED_PANELS),
        report=report_without_rendering(topic) is not None,
        share_form=ShareLinkForm(),
        share_links=list(topic.share_links.all()),
        **extra,
    )
    return context


def cached_panels(topic: Topic, names: Iterable[str]) -> dict[str, SafeString]:
    """The named read-only panels in the active language, each from the fragment cache or
    rendered from the topic's rows (the context of all of them built once, on the first miss).
    The topic is read again after its version: `topic` may be older than that."""
    version = fragments.version_of(topic.pk)
    shared: dict[str, Any] = {}

    def render(name: str) -> str:
        if not shared:
            current = Topic.objects.get(pk=topic.pk)
            shared.update(panel_context(current, {"progress", "hits", "documents", "report"}))
            shared.update(recent_events(current))
        return render_to_string(f"research/_{name}.html", shared)

    return {name: fragments.fragment(version, name, partial(render, name)) for name in names}


def panel_context(topic: Topic, panels: set[str]) -> dict[str, Any]:
    """Only what the named panels need: the websocket re-renders a few of them per event."""
    context: dict[str, Any] = {"topic": topic}
    if "plan" in panels:
        subqueries = topic.subqueries.prefetch_related("search_queries").order_by("round", "position", "id")
        context["subqueries"] = list(subqueries)
        if topic.status == Topic.Status.AWAITING_APPROVAL:
            context["estimate"] = estimate.estimate(topic)
    if "progress" in panels:
        context.update(progress=stage_progress(topic), usage=usage_of(topic), rounds=deep.rounds_of(topic))
        context["deep_rule"] = {
            "threshold": settings.RESEARCH_DEEP_GROWTH_THRESHOLD,
            "max_rounds": settings.RESEARCH_DEEP_MAX_ROUNDS,
        }
    if "hits" in panels:
        context["hits"] = hits_of(topic)
        context["dropped"] = dropped_of(topic)
    if "documents" in panels:
        context["documents"] = documents_of(topic)
    if "report" in panels or "sharing" in panels:
        context["report"] = report_of(topic, context.get("documents"))
        context["draft"] = draft_of(topic) if context["report"] is None else None
    if "sharing" in panels:
        context.update(share_form=ShareLinkForm(), share_links=list(topic.share_links.all()))
    if "thread" in panels:
        context.update(thread_context(topic))
    return context


# --- The follow-up thread --------------------------------------------------------------------------


def thread_context(topic: Topic, *, shared: bool = False) -> dict[str, Any]:
    """The thread of follow-ups under the report (only the answered ones behind a share link),
    and what the owner may ask next."""
    language = translation.get_language() or settings.LANGUAGE_CODE
    # Each answer's marked HTML in the active language read with it (the rest of its stored
    # rendering, megabytes for thousands of markers, left in the database): `followup_html`.
    followups = list(
        topic.followups.defer("rendering")
        .annotate(
            marked_html=KT(f"rendering__marked__{language}"),
            rendering_digest=KT("rendering__digest"),
        )
        .order_by("position")
    )
    for followup in followups:
        followup.marked_with_row = (language, followup.rendering_digest, followup.marked_html)
    if shared:
        followups = [f for f in followups if f.status == FollowUp.Status.COMPLETED]
    report = report_without_rendering(topic)
    numbered = len(report.sources) if report else 0
    answered = [f for f in followups if f.status == FollowUp.Status.COMPLETED]
    spent = None if shared else followup_usages(answered)
    items = []
    for followup in followups:
        if followup.status == FollowUp.Status.COMPLETED:
            numbered = max([numbered, *(s.get("n", 0) for s in followup.sources)])
        items.append(followup_item(followup, numbered, shared=shared, usages=spent))
    can_ask = topic.status == Topic.Status.COMPLETED and report is not None and not shared
    return {
        "thread": items,
        "thread_open": can_ask or bool(items),
        "can_ask": can_ask,
        "answering": any(f.is_pending for f in followups),
        "sections": report_sections(report.markdown) if can_ask and report else [],
        "followup_max_chars": settings.RESEARCH_FOLLOWUP_MAX_CHARS,
        "followups_left": max(0, settings.RESEARCH_MAX_FOLLOWUPS - len(followups)),
    }


def followup_item(
    followup: FollowUp,
    source_count: int,
    *,
    shared: bool = False,
    usages: dict[int, dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """One follow-up as the thread shows it: its answer rendered like the report (citations
    marked with their verdicts, linked to the numbered sources), or its text so far. Behind a
    share link without what it cost (the topic's usage is its owner's alone)."""
    item: dict[str, Any] = {"followup": followup}
    if followup.status == FollowUp.Status.COMPLETED:
        citations = followup_citations(followup)
        item["html"] = followup_html(followup, source_count, citations)
        item["sources"] = [{**source, "passage_url": _passage_url(source)} for source in followup.sources]
        item["citation_counts"] = citecheck.counts(citations) if citations else None
        # What it cost (`followup_usages`, read for the whole thread at once, or read now).
        if shared:
            item["usage"] = None
        else:
            item["usage"] = usages.get(followup.pk) if usages is not None else followup_usage(followup)
    elif followup.is_pending and followup.draft.strip():
        item["draft_html"] = render_markdown(demoted_headings(SOURCES_HEADING.split(followup.draft)[0]))
    return item


def followup_html(
    followup: FollowUp, source_count: int, citations: list[Citation] | None = None
) -> SafeString:
    """A completed follow-up's answer rendered, its citations marked, in the active language:
    stored when it was answered or imported (`store_thread`), else rendered now and kept. Its
    numbers depend on the answers before it: a rendering for another count is done again."""
    language = translation.get_language() or settings.LANGUAGE_CODE
    if "rendering" in followup.get_deferred_fields():
        made_from = digest(followup.answer, source_count)
        html = _read_with_row(followup, made_from, language)
        if html is None:
            html = stored_html(FollowUp, followup.pk, made_from, language)
        if html is not None:
            return mark_safe(html)  # noqa: S308 — stored from nh3's output below
        followup.refresh_from_db(fields=["rendering"])
    stored = followup.rendering if isinstance(followup.rendering, dict) else {}
    if not _well_formed(stored) or stored.get("digest") != digest(followup.answer, source_count):
        stored = report_rendering(followup.answer, source_count, demote=True)
    found = stored.get("marked")
    marked: dict[str, Any] = found if isinstance(found, dict) else {}
    if isinstance(marked.get(language), str):
        return mark_safe(marked[language])  # noqa: S308 — stored from nh3's output below
    rows = followup_citations(followup) if citations is None else citations
    places = [(index, n) for index, n in stored["places"]]
    html = with_marks(Prepared(stored["html"], stored["token"]), marks_at(places, rows))
    stored["marked"] = {**marked, language: str(html)}
    FollowUp.objects.filter(pk=followup.pk).update(rendering=stored)
    followup.rendering = stored
    return html


def _read_with_row(followup: FollowUp, made_from: str, language: str) -> str | None:
    """The marked HTML `thread_context` read with the follow-up's row, if it is this language's
    and was made from what the row holds now."""
    read = getattr(followup, "marked_with_row", None)
    if isinstance(read, tuple) and read[:2] == (language, made_from) and isinstance(read[2], str):
        return read[2]
    return None


def store_thread(topic: Topic) -> None:
    """Render every answered follow-up of the topic in every language of the site, once, when
    an answer is saved or the topic imported: a page view then only reads them."""
    report = Report.objects.filter(topic=topic).only("sources").first()
    numbered = len(report.sources) if report else 0
    for followup in topic.followups.filter(status=FollowUp.Status.COMPLETED).order_by("position"):
        numbered = max([numbered, *(s.get("n", 0) for s in followup.sources)])
        for language, _name in settings.LANGUAGES:
            with translation.override(language):
                followup_html(followup, numbered)


HEADING = re.compile(r"^(\s{0,3})(#{1,6})(?=\s)")


def demoted_headings(markdown: str) -> str:
    """An answer in the thread sits under the thread's own heading: its headings go two levels
    down (# becomes ###), so an answer written like a report does not shout over the page."""
    lines, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            line = HEADING.sub(lambda m: m.group(1) + "#" * min(6, len(m.group(2)) + 2), line)
        lines.append(line)
    return "\n".join(lines)


def followup_usage(followup: FollowUp) -> dict[str, Any] | None:
    """The LLM calls answering it made: the topic's calls while it was answered (a topic's
    follow-ups are answered one at a time, and a finished topic makes no other calls)."""
    return followup_usages([followup]).get(followup.pk)


def followup_usages(followups: list[FollowUp]) -> dict[int, dict[str, Any] | None]:
    """`followup_usage` of each answered follow-up, in one grouped query for all of them (each
    call counted in the window of the answer it was made for)."""
    windows = [f for f in followups if f.finished_at is not None]
    found: dict[int, usage.Usage] = {f.pk: usage.Usage() for f in windows}
    if windows:
        during = Q()
        for f in windows:
            during |= Q(created_at__gte=f.created_at, created_at__lte=f.finished_at)
        answered = Case(
            *(
                When(created_at__gte=f.created_at, created_at__lte=f.finished_at, then=Value(f.pk))
                for f in windows
            ),
            output_field=IntegerField(),
        )
        calls = LLMCall.objects.filter(during, topic_id=windows[0].topic_id).annotate(answered=answered)
        for row in calls.values("answered", "model", "cache_hit").annotate(**usage.CALL_SUMS).order_by():
            found[row["answered"]].add(row)
    return {pk: _usage_shown(spent) for pk, spent in found.items()}


def _usage_shown(spent: usage.Usage) -> dict[str, Any] | None:
    if not spent.calls and not spent.cached_calls:
        return None
    return {
        "calls": spent.calls,
        "cached_calls": spent.cached_calls,
        "tokens": spent.total_tokens,
        "cost": spent.cost if usage.prices_configured() else None,
        "currency": settings.LLM_PRICE_CURRENCY,
    }


_CITATION_FIELDS = frozenset(field.name for field in Citation._meta.get_fields())


def followup_citations(followup: FollowUp, rows: list[dict[str, Any]] | None = None) -> list[Citation]:
    """The citation check of a follow-up's answer (or those `rows` of it), as (unsaved)
    Citation rows."""
    checked = followup.citations if rows is None else rows
    return [Citation(**{k: v for k, v in row.items() if k in _CITATION_FIELDS}) for row in checked]


def stage_progress(topic: Topic) -> list[dict[str, Any]]:
    """The latest done/total of each stage, from the durable event log."""
    # The latest counted event of each stage, picked by the database (PostgreSQL's DISTINCT ON):
    # one row a stage, not every counted event of the run.
    counted = topic.events.filter(total__isnull=False).only("topic", "stage", "done", "total")
    latest = {event.stage: event for event in counted.order_by("stage", "-seq").distinct("stage")}
    stages = STAGES
    if topic.route in (Topic.Route.DOCUMENTS, Topic.Route.DIRECT):  # answered without a search
        stages = [(key, label) for key, label in STAGES if key == StageName.ANSWER]
    return [progress_row(key, label, latest.get(key), topic) for key, label in stages]


def progress_row(key: str, label: str | Promise, event: RunEvent | None, topic: Topic) -> dict[str, Any]:
    done, total = (event.done or 0, event.total) if event else (0, 0)
    percent = round(100 * done / total) if total else (100 if _past(key, topic) else 0)
    return {"key": key, "label": label, "done": done, "total": total, "percent": min(100, percent)}


def _past(stage: str, topic: Topic) -> bool:
    return topic.status == Topic.Status.COMPLETED or (stage == StageName.PLAN and topic.subqueries.exists())


def hits_of(topic: Topic) -> list[Hit]:
    hits = Hit.objects.filter(topic=topic).select_related("score", "subquery")
    return sorted(hits, key=lambda hit: (-(hit.score.total if _scored(hit) else -1), hit.position, hit.url))


def dropped_of(topic: Topic) -> list[dict[str, str]]:
    """The results the topic's site rules dropped, once each, with the query that found them."""
    seen: set[str] = set()
    found = []
    for query in SearchQuery.objects.filter(subquery__topic=topic).exclude(dropped=[]).order_by("id"):
        for row in query.dropped:
            if row["url"] not in seen:
                seen.add(row["url"])
                found.append({**row, "query": query.text})
    return found


def _scored(hit: Hit) -> bool:
    try:
        return hit.score is not None
    except Hit.score.RelatedObjectDoesNotExist:
        return False


def documents_of(topic: Topic) -> list[Document]:
    documents = Document.objects.filter(topic=topic).select_related("summary__score", "hit__score")
    return list(documents.order_by("-summary__score__total", "url"))


def report_of(topic: Topic, documents: list[Document] | None = None) -> dict[str, Any] | None:
    """The report panel's data; `documents`, the topic's as the documents panel read them, saves
    reading them again for the sources list."""
    report = report_without_rendering(topic)
    if report is None:
        return None
    citations = list(report.citations.all())
    for citation in citations:
        citation.note_shown = note_text(citation.note)
    # A later version's new and changed claims are marked in it (research/versions.py).
    html = mark_safe(mark_new_claims(marked_html(report, citations), report.changes))  # noqa: S308
    return {
        "report": report,
        "html": html,
        "sources": sources_of(report, documents),
        "citations": citations,
        "citation_counts": citecheck.counts(citations) if citations else None,
        "doubtful_citations": [c for c in citations if c.verdict != Citation.Verdict.SUPPORTED],
        "marks": marks_of(report),
        "without_model": without_model_of(report),
    }


def marks_of(report: Report) -> list[dict[str, str]]:
    """What the checks of the whole report found, as stored when it was saved, with its label
    (a value this version does not know, from an archive, is left out)."""
    labels = dict(Report.Mark.choices)
    return [{"mark": mark, "label": str(labels[mark])} for mark in report.marks if mark in labels]


def without_model_of(report: Report) -> list[dict[str, Any]]:
    """The stages that ran without the configured model, each with its label and its count
    (what an archive brought is read as carefully: known stages, whole numbers)."""
    labels = dict(StageName.choices)
    return [
        {
            "stage": entry["stage"],
            "label": str(labels[entry["stage"]]),
            "count": _count(entry.get("count")),
            "total": _count(entry.get("total")),
        }
        for entry in report.without_model
        if isinstance(entry, dict) and entry.get("stage") in labels
    ]


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def draft_of(topic: Topic) -> dict[str, Any] | None:
    """The report's text so far while the LLM writes it, through the same safe Markdown path as
    the report (the model's own sources list left out, as from the report)."""
    if topic.is_finished:
        return None
    draft = ReportDraft.objects.filter(topic=topic).only("text", "version").first()
    if draft is None:
        return None
    if not draft.text.strip():  # saved empty while the model reasons before it writes
        return {"html": "", "version": draft.version, "thinking": True}
    return {"html": render_markdown(SOURCES_HEADING.split(draft.text)[0]), "version": draft.version}


def report_rendering(markdown: str, source_count: int, *, demote: bool = False) -> dict[str, Any]:
    """What a page needs of a report's text (or, `demote`d, a follow-up's answer), derived once
    when it is saved (work linear in its size): the safe HTML with tagged citation links
    (`rendering.prepared_markdown`), and each citation's (sentence index, n) in reading order
    (`citecheck.citation_occurrences`)."""
    body = markdown if demote else SOURCES_HEADING.split(markdown)[0]
    prepared = prepared_markdown(demoted_headings(body) if demote else body, source_count=source_count)
    places = citecheck.citation_occurrences(body, source_count)
    return {
        "html": prepared.html,
        "token": prepared.token,
        "places": [list(place) for place in places],
        "digest": digest(markdown, source_count),
    }


def digest(markdown: str, source_count: int) -> str:
    """What a rendering was made from: a text changed behind `save` (a queryset's update) is
    rendered again rather than shown stale."""
    return f"{hashlib.blake2b(markdown.encode(), digest_size=16).hexdigest()}:{source_count}"


def stored_rendering(report: Report) -> tuple[Prepared, list[tuple[int, int]]]:
    """The report's stored rendering; a row saved before it was stored (or holding something
    else) is rendered now, once, and kept."""
    data = report.rendering
    if not _well_formed(data) or data.get("digest") != digest(report.markdown, len(report.sources)):
        data = report_rendering(report.markdown, len(report.sources))
        Report.objects.filter(pk=report.pk).update(rendering=data)
        report.rendering = data
    places = [(index, n) for index, n in data["places"]]
    return Prepared(data["html"], data["token"]), places


def report_without_rendering(topic: Topic) -> Report | None:
    """The topic's report as a page needs it: its stored rendering (every HTML copy and the
    citations' places, megabytes for a hostile report) is left in the database; the page reads
    the one string it shows (`stored_html`). Kept on the topic, as `topic.report` would be."""
    relation = Topic.report.related  # the reverse one-to-one
    if relation.is_cached(topic):
        cached = relation.get_cached_value(topic)
        return cached if isinstance(cached, Report) else None
    report = Report.objects.defer("rendering").filter(topic=topic).first()
    if report is not None:
        relation.set_cached_value(topic, report)
        report.topic = topic
    return report


def stored_html(model: type[Report] | type[FollowUp], pk: int, made_from: str, language: str) -> str | None:
    """The marked HTML stored for `language`, read alone from the row's rendering (the database
    picks it out: nothing else of the rendering is sent, decoded or copied), if the rendering was
    made from what the row holds now (`digest`)."""
    html = (
        model.objects.filter(pk=pk, rendering__digest=made_from)
        .values_list(KT(f"rendering__marked__{language}"), flat=True)
        .first()
    )
    return html if isinstance(html, str) else None


def stored_place(report: Report, index: int) -> tuple[int, int] | None:
    """The `index`-th citation's (sentence index, n) as stored with the report's rendering, read
    alone from it; None when there is no such citation. A rendering made from another text (or
    none yet) is made now, once (`stored_rendering`)."""
    made_from = digest(report.markdown, len(report.sources))
    place = place_in_rendering(Report, report.pk, made_from, index)
    if isinstance(place, NotStored):
        _prepared, places = stored_rendering(report)
        return places[index] if 0 <= index < len(places) else None
    return place


class NotStored:
    """What `place_in_rendering` answers when the row holds no rendering made from what it says
    now (`digest`)."""


NOT_STORED = NotStored()


def place_in_rendering(
    model: type[Report] | type[FollowUp], pk: int, made_from: str, index: int
) -> tuple[int, int] | NotStored | None:
    """The `index`-th citation's (sentence index, n) in the row's stored rendering, picked out by
    the database (one query; nothing else of the rendering is sent or decoded): None when there
    is no such citation, NOT_STORED when the rendering was not made from `made_from` (`digest`)."""
    path = KeyTransform(str(max(index, 0)), KeyTransform("places", "rendering"))
    row = model.objects.filter(pk=pk, rendering__digest=made_from).values_list(path, flat=True)[:1]
    found = list(row)
    if not found:
        return NOT_STORED
    place = found[0]
    if index >= 0 and isinstance(place, list) and len(place) == 2 and all(type(x) is int for x in place):
        return place[0], place[1]
    return None


def marked_html(report: Report, citations: list[Citation] | None = None) -> SafeString:
    """The report's HTML with its citations marked, in the active language: stored when the
    report and its citations were saved (`store_marked`), else marked now and kept."""
    language = translation.get_language() or settings.LANGUAGE_CODE
    if "rendering" in report.get_deferred_fields():
        html = stored_html(Report, report.pk, digest(report.markdown, len(report.sources)), language)
        if html is not None:
            return mark_safe(html)  # noqa: S308 — stored from nh3's output by `_marked_now`
        report.refresh_from_db(fields=["rendering"])
    marked = report.rendering.get("marked") if isinstance(report.rendering, dict) else None
    current = isinstance(report.rendering, dict) and report.rendering.get("digest") == digest(
        report.markdown, len(report.sources)
    )
    if current and isinstance(marked, dict) and isinstance(marked.get(language), str):
        return mark_safe(marked[language])  # noqa: S308 — stored from nh3's output by `_marked_now`
    prepared, places = stored_rendering(report)
    if not current:
        marked = {}
    rows = list(report.citations.all()) if citations is None else citations
    html = with_marks(prepared, marks_at(places, rows))
    assert isinstance(report.rendering, dict)  # stored_rendering made it one
    report.rendering["marked"] = {**(marked if isinstance(marked, dict) else {}), language: str(html)}
    Report.objects.filter(pk=report.pk).update(rendering=report.rendering)
    return html


def store_marked(report: Report) -> None:
    """Mark the report's citations with their verdicts in every language of the site, once, when
    the report and its citations have been saved: a page view then only reads the result."""
    report.rendering = {**(report.rendering or {}), "marked": {}}
    citations = list(report.citations.all())
    for language, _name in settings.LANGUAGES:
        with translation.override(language):
            marked_html(report, citations)


def _well_formed(data: Any) -> TypeGuard[dict[str, Any]]:
    return (
        isinstance(data, dict)
        and isinstance(data.get("html"), str)
        and isinstance(data.get("token"), str)
        and bool(re.fullmatch(r"[0-9a-f]{16}", data["token"]))
        and isinstance(data.get("places"), list)
        and all(
            isinstance(place, list) and len(place) == 2 and all(type(v) is int for v in place)
            for place in data["places"]
        )
    )


def citation_marks(body: str, source_count: int, citations: list[Citation]) -> list[CitationMark | None]:
    """Each citation of the body, in reading order, marked with its verdict (None: unchecked,
    as in reports written before the check existed)."""
    if not citations:
        return []
    return marks_at(citecheck.citation_occurrences(body, source_count), citations)


def marks_at(places: Iterable[tuple[int, int]], citations: list[Citation]) -> list[CitationMark | None]:
    """The mark of each citation at `places` ((sentence index, n), reading order)."""
    if not citations:
        return []
    by_place = {(c.sentence_index, c.n): _mark(c) for c in citations}
    return [by_place.get(place) for place in places]


def _mark(citation: Citation | None) -> CitationMark | None:
    if citation is None:
        return None
    n = citation.n
    if citation.verdict == Citation.Verdict.SUPPORTED:
        return CitationMark("supported", gettext("Source %(n)s supports this sentence") % {"n": n})
    if citation.verdict == Citation.Verdict.WEAK:
        title = gettext("Source %(n)s supports this sentence only in part") % {"n": n}
        return CitationMark("weak", title, gettext("weak support"))
    title = gettext("Source %(n)s does not support this sentence") % {"n": n}
    return CitationMark("unsupported", title, gettext("not supported"))


# The citation check's notes are stored as English records (citecheck.py); these are how they read.
_NOTE_PARTS = (
    (
        re.compile(r"not in the source: (.+)"),
        lambda m: gettext("not in the source: %(numbers)s") % {"numbers": m[1]},
    ),
    (
        re.compile(r"the source is in another language"),
        lambda m: gettext("the source is in another language"),
    ),
    (re.compile(r"the source has no text"), lambda m: gettext("the source has no text")),
    (re.compile(r"the LLM said (supported|weak|unsupported)"), lambda m: _llm_said(m[1])),
)


def _llm_said(verdict: str) -> str:
    label = str(dict(Citation.Verdict.choices)[verdict]).lower()
    return gettext("the LLM said: %(verdict)s") % {"verdict": label}


def note_text(note: str) -> str:
    """A citation's stored note in the active language: the check's own phrases translated, the
    model's reason (its own words, in the report's language) as it gave it."""
    parts = []
    for part in note.split("; "):
        for pattern, shown in _NOTE_PARTS:
            match = pattern.fullmatch(part)
            if match:
                parts.append(shown(match))
                break
        else:
            parts.append(part)
    return "; ".join(parts)


def citation_summary(counts: dict[str, int]) -> str:
    """ "14 of 15 citations supported by their sources · 1 not supported", as on the page."""
    line = ngettext(
        "%(supported)s of %(total)s citation supported by its source",
        "%(supported)s of %(total)s citations supported by their sources",
        counts["total"],
    ) % {"supported": counts["supported"], "total": counts["total"]}
    doubts = []
    if counts.get("unsupported"):
        doubts.append(
            ngettext("%(unsupported)s not supported", "%(unsupported)s not supported", counts["unsupported"])
            % {"unsupported": counts["unsupported"]}
        )
    if counts.get("weak"):
        doubts.append(
            ngettext("%(weak)s weakly supported", "%(weak)s weakly supported", counts["weak"])
            % {"weak": counts["weak"]}
        )
    return f"{line} · {', '.join(doubts)}" if doubts else line


def sources_of(report: Report, documents: list[Document] | None = None) -> list[dict[str, Any]]:
    """The report's numbered sources with how each was read and scored (from `documents` when
    given, with their hits' scores; any other source's document read here)."""
    by_id = {document.pk: document for document in documents or []}
    missing = [source["document_id"] for source in report.sources if source["document_id"] not in by_id]
    if missing:
        queried = Document.objects.select_related("hit__score", "summary__score", "uploaded_document")
        by_id.update(queried.in_bulk(missing))
    rows = []
    for source in report.sources:
        document = by_id.get(source["document_id"])
        hit_score = document.hit.score.total if document and document.hit and _scored(document.hit) else None
        passage_url = _passage_url(source)
        rows.append({**source, "document": document, "hit_score": hit_score, "passage_url": passage_url})
    return rows


def _passage_url(source: dict[str, Any]) -> str:
    """A link that opens the page at the passage the report drew on (a text fragment)."""
    cited = source.get("passages") or []
    return passages.text_fragment_url(source["url"], cited[0]["quote"]) if cited and source["url"] else ""


def usage_of(topic: Topic) -> dict[str, Any]:
    """Calls, tokens and the estimated cost of the topic's run (one grouped query)."""
    spent = usage.topic_usage(topic)
    seconds = None
    if topic.started_at and topic.finished_at:
        seconds = round((topic.finished_at - topic.started_at).total_seconds())
    return {
        "calls": spent.calls,
        "cached_calls": spent.cached_calls,
        "prompt_tokens": spent.prompt_tokens,
        "completion_tokens": spent.completion_tokens,
        "cost": spent.cost if usage.prices_configured() else None,
        "currency": settings.LLM_PRICE_CURRENCY,
        "seconds": seconds,
    }
