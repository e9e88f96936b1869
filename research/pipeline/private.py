"""The owner's own documents in research: passages found, scored and read like web pages.

In the search stage, each sub-query searches the owner's ready documents (hybrid BM25 + dense,
`retrieval.search.hybrid_search`) once as written and once per search query written for it, so
Russian sub-queries still find English documents; the best passages by reciprocal rank over
those phrasings become Hits with source=private and their chunk, and score_hits scores them on
the same five criteria as web hits. In the read stage the best-scored passages of each
sub-query become Documents (fetched_via=private); neighbouring passages of one document merge
into one text, and their pages make the citation ("Annual report.pdf, p. 4").

Nothing here goes to the network. Private text reaches only the LLM, and what the LLM says
about it is cached for the owner alone (`ask(..., private=True)`). Web search queries are
written from the sub-queries before any passage is retrieved, so private text never reaches
the search engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date
from typing import Any, TypeVar

from django.contrib.auth.models import User
from django.db import transaction
from django.utils.translation import gettext_noop

from research.event_text import english, phrase
from research.models import Document, Hit, SubQuery, Topic
from research.pipeline import rerank
from research.pipeline.context import RunContext, StageError
from research.pipeline.stage import StageName
from retrieval.models import Chunk, UploadedDocument
from retrieval.search import Passage, hybrid_search, reciprocal_rank_fusion

T = TypeVar("T")

PASSAGES_PER_PHRASING = 10
# Passages kept per sub-query: one scoring batch.
PASSAGES_PER_SUBQUERY = 10
# Passages read per sub-query, as many as web pages.
PASSAGES_READ = 5
# Dense search always returns the nearest chunks, however unrelated; a passage must be judged
# at least this relevant (total of the five criteria) to be read. Web hits need no floor: the
# search engine only returns pages that match.
MIN_PASSAGE_SCORE = 4.0
KEY_PREFIX = "private:chunk:"
MAX_HEADING_CHARS = 80


# --- Whether there is anything to search ---------------------------------------------------------


def document_counts(owner: User) -> tuple[int, int]:
    """The owner's uploads that are ready to search, and those still being indexed."""
    uploads = UploadedDocument.objects.for_user(owner)
    ready = uploads.ready().filter(chunk_count__gt=0).count()
    indexing = uploads.filter(
        status__in=(
            UploadedDocument.Status.PENDING,
            UploadedDocument.Status.PARSING,
            UploadedDocument.Status.EMBEDDING,
        )
    ).count()
    return ready, indexing


def no_documents_message(indexing: int) -> str:
    return english(_no_documents(indexing))


def _no_documents(indexing: int) -> dict[str, Any]:
    if indexing:
        return phrase(
            gettext_noop(
                "You have no indexed documents yet: %(indexing)s still being indexed. "
                "Resume the topic when they are ready."
            ),
            indexing=indexing,
        )
    return phrase(
        gettext_noop("You have no indexed documents to search: upload some on the Documents page first.")
    )


def stage_error(spec: dict[str, Any]) -> StageError:
    """A StageError the page shows in the reader's language (a `phrase` with flat arguments)."""
    return StageError(spec["msgid"], dict(spec.get("args") or {}))


def check_before_planning(ctx: RunContext) -> None:
    """A documents-only topic with nothing uploaded fails before any LLM call is spent on it."""
    if ctx.topic.sources != Topic.Sources.DOCS:
        return
    ready, indexing = document_counts(ctx.topic.owner)
    if not ready and not indexing:
        raise stage_error(_no_documents(0))


def have_documents(ctx: RunContext, stage: StageName) -> bool:
    """True when there is something to search; a documents-only topic cannot go on without."""
    ready, indexing = document_counts(ctx.topic.owner)
    if ready:
        return True
    if ctx.topic.sources == Topic.Sources.DOCS:
        raise stage_error(_no_documents(indexing))
    ctx.warn(
        stage, gettext_noop("%(reason)s Searching the web only."), args={"reason": _no_documents(indexing)}
    )
    return False


# --- Search stage: passages become hits ----------------------------------------------------------


def search_documents(ctx: RunContext, stage: StageName) -> None:
    """Passages from the owner's documents for every sub-query that has none yet."""
    if ctx.topic.sources in (Topic.Sources.WEB, Topic.Sources.PAPERS):
        return
    subqueries = ctx.topic.subqueries.order_by("round", "position", "id")
    pending = list(subqueries.exclude(hits__source=Hit.Source.PRIVATE).prefetch_related("search_queries"))
    if not pending or not have_documents(ctx, stage):
        return
    total = subqueries.count()
    ctx.begin(stage, gettext_noop("Searching your documents"), len(pending), total)
    done = total - len(pending)
    reorder = rerank.passage_reorderer(ctx, stage)
    for subquery in pending:
        ctx.check_cancelled()
        found = find_passages(ctx.topic.owner, phrasings(subquery), ctx.topic.period, reorder=reorder)
        added = save_hits(ctx.topic, subquery, found)
        done += 1
        ctx.emit(
            stage,
            gettext_noop("%(count)s passages from your documents for “%(subquery)s”"),
            args={"count": added, "subquery": subquery.text},
            done=done,
            total=total,
        )


