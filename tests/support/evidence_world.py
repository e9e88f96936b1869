"""A realistic loopback web for measuring evidence: real public text, a SearXNG that behaves like
the real one, and an LLM that makes the mistakes real models make.

The web (≈ 450 pages on ≈ 50 hosts) is built from `tests/data/evidence/` — SciFact abstracts
(ODC-By 1.0) and XQuAD-ru Wikipedia paragraphs (CC BY-SA 4.0), see its README — around eleven
questions, each with an answer key of fact phrases spread over several pages and noise facts
from look-alike pages that must not reach a report. How the pages are laid out:

- most pages sit on hosts chosen by a hash; the relevant pages of a `one_host` question all
  share one host; a `wiki` question's Russian paragraphs share ru.wikipedia.org and their
  English originals en.wikipedia.org;
- the relevant abstracts of a `long_pages` question exist only deep inside long digest pages
  (twelve abstracts, the relevant one ninth), past what a whole-page excerpt keeps;
- every page carries a publication date except Wikipedia's; the relevant pages of a `dated`
  question ("in the past 6 months") are recent, and older pages on the same topic are noise;
- dead links (a mirror host that does not exist), redirects (the reader reports where a DOI
  link led) and paywalled copies (the reader gets a subscription stub) sit among the results.

SearXNG (`SearxngStandIn`): five engines, each indexing part of the web and ranking by the
query's words; results merged as SearXNG merges them (one result per URL with every engine
that found it, scored by positions); 10 results per engine page and `pageno`; with
`time_range` the engines without time-range support are skipped and the others keep only
pages dated inside the window; engines that do not page are skipped for pageno > 1; engines
time out or are suspended at seeded rates and are listed in `unresponsive_engines` as
[name, reason] pairs, as SearXNG's JSON does.

The LLM (`EvidenceScript`) answers every prompt kind from the request text. It knows, as a model
understands a question, which terms the question is about (`Question.key`); the rest it reads
from the request. At seeded rates it writes citation numbers that do not exist, plants claims
no source supports (recorded in `planted`, so a benchmark knows which sentences are planted),
wraps JSON in prose or cuts it short, and writes the report's frame in the wrong language.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
import re
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any

from tests.support.fakes import (
    FakeService,
    Request,
    Response,
    Route,
    openai_chat,
    reader_text,
    searxng_result,
)
from tests.support.world import prompt_kind, service_settings

DATA = Path(__file__).resolve().parents[1] / "data" / "evidence"
RESULTS_PER_PAGE = 10
DIGEST_SIZE = 12
DIGEST_POSITION = 9  # the relevant abstract's place in its digest (0-based)
DEAD_HOST = "mirror.old-archive.invalid"  # .invalid never resolves (RFC 6761)
PAYWALL_HOST = "www.premium-journals.example"
DIGEST_HOST = "digest.sciencewire.example"
ONE_HOSTS = ("www.oncology-today.example", "flu-research.example")
HOSTS = tuple(
    f"{name}.example"
    for name in (
        "openbio",
        "medline-review",
        "cellpress-archive",
        "jbc-mirror",
        "plos-notes",
        "biorxiv-digest",
        "clinical-evidence",
        "lab-notebook",
        "genomics-today",
        "immunology-weekly",
        "pathology-letters",
        "epi-journal",
        "nutrition-facts",
        "public-health-report",
        "neuro-digest",
        "cardio-review",
        "stemcell-news",
        "oncology-watch",
        "virology-blog",
        "pharma-insight",
        "metabolism-today",
        "physiology-notes",
        "bioinformatics-hub",
        "molecular-medicine",
        "trials-register",
        "med-abstracts",
        "science-summary",
        "health-research",
        "journal-club",
        "pubscience",
        "evidence-base",
        "research-gate-mirror",
        "academic-press",
        "med-library",
        "bio-letters",
        "open-medicine",
        "life-sciences-review",
        "cell-biology-news",
        "biomed-central-mirror",
        "genetics-forum",
    )
)
WIKI_HOSTS = {"ru": "ru.wikipedia.org", "en": "en.wikipedia.org"}
# How a Russian speaker names the Wikipedia questions' subjects (SciFact terms stay English).
RU_NAMES = {"tesla": "Никола Тесла", "black-death": "Черная смерть", "amazon": "леса Амазонки"}

_WORD = re.compile(r"[a-zа-яё0-9]+")
_STOP = set(
    [
        "the",
        "a",
        "an",
        "of",
        "in",
        "on",
        "and",
        "or",
        "to",
        "for",
        "is",
        "are",
        "was",
        "were",
        "be",
        "by",
        "with",
        "what",
        "how",
        "have",
        "has",
        "do",
        "does",
        "did",
        "about",
        "that",
        "this",
        "from",
        "as",
        "at",
        "it",
        "its",
        "their",
        "which",
        "who",
        "whom",
        "whose",
        "studies",
        "study",
        "found",
        "published",
        "past",
        "months",
        "role",
        "play",
        "new",
        "known",
        "и",
        "в",
        "во",
        "на",
        "о",
        "об",
        "что",
        "как",
        "про",
        "за",
        "с",
        "со",
        "по",
        "из",
        "от",
        "до",
        "для",
        "ли",
        "расскажи",
        "известно",
        "нового",
        "опубликовано",
        "последние",
        "последний",
        "полгода",
        "происходит",
        "какие",
        "какой",
        "такое",
        "где",
        "есть",
        "его",
        "ее",
        "их",
        "это",
        "был",
        "была",
        "были",
    ]
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-ZА-ЯЁ0-9\"«(])")


# ---- text helpers, shared with tests/data/evidence/build.py ----------------------------------


def words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower().replace("ё", "е")) if w not in _STOP]


def stem(word: str) -> str:
    """A crude stem that makes "теслы"/"тесла" and "vaccines"/"vaccine" meet."""
    if re.search("[а-я]", word):
        return word[: min(6, len(word) - 2)] if len(word) > 5 else word[: max(3, len(word) - 1)]
    return word[:6] if len(word) > 5 else word


def stems(text: str) -> set[str]:
    return {stem(w) for w in words(text)}


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


def mentions(text: str, terms: list[str]) -> bool:
    """A term as whole words; a Cyrillic term is a stem (Russian inflects), so any ending goes."""
    low = text.lower().replace("ё", "е")
    return any(re.search(_term_pattern(term), low) for term in terms)


def _term_pattern(term: str) -> str:
    tail = "" if re.search("[а-я]", term) else r"(?![a-z])"
    return r"(?<![a-zа-я0-9])" + re.escape(term) + tail


def sentence_score(sentence: str, question: str, key: list[str]) -> int:
    asked = stems(question) | {stem(w) for term in key for w in words(term)}
    return 2 * mentions(sentence, key) + len(asked & stems(sentence))


def best_sentences(text: str, question: str, key: list[str], count: int) -> list[str]:
    """The sentences that best answer the question: naming a key term, sharing its words."""
    ranked = sorted(sentences(text), key=lambda s: (-sentence_score(s, question, key), len(s)))
    return ranked[:count]


def normalise(text: str) -> str:
    """Text as a fact phrase is looked for in it: lower case, no Markdown emphasis, one space."""
    return " ".join(re.sub(r"[*_`]", "", text).lower().replace("ё", "е").split())


def _hash(*parts: object) -> int:
    return int(hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:12], 16)


# ---- the web ------------------------------------------------------------------------------------


@dataclass
class Page:
    url: str
    title: str
    text: str  # Markdown, as the reader returns it
    published: date | None
    kind: str = "article"  # article, digest, paywall, dead, redirect
    docs: tuple[str, ...] = ()  # corpus ids whose text the page carries
    final_url: str = ""  # where a redirect leads (the reader reports it)
    reader_text: str = ""  # what the reader returns when it is not the text (a paywall stub)

    @property
    def host(self) -> str:
        return self.url.split("/")[2]

    @cached_property
    def title_stems(self) -> set[str]:
        return stems(self.title)

    @cached_property
    def text_stems(self) -> set[str]:
        return stems(self.text)


@dataclass
class Question:
    id: str
    text: str
    language: str
    key: list[str]
    layout: str
    facts: list[list[str]]  # per fact, its phrases (any one found counts)
    noise_facts: list[str]
    relevant_urls: set[str]
    display: dict[str, str]  # what the question is about, in each language

    def facts_in(self, text: str) -> list[int]:
        body = normalise(text)
        return [i for i, phrases in enumerate(self.facts) if any(normalise(p) in body for p in phrases)]

    def noise_in(self, text: str) -> list[str]:
        body = normalise(text)
        return [phrase for phrase in self.noise_facts if normalise(phrase) in body]


@dataclass
class Web:
    pages: dict[str, Page]
    questions: list[Question]
    today: date

    def question(self, text: str) -> Question | None:
        return next((q for q in self.questions if q.text.strip() == text.strip()), None)

    @property
    def hosts(self) -> set[str]:
        return {page.host for page in self.pages.values()}


def load_corpus() -> dict[str, dict[str, Any]]:
    with gzip.open(DATA / "corpus.jsonl.gz", "rt", encoding="utf-8") as lines:
        return {doc["id"]: doc for doc in map(json.loads, lines)}


def load_questions() -> list[dict[str, Any]]:
    return json.loads((DATA / "questions.json").read_text(encoding="utf-8"))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "page"


def _article(doc: dict[str, Any], published: date | None) -> str:
    dated = f"*Published: {published:%Y-%m-%d}*\n\n" if published else ""
    return f"# {doc['title']}\n\n{dated}{doc['text']}"


def build_web(today: date | None = None, seed: int = 7) -> Web:
    """The web, deterministic for a given day and seed."""
    today = today or datetime.now(UTC).date()
    rng = random.Random(seed)
    corpus = load_corpus()
    specs = load_questions()
    pages: dict[str, Page] = {}
    placed: dict[str, list[str]] = {}  # corpus id -> URLs carrying it

    def add(page: Page) -> Page:
        pages[page.url] = page
        for doc in page.docs:
            placed.setdefault(doc, []).append(page.url)
        return page

    def old_date(doc_id: str) -> date:
        return date(2014, 1, 1) + timedelta(days=_hash(seed, doc_id) % 3650)

    special: dict[str, tuple[str, date | None]] = {}  # corpus id -> (host, date) fixed by a layout
    in_digest: list[str] = []
    one_host = iter(ONE_HOSTS)
    for spec in specs:
        relevant = [r["page"] for r in spec["relevant"]] if spec["layout"] != "wiki" else []
        if spec["layout"] == "one_host":
            host = next(one_host)
            special |= {doc: (host, old_date(doc)) for doc in relevant}
        elif spec["layout"] == "dated":
            for i, doc in enumerate(relevant):
                special[doc] = (HOSTS[_hash(seed, doc) % len(HOSTS)], today - timedelta(days=12 + 27 * i))
            for i, doc in enumerate(spec["old"]):
                special[doc] = (HOSTS[_hash(seed, doc) % len(HOSTS)], today - timedelta(days=700 + 300 * i))
        elif spec["layout"] == "long_pages":
            in_digest += relevant[:2]
        elif spec["layout"] == "wiki":
            for part, pair in enumerate(spec["relevant"], 1):
                for language, doc_id in zip(("ru", "en"), pair["pages"], strict=True):
                    doc = corpus[doc_id]
                    url = f"https://{WIKI_HOSTS[language]}/wiki/{doc['title'].replace(' ', '_')}/part{part}"
                    add(Page(url, doc["title"], f"# {doc['title']}\n\n{doc['text']}", None, docs=(doc_id,)))
    # Every other document is an article of its own on a host of its own choosing.
    for doc_id, doc in sorted(corpus.items()):
        if doc_id in placed or doc_id in in_digest:
            continue
        if doc["source"] == "xquad-ru":
            url = f"https://{WIKI_HOSTS['ru']}/wiki/{doc['title'].replace(' ', '_')}"
            add(Page(url, doc["title"], f"# {doc['title']}\n\n{doc['text']}", None, docs=(doc_id,)))
            continue
        host, published = special.get(doc_id, (HOSTS[_hash(seed, doc_id) % len(HOSTS)], old_date(doc_id)))
        url = f"https://{host}/article/{doc_id.removeprefix('sf-')}-{_slug(doc['title'])[:40]}"
        add(Page(url, doc["title"], _article(doc, published), published, docs=(doc_id,)))
    # Digests: eleven background abstracts around one relevant abstract, ninth.
    asked = {
        e["page"] for spec in specs if spec["layout"] != "wiki" for e in spec["relevant"] + spec["noise"]
    }
    background = [url for url, page in pages.items() if page.host in HOSTS and page.docs[0] not in asked]
    rng.shuffle(background)
    for n, doc_id in enumerate(in_digest, 1):
        fillers = [pages[url].docs[0] for url in background[(n - 1) * 11 : n * 11]]
        members = [*fillers[:DIGEST_POSITION], doc_id, *fillers[DIGEST_POSITION:]]
        published = today - timedelta(days=400 + 31 * n)
        sections = [f"## {corpus[d]['title']}\n\n{corpus[d]['text']}" for d in members]
        title = f"Research digest no. {n}: twelve new abstracts"
        text = f"# {title}\n\n*Published: {published:%Y-%m-%d}*\n\n" + "\n\n".join(sections)
        add(
            Page(
                f"https://{DIGEST_HOST}/issues/{n}",
                title,
                text,
                published,
                kind="digest",
                docs=tuple(members),
            )
        )
    _add_traps(pages, placed, specs, add, rng)
    questions = [_question(spec, placed, corpus) for spec in specs]
    return Web(pages=pages, questions=questions, today=today)


def _add_traps(
    pages: dict[str, Page], placed: dict[str, list[str]], specs: list[dict], add: Any, rng: random.Random
) -> None:
    """Dead mirrors, DOI redirects and paywalled copies of real pages (the original stays)."""
    relevant = sorted(
        {r["page"] for s in specs if s["layout"] != "wiki" for r in s["relevant"]} & set(placed)
    )
    articles = sorted(url for url, page in pages.items() if page.kind == "article" and page.published)
    for doc_id in rng.sample(relevant, 8) + rng.sample(articles, 12):
        page = pages[placed[doc_id][0]] if doc_id in placed else pages[doc_id]
        add(
            Page(
                f"https://{DEAD_HOST}/{_slug(page.title)}", page.title, page.text, page.published, kind="dead"
            )
        )
    for url in rng.sample(articles, 12):
        page = pages[url]
        doi = f"https://doi.example/10.{1000 + _hash(url) % 9000}/{_slug(page.title)[:24]}"
        add(Page(doi, page.title, page.text, page.published, kind="redirect", final_url=url))
    for doc_id in rng.sample(relevant, 6):
        page = pages[placed[doc_id][0]]
        stub = (
            f"# {page.title}\n\n{sentences(page.text.split(chr(10), 2)[-1])[0]}\n\n"
            "**Subscribe to continue reading.** This article is available to subscribers only. "
            "Already a subscriber? Sign in. Purchase access: $39.95 for 24 hours."
        )
        url = f"https://{PAYWALL_HOST}/doi/full/{_slug(page.title)}"
        add(Page(url, page.title, page.text, page.published, kind="paywall", reader_text=stub))


def _question(spec: dict[str, Any], placed: dict[str, list[str]], corpus: dict[str, dict]) -> Question:
    if spec["layout"] == "wiki":
        facts = [entry["facts"] for entry in spec["relevant"]]
        docs = [doc for entry in spec["relevant"] for doc in entry["pages"]]
        display = {"ru": RU_NAMES.get(spec["id"], spec["english"]), "en": spec["english"]}
    else:
        facts = [[entry["fact"]] for entry in spec["relevant"]]
        docs = [entry["page"] for entry in spec["relevant"]]
        display = {"ru": spec["key"][0], "en": spec["key"][0]}
    urls = {url for doc in docs for url in placed.get(doc, [])}
    return Question(
        id=spec["id"],
        text=spec["question"],
        language=spec["language"],
        key=spec["key"],
        layout=spec["layout"],
        facts=facts,
        noise_facts=[entry["fact"] for entry in spec["noise"]],
        relevant_urls=urls,
        display=display,
    )


# ---- SearXNG ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Engine:
    name: str
    time_range: bool  # SearXNG's time_range_support
    paging: bool
    share: float  # of the web it indexes
    hosts: tuple[str, ...] = ()  # only these hosts, when given (Wikipedia's own search)
    categories: tuple[str, ...] = ("general",)
    dated_only: bool = False  # a news engine indexes dated pages only


ENGINES = (
    Engine("bing", time_range=False, paging=True, share=0.75),
    Engine("brave", time_range=True, paging=True, share=0.55),
    Engine("duckduckgo", time_range=True, paging=False, share=0.6),
    Engine("mojeek", time_range=False, paging=True, share=0.5),
    Engine("semantic scholar", time_range=False, paging=True, share=0.4, categories=("science",)),
    Engine("bing news", time_range=True, paging=True, share=0.3, categories=("news",), dated_only=True),
    Engine("wikipedia", time_range=False, paging=False, share=1.0, hosts=tuple(WIKI_HOSTS.values())),
)
WINDOWS = {"day": 1, "week": 7, "month": 31, "year": 365}
_SEARCH_STOP = _STOP | {"research", "results", "new", "latest", "recent", "2024", "2025", "2026"}


@dataclass
class SearxngStandIn:
    """GET /search over the web, as a SearXNG instance in front of five engines answers it."""

    web: Web
    engines: tuple[Engine, ...] = ENGINES
    timeout_rate: float = 0.04  # an engine does not answer in time
    suspend_rate: float = 0.04  # an engine is suspended (too many requests, a CAPTCHA)
    outage_rate: float = 0.02  # every engine fails at once
    seed: int = 7
    _asked: Counter = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def config(self, request: Request) -> Response:
        """GET /config: the enabled engines, their categories, paging and time-range support."""
        engines = [
            {
                "name": engine.name,
                "categories": list(engine.categories),
                "enabled": True,
                "paging": engine.paging,
                "time_range_support": engine.time_range,
                "timeout": 3.0,
            }
            for engine in self.engines
        ]
        categories = sorted({c for engine in self.engines for c in engine.categories})
        return Response(200, {"engines": engines, "categories": categories, "instance_name": "SearXNG"})

    def __call__(self, request: Request) -> Response:
        if request.param("format") != "json":
            return Response(403, b"<html><body>403 Forbidden</body></html>", {"Content-Type": "text/html"})
        query, time_range = request.param("q"), request.param("time_range")
        pageno = max(1, int(request.param("pageno", "1") or 1))
        with self._lock:
            self._asked[(query, time_range, pageno)] += 1
            attempt = self._asked[(query, time_range, pageno)]
        unresponsive: list[list[str]] = []
        found: dict[str, dict[str, Any]] = {}
        totals: dict[str, int] = {}
        outage = self._roll("outage", query, time_range, pageno, attempt) < self.outage_rate
        wanted = {c.strip() for c in request.param("categories", "general").split(",") if c.strip()} or {
            "general"
        }
        for engine in self.engines:
            if not wanted & set(engine.categories):
                continue  # only the engines of the categories asked for run
            if time_range and not engine.time_range:
                continue  # SearXNG skips an engine that cannot filter by time
            if pageno > 1 and not engine.paging:
                continue
            fault = self._fault(engine, query, time_range, pageno, attempt, outage)
            if fault:
                unresponsive.append([engine.name, fault])
                continue
            ranked = self._rank(engine, query, time_range)
            totals[engine.name] = len(ranked) * 37
            for position, page in enumerate(
                ranked[(pageno - 1) * RESULTS_PER_PAGE : pageno * RESULTS_PER_PAGE], 1
            ):
                empty = {
                    "page": page,
                    "engines": [],
                    "positions": [],
                    "score": 0.0,
                    "category": engine.categories[0],
                }
                entry = found.setdefault(page.url, empty)
                entry["engines"].append(engine.name)
                entry["positions"].append(position)
                entry["score"] += 1.0 / position
        merged = sorted(found.values(), key=lambda e: (-e["score"] * len(e["engines"]), e["page"].url))
        results = [self._result(entry, query, i) for i, entry in enumerate(merged, 1)]
        return Response(
            200,
            {
                "query": query,
                # Only engines that report a total count (here bing) give one; else SearXNG says 0.
                "number_of_results": totals.get("bing", 0),
                "results": results,
                "answers": [],
                "corrections": [],
                "infoboxes": [],
                "suggestions": [],
                "unresponsive_engines": unresponsive,
            },
        )

    def _roll(self, *parts: object) -> float:
        return (_hash(self.seed, *parts) % 10_000) / 10_000

    def _fault(
        self, engine: Engine, query: str, time_range: str, pageno: int, attempt: int, outage: bool
    ) -> str:
        if outage:
            return "timeout"
        if self._roll("timeout", engine.name, query, time_range, pageno, attempt) < self.timeout_rate:
            return "timeout"
        if self._roll("suspend", engine.name, query, time_range, pageno, attempt) < self.suspend_rate:
            return "Suspended: CAPTCHA" if engine.name == "duckduckgo" else "Suspended: too many requests"
        return ""

    def _indexes(self, engine: Engine, page: Page) -> bool:
        """Each general engine indexes its share of the web; a page none drew goes to one of them
        (every page of the web can be found somewhere)."""
        general = [e for e in self.engines if not e.hosts and "general" in e.categories]
        if engine.dated_only and page.published is None:
            return False
        if "science" in engine.categories and page.host in WIKI_HOSTS.values():
            return False
        if self._roll("index", engine.name, page.url) < engine.share:
            return True
        if any(self._roll("index", e.name, page.url) < e.share for e in general):
            return False
        return engine in general and engine is general[_hash(self.seed, page.url) % len(general)]

    def _rank(self, engine: Engine, query: str, time_range: str) -> list[Page]:
        asked = {stem(w) for w in words(query) if w not in _SEARCH_STOP}
        if not asked:
            return []
        oldest = self.web.today - timedelta(days=WINDOWS.get(time_range, 0)) if time_range else None
        scored = []
        for page in self.web.pages.values():
            if engine.hosts and page.host not in engine.hosts:
                continue
            if not engine.hosts and not self._indexes(engine, page):
                continue
            if oldest and (page.published is None or page.published < oldest):
                continue
            score = 3 * len(asked & page.title_stems) + len(asked & page.text_stems)
            if score:
                jitter = self._roll("rank", engine.name, page.url)
                scored.append((-(score + jitter), page.url, page))
        return [page for *_, page in sorted(scored)]

    def _result(self, entry: dict[str, Any], query: str, position: int) -> dict[str, Any]:
        page: Page = entry["page"]
        body = page.text.split("\n", 2)[-1]
        asked = stems(query)
        best = max(sentences(body) or [body], key=lambda s: len(asked & stems(s)))
        snippet = best if len(best) <= 240 else best[:237].rsplit(" ", 1)[0] + " ..."
        published = f"{page.published:%Y-%m-%d}T00:00:00" if page.published else None
        item = {
            "url": page.url,
            "title": page.title,
            "content": snippet,
            "engine": entry["engines"][0],
            "engines": entry["engines"],
            "score": round(entry["score"], 4),
            "publishedDate": published,
            "category": entry["category"],
        }
        result = searxng_result(item, position)
        result["positions"] = entry["positions"]
        return result


def reader_route(web: Web) -> Any:
    """GET /<url> as r.jina.ai answers it: the page's Markdown; 422 for a dead link; the stub a
    paywall shows; the final URL of a redirect."""

    def route(request: Request) -> Response:
        target = request.raw_path.removeprefix("/")
        page = web.pages.get(target)
        if page is None or page.kind == "dead":
            message = f"Failed to goto {target}: net::ERR_NAME_NOT_RESOLVED"
            return Response(422, {"code": 422, "name": "AssertionFailureError", "message": message})
        if page.kind == "redirect":
            final = web.pages[page.final_url]
            return Response(200, reader_text(final.title, final.url, final.text))
        return Response(200, reader_text(page.title, page.url, page.reader_text or page.text))

    return route


# ---- the LLM ------------------------------------------------------------------------------------


@dataclass
class Mistakes:
    """Seeded rates of what real models get wrong."""

    bad_citation: float = 0.3  # an answer cites a source number that does not exist
    planted_claim: float = 0.5  # an answer carries a claim no source supports (one, sometimes two)
    json_in_prose: float = 0.15  # JSON wrapped in prose or a code fence with chatter
    json_cut_short: float = 0.05  # JSON cut off mid-way (a token limit)
    wrong_language: float = 0.1  # the report's frame in the other language
    misjudged: float = 0.05  # a citation verdict the other way round

    @classmethod
    def none(cls) -> Mistakes:
        return cls(0, 0, 0, 0, 0, 0)


@dataclass
class Planted:
    question: str
    sentence: str  # as written, with its citation
    cited: int


_PLANTED_EN = (
    "{key} was shown to cut all-cause mortality by {pct}% in a trial of {n} participants",
    "A 2023 meta-analysis of {n} patients found that {key} doubles the response to standard therapy",
    "Regulators approved the first {key} screening programme for children in {year}",
)
_PLANTED_RU = (
    "{key}: в испытании с участием {n} человек смертность снизилась на {pct}%",
    "Метаанализ {year} года по {n} пациентам показал, что {key} вдвое усиливает эффект терапии",
    "Первая государственная программа, посвященная теме «{key}», была запущена в {year} году",
)


@dataclass
class EvidenceScript:
    """Answers every MindSearch prompt about the evidence web; counts calls per prompt kind."""

    web: Web
    mistakes: Mistakes = field(default_factory=Mistakes)
    seed: int = 7
    calls: Counter = field(default_factory=Counter)
    planted: list[Planted] = field(default_factory=list)
    bad_citations: list[tuple[str, int]] = field(default_factory=list)
    wrong_language: list[str] = field(default_factory=list)
    answer_requests: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _idf: dict[str, float] = field(default_factory=dict)

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        system, user = messages[0]["content"], messages[-1]["content"]
        kind = "citecheck" if "фактчекер" in system else prompt_kind(system)
        with self._lock:
            self.calls[kind] += 1
        return getattr(self, kind)(user, system)

    def _rarity(self) -> dict[str, float]:
        """How rare each word stem is on the web (a model knows which words say something)."""
        if not self._idf:
            frequency = Counter(s for page in self.web.pages.values() for s in page.text_stems)
            total = len(self.web.pages)
            self._idf.update({s: math.log(total / count) for s, count in frequency.items()})
        return self._idf

    def _rng(self, *parts: object) -> random.Random:
        return random.Random(_hash(self.seed, *parts))

    def _about(self, text: str) -> Question | None:
        return self.web.question(text) or next(
            (
                q
                for q in self.web.questions
                if mentions(text, q.key) or q.display["ru"].lower() in text.lower()
            ),
            None,
        )

    def _json(self, value: Any, *salt: object) -> str:
        text = json.dumps(value, ensure_ascii=False, indent=1)
        roll = self._rng("json", text, *salt).random()
        if roll < self.mistakes.json_cut_short:
            return text[: len(text) * 2 // 3]
        if roll < self.mistakes.json_cut_short + self.mistakes.json_in_prose:
            return f"Вот результат:\n```json\n{text}\n```\nЕсли нужно, могу пояснить оценки."
        return text

    # -- prompts --

    def route(self, user: str, system: str) -> str:
        return self._json({"domain": "general", "needs_search": True}, user)

    def direct(self, user: str, system: str) -> str:
        return "I can research a topic from sources and write a report with citations."

    def plan(self, user: str, system: str) -> str:
        question = _quoted(user, "Запрос")
        about = self._about(question)
        russian = "на русском языке" in system or bool(re.search("[а-яё]", question, re.I))
        name = about.display["ru" if russian else "en"] if about else " ".join(words(question)[:4])
        if russian:
            lines = [
                f"Что известно о теме «{name}»?",
                f"Какие результаты исследований есть по теме «{name}»?",
                f"{name}: механизмы, риски и последствия",
            ]
        else:
            lines = [
                f"What is known about {name}?",
                f"What did studies find about {name}?",
                f"{name}: mechanisms, risks and outcomes",
            ]
        return "Подзапросы для поиска:\n" + "\n".join(f"ПОДЗАПРОС: {line}" for line in lines)

    def queries(self, user: str, system: str) -> str:
        """Queries that name the subject and what the sub-query adds to it, in both languages."""
        topic = _quoted(user, "Тема").split(" — ")[0]
        about = self._about(topic)
        ru_name, en_name = (about.display["ru"], about.display["en"]) if about else (topic, topic)
        named = stems(f"{ru_name} {en_name}") | {
            stem(w) for term in (about.key if about else []) for w in words(term)
        }
        extra = " ".join(w for w in words(topic) if stem(w) not in named and w not in _ASPECT_WORDS)
        low = topic.lower()
        aspect = next((en for words_, en in _ASPECTS if any(w in low for w in words_)), "overview")
        ru_aspect = dict(_ASPECT_RU)[aspect]
        lines = [f"{ru_name} {extra or ru_aspect}", f"{en_name} {extra or aspect}"]
        lines += (
            [f"{ru_name} {ru_aspect}", f"{en_name} {aspect}"] if extra else [ru_name, f"{en_name} review"]
        )
        return "\n".join(f"ЗАПРОС: {line}" for line in lines)

    def score(self, user: str, system: str) -> str:
        question = _line(user, "Исходный запрос")
        about = self._about(question)
        items = re.findall(r"^\d+\. Заголовок: (.*)\n((?:(?!\d+\. Заголовок: ).*\n?)*)", user, re.M)
        rows = []
        for title, text in items:
            relevance = self._relevance(question, about, f"{title}\n{text}")
            rng = self._rng("score", title, relevance)
            values = [max(0, min(10, relevance + rng.choice((-1, 0, 0, 1)))) for _ in range(5)]
            if _PAYWALL.search(text):  # a teaser: on topic, but hardly complete or checkable
                values[2:4] = [2, 4]
            keys = ("соответствие_запросу", "соответствие_направлению", "полнота", "точность", "структура")
            rows.append(
                {
                    "заголовок": title,
                    **dict(zip(keys, values, strict=True)),
                    "итоговый_рейтинг": round(sum(values) / 5, 1),
                }
            )
        return self._json(rows, user)

    def _relevance(self, question: str, about: Question | None, text: str) -> int:
        if about and mentions(text, about.key):
            return 9 if mentions(text.split("\n", 1)[0], about.key) else 8
        shared = len(stems(question) & stems(text))
        return min(4, 1 + shared)

    def summarise(self, user: str, system: str) -> str:
        body = user.split("<<<ДАННЫЕ", 1)[-1].rsplit("ДАННЫЕ>>>", 1)[0]
        headings = [h.strip("# ").strip() for h in re.findall(r"^#{1,3} .+$", body, re.M)]
        prose = "\n".join(line for line in body.splitlines() if not line.startswith(("#", "*Published")))
        picked = sentences(prose)[:3]
        if len(headings) > 2:
            picked.append("The text also covers: " + "; ".join(headings[1:8]) + ".")
        return " ".join(picked)

    def expand(self, user: str, system: str) -> str:
        question = _line(user, "Исходный запрос")
        about = self._about(question)
        asked = (
            user.split("Уже заданные подзапросы:", 1)[-1].split("Найдено по этому направлению:", 1)[0].lower()
        )
        found = user.split("<<<ДАННЫЕ", 1)[-1]
        name = about.display["ru" if about and about.language == "ru" else "en"] if about else ""
        key = about.key if about else []
        # Leads come from the findings about the subject, not from the off-topic ones.
        findings = [f for f in re.split(r"^\[\d+\] ", found, flags=re.M) if not key or mentions(f, key)]
        common = Counter(w for f in findings for w in words(f) if len(w) > 5 and not mentions(w, key))
        rarity = self._rarity()
        salient = sorted(common, key=lambda w: (-common[w] * rarity.get(stem(w), 1.0), w))
        lines: list[str] = []
        for term in salient[:12]:
            proposal = f"{name} {term}".strip()
            if proposal.lower() not in asked and len(lines) < 4:
                lines.append(f"ПОДЗАПРОС: {proposal} | ОЦЕНКА: {8 - len(lines)}")
        return "\n".join(lines)

    def citecheck(self, user: str, system: str) -> str:
        """Each claim against the passages given for it: its words and numbers found there."""
        claims = re.findall(
            r"^### (\d+)\nУтверждение: (.*)\nИсточник \[\d+\]:\n([\s\S]*?)(?=\n\n### \d+\n|\nДАННЫЕ>>>|\Z)",
            user,
            re.M,
        )
        rows = []
        for number, claim, passage in claims:
            claimed, given = stems(claim), stems(passage)
            cover = len(claimed & given) / len(claimed) if claimed else 0.0
            missing = set(re.findall(r"\d+", claim)) - set(re.findall(r"\d+", passage))
            verdict = "unsupported" if missing or cover < 0.4 else "weak" if cover < 0.7 else "supported"
            reason = (
                "numbers not in the source" if missing else f"{cover:.0%} of the claim's words in the source"
            )
            if self._rng("misjudge", claim).random() < self.mistakes.misjudged:  # a model's slip
                verdict = "supported" if verdict == "unsupported" else "unsupported"
                reason = "the source says this" if verdict == "supported" else "the source does not say this"
            rows.append({"id": int(number), "verdict": verdict, "reason": reason})
        return self._json(rows, user)

    def answer(self, user: str, system: str) -> str:
        with self._lock:
            self.answer_requests.append(user)
        if "Перепиши ответ" in user or "Rewrite the answer" in user:
            return self._rewrite(user)
        return self._answer(user, plant=True)

    def _rewrite(self, user: str) -> str:
        """Asked again with the check's verdicts: the statements it questioned are left out."""
        sources, feedback = user.rsplit("<<<ДАННЫЕ", 1)
        questioned = [normalise(s) for s in re.findall(r"^- [«“](.*)[»”] \[\d+\]", feedback, re.M)]
        return self._answer(sources + "\nДАННЫЕ>>>", plant=False, skip=questioned)

    def _answer(self, user: str, *, plant: bool, skip: tuple[str, ...] | list[str] = ()) -> str:
        question = _line(user, "Исходный запрос")
        about = self._about(question)
        key = about.key if about else []
        blocks = re.findall(
            r"^\[(\d+)\] (.*)\n(.*)\n\n([\s\S]*?)(?=\n\n---\n\n\[\d+\] |\nДАННЫЕ>>>|\Z)", user, re.M
        )
        rng = self._rng("answer", user)
        russian = bool(re.search("[а-яё]", question, re.I))
        if rng.random() < self.mistakes.wrong_language:
            russian = not russian
            with self._lock:
                self.wrong_language.append(question)
        claims: list[str] = []
        for n, _title, _url, excerpt in blocks:
            text = "\n".join(
                line for line in excerpt.splitlines() if not line.startswith(("#", "*Published"))
            )
            for sentence in best_sentences(text, question, key, 2):
                if sentence_score(sentence, question, key) >= 2 and not _questioned(sentence, skip):
                    claims.append(f"{sentence.rstrip()} [{n}]")
        count = len(blocks)
        if plant and claims and rng.random() < self.mistakes.bad_citation:
            i = rng.randrange(len(claims))
            wrong = count + rng.randint(1, 5)
            claims[i] = f"{claims[i]}[{wrong}]"
            with self._lock:
                self.bad_citations.append((question, wrong))
        if plant and count and rng.random() < self.mistakes.planted_claim:
            for _ in range(1 + (rng.random() < 0.3)):
                cited = rng.randint(1, count)
                name = about.display["ru" if russian else "en"] if about else "the topic"
                template = rng.choice(_PLANTED_RU if russian else _PLANTED_EN)
                claim = template.format(
                    key=name, pct=rng.randint(21, 64), n=rng.randint(900, 14000), year=rng.randint(2016, 2023)
                )
                sentence = f"{claim[0].upper()}{claim[1:]}. [{cited}]"
                claims.insert(rng.randint(0, len(claims)), sentence)
                with self._lock:
                    self.planted.append(Planted(question, sentence, cited))
        headings = (
            ("Введение", "Что показывают источники", "Заключение")
            if russian
            else ("Introduction", "What the sources show", "Conclusion")
        )
        title = about.display["ru" if russian else "en"] if about else question
        intro = (
            f"Этот обзор собран по {count} источникам."
            if russian
            else f"This review draws on {count} sources."
        )
        closing = (
            "Источники согласуются не во всем; выводы ограничены найденными работами."
            if russian
            else "The sources do not agree on everything; the conclusions are limited to the works found."
        )
        paragraphs = [" ".join(claims[i : i + 3]) for i in range(0, len(claims), 3)]
        return (
            f"# {title[:1].upper()}{title[1:]}\n\n## {headings[0]}\n\n{intro}\n\n## {headings[1]}\n\n"
            + "\n\n".join(paragraphs)
            + f"\n\n## {headings[2]}\n\n{closing}"
        )

    def section(self, user: str, system: str) -> str:
        """One section of a report along an outline (prompts/section.txt): the sources' sentences
        most about the question and the section, cited, until about the words asked — fewer when
        the sources say less. The same seeded mistakes as a whole answer (a citation number that
        does not exist, a planted claim); asked again with the verdicts, the questioned ones left out."""
        with self._lock:
            self.answer_requests.append(user)
        again = "Перепиши ответ" in user or "Rewrite the answer" in user
        sources, feedback = user.rsplit("<<<ДАННЫЕ", 1) if again else (user, "")
        if again:
            sources += "\nДАННЫЕ>>>"
        questioned = [normalise(q) for q in re.findall(r"^- [«“](.*)[»”] \[\d+\]", feedback, re.M)]
        question = _line(sources, "Исходный запрос")
        title = _line(sources, "Раздел")
        wanted = int(_line(sources, "Объём раздела").split()[1]) if "Объём раздела" in sources else 200
        about = self._about(question)
        key = about.key if about else []
        blocks = re.findall(
            r"^\[(\d+)\] (.*)\n(.*)\n\n([\s\S]*?)(?=\n\n---\n\n\[\d+\] |\nДАННЫЕ>>>|\Z)", sources, re.M
        )
        rng = self._rng("section", user)
        candidates: list[tuple[int, str]] = []
        for n, _title, _url, excerpt in blocks:
            # Each passage apart: a sentence never runs across the gap between two ("[…]").
            text = "\n".join(
                line for line in excerpt.splitlines() if not line.startswith(("#", "*Published", "§"))
            )
            found = [
                x for part in text.split("[…]") for x in best_sentences(part, f"{question} {title}", key, 4)
            ]
            for sentence in sorted(found, key=lambda x: -sentence_score(x, f"{question} {title}", key))[:4]:
                score = sentence_score(sentence, question, key)
                if score >= 2 and not _questioned(sentence, questioned):
                    candidates.append((score, f"{sentence.rstrip()} [{n}]"))
        candidates.sort(key=lambda item: -item[0])
        claims: list[str] = []
        written = 0
        for _score, claim in candidates:
            if written >= wanted:
                break
            if claim not in claims:
                claims.append(claim)
                written += len(claim.split())
        count = max((int(n) for n, *_ in blocks), default=0)
        if not again and claims and rng.random() < self.mistakes.bad_citation:
            i = rng.randrange(len(claims))
            wrong = count + rng.randint(1, 5)
            claims[i] = f"{claims[i]}[{wrong}]"
            with self._lock:
                self.bad_citations.append((question, wrong))
        if not again and blocks and rng.random() < self.mistakes.planted_claim:
            russian = bool(re.search("[а-яё]", question, re.I))
            cited = int(rng.choice(blocks)[0])
            name = about.display["ru" if russian else "en"] if about else "the topic"
            template = rng.choice(_PLANTED_RU if russian else _PLANTED_EN)
            claim = template.format(
                key=name, pct=rng.randint(21, 64), n=rng.randint(900, 14000), year=rng.randint(2016, 2023)
            )
            sentence = f"{claim[0].upper()}{claim[1:]}. [{cited}]"
            claims.insert(rng.randint(0, len(claims)), sentence)
            with self._lock:
                self.planted.append(Planted(question, sentence, cited))
        return "\n\n".join(" ".join(claims[i : i + 3]) for i in range(0, len(claims), 3))


