"""A small loopback internet for end-to-end research runs: LLM, SearXNG, the reader and web pages.

The pages are about Mixture of Tokens (the README's example question). The scripted LLM answers
each prompt of research/pipeline/prompts/ the way a real model would, in the real wire format,
deterministically: it plans three sub-queries, writes Russian and English queries, scores hits
(shuffled and re-cased, to exercise title matching), summarises and writes a cited report. Used
by tests and by bench/.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.support.fakes import FakeService, Pace, Request, html_page, openai_chat, reader, searxng_search

RESULTS_PER_PAGE = 10
TOPIC = "Расскажи об Mixture of Tokens, в том числе где используется и какие есть улучшения"

# (slug, title, keywords that make SearXNG return it, relevance 0–10 the LLM gives it, text)
PAGES = [
    (
        "mot-paper",
        "Mixture of Tokens: Efficient LLMs through Cross-Example Aggregation",
        "mixture tokens что такое",
        10,
        "Mixture of Tokens is a fully differentiable alternative to Mixture of Experts. "
        "Tokens from different examples are mixed in groups before each expert, "
        "so every expert sees a weighted blend. "
        "The method avoids discrete routing and token dropping, and trains stably at scale.",
    ),
    (
        "mot-blog",
        "Что такое Mixture of Tokens — разбор",
        "mixture tokens что такое смесь токенов",
        9,
        "Mixture of Tokens (MoT) смешивает токены из разных примеров в группы. Каждый эксперт получает "
        "взвешенную смесь токенов. Это устраняет проблему нестабильной маршрутизации в MoE.",
    ),
    (
        "mot-uses",
        "Where Mixture of Tokens is used: language models and beyond",
        "mixture tokens used используется применение",
        9,
        "Mixture of Tokens is used in large language model pretraining, where it reduces training cost. "
        "It also applies to vision transformers and to autoregressive decoding with transition tuning.",
    ),
    (
        "mot-apps",
        "Применение Mixture of Tokens в NLP задачах",
        "mixture tokens применение используется nlp",
        8,
        "Mixture of Tokens применяется в предобучении языковых моделей и в задачах генерации текста. "
        "Метод совместим с авторегрессионным декодированием.",
    ),
    (
        "mot-improve",
        "Improvements to Mixture of Tokens: transition tuning and scaling",
        "mixture tokens improvements улучшения",
        9,
        "Transition tuning lets a Mixture of Tokens model switch to sparse inference. Later work scaled the "
        "group size and combined MoT with expert-choice routing, improving perplexity by 3%.",
    ),
    (
        "mot-improve-ru",
        "Улучшения Mixture of Tokens и их преимущества",
        "mixture tokens улучшения improvements преимущества",
        8,
        "Улучшения Mixture of Tokens включают transition tuning и увеличение размера групп. "
        "Преимущества: стабильное обучение и меньшая стоимость.",
    ),
    (
        "moe-intro",
        "Mixture of Experts explained",
        "mixture experts tokens",
        5,
        "Mixture of Experts routes each token to a few experts chosen by a gating network.",
    ),
    (
        "recipes",
        "Tokens for arcade machines: a collector's guide",
        "tokens",
        1,
        "Arcade tokens were minted by many companies in the 1980s.",
    ),
]


@dataclass
class ScriptedLLM:
    """Answers the pipeline's prompts; counts calls per prompt kind."""

    pages: list[tuple[str, str, str, int, str]] = field(default_factory=lambda: list(PAGES))
    queries_per_language: int = 2
    calls: Counter = field(default_factory=Counter)
    bad_citation: bool = True

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        system, user = messages[0]["content"], messages[-1]["content"]
        kind = prompt_kind(system)
        self.calls[kind] += 1
        return getattr(self, kind)(user)

    def plan(self, user: str) -> str:
        return (
            "Вот подзапросы:\n"
            "ПОДЗАПРОС: Что такое Mixture of Tokens в машинном обучении?\n"
            "- ПОДЗАПРОС: Где используется Mixture of Tokens и какие задачи решает?\n"
            "**ПОДЗАПРОС:** Какие есть улучшения Mixture of Tokens и их преимущества?"
        )

    def queries(self, user: str) -> str:
        found = re.search(r'Тема: "(.*)"', user)
        assert found is not None, user
        topic = found.group(1)
        aspect = (
            "что такое" if "Что такое" in topic else "применение" if "используется" in topic else "улучшения"
        )
        english = {"что такое": "what is", "применение": "where is it used", "улучшения": "improvements"}[
            aspect
        ]
        return (
            f"ЗАПРОС: Mixture of Tokens {aspect}\nЗАПРОС: смесь токенов {aspect}\n"
            f"ЗАПРОС: Mixture of Tokens {english}\nЗАПРОС: Mixture of Tokens {english} arxiv"
        )

    def score(self, user: str) -> str:
        titles = re.findall(r"^\d+\. Заголовок: (.*)$", user, re.M)
        rows = [self._row(title) for title in titles]
        random.Random(len(titles)).shuffle(rows)
        return "```json\n" + json.dumps(rows, ensure_ascii=False, indent=1) + "\n```"

    def _row(self, title: str) -> dict[str, Any]:
        relevance = next((page[3] for page in self.pages if page[1] == title), 3)
        keys = ["соответствие_запросу", "соответствие_направлению", "полнота", "точность", "структура"]
        return {"заголовок": title.upper() if relevance % 2 else title, **dict.fromkeys(keys, relevance)}

    def route(self, user: str) -> str:
        return '{"domain": "general", "needs_search": true}'

    def expand(self, user: str) -> str:
        return "ПОДЗАПРОС: Mixture of Tokens transition tuning | ОЦЕНКА: 7"

    def direct(self, user: str) -> str:
        return "Здравствуйте! Задайте тему для исследования."

    def summarise(self, user: str) -> str:
        body = user.split("<<<ДАННЫЕ", 1)[-1]
        sentences = re.findall(r"[^.!?\n]+[.!?]", body)
        return " ".join(sentence.strip() for sentence in sentences[:2])

    def citecheck(self, user: str) -> str:
        """A verifier that calls a claim supported when it shares a Latin term with its source."""

        def shares_a_term(claim: str, passage: str) -> bool:
            latin = {word.lower() for word in re.findall(r"[A-Za-z]{4,}", claim)}
            return bool(latin & {word.lower() for word in re.findall(r"[A-Za-z]{4,}", passage)})

        return citecheck_reply(user, shares_a_term)

    def answer(self, user: str) -> str:
        numbers = re.findall(r"^\[(\d+)\] ", user, re.M)
        cited = "".join(f"[{n}]" for n in numbers[:2])
        extra = " [99]" if self.bad_citation else ""
        return (
            "# Mixture of Tokens\n\n## Введение\n\nMixture of Tokens — непрерывная альтернатива MoE "
            f"{cited}.\n\n## Где используется\n\nВ предобучении языковых моделей [{numbers[-1]}].\n\n"
            f"## Улучшения\n\nTransition tuning{extra}.\n\n## Заключение\n\nМетод развивается [1].\n\n"
            "## Источники\n\n1. made-up source"
        )

    def section(self, user: str) -> str:
        """One section of a report along an outline: the first sentence of each source given, cited
        with its number, under a heading of its own (which the writer drops)."""
        title = re.search(r"^Раздел: (.*)$", user, re.M)
        blocks = re.findall(r"^\[(\d+)\] .*\n.*\n\n([\s\S]*?)(?=\n\n---\n\n\[\d+\] |\nДАННЫЕ>>>)", user, re.M)
        lines = []
        for n, text in blocks:
            prose = " ".join(
                line for line in text.splitlines() if line.strip() and not line.startswith(("#", "§"))
            )
            first = re.search(r"[^.!?]+[.!?]", prose)
            if first:
                lines.append(f"{first.group(0).strip()} [{n}]")
        return f"## {title.group(1) if title else ''}\n\n" + " ".join(lines)


