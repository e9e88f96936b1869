"""Which documents the report is written from: good enough, from different sites, not repetitive.

Seed 001's filters and seed 002's reranking, applied to the scored summaries:

1. a minimum score (`RESEARCH_MIN_SCORE`, on the 0–10 scale of the five criteria);
2. at most `RESEARCH_SOURCES_PER_SITE` documents per site (default 1, 0 = no cap), so one site
   cannot fill the context; an uploaded file counts as a site of its own (no cap at all when
   the topic searches only the owner's documents);
3. maximal marginal relevance (`RESEARCH_MMR_LAMBDA`) over the summaries' words, so the next
   source chosen is the best one that does not repeat those already chosen;
4. in deep mode, the best document of every round first, so the report covers all rounds.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from django.conf import settings
from django.utils.translation import gettext_noop

from research.models import Document, Topic
from research.pipeline.context import RunContext
from research.pipeline.extractive import tokenize
from research.pipeline.urls import domain_of

STAGE = "answer"
QUICK_SOURCES = 5  # the seed's top 5
# Ties are broken by content, not by id: ids follow the order in which concurrent reads
# finished, and a repeated topic must send the answer stage the very same request.
ORDER = ("-summary__score__total", "-hit__score__total", "url", "title")


@dataclass(frozen=True)
class Candidate:
    key: int
    site: str
    score: float  # 0–10
    text: str
    round: int = 1


def select_sources(
    candidates: list[Candidate],
    *,
    k: int,
    per_site: int = 1,
    min_score: float = 0.0,
    mmr_lambda: float = 1.0,
    cover_rounds: bool = False,
) -> list[Candidate]:
    """Up to `k` candidates, best first; `candidates` come best first.

    `mmr_lambda` 1 ranks by score alone; lower values trade score for novelty.
    """
    eligible = [candidate for candidate in candidates if candidate.score >= min_score]
    words = {candidate.key: Counter(tokenize(candidate.text)) for candidate in eligible}
    chosen: list[Candidate] = []
    sites: Counter[str] = Counter()

    def take(candidate: Candidate) -> None:
        chosen.append(candidate)
        sites[candidate.site] += 1

    def open_to(candidate: Candidate) -> bool:
        return candidate not in chosen and (per_site <= 0 or sites[candidate.site] < per_site)

    if cover_rounds:
        for number in sorted({candidate.round for candidate in eligible}):
            best = next((c for c in eligible if c.round == number and open_to(c)), None)
            if best is not None and len(chosen) < k:
                take(best)
    while len(chosen) < k:
        pool = [candidate for candidate in eligible if open_to(candidate)]
        if not pool:
            break
        take(max(pool, key=lambda c: _mmr_value(c, chosen, words, mmr_lambda)))
    return sorted(chosen, key=lambda candidate: (-candidate.score, candidates.index(candidate)))


def _mmr_value(
    candidate: Candidate, chosen: list[Candidate], words: dict[int, Counter], mmr_lambda: float
) -> float:
    redundancy = max((cosine(words[candidate.key], words[other.key]) for other in chosen), default=0.0)
    return mmr_lambda * candidate.score / 10 - (1 - mmr_lambda) * redundancy


def cosine(first: Counter, second: Counter) -> float:
    dot = sum(count * second[word] for word, count in first.items() if word in second)
    norms = math.sqrt(sum(c * c for c in first.values())) * math.sqrt(sum(c * c for c in second.values()))
    return dot / norms if norms else 0.0


def site_of(document: Document) -> str:
    """The registrable domain of a web page; each private document is its own site."""
    if document.url:
        return domain_of(document.url)
    return f"document:{document.uploaded_document_id or document.pk}"


def final_documents(ctx: RunContext) -> list[Document]:
    """The documents the report is written from, numbered in this order."""
    documents = list(
        Document.objects.filter(topic=ctx.topic, summary__score__isnull=False)
        .select_related("hit__subquery", "hit__score", "summary__score")
        .order_by(*ORDER)
    )
    candidates = [_candidate(document) for document in documents]
    deep = ctx.topic.mode == Topic.Mode.DEEP
    min_score = settings.RESEARCH_MIN_SCORE
    if candidates and not any(candidate.score >= min_score for candidate in candidates):
        ctx.warn(
            STAGE,
            gettext_noop("No source scored %(score)s or more; the report uses the best there are."),
            args={"score": f"{min_score:g}"},
        )
        min_score = 0.0
    chosen = select_sources(
        candidates,
        k=settings.RESEARCH_DEEP_SOURCES if deep else QUICK_SOURCES,
        per_site=_per_site(ctx.topic),
        min_score=min_score,
        mmr_lambda=settings.RESEARCH_MMR_LAMBDA,
        cover_rounds=deep,
    )
    by_key = {document.pk: document for document in documents}
    return [by_key[candidate.key] for candidate in chosen]


def _per_site(topic: Topic) -> int:
    """The cap per site; none when every source is one of the owner's own documents, since the
    user asked for exactly those (one uploaded report would otherwise give a one-source report)."""
    return 0 if topic.sources == Topic.Sources.DOCS else settings.RESEARCH_SOURCES_PER_SITE


def _candidate(document: Document) -> Candidate:
    return Candidate(
        key=document.pk,
        site=site_of(document),
        score=document.summary.score.total,
        text=f"{document.title} {document.summary.text}",
        round=document.round,
    )
