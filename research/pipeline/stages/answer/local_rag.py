"""Answered from your documents (docs/RESEARCH.md, "Answered from your documents"): a question that needs
no web search, asked by someone with documents, is answered from those documents (`Topic.route`
"documents").

The route stage sends a question here when it may skip the search (`route.route_taken`); the
question is searched in the owner's indexed documents as a sub-query's phrasing is
(`private.find_passages`: hybrid BM25 + dense with the relevance floor, and the reranker when
one is configured), in the topic's period (`Topic.period`: the one the question names, else the
window the user chose), the best passages become private
Documents — neighbouring passages of one file merged, titled by file name and page like every
private source — and the report is written from them (`report_writer.write_report`: the same
citations, sources list, citation check and previews as a researched topic). No plan, no web
search.

A question none of the documents matches (every passage under the floor) and an owner without
indexed documents are handed to the direct answer: the topic's route becomes "direct". The event
log says which branch was taken. A run killed half-way takes the documents it already saved, so
nothing is made twice.
"""

from __future__ import annotations

from django.db import transaction
from django.utils.translation import gettext_noop

from research.models import Document, Report, Topic
from research.pipeline import private, rerank
from research.pipeline.context import RunContext
from research.pipeline.stage import Outcome, StageName
from research.pipeline.stages.answer import report_writer, sections
from retrieval.models import Chunk
from retrieval.search import Passage

STAGE = StageName.ANSWER
ROUTE = Topic.Route.DOCUMENTS
# As many passages as a sub-query reads.
PASSAGES = private.PASSAGES_READ


def run(ctx: RunContext) -> Outcome:
    """ANSWERED once the report is written from the owner's documents; CONTINUE, with the route
    now "direct", when the owner has no indexed documents or none matches the question."""
    topic = ctx.topic
    if Report.objects.filter(topic=topic).exists():
        return Outcome.ANSWERED
    documents = saved_documents(topic) or _take_passages(ctx)
    if not documents:
        topic.route = Topic.Route.DIRECT
        topic.save(update_fields=["route", "updated_at"])
        return Outcome.CONTINUE
    ctx.emit(
        STAGE,
        gettext_noop(
            "No web search needed: answering from your documents (%(passages)s passages of %(files)s files)"
        ),
        args={"passages": len(documents), "files": len({d.uploaded_document_id for d in documents})},
    )
    if topic.outline:  # an outline given with the question (issue 30)
        sections.write_report(ctx, documents)
    else:
        report_writer.write_report(ctx, documents)
    return Outcome.ANSWERED


def _take_passages(ctx: RunContext) -> list[Document]:
    """The best passages of the owner's documents for the question, saved; none when none matches."""
    topic = ctx.topic
    ready, _ = private.document_counts(topic.owner)
    if not ready:
        return []
    reorder = rerank.passage_reorderer(ctx, STAGE)
    found = private.find_passages(topic.owner, [ctx.question], topic.period, reorder=reorder)
    if not found:
        ctx.emit(
            STAGE,
            gettext_noop("None of your %(count)s documents matches the question: answering it directly"),
            args={"count": ready},
        )
        return []
    return save_documents(topic, found[:PASSAGES])


def saved_documents(topic: Topic) -> list[Document]:
    """The passages an earlier, interrupted run of this branch took (private, without a hit)."""
    documents = Document.objects.filter(
        topic=topic, fetched_via=Document.FetchedVia.PRIVATE, hit__isnull=True
    )
    return list(documents.order_by("id"))


def save_documents(topic: Topic, passages: list[Passage]) -> list[Document]:
    """The passages as private Documents, best first, neighbours of one file merged; all at once."""
    chunks = {
        chunk.id: chunk
        for chunk in Chunk.objects.for_user(topic.owner)
        .filter(id__in=[passage.chunk_id for passage in passages])
        .select_related("document")
        .defer("embedding", "stemmed_vector")
    }
    items = [
        (chunks[p.chunk_id], chunks[p.chunk_id].document_id, chunks[p.chunk_id].position)
        for p in passages
        if p.chunk_id in chunks
    ]
    taken: set[str] = set()
    rows = []
    for lead, members in private.neighbour_groups(items):
        pages = sorted({chunk.page for chunk in members if chunk.page})
        label = private.citation(lead.document.original_name, pages, members[0].heading)
        rows.append(
            Document(
                topic=topic,
                uploaded_document_id=lead.document_id,
                title=private.distinct(label, [chunk.position for chunk in members], taken),
                url="",
                text=private.join_chunks([(c.char_start, c.char_end, c.text) for c in members]),
                fetched_via=Document.FetchedVia.PRIVATE,
                pages=pages,
            )
        )
    with transaction.atomic():
        return Document.objects.bulk_create(rows)