def citecheck_reply(user: str, supported: Callable[[str, str], bool]) -> str:
    """The citation check's answer, as a model writes it: a fenced JSON array, one item per claim."""
    items = re.findall(
        r"^### (\d+)\nУтверждение: (.*?)\nИсточник \[\d+\]:\n(.*?)(?=\n\n### \d+\n|\nДАННЫЕ>>>)",
        user,
        re.M | re.S,
    )
    rows = [
        {
            "id": int(k),
            "verdict": "supported" if supported(claim, passage) else "unsupported",
            "reason": "checked",
        }
        for k, claim, passage in items
    ]
    return "Here is the check:\n```json\n" + json.dumps(rows, ensure_ascii=False, indent=1) + "\n```"


def prompt_kind(system: str) -> str:
    if "фактчекер" in system:
        return "citecheck"
    if "один раздел отчёта" in system:  # prompts/section.txt (a report along an outline)
        return "section"
    if "классификатор запросов" in system:
        return "route"
    if "следующего раунда" in system:
        return "expand"
    if "можно ответить без поиска" in system:
        return "direct"
    if "подзапросов" in system:
        return "plan"
    if "поисковые запросы" in system:
        return "queries"
    if "Оценить релевантность" in system:
        return "score"
    if "кратком изложении" in system:
        return "summarise"
    return "answer"


def notes(count: int) -> list[tuple[str, str, str, int, str]]:
    """Extra, less relevant pages, so that searches return full result pages (benchmarks)."""
    aspects = ["что такое", "применение используется", "улучшения improvements"]
    return [
        (
            f"note-{i}",
            f"Mixture of Tokens note {i}",
            f"mixture tokens {aspects[i % 3]}",
            2 + i % 6,
            f"Note {i} on Mixture of Tokens. It restates known facts about token mixing. {aspects[i % 3]}.",
        )
        for i in range(count)
    ]


