"""A loopback web whose facts are spread so that one round of search cannot find them all.

The question is about the (fictional) Kestrel consensus protocol. The pages a first search
finds mention the Merlin ballot scheme and the Osprey protocol, which only a search for those
names finds; their pages in turn mention the Harrier audit and the Gannet scheduler; after
that nothing new is left. Every page sits on a site of its own (a loopback address of its own:
127.0.0.2, 127.0.0.3, …), except two Kestrel pages that share one, to show the per-site cap.
One long handbook page keeps its fact deep inside, past what a whole-page excerpt would keep.

The reader serves every page, so nothing listens on those addresses. The scripted LLM answers
every prompt deterministically in the real wire format; `expand` proposes the names it reads in
the summaries, like a model that follows the leads it was given. Used by tests/research and
bench/deep.py.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.support.fakes import FakeService, Request, openai_chat, reader, searxng_search
from tests.support.world import citecheck_reply, prompt_kind, service_settings

QUESTION = "Tell me about the Kestrel consensus protocol: how it works, where it is used and what replaced it"
RESULTS_PER_PAGE = 10


@dataclass(frozen=True)
class Page:
    slug: str
    site: int  # the last byte of its loopback address
    title: str
    keywords: str  # a search whose words meet these finds the page
    relevance: int  # what the scripted LLM scores it, 0–10
    text: str  # Markdown
    fact: str = ""  # the phrase that shows the fact was found

    @property
    def url(self) -> str:
        return f"http://127.0.0.{self.site}/pages/{self.slug}"


def _handbook() -> str:
    filler = (
        "Operators keep a log of every maintenance window, with the start and end time, the "
        "people on call and the changes applied. Backups are copied to a second data centre "
        "every night and restored once a month to prove they work. "
    )
    sections = [f"## Maintenance routine {i}\n\n{filler * 8}" for i in range(1, 13)]
    sections.insert(
        9,
        "## Commit rule\n\nIn the Kestrel consensus protocol a block is final once three of "
        "four nodes have signed it; a signed block is never rolled back.",
    )
    return "# Kestrel operations handbook\n\n" + "\n\n".join(sections)


PAGES = [
    Page("kestrel-overview", 2, "The Kestrel consensus protocol", "kestrel consensus protocol works", 9,
         "Kestrel commits a block after two message rounds. Kestrel is a leader-based consensus "
         "protocol for permissioned ledgers. Its leader election comes from the Merlin ballot scheme.",
         "two message rounds"),
    Page("kestrel-notes", 2, "Kestrel implementation notes", "kestrel consensus protocol implementation", 8,
         "Kestrel nodes exchange signed votes over mutual TLS. The reference implementation is "
         "written in Go.", "signed votes"),
    Page("kestrel-deployments", 3, "Where the Kestrel protocol is used", "kestrel consensus protocol used", 9,
         "Kestrel runs the cargo ledger of the Nordvik port authority. In 2019 the authority moved "
         "to the Osprey protocol.", "Nordvik port authority"),
    Page("kestrel-paper", 4, "Kestrel: the original paper", "kestrel consensus protocol paper works", 8,
         "Kestrel tolerates one faulty node in four. The paper appeared at a 2014 workshop on "
         "distributed ledgers.", "one faulty node in four"),
    Page("kestrel-handbook", 10, "Kestrel operations handbook", "kestrel consensus protocol handbook", 7,
         _handbook(), "three of four nodes have signed"),
    Page("merlin", 5, "The Merlin ballot scheme", "merlin ballot", 8,
         "The Merlin ballot scheme elects a leader by sealed bids each epoch. Its weakness to bid "
         "withholding was fixed by the Harrier audit.", "sealed bids"),
    Page("osprey", 6, "The Osprey protocol", "osprey sharding", 9,
         "Osprey added sharding and replaced Kestrel at Nordvik in 2019. Osprey shards are "
         "balanced by the Gannet scheduler.", "added sharding"),
    Page("harrier", 7, "The Harrier audit", "harrier audit", 8,
         "The Harrier audit checks every sealed bid against a public commitment.", "public commitment"),
    Page("gannet", 8, "The Gannet scheduler", "gannet scheduler", 8,
         "The Gannet scheduler moves hot accounts between shards every hour.", "hot accounts"),
    Page("raft", 11, "Raft consensus explained", "consensus raft", 4,
         "Raft elects a leader with randomised timeouts and replicates a log."),
    Page("paxos", 12, "Paxos made simple", "consensus paxos", 4,
         "Paxos reaches agreement with proposers, acceptors and learners."),
    Page("birds", 13, "The common kestrel, a small falcon", "kestrel bird falcon", 1,
         "The common kestrel hovers over fields while it hunts voles."),
]  # fmt: skip
FACTS = {page.slug: page.fact for page in PAGES if page.fact}
# Found by a first round of search; the other facts need later rounds.
FIRST_ROUND_FACTS = {slug for slug in FACTS if slug.startswith("kestrel")}

SUBQUERIES = (
    "How does the Kestrel consensus protocol work?",
    "Where is the Kestrel consensus protocol used?",
    "What replaced the Kestrel consensus protocol?",
)
# What a model falls back on when the summaries name nothing new: real questions, no leads.
GENERIC_PROPOSALS = (
    ("Kestrel consensus protocol performance benchmarks", 4),
    ("Kestrel consensus protocol security analysis", 4),
    ("Kestrel consensus protocol history", 3),
    ("Kestrel consensus protocol criticism", 3),
)
_LEAD = re.compile(r"\b(?:the )?((?:[A-Z][a-z]+ )+(?:ballot scheme|protocol|audit|scheduler))\b")
_WORD = re.compile(r"[a-zа-яё0-9]+")


@dataclass
class DeepScript:
    """Answers every MindSearch prompt about the Kestrel web; counts calls per prompt kind."""

    calls: Counter = field(default_factory=Counter)
    answer_requests: list[str] = field(default_factory=list)

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        kind = prompt_kind(messages[0]["content"])
        self.calls[kind] += 1
        return getattr(self, kind)(messages[-1]["content"])

    def route(self, user: str) -> str:
        return json.dumps({"domain": "general", "needs_search": True})

    def direct(self, user: str) -> str:
        return "Hello! Ask me about a topic."

    def plan(self, user: str) -> str:
        return "\n".join(f"ПОДЗАПРОС: {text}" for text in SUBQUERIES)

    def queries(self, user: str) -> str:
        found = re.search(r'Тема: "(.*)"', user)
        assert found is not None, user
        topic = found.group(1).rstrip("?")
        plain = " ".join(_WORD.findall(topic.lower()))
        return f"ЗАПРОС: {plain}\nЗАПРОС: {plain} overview"

    def score(self, user: str) -> str:
        titles = re.findall(r"^\d+\. Заголовок: (.*)$", user, re.M)
        keys = ["соответствие_запросу", "соответствие_направлению", "полнота", "точность", "структура"]
        rows = [{"заголовок": title, **dict.fromkeys(keys, _relevance(title))} for title in titles]
        return json.dumps(rows, ensure_ascii=False)

    def summarise(self, user: str) -> str:
        body = user.split("<<<ДАННЫЕ", 1)[-1].rsplit("ДАННЫЕ>>>", 1)[0]
        sentences = [s.strip() for s in re.findall(r"[^.!?\n]+[.!?]", body) if not _filler(s)]
        return " ".join(sentences[:4])

    def expand(self, user: str) -> str:
        asked = user.split("Уже заданные подзапросы:", 1)[-1].split("Найдено по этому направлению:", 1)[0]
        found = user.split("<<<ДАННЫЕ", 1)[-1]
        leads = dict.fromkeys(lead for lead in _LEAD.findall(found) if "Kestrel" not in lead)
        lines = [f"ПОДЗАПРОС: {lead} | ОЦЕНКА: 8" for lead in leads if lead.lower() not in asked.lower()]
        lines += [
            f"ПОДЗАПРОС: {text} | ОЦЕНКА: {score}" for text, score in GENERIC_PROPOSALS if text not in asked
        ]
        return "\n".join(lines[:5])

    def citecheck(self, user: str) -> str:
        return citecheck_reply(user, lambda claim, passage: True)

    def answer(self, user: str) -> str:
        self.answer_requests.append(user)
        numbers = re.findall(r"^\[(\d+)\] ", user, re.M)
        cited = " ".join(f"[{n}]" for n in numbers)
        body = f"## Introduction\n\nKestrel is a consensus protocol {cited}.\n\n## Conclusion\n\nDone [1]."
        return f"# Kestrel\n\n{body}"


def _filler(sentence: str) -> bool:
    return any(words in sentence for words in ("Operators keep", "Backups are", "restored once"))


def _relevance(title: str) -> int:
    return next((page.relevance for page in PAGES if page.title.lower() == title.lower()), 3)


def search_pages(request: Request) -> list[dict]:
    """SearXNG's answer: pages sharing words with the query, most shared words first."""
    words = set(_WORD.findall(request.param("q").lower()))
    found = [page for page in PAGES if words & set(page.keywords.split())]
    found.sort(key=lambda page: (-len(words & set(page.keywords.split())), page.slug))
    return [
        {"url": page.url, "title": page.title, "content": page.text[:160]}
        for page in found[:RESULTS_PER_PAGE]
    ]