def phrasings(subquery: SubQuery) -> list[str]:
    """The sub-query and its search queries, each once."""
    queries = sorted(subquery.search_queries.all(), key=lambda query: (query.language, query.position))
    return list(dict.fromkeys([subquery.text, *(query.text for query in queries)]))


def find_passages(
    owner: User,
    texts: list[str],
    published: tuple[date | None, date | None] | None = None,
    *,
    reorder: Callable[[str, list[Passage]], list[Passage]] | None = None,
) -> list[Passage]:
    """`published`: the period the question asks about (`Topic.period`), or None. `reorder`
    (the reranker, `rerank.passage_reorderer`) orders each phrasing's larger pool before it is
    cut and fused; it returns the pool as it came when it cannot."""
    if reorder is None:
        rankings = [
            hybrid_search(owner, text, k=PASSAGES_PER_PHRASING, published=published) for text in texts
        ]
    else:
        rankings = [
            reorder(text, hybrid_search(owner, text, k=rerank.PASSAGE_POOL, published=published))[
                :PASSAGES_PER_PHRASING
            ]
            for text in texts
        ]
    by_chunk = {passage.chunk_id: passage for ranking in rankings for passage in ranking}
    order = fuse_rankings([[passage.chunk_id for passage in ranking] for ranking in rankings])
    return [by_chunk[chunk_id] for chunk_id in order[:PASSAGES_PER_SUBQUERY]]


def fuse_rankings(rankings: list[list[int]]) -> list[int]:
    return [item for item, _ in reciprocal_rank_fusion(rankings)]


def save_hits(topic: Topic, subquery: SubQuery, passages: list[Passage]) -> int:
    """One hit per passage not yet found for the topic, all at once: a sub-query with private
    hits counts as searched, so it must never be left with only some of them."""
    chunks = Chunk.objects.for_user(topic.owner).filter(id__in=[p.chunk_id for p in passages])
    details = {row["id"]: row for row in chunks.values("id", "position", "heading")}
    private_hits = Hit.objects.filter(topic=topic, source=Hit.Source.PRIVATE)
    known = set(private_hits.values_list("normalized_url", flat=True))
    taken = set(private_hits.values_list("title", flat=True))
    rows = []
    for position, passage in enumerate(passages):
        key = f"{KEY_PREFIX}{passage.chunk_id}"
        if key in known or passage.chunk_id not in details:
            continue
        chunk = details[passage.chunk_id]
        pages = [passage.page] if passage.page else []
        label = citation(passage.document_name, pages, chunk["heading"])
        rows.append(
            Hit(
                topic=topic,
                subquery=subquery,
                source=Hit.Source.PRIVATE,
                url="",
                normalized_url=key,
                title=distinct(label, [chunk["position"]], taken),
                snippet=passage.text,
                position=position,
                chunk_id=passage.chunk_id,
            )
        )
    with transaction.atomic():
        Hit.objects.bulk_create(rows)
    return len(rows)


# --- Read stage: the best passages become documents ----------------------------------------------


def read_documents(ctx: RunContext, stage: StageName) -> list[Document]:
    """Documents from each sub-query's best passages; returns the private ones not yet summarised."""
    if ctx.topic.sources in (Topic.Sources.WEB, Topic.Sources.PAPERS):
        return []
    created = 0
    for subquery in ctx.topic.subqueries.order_by("round", "position", "id"):
        for lead, members in neighbour_groups(_passage_positions(best_passages(subquery))):
            created += save_document(ctx.topic, subquery, lead, members)
    documents = Document.objects.filter(topic=ctx.topic, fetched_via=Document.FetchedVia.PRIVATE)
    if ctx.topic.sources == Topic.Sources.DOCS and not documents.exists():
        raise StageError(
            gettext_noop(
                "None of the passages found in your documents is relevant enough to the question "
                "(each scored under %(score)s of 10), so there is nothing to write a report from."
            ),
            {"score": f"{MIN_PASSAGE_SCORE:g}"},
        )
    if created:
        ctx.emit(stage, gettext_noop("Took %(count)s passages from your documents"), args={"count": created})
    return list(documents.filter(summary__isnull=True).order_by("id"))