def search_pages(base_url: str, pages: list[tuple[str, str, str, int, str]]) -> Any:
    """SearXNG's answer: pages sharing words with the query, best overlap first.

    Ties are broken by a hash of query and page, so different queries see different pages.
    """

    def results(request: Request) -> list[dict]:
        query = request.param("q").lower()
        # Words as a search engine reads them: "Mixture-of-Tokens?" and "(tokens" are words too.
        words = set(re.findall(r"\w+", query))

        def rank(page: tuple) -> tuple[int, str]:
            return -len(words & set(page[2].split())), hashlib.md5((query + page[0]).encode()).hexdigest()

        found = sorted((page for page in pages if words & set(page[2].split())), key=rank)
        return [
            {"url": f"{base_url}pages/{slug}?utm_source=searx", "title": title, "content": text[:120]}
            for slug, title, _, _, text in found[:RESULTS_PER_PAGE]
        ]

    return results


def service_settings(llm: FakeService, searxng: FakeService, reader: FakeService) -> dict[str, Any]:
    """Settings that point MindSearch at loopback fakes, with no rate limits to wait for. The
    model's window is stated, as a user of a hosted model would: the stand-in reports none, and
    asking it (`llm.context_window`) would add its GETs to the requests the tests count; a test of
    an unknown window sets AITUNNEL_CONTEXT_TOKENS to 0."""
    return {
        "AITUNNEL_BASE_URL": f"{llm.url}v1/",
        "AITUNNEL_API_KEY": "test-key",
        "AITUNNEL_MODEL": "test-model",
        "AITUNNEL_CONTEXT_TOKENS": 128_000,
        "SEARXNG_URL": searxng.url,
        "JINA_READER_URL": reader.url,
        "MINDSEARCH_ALLOW_PRIVATE_URLS": True,
        "LIMIT_SEARXNG_RPM": 0,
        "LIMIT_JINA_RPS": 0,
        "LIMIT_AITUNNEL_RPS": 0,
    }


@dataclass
class World:
    llm: FakeService
    searxng: FakeService
    reader: FakeService
    web: FakeService
    script: ScriptedLLM
    llm_pace: Pace | None = None

    def settings(self) -> dict[str, Any]:
        # Every page of this world is on one host; the per-site cap is tested on a world of
        # many sites (tests/support/deep_world.py).
        return {**service_settings(self.llm, self.searxng, self.reader), "RESEARCH_SOURCES_PER_SITE": 0}

    def env(self) -> dict[str, str]:
        return {name: str(value) for name, value in self.settings().items()}

    def external_requests(self) -> int:
        return sum(len(service.requests) for service in (self.llm, self.searxng, self.reader, self.web))

    def use_script(self, script: ScriptedLLM) -> None:
        """The LLM answers with `script` from now on: a ScriptedLLM subclass with other answers."""
        self.llm.routes[("POST", "/v1/chat/completions")] = openai_chat(script, pace=self.llm_pace)
        self.script = script


@contextmanager
def world(
    *,
    llm_latency: float = 0.0,
    search_latency: float = 0.0,
    reader_latency: float = 0.0,
    extra_pages: int = 0,
    queries_per_language: int = 2,
    llm_pace: Pace | None = None,
) -> Iterator[World]:
    pages = PAGES + notes(extra_pages)
    script = ScriptedLLM(pages=pages, queries_per_language=queries_per_language)
    with ExitStack() as stack:
        web = stack.enter_context(FakeService())
        for slug, title, _, _, text in pages:
            article = f"<article><h1>{title}</h1><p>{text}</p></article>"
            web.routes[("GET", f"/pages/{slug}")] = html_page(title, article)
        readable = {f"{web.url}pages/{p[0]}?utm_source=searx": (p[1], f"# {p[1]}\n\n{p[4]}") for p in pages}
        chat = {("POST", "/v1/chat/completions"): openai_chat(script, pace=llm_pace)}
        llm = stack.enter_context(FakeService(chat, latency=llm_latency))
        search = {("GET", "/search"): searxng_search(search_pages(web.url, pages))}
        searxng = stack.enter_context(FakeService(search, latency=search_latency))
        read = stack.enter_context(FakeService(fallback=reader(readable), latency=reader_latency))
        yield World(llm=llm, searxng=searxng, reader=read, web=web, script=script, llm_pace=llm_pace)


@contextmanager
def loopback_world(settings: Any, **options: Any) -> Iterator[World]:
    """The scripted world with the project's settings pointed at it."""
    with world(**options) as w:
        for name, value in w.settings().items():
            setattr(settings, name, value)
        yield w