@dataclass
class DeepWorld:
    llm: FakeService
    searxng: FakeService
    reader: FakeService
    script: DeepScript

    def settings(self) -> dict[str, Any]:
        return service_settings(self.llm, self.searxng, self.reader)

    def env(self) -> dict[str, str]:
        return {name: str(value) for name, value in self.settings().items()}

    def external_requests(self) -> int:
        return sum(len(service.requests) for service in (self.llm, self.searxng, self.reader))


def facts_in(text: str) -> set[str]:
    return {slug for slug, phrase in FACTS.items() if phrase in text}


@contextmanager
def deep_world(
    *,
    llm_latency: float = 0.0,
    search_latency: float = 0.0,
    reader_latency: float = 0.0,
    settings: Any = None,
) -> Iterator[DeepWorld]:
    """The Kestrel web; with pytest-django's `settings`, this process's settings point at it."""
    script = DeepScript()
    readable = {page.url: (page.title, page.text) for page in PAGES}
    with ExitStack() as stack:
        llm = stack.enter_context(
            FakeService({("POST", "/v1/chat/completions"): openai_chat(script)}, latency=llm_latency)
        )
        searxng = stack.enter_context(
            FakeService({("GET", "/search"): searxng_search(search_pages)}, latency=search_latency)
        )
        read = stack.enter_context(FakeService(fallback=reader(readable), latency=reader_latency))
        world = DeepWorld(llm=llm, searxng=searxng, reader=read, script=script)
        if settings is not None:
            for name, value in world.settings().items():
                setattr(settings, name, value)
        yield world
