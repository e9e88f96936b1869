"""The seed's Router → Local RAG: a question that needs no web search, asked by someone with
documents, is answered from those documents.

When the route stage decides a question needs no search (`route._may_skip_search`) and the
owner has indexed documents, the question is searched in them as a sub-query's phrasing is
(`private.find_passages`: hybrid BM25 + dense with the relevance floor, and the reranker when
one is configured), the best passages become private Documents — neighbouring passages of one
file merged, titled by file name and page like every private source — and the answer stage
writes the report from them (`answer.write_report`: the same citations, sources list, citation
check and previews as a researched topic). No plan, no web search.

A question none of the documents matches (every passage under the floor) and an owner without
indexed documents get the direct answer, as before. The event log says which branch was taken.
A run killed half-way takes the documents it already saved, so nothing is made twice.
"""

from __future__ import annotations

from datetime import date

from django.db import transaction
from django.utils.translation import gettext_noop

from research.models import Document, Report, Topic
from research.pipeline import answer, private, rerank
from research.pipeline.context import RunContext
from research.pipeline.stage import StageName
from retrieval.models import Chunk
from retrieval.search import Passage

STAGE = StageName.ANSWER
# As many passages as a sub-query reads.
PASSAGES = private.PASSAGES_READ


def run(ctx: RunContext, published: tuple[date | None, date | None] | None) -> bool:
    """True when the question was answered from the owner's documents; False leaves it to the
    direct answer. `published`: the period the question names, if any."""
    topic = ctx.topic
    documents = saved_documents(topic)
    if not documents:
        ready, _ = private.document_counts(topic.owner)
        if not ready:
            return False
        reorder = rerank.passage_reorderer(ctx, STAGE)
        found = private.find_passages(topic.owner, [ctx.question], published, reorder=reorder)
        if not found:
            ctx.emit(
                STAGE,
                gettext_noop("None of your %(count)s documents matches the question: answering it directly"),
                args={"count": ready},
            )
            return False
        documents = save_documents(topic, found[:PASSAGES])
    ctx.emit(
        STAGE,
        gettext_noop(
            "No web search needed: answering from your documents (%(passages)s passages of %(files)s files)"
        ),
        args={"passages": len(documents), "files": len({d.uploaded_document_id for d in documents})},
    )
    if not Report.objects.filter(topic=topic).exists():
        answer.write_report(ctx, documents)
    return True


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