_PAYWALL = re.compile(r"subscribe to continue|subscribers only|подписк", re.I)


def _questioned(sentence: str, questioned: tuple[str, ...] | list[str]) -> bool:
    text = normalise(sentence).rstrip(". ")
    return any(q and (q.rstrip(". ") in text or text in q) for q in questioned)


_ASPECTS = (
    (("механизм", "mechanism"), "mechanisms risks"),
    (("исследован", "studies", "study"), "clinical study results"),
    (("известно", "known"), "overview"),
)
_ASPECT_RU = (
    ("mechanisms risks", "механизмы и риски"),
    ("clinical study results", "результаты исследований"),
    ("overview", "обзор"),
)
_ASPECT_WORDS = {
    *("тему", "теме", "тема", "известно", "результаты", "исследований", "механизмы", "риски"),
    *("последствия", "mechanisms", "risks", "outcomes", "known", "find"),
}


def _quoted(user: str, label: str) -> str:
    found = re.search(rf'{label}: "(.*)"', user)
    return found.group(1) if found else user


def _line(user: str, label: str) -> str:
    found = re.search(rf"^{label}: (.*)$", user, re.M)
    return found.group(1).strip() if found else ""


# ---- the world ----------------------------------------------------------------------------------


@dataclass
class EvidenceWorld:
    web: Web
    llm: FakeService
    searxng: FakeService
    reader: FakeService
    script: EvidenceScript
    search: SearxngStandIn

    def settings(self) -> dict[str, Any]:
        return service_settings(self.llm, self.searxng, self.reader)

    def env(self) -> dict[str, str]:
        return {name: str(value) for name, value in self.settings().items()}


@contextmanager
def evidence_world(
    *,
    today: date | None = None,
    seed: int = 7,
    mistakes: Mistakes | None = None,
    engines: tuple[Engine, ...] = ENGINES,
    timeout_rate: float = 0.04,
    suspend_rate: float = 0.04,
    outage_rate: float = 0.02,
    llm_latency: float = 0.0,
    search_latency: float = 0.0,
    reader_latency: float = 0.0,
) -> Iterator[EvidenceWorld]:
    web = build_web(today, seed)
    script = EvidenceScript(web, mistakes or Mistakes(), seed)
    search = SearxngStandIn(web, engines, timeout_rate, suspend_rate, outage_rate, seed)
    with ExitStack() as stack:
        llm = stack.enter_context(
            FakeService({("POST", "/v1/chat/completions"): openai_chat(script)}, latency=llm_latency)
        )
        routes: dict[tuple[str, str], Route] = {("GET", "/search"): search, ("GET", "/config"): search.config}
        searxng = stack.enter_context(FakeService(routes, latency=search_latency))
        read = stack.enter_context(FakeService(fallback=reader_route(web), latency=reader_latency))
        yield EvidenceWorld(web=web, llm=llm, searxng=searxng, reader=read, script=script, search=search)
