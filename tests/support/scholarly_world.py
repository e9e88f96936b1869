"""Loopback stand-ins of the four scholarly indexes, speaking their real formats and failing
their real ways, over one small corpus of works (about Mixture of Tokens, like tests/support/world.py).

- OpenAlex `GET /works?search=&per-page=&mailto=`: `{"meta": {"count"…}, "results": [work…]}`;
  a work's DOI is a full https://doi.org/ link or null, its abstract only an
  `abstract_inverted_index` (null for some), its PDF in `best_oa_location.pdf_url`, its venue in
  `primary_location.source` (null for some). Relevance: works sharing at least half of the
  query's words. Rate: HTTP 429 `{"error": …, "message": …}` (`openalex_rate_limited`).
- arXiv `GET /api/query?search_query=all:a AND all:b&start&max_results`: an Atom feed with
  opensearch counts; every `all:` term must match (stop words ignored, as Lucene's analyser
  does); a query it cannot parse is HTTP 400 with a one-entry error feed; busy is 503 with
  Retry-After (`arxiv_busy`). Only works with an arXiv id are there.
- PubMed `esearch.fcgi` (JSON: `esearchresult.idlist`, `count` as a string; nothing found gives
  `errorlist.phrasesnotfound`) and `efetch.fcgi` (PubmedArticleSet XML); rate: HTTP 429
  `{"error":"API rate limit exceeded",…}` (`ncbi_rate_limited`). A record may lack an abstract
  and a DOI.
- Crossref `GET /works?query=&rows=&select=&mailto=`: `{"status": "ok", "message-type":
  "work-list", "message": {"items": […]}}`; titles and venues as lists, dates as date-parts,
  abstracts (when deposited) as JATS; rate: HTTP 429 with X-Rate-Limit headers
  (`crossref_rate_limited`).

The open-access PDF is a real PDF (text in a content stream, fonts and xref table) served by the
`files` service, so the document reader parses it as it parses an upload.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

from tests.support.fakes import FakeService, Fault, Request, Response

STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "does",
        "do",
        "for",
        "from",
        "how",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "to",
        "what",
        "where",
        "which",
        "with",
    ]
)
# What only the PDF holds (not the abstract): a report that cites it read the file.
PDF_ONLY_SENTENCE = (
    "In our experiments Mixture of Tokens matched the dense baseline perplexity with three times fewer "
    "training steps."
)


@dataclass(frozen=True)
class Work:
    key: str
    title: str
    authors: list[tuple[str, str]]  # (given, family)
    year: int
    venue: str
    abstract: str = ""
    doi: str = ""
    arxiv: str = ""
    pmid: str = ""
    pdf: bool = False
    in_openalex: bool = True
    in_crossref: bool = True

    def words(self) -> set[str]:
        return set(re.findall(r"[a-zа-яё0-9]+", f"{self.title} {self.abstract}".lower()))


CORPUS = [
    Work(
        "mot-continuous",
        "Mixture of Tokens: Continuous MoE through Cross-Example Aggregation",
        [("Szymon", "Antoniak"), ("Michał", "Krutul"), ("Maciej", "Pióro"), ("Sebastian", "Jaszczur")],
        2023,
        "arXiv",
        "Mixture of Tokens is a fully differentiable alternative to Mixture of Experts: tokens from "
        "different examples are mixed in groups before each expert, which avoids discrete routing.",
        doi="10.48550/arxiv.2310.15961",
        arxiv="2310.15961",
        pdf=True,
        in_crossref=False,
    ),
    Work(
        "mot-transition",
        "Scaling Mixture of Tokens with transition tuning",
        [("Anna", "Kowalska"), ("Jan", "Nowak")],
        2024,
        "Journal of Machine Learning Research",
        "Transition tuning lets a Mixture of Tokens model switch to sparse inference after training; "
        "larger token groups improve perplexity by three percent.",
        doi="10.1234/jmlr.2024.0077",
    ),
    Work(
        "mot-clinical",
        "Mixture of Tokens for clinical note classification: a randomized comparison",
        [("Maria", "Garcia"), ("Wei", "Zhang"), ("Olga", "Ivanova"), ("Tom", "Smith"), ("Ana", "Silva")],
        2022,
        "Journal of Biomedical Informatics",
        "Background: Sparse models are costly to train on clinical notes. Results: Mixture of Tokens "
        "classified discharge notes as accurately as Mixture of Experts at lower training cost.",
        doi="10.1016/j.jbi.2022.104155",
        pmid="36100001",
        in_openalex=False,
    ),
    Work(
        "mot-cohort",
        "Mixture of tokens in electronic health records: a cohort study",
        [("Li", "Chen")],
        2021,
        "BMC Medical Informatics",
        pmid="36100002",  # no DOI, no abstract: PubMed has many such records
        in_openalex=False,
        in_crossref=False,
    ),
    Work(
        "mot-speech",
        "Mixture of Tokens in speech recognition",
        [("Kenji", "Sato")],
        2024,
        "Proceedings of Interspeech",
        doi="10.21437/interspeech.2024-991",  # Crossref only, no abstract deposited
        in_openalex=False,
    ),
]


def query_words(text: str) -> list[str]:
    return [word for word in re.findall(r"[a-zа-яё0-9]+", text.lower()) if word not in STOP_WORDS]


def half_match(work: Work, text: str) -> int:
    """OpenAlex's and Crossref's relevance, roughly: how many query words the work has, or 0
    when it has fewer than half of them."""
    words = query_words(text)
    found = sum(word in work.words() for word in words)
    return found if words and found * 2 >= len(words) else 0


def ranked(works: list[Work], text: str) -> list[Work]:
    scored = [(half_match(work, text), index, work) for index, work in enumerate(works)]
    return [work for score, _i, work in sorted(scored, key=lambda row: (-row[0], row[1])) if score]


# --- A real PDF ----------------------------------------------------------------------------------


def text_pdf(lines: list[str]) -> bytes:
    """A one-page PDF whose text is `lines` (Helvetica, WinAnsi), with a correct xref table."""

    def literal(line: str) -> str:
        return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    content = "BT /F1 11 Tf 14 TL 56 760 Td " + " ".join(f"({literal(line)}) '" for line in lines) + " ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        "/Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(content.encode('latin-1'))} >>\nstream\n{content}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    start = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{start}\n%%EOF\n".encode()
    return out


PAPER_TEXT = [
    "Mixture of Tokens: Continuous MoE through Cross-Example Aggregation",
    "",
    "1 Introduction",
    "Mixture of Experts models route each token to a few experts, which makes training unstable.",
    "Mixture of Tokens instead mixes tokens from different examples in groups before each expert.",
    "",
    "4 Results",
    "In our experiments Mixture of Tokens matched the dense baseline perplexity with three times fewer",
    "training steps.",
    "Transition tuning converts a trained model to sparse inference without loss of quality.",
]


# --- The services --------------------------------------------------------------------------------


@dataclass
class ScholarlyWorld:
    openalex: FakeService
    arxiv: FakeService
    pubmed: FakeService
    crossref: FakeService
    files: FakeService
    mailto: str = "research@example.org"
    works: list[Work] = field(default_factory=lambda: list(CORPUS))

    def settings(self) -> dict[str, Any]:
        return {
            "OPENALEX_URL": self.openalex.url,
            "ARXIV_URL": self.arxiv.url,
            "PUBMED_URL": self.pubmed.url + "entrez/eutils",
            "CROSSREF_URL": self.crossref.url,
            "SCHOLARLY_MAILTO": self.mailto,
            "LIMIT_OPENALEX_RPS": 0,
            "LIMIT_ARXIV_RPM": 0,
            "LIMIT_PUBMED_RPS": 0,
            "LIMIT_CROSSREF_RPS": 0,
        }

    def pdf_url(self, work: Work) -> str:
        return f"{self.files.url}pdf/{work.arxiv}v1" if work.pdf else ""

    def requests(self) -> int:
        return sum(len(s.requests) for s in (self.openalex, self.arxiv, self.pubmed, self.crossref))


def _doi_link(doi: str) -> str | None:
    return f"https://doi.org/{doi}" if doi else None


def _inverted(text: str) -> dict[str, list[int]] | None:
    if not text:
        return None
    index: dict[str, list[int]] = {}
    for position, word in enumerate(text.split()):
        index.setdefault(word, []).append(position)
    return index


def _openalex_work(world: ScholarlyWorld, work: Work) -> dict[str, Any]:
    pdf = world.pdf_url(work)
    source = None if work.venue == "arXiv" else {"display_name": work.venue, "type": "journal"}
    return {
        "id": f"https://openalex.org/W{abs(hash(work.key)) % 10**10}",
        "doi": _doi_link(work.doi),
        "title": work.title,
        "display_name": work.title,
        "publication_year": work.year,
        "type": "preprint" if work.venue == "arXiv" else "article",
        "authorships": [
            {"author_position": "first" if i == 0 else "middle", "author": {"display_name": f"{g} {f}"}}
            for i, (g, f) in enumerate(work.authors)
        ],
        "primary_location": {"source": source, "landing_page_url": _doi_link(work.doi), "pdf_url": None},
        "best_oa_location": {"pdf_url": pdf, "landing_page_url": None} if pdf else None,
        "open_access": {"is_oa": bool(pdf), "oa_url": pdf or None, "oa_status": "green" if pdf else "closed"},
        "abstract_inverted_index": _inverted(work.abstract),
    }


def openalex_routes(world: ScholarlyWorld) -> dict[tuple[str, str], Any]:
    def works(request: Request) -> Response:
        text = request.param("search")
        try:
            per_page = int(request.param("per-page", "25"))
        except ValueError:
            return Response(
                400, {"error": "Invalid query parameters error.", "message": "per-page is not an int"}
            )
        found = ranked([w for w in world.works if w.in_openalex], text)
        results = [_openalex_work(world, work) for work in found[:per_page]]
        return Response(
            200, {"meta": {"count": len(found), "page": 1, "per_page": per_page}, "results": results}
        )

    return {("GET", "/works"): works}


def openalex_rate_limited() -> Fault:
    return Fault(429, body={"error": "Rate limit exceeded", "message": "Too many requests; slow down."})


ATOM_HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom" '
    'xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/" xmlns:arxiv="http://arxiv.org/schemas/atom">\n'
    '  <title type="html">ArXiv Query: {query}</title>\n  <id>http://arxiv.org/api/q</id>\n'
    "  <updated>2026-11-28T00:00:00-05:00</updated>\n"
    "  <opensearch:totalResults>{total}</opensearch:totalResults>\n"
    "  <opensearch:startIndex>0</opensearch:startIndex>\n"
    "  <opensearch:itemsPerPage>{per_page}</opensearch:itemsPerPage>\n"
)


def _atom(body: str, status: int = 200) -> Response:
    return Response(status, body.encode(), {"Content-Type": "application/atom+xml; charset=utf-8"})


def _arxiv_entry(world: ScholarlyWorld, work: Work) -> str:
    authors = "".join(
        f"    <author>\n      <name>{escape(g)} {escape(f)}</name>\n    </author>\n" for g, f in work.authors
    )
    # Titles and summaries come with hard line breaks and indentation, as arXiv's do.
    title = escape(work.title).replace(": ", ":\n  ", 1)
    return (
        "  <entry>\n"
        f"    <id>http://arxiv.org/abs/{work.arxiv}v1</id>\n"
        f"    <updated>{work.year}-10-24T17:57:11Z</updated>\n"
        f"    <published>{work.year}-10-24T17:57:11Z</published>\n"
        f"    <title>{title}</title>\n"
        f"    <summary>  {escape(work.abstract)}\n</summary>\n"
        f"{authors}"
        f'    <link href="http://arxiv.org/abs/{work.arxiv}v1" rel="alternate" type="text/html"/>\n'
        f'    <link title="pdf" href="{world.pdf_url(work)}" rel="related" type="application/pdf"/>\n'
        '    <arxiv:primary_category term="cs.LG" scheme="http://arxiv.org/schemas/atom"/>\n'
        "  </entry>\n"
    )


def arxiv_routes(world: ScholarlyWorld) -> dict[tuple[str, str], Any]:
    def query(request: Request) -> Response:
        expression = request.param("search_query")
        max_results = request.param("max_results", "10")
        terms = re.findall(r"all:([^\s()]+)", expression)
        if not terms or not max_results.isdigit():
            error = (
                ATOM_HEAD.format(query=escape(expression), total=1, per_page=1)
                + "  <entry>\n    <id>http://arxiv.org/api/errors#incorrect_query</id>\n"
                "    <title>Error</title>\n    <summary>incorrect search_query or max_results</summary>\n"
                "  </entry>\n</feed>\n"
            )
            return _atom(error, 400)
        words = [t.lower() for t in terms if t.lower() not in STOP_WORDS]
        found = [w for w in world.works if w.arxiv and all(word in w.words() for word in words)]
        found = found[: int(max_results)]
        feed = ATOM_HEAD.format(query=escape(expression), total=len(found), per_page=max_results)
        return _atom(feed + "".join(_arxiv_entry(world, work) for work in found) + "</feed>\n")

    return {("GET", "/api/query"): query}


def arxiv_error(reason: str) -> Fault:
    """arXiv's answer to a query it cannot read: HTTP 400 with a one-entry error feed."""
    feed = (
        ATOM_HEAD.format(query="", total=1, per_page=1)
        + "  <entry>\n    <id>http://arxiv.org/api/errors#incorrect_query</id>\n"
        f"    <title>Error</title>\n    <summary>{escape(reason)}</summary>\n  </entry>\n</feed>\n"
    )
    return Fault(400, headers={"Content-Type": "application/atom+xml"}, body=feed.encode())


