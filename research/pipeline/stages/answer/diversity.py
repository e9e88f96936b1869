"""Which documents the report is written from: good enough, from different sites, not repetitive.

Source filters and diversity reranking, applied to the scored summaries:

1. a minimum score (`RESEARCH_MIN_SCORE`, on the 0–10 scale of the five criteria) for scores an
   LLM gave; scores of the keyword fallback (no LLM, or it failed) rank but are on no
   calibrated scale, so no minimum drops a page they were computed for;
2. at most `RESEARCH_SOURCES_PER_SITE` documents per site (default 1, 0 = no cap) while other
   sites still have good documents, so one site cannot fill the context; an uploaded file
   counts as a site of its own (no cap at all when the topic searches only the owner's
   documents);
3. maximal marginal relevance (`RESEARCH_MMR_LAMBDA`) over the summaries' words, so the next
   source chosen is the best one that does not repeat those already chosen;
4. in deep mode, the best document of every round first, so the report covers all rounds;
5. then the budget is filled from the best remaining documents, same site allowed: the cap is a
   preference, never a starvation. k good documents always give k sources — on a web where the
   relevant pages share a site (habr.com for Russian ML articles, arxiv.org, github.com, an
   intranet SearXNG) a cap that drops them would leave the report with one source.

What a "site" is (`site_of`): the registrable domain, so blog.example.org and example.org — one
owner, one editorial voice — count once, while names under a shared platform suffix
(alice.github.io, x.substack.com) are different owners. A language edition of a Wikimedia
project (ru.wikipedia.org, en.wikipedia.org; the mobile "m." ignored) is a site of its own: its
editions are written independently by different communities, and where one article is a
translation of another, MMR sees the repetition. Other sites' language subdomains are usually
translations by one owner, so they stay one site. An uploaded file is a site of its own.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.utils.translation import gettext_noop

from research.models import Document, SummaryScore, Topic
from research.pipeline import sites
from research.pipeline.context import RunContext
from research.pipeline.links import domain_of, normalize_url
from research.pipeline.stage import StageName
from research.pipeline.text import tokenize

STAGE = StageName.ANSWER
QUICK_SOURCES = 5  # sources of a quick topic's answer
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
    judged: bool = True  # scored by an LLM (the minimum applies), not by the keyword fallback


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
    eligible = [c for c in candidates if c.score >= min_score or not c.judged]
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
    # Diverse sites first; then, when no other site is left, fill the budget from the rest.
    for capped in (True, False):
        while len(chosen) < k:
            pool = [c for c in eligible if (open_to(c) if capped else c not in chosen)]
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
    """The site of a web page (see the module's docstring); each private document is its own."""
    if document.fetched_via in (Document.FetchedVia.PAPER, Document.FetchedVia.ABSTRACT):
        return f"paper:{document.pk}"  # papers are not pages of a site: arXiv's PDFs are all on one host
    if document.url:
        return site_of_url(document.url)
    return f"document:{document.uploaded_document_id or document.pk}"


# ISO 639-1 codes (and a region form such as "zh-min-nan" or "pt-br") as a host's first label.
_LANGUAGE_EDITION = re.compile(r"^[a-z]{2,3}(?:-[a-z]{2,4})*$")
_EDITION_HOSTS = {"wikipedia.org", "wiktionary.org", "wikibooks.org", "wikiquote.org", "wikinews.org",
                  "wikisource.org", "wikiversity.org", "wikivoyage.org"}  # fmt: skip


def site_of_url(url: str) -> str:
    domain = domain_of(url)
    host = urlsplit(normalize_url(url)).hostname or ""
    if domain not in _EDITION_HOSTS or host == domain:
        return domain
    labels = [label for label in host.removesuffix("." + domain).split(".") if label != "m"]
    if labels and _LANGUAGE_EDITION.match(labels[0]):
        return f"{labels[0]}.{domain}"
    return domain


def final_documents(ctx: RunContext, *, share: float = 1.0) -> list[Document]:
    """The documents the report is written from, numbered in this order; `share` times the mode's
    count of them (a long sectioned report is given more: research/pipeline/outline.py)."""
    documents = list(
        Document.objects.filter(topic=ctx.topic, summary__score__isnull=False)
        .select_related("hit__subquery", "hit__score", "summary__score")
        .order_by(*ORDER)
    )
    rules = sites.Rules.of(ctx.topic)
    candidates = [_candidate(document, rules) for document in documents]
    deep = ctx.topic.mode == Topic.Mode.DEEP
    min_score = settings.RESEARCH_MIN_SCORE
    judged = [candidate for candidate in candidates if candidate.judged]
    if judged and not any(candidate.score >= min_score for candidate in judged):
        ctx.warn(
            STAGE,
            gettext_noop("No source scored %(score)s or more; the report uses the best there are."),
            args={"score": f"{min_score:g}"},
        )
        min_score = 0.0
    chosen = select_sources(
        candidates,
        k=max(1, round((settings.RESEARCH_DEEP_SOURCES if deep else QUICK_SOURCES) * share)),
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


def _candidate(document: Document, rules: sites.Rules | None = None) -> Candidate:
    preferred = rules is not None and rules.preferred(document.url)
    return Candidate(
        key=document.pk,
        site=site_of(document),
        score=document.summary.score.total + (sites.PREFERRED_BONUS if preferred else 0.0),
        text=f"{document.title} {document.summary.text}",
        round=document.round,
        judged=document.summary.score.origin == SummaryScore.Origin.LLM,
    )