def best_passages(subquery: SubQuery) -> list[Hit]:
    """The sub-query's best-scored private hits whose chunk still exists (a deleted document's
    passages are not read)."""
    hits = Hit.objects.filter(
        subquery=subquery,
        source=Hit.Source.PRIVATE,
        chunk__isnull=False,
        score__total__gte=MIN_PASSAGE_SCORE,
    )
    ordered = hits.select_related("chunk__document").order_by("-score__total", "position", "id")
    return list(ordered[:PASSAGES_READ])


def _passage_positions(hits: list[Hit]) -> list[tuple[Hit, int, int]]:
    # The hits were read with chunk__isnull=False: the check only tells the type checker so.
    return [(hit, hit.chunk.document_id, hit.chunk.position) for hit in hits if hit.chunk is not None]


def neighbour_groups(items: Iterable[tuple[T, int, int]]) -> list[tuple[T, list[T]]]:
    """(item, document, chunk position) best first → (lead, members) per run of consecutive
    chunks of one document; the lead is the run's best item, members are in text order, and
    runs come in the order of their leads."""
    by_document: dict[int, list[tuple[int, int, T]]] = {}
    for rank, (item, document, position) in enumerate(items):
        by_document.setdefault(document, []).append((position, rank, item))
    runs: list[list[tuple[int, int, T]]] = []
    for entries in by_document.values():
        entries.sort(key=lambda entry: entry[:2])
        runs.append([entries[0]])
        for entry in entries[1:]:
            if entry[0] <= runs[-1][-1][0] + 1:
                runs[-1].append(entry)
            else:
                runs.append([entry])
    runs.sort(key=lambda run: min(rank for _, rank, _ in run))
    return [(min(run, key=lambda entry: entry[1])[2], [item for _, _, item in run]) for run in runs]


def save_document(topic: Topic, subquery: SubQuery, lead: Hit, members: list[Hit]) -> int:
    """The merged passages as one document, keyed by the lead hit so a re-run adds nothing."""
    if Document.objects.filter(hit=lead).exists():
        return 0
    chunks = [hit.chunk for hit in members if hit.chunk is not None]
    pages = sorted({chunk.page for chunk in chunks if chunk.page})
    label = citation(chunks[0].document.original_name, pages, chunks[0].heading)
    private_documents = Document.objects.filter(topic=topic, fetched_via=Document.FetchedVia.PRIVATE)
    taken = set(private_documents.values_list("title", flat=True))
    _, created = Document.objects.get_or_create(
        hit=lead,
        defaults={
            "topic": topic,
            "uploaded_document_id": chunks[0].document_id,
            "title": distinct(label, [chunk.position for chunk in chunks], taken),
            "url": "",
            "text": join_chunks([(chunk.char_start, chunk.char_end, chunk.text) for chunk in chunks]),
            "fetched_via": Document.FetchedVia.PRIVATE,
            "pages": pages,
            "round": subquery.round,
        },
    )
    return len(members) if created else 0


def join_chunks(spans: list[tuple[int, int, str]]) -> str:
    """Consecutive chunks (start, end, text) as one text: the overlap a chunk repeats from the one
    before is taken once; a gap between them (a page break) becomes a blank line."""
    text, end = "", None
    for start, stop, piece in spans:
        if end is None:
            text = piece
        elif start <= end:
            text += piece[end - start :]
        else:
            text += "\n\n" + piece
        end = stop if end is None else max(end, stop)
    return text


# --- Citations -----------------------------------------------------------------------------------


def citation(name: str, pages: list[int], heading: str = "") -> str:
    """How a passage is cited: "Annual report.pdf, p. 4", "…, pp. 4–5", or, for a file without
    pages, its section: "Notes.md, “Results”"."""
    if len(pages) == 1:
        return f"{name}, p. {pages[0]}"
    if pages:
        return f"{name}, pp. {pages[0]}–{pages[-1]}"
    heading = " ".join(heading.split())
    if len(heading) > MAX_HEADING_CHARS:
        heading = heading[: MAX_HEADING_CHARS - 1].rstrip() + "…"
    return f"{name}, “{heading}”" if heading else name


def distinct(label: str, positions: list[int], taken: set[str]) -> str:
    """`label`, or with the passage numbers added when the topic already cites that label (two
    passages on one page); the result is added to `taken`.

    Titles must differ within a topic: the LLM's scores are matched back by title."""
    if label in taken:
        first, last = min(positions) + 1, max(positions) + 1
        label = f"{label}, passage {first}" if first == last else f"{label}, passages {first}–{last}"
    # Two uploads may share a file name.
    candidate, copy = label, 2
    while candidate in taken:
        candidate, copy = f"{label} ({copy})", copy + 1
    taken.add(candidate)
    return candidate