def arxiv_busy() -> Fault:
    return Fault(503, headers={"Retry-After": "0"}, body="Service Unavailable")


def _pubmed_match(work: Work, term: str) -> bool:
    words = query_words(term)
    return bool(work.pmid) and bool(words) and all(word in work.words() for word in words)


def _pubmed_article(work: Work) -> str:
    authors = "".join(
        f'<Author ValidYN="Y"><LastName>{escape(f)}</LastName><ForeName>{escape(g)}</ForeName></Author>'
        for g, f in work.authors
    )
    abstract = ""
    if work.abstract:
        parts = re.split(r"(?:^|\s)(Background|Results): ", work.abstract)
        labelled = [(parts[i], parts[i + 1]) for i in range(1, len(parts) - 1, 2)]
        texts = labelled or [("", work.abstract)]
        abstract = (
            "<Abstract>"
            + "".join(
                f'<AbstractText Label="{label.upper()}">{escape(text.strip())}</AbstractText>'
                if label
                else f"<AbstractText>{escape(text)}</AbstractText>"
                for label, text in texts
            )
            + "</Abstract>"
        )
    ids = f'<ArticleId IdType="pubmed">{work.pmid}</ArticleId>'
    if work.doi:
        ids += f'<ArticleId IdType="doi">{work.doi}</ArticleId>'
    return (
        '<PubmedArticle><MedlineCitation Status="MEDLINE" Owner="NLM">'
        f'<PMID Version="1">{work.pmid}</PMID><Article PubModel="Print">'
        '<Journal><JournalIssue CitedMedium="Internet">'
        f"<PubDate><Year>{work.year}</Year></PubDate></JournalIssue>"
        f"<Title>{escape(work.venue)}</Title></Journal>"
        f"<ArticleTitle>{escape(work.title)}.</ArticleTitle>{abstract}"
        f'<AuthorList CompleteYN="Y">{authors}</AuthorList></Article></MedlineCitation>'
        f"<PubmedData><ArticleIdList>{ids}</ArticleIdList></PubmedData></PubmedArticle>"
    )


