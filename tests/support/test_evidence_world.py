"""The evidence world (tests/support/evidence_world.py): its web is what bench/evidence.py says it
is, its SearXNG behaves as the real one does, its LLM's mistakes are recorded, and a topic runs
through the real pipeline against it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import date, timedelta
from typing import Any

import httpx
import pytest

from tests.support.evidence_world import (
    ENGINES,
    EvidenceScript,
    Mistakes,
    Web,
    build_web,
    evidence_world,
    normalise,
)

TODAY = date(2026, 11, 23)


@pytest.fixture(scope="module")
def web() -> Web:
    return build_web(TODAY)


def live_text(web: Web) -> dict[str, str]:
    """What the reader returns for each readable page."""
    return {
        url: page.reader_text or page.text
        for url, page in web.pages.items()
        if page.kind in ("article", "digest", "paywall")
    }


def test_the_web_is_large_and_every_fact_can_be_read(web: Web) -> None:
    assert len(web.pages) >= 300 and len(web.hosts) >= 40
    assert sum(q.language == "ru" for q in web.questions) >= 3
    readable = {url: normalise(text) for url, text in live_text(web).items()}
    for question in web.questions:
        assert len(question.facts) >= 5 and question.relevant_urls, question.id
        for phrases in question.facts:
            # Each fact is on a page the reader serves in full, and that page is a relevant one.
            holders = {url for url, text in readable.items() if any(normalise(p) in text for p in phrases)}
            assert holders & question.relevant_urls, (question.id, phrases)
            assert all(web.pages[url].kind != "paywall" for url in holders & question.relevant_urls)
        for phrase in question.noise_facts:
            assert any(normalise(phrase) in text for text in readable.values()), (question.id, phrase)
            assert not question.facts_in(phrase)


def test_layouts_put_the_facts_where_the_questions_say(web: Web) -> None:
    by_layout: dict[str, list] = {}
    for question in web.questions:
        by_layout.setdefault(question.layout, []).append(question)
    for question in by_layout["one_host"]:
        assert len({url.split("/")[2] for url in question.relevant_urls}) == 1
    for question in by_layout["dated"]:
        assert re.search(r"past 6 months|последние полгода", question.text)
        for url in question.relevant_urls:
            published = web.pages[url].published
            assert published is not None and TODAY - published <= timedelta(days=183)
        old = [
            p
            for p in web.pages.values()
            if any(normalise(f) in normalise(p.text) for f in question.noise_facts)
        ]
        assert any(TODAY - p.published > timedelta(days=365) for p in old if p.published)
    for question in by_layout["long_pages"]:
        digests = [web.pages[url] for url in question.relevant_urls if web.pages[url].kind == "digest"]
        assert digests
        for digest in digests:
            assert len(digest.docs) == 12 and len(digest.text) > 10_000
            text = normalise(digest.text)
            offsets = [text.find(normalise(p)) for phrases in question.facts for p in phrases]
            # The fact sits past the first eight abstracts, thousands of characters in.
            assert max(offsets) > 8_000
    wiki = by_layout["wiki"][0]
    assert {url.split("/")[2] for url in wiki.relevant_urls} == {"ru.wikipedia.org", "en.wikipedia.org"}
    kinds = {page.kind for page in web.pages.values()}
    assert {"dead", "redirect", "paywall", "digest"} <= kinds


@pytest.fixture
def search_world() -> Iterator[Any]:
    with evidence_world(today=TODAY, timeout_rate=0, suspend_rate=0, outage_rate=0) as world:
        yield world


def searx(world: Any, **params: Any) -> dict[str, Any]:
    response = httpx.get(f"{world.searxng.url}search", params={"format": "json", **params}, timeout=10)
    response.raise_for_status()
    return response.json()


def test_searxng_skips_engines_without_time_range_support(search_world: Any) -> None:
    plain = searx(search_world, q="type 2 diabetes")
    assert {"bing", "mojeek"} & {engine for r in plain["results"] for engine in r["engines"]}
    filtered = searx(search_world, q="type 2 diabetes", time_range="year")
    supporting = {engine.name for engine in ENGINES if engine.time_range}
    assert filtered["results"]
    for result in filtered["results"]:
        assert set(result["engines"]) <= supporting
        assert date.fromisoformat(result["publishedDate"][:10]) >= TODAY - timedelta(days=365)
    # An instance whose engines all lack time-range support answers a time range with nothing.
    search_world.search.engines = tuple(replace(engine, time_range=False) for engine in ENGINES)
    assert searx(search_world, q="type 2 diabetes", time_range="month")["results"] == []
    assert searx(search_world, q="type 2 diabetes")["results"]


def test_searxng_pages_ten_results_per_engine_and_skips_engines_without_paging(search_world: Any) -> None:
    first = searx(search_world, q="cancer cells", pageno=1)
    second = searx(search_world, q="cancer cells", pageno=2)
    for page in (first, second):
        counts: dict[str, int] = {}
        for result in page["results"]:
            for engine in result["engines"]:
                counts[engine] = counts.get(engine, 0) + 1
        assert counts and max(counts.values()) <= 10
    assert not {"duckduckgo", "wikipedia"} & {e for r in second["results"] for e in r["engines"]}
    assert {r["url"] for r in first["results"]} != {r["url"] for r in second["results"]}
    assert set(first) >= {"query", "number_of_results", "results", "unresponsive_engines", "suggestions"}


def test_searxng_runs_only_the_engines_of_the_categories_asked(search_world: Any) -> None:
    def engines(**params: Any) -> set[str]:
        return {
            e for r in searx(search_world, q="malaria parasites", **params)["results"] for e in r["engines"]
        }

    assert "semantic scholar" not in engines() and "bing news" not in engines()
    assert "semantic scholar" in engines(categories="science,general")
    news = searx(search_world, q="malaria parasites", categories="news")["results"]
    assert news and {e for r in news for e in r["engines"]} == {"bing news"}
    assert all(r["publishedDate"] and r["category"] == "news" for r in news)


def test_searxng_reports_unresponsive_engines_as_name_and_reason() -> None:
    with evidence_world(today=TODAY, outage_rate=1.0) as world:
        down = searx(world, q="malaria")
        assert down["results"] == []
        general = sorted(e.name for e in ENGINES if "general" in e.categories)
        assert sorted(name for name, _ in down["unresponsive_engines"]) == general
        assert all(reason == "timeout" for _, reason in down["unresponsive_engines"])
    with evidence_world(today=TODAY, suspend_rate=1.0, outage_rate=0, timeout_rate=0) as world:
        suspended = dict(searx(world, q="malaria")["unresponsive_engines"])
        assert suspended["duckduckgo"] == "Suspended: CAPTCHA"
        assert suspended["bing"] == "Suspended: too many requests"


def test_reader_serves_dead_links_redirects_and_paywalls_as_a_reader_does(search_world: Any) -> None:
    pages = search_world.web.pages
    by_kind = {kind: next(url for url, page in pages.items() if page.kind == kind) for kind in
               ("dead", "redirect", "paywall")}  # fmt: skip
    read = {kind: httpx.get(search_world.reader.url + url, timeout=10) for kind, url in by_kind.items()}
    assert read["dead"].status_code == 422
    assert f"URL Source: {pages[by_kind['redirect']].final_url}" in read["redirect"].text
    assert "Subscribe to continue reading" in read["paywall"].text
    assert normalise(pages[by_kind["paywall"]].text)[-200:] not in normalise(read["paywall"].text)


def answer_request(web: Web, question_id: str) -> tuple[str, str]:
    question = next(q for q in web.questions if q.id == question_id)
    urls = sorted(question.relevant_urls)[:3]
    blocks = [
        f"[{n}] {web.pages[url].title}\n{url}\n\n{web.pages[url].text}" for n, url in enumerate(urls, 1)
    ]
    body = "\n\n---\n\n".join(blocks)
    return question.text, f"Исходный запрос: {question.text}\n\nИсточники:\n<<<ДАННЫЕ\n{body}\nДАННЫЕ>>>"


def test_the_llm_plants_claims_it_records_and_its_checker_finds_them(web: Web) -> None:
    mistakes = replace(Mistakes.none(), planted_claim=1.0, bad_citation=1.0)
    script = EvidenceScript(web, mistakes)
    question, request = answer_request(web, "vitamin-d")
    report = script([{"role": "system", "content": "answer"}, {"role": "user", "content": request}])
    assert script.planted and all(p.sentence in report for p in script.planted)
    assert script.bad_citations and f"[{script.bad_citations[0][1]}]" in report
    assert len(next(q for q in web.questions if q.id == "vitamin-d").facts_in(report)) >= 2
    planted = script.planted[0]
    source = request.split(f"\n[{planted.cited}] ", 1)[-1].split("\n---\n", 1)[0]
    copied = re.sub(r"\s*\[\d+\]", "", report.split("## What the sources show\n\n")[1]).split(". ")[0]
    claims = [("1", planted.sentence.rsplit(" [", 1)[0], source), ("2", copied, request)]
    check = "\n\n".join(f"### {n}\nУтверждение: {c}\nИсточник [1]:\n{s}" for n, c, s in claims)
    messages = [
        {"role": "system", "content": "Ты – внимательный редактор-фактчекер."},
        {"role": "user", "content": f"Исходный запрос: {question}\n\n<<<ДАННЫЕ\n{check}\nДАННЫЕ>>>"},
    ]
    verdicts = {row["id"]: row["verdict"] for row in json.loads(script(messages))}
    assert verdicts == {1: "unsupported", 2: "supported"}


@pytest.mark.django_db(transaction=True)
def test_a_quick_topic_runs_end_to_end(settings: Any, alice: Any) -> None:
    from research.models import Report, Topic
    from research.pipeline.run import plan_topic, run_topic

    with evidence_world(today=TODAY, mistakes=Mistakes.none()) as world:
        for name, value in world.settings().items():
            setattr(settings, name, value)
        question = next(q for q in world.web.questions if q.id == "influenza")
        topic = Topic.objects.create(owner=alice, question=question.text, mode="quick", auto_approve=True)
        assert plan_topic(topic.pk)
        run_topic(topic.pk)
        topic.refresh_from_db()
        assert topic.status == Topic.Status.COMPLETED, topic.error
        report = Report.objects.get(topic=topic)
        assert report.sources and question.facts_in(report.markdown)
        assert world.script.calls["answer"] >= 1 and world.searxng.requests and world.reader.requests