def pubmed_routes(world: ScholarlyWorld) -> dict[tuple[str, str], Any]:
    def esearch(request: Request) -> Response:
        term = request.param("term")
        if request.param("db") != "pubmed":
            return Response(
                200, {"esearchresult": {"ERROR": "Invalid db name specified: " + request.param("db")}}
            )
        if not term.strip():
            return Response(200, {"esearchresult": {"ERROR": "Empty term and query_key - nothing todo"}})
        found = [w.pmid for w in world.works if _pubmed_match(w, term)]
        retmax = int(request.param("retmax", "20"))
        result: dict[str, Any] = {
            "count": str(len(found)),
            "retmax": str(min(retmax, len(found))),
            "retstart": "0",
            "idlist": found[:retmax],
            "translationset": [],
            "querytranslation": term,
        }
        if not found:
            result["errorlist"] = {"phrasesnotfound": query_words(term), "fieldsnotfound": []}
        return Response(200, {"header": {"type": "esearch", "version": "0.3"}, "esearchresult": result})

    def efetch(request: Request) -> Response:
        wanted = request.param("id").split(",")
        articles = "".join(_pubmed_article(w) for w in world.works if w.pmid and w.pmid in wanted)
        body = (
            '<?xml version="1.0" ?>\n<!DOCTYPE PubmedArticleSet PUBLIC "-//NLM//DTD PubMedArticle, '
            '1st January 2025//EN" "https://dtd.nlm.nih.gov/ncbi/pubmed/out/pubmed_250101.dtd">\n'
            f"<PubmedArticleSet>{articles}</PubmedArticleSet>\n"
        )
        return Response(200, body.encode(), {"Content-Type": "text/xml; charset=UTF-8"})

    return {
        ("GET", "/entrez/eutils/esearch.fcgi"): esearch,
        ("GET", "/entrez/eutils/efetch.fcgi"): efetch,
    }


def ncbi_rate_limited() -> Fault:
    return Fault(
        429,
        headers={"Retry-After": "0"},
        body={"error": "API rate limit exceeded", "api-key": "127.0.0.1", "count": "4", "limit": "3"},
    )


def _crossref_item(world: ScholarlyWorld, work: Work) -> dict[str, Any]:
    item: dict[str, Any] = {
        "DOI": work.doi,
        "URL": f"http://dx.doi.org/{work.doi}",
        "type": "proceedings-article" if "Proceedings" in work.venue else "journal-article",
        "title": [work.title],
        "container-title": [work.venue],
        "author": [
            {"given": g, "family": f, "sequence": "first" if i == 0 else "additional"}
            for i, (g, f) in enumerate(work.authors)
        ],
        "issued": {"date-parts": [[work.year, 5]]},
    }
    if work.abstract:
        item["abstract"] = f"<jats:title>Abstract</jats:title><jats:p>{escape(work.abstract)}</jats:p>"
    return item


def crossref_routes(world: ScholarlyWorld) -> dict[tuple[str, str], Any]:
    def works(request: Request) -> Response:
        rows = request.param("rows", "20")
        if not rows.isdigit():
            message = [
                {
                    "type": "integer-not-valid",
                    "value": rows,
                    "message": "Integer specified as rows is not valid",
                }
            ]
            return Response(
                400, {"status": "failed", "message-type": "validation-failure", "message": message}
            )
        found = ranked([w for w in world.works if w.in_crossref and w.doi], request.param("query"))
        items = [_crossref_item(world, work) for work in found[: int(rows)]]
        listing = {"total-results": len(found), "items": items, "items-per-page": int(rows), "query": {}}
        return Response(
            200, {"status": "ok", "message-type": "work-list", "message-version": "1.0.0", "message": listing}
        )

    return {("GET", "/works"): works}


def crossref_rate_limited() -> Fault:
    return Fault(
        429,
        headers={"X-Rate-Limit-Limit": "5", "X-Rate-Limit-Interval": "1s", "Retry-After": "0"},
        body="Too many requests",
    )


@contextmanager
def scholarly_world() -> Iterator[ScholarlyWorld]:
    with ExitStack() as stack:
        openalex, arxiv, pubmed, crossref, files = (stack.enter_context(FakeService()) for _ in range(5))
        world = ScholarlyWorld(openalex, arxiv, pubmed, crossref, files)
        world.openalex.routes.update(openalex_routes(world))
        world.arxiv.routes.update(arxiv_routes(world))
        world.pubmed.routes.update(pubmed_routes(world))
        world.crossref.routes.update(crossref_routes(world))
        pdf = text_pdf(PAPER_TEXT)

        def paper_file(request: Request) -> Response:
            return Response(200, pdf, {"Content-Type": "application/pdf"})

        for work in world.works:
            if work.pdf:
                world.files.routes[("GET", f"/pdf/{work.arxiv}v1")] = paper_file
        yield world
