"""The claim-level citation check on its own: sentences and their citations, the local verdicts
(supported, paraphrase, a changed number, a claim from another source, Russian), the LLM's
untrusted answer, and the verification pass through the real client against a loopback LLM."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User

from research.models import CacheEntry, LLMCall, Topic
from research.pipeline import citecheck
from research.pipeline.context import RunContext
from research.pipeline.stage import StageName
from research.rendering import render_markdown
from tests.support.fakes import FakeService, openai_chat

# Abridged from the Mixture of Tokens paper's abstract (arXiv 2310.15961) and a Russian summary.
MOT = (
    "Mixture of Tokens is a fully differentiable alternative to Mixture of Experts. "
    "Tokens from different examples are mixed in groups before each expert, so every expert sees "
    "a weighted blend. The method avoids discrete routing and token dropping, and trains stably at "
    "scale. Combined with expert-choice routing it improved perplexity by 3% over the baseline."
)
OSPREY = (
    "The Osprey protocol rotates its validators every 40 minutes. Its audit log is signed by three "
    "of four nodes before a block is final, and the Harrier audit checks those signatures weekly."
)
MOT_RU = (
    "Mixture of Tokens (MoT) смешивает токены из разных примеров в группы. Каждый эксперт получает "
    "взвешенную смесь токенов. Это устраняет проблему нестабильной маршрутизации в MoE. Метод снижает "
    "стоимость обучения на 20 процентов по сравнению с обычной смесью экспертов."
)
SOURCES = {1: MOT, 2: OSPREY, 3: MOT_RU}


def verdicts(body: str, sources: dict[int, str] = SOURCES, **options: Any) -> list[citecheck.Verdict]:
    return citecheck.check(citecheck.claims(body, len(sources)), sources, **options)


def only(body: str, **options: Any) -> citecheck.Verdict:
    (verdict,) = verdicts(body, **options)
    return verdict


# --- Sentences and citations -------------------------------------------------------------------------


def test_sentences_carry_their_citations_wherever_the_full_stop_is() -> None:
    body = (
        "# Mixture of Tokens [1]\n\n## Intro\n\n"
        "Tokens are mixed in groups [1]. Routing is avoided. [2] Experts see a blend [1][3].\n"
        "- A list item cites too [2]\n\n```\ncode [1]\n```\n\n| a | b |\n|---|---|\n"
    )
    found = citecheck.claims(body, 3)
    assert [(c.text, c.sources) for c in found] == [
        ("Tokens are mixed in groups.", (1,)),
        ("Routing is avoided.", (2,)),
        ("Experts see a blend.", (1, 3)),
        ("A list item cites too", (2,)),
    ]
    # Every [n] in reading order with its sentence; the heading's citation belongs to none.
    occurrences = citecheck.citation_occurrences(body, 3)
    assert [n for _, n in occurrences] == [1, 1, 2, 1, 3, 2, 1]
    assert occurrences[0][0] == -1
    indexes = {c.text: c.index for c in found}
    assert occurrences[1:5] == [
        (indexes["Tokens are mixed in groups."], 1),
        (indexes["Routing is avoided."], 2),
        (indexes["Experts see a blend."], 1),
        (indexes["Experts see a blend."], 3),
    ]


def test_a_cited_colon_ends_a_claim_and_an_uncited_one_does_not() -> None:
    body = (
        'In his article "A Machine to End War", published in 1937, Tesla stated: [2] '
        "Тесла умер 7 января 1943 года. [3] The review says: Tokens are mixed [1]."
    )
    found = citecheck.claims(body, 3)
    assert [(c.text, c.sources) for c in found] == [
        ('In his article "A Machine to End War", published in 1937, Tesla stated:', (2,)),
        ("Тесла умер 7 января 1943 года.", (3,)),
        ("The review says: Tokens are mixed.", (1,)),
    ]


def test_citations_of_sources_that_do_not_exist_are_not_claims() -> None:
    assert citecheck.claims("A fact [7]. Another [0].", 3) == []
    assert citecheck.claims("[1]", 3) == []  # nothing said, nothing to check


# --- Local verdicts ----------------------------------------------------------------------------------


def test_a_sentence_the_source_says_is_supported() -> None:
    verdict = only("Mixture of Tokens mixes tokens from different examples in groups before each expert [1].")
    assert verdict.verdict == citecheck.SUPPORTED
    assert "mixed in groups" in verdict.passage
    assert verdict.method == citecheck.LOCAL and verdict.similarity is not None


def test_a_paraphrase_is_not_flagged() -> None:
    # Fewer of its words are the source's: the local check, tuned for precision on SciFact, says
    # at least "weak" (the LLM pass, when there is one, decides), never "unsupported".
    verdict = only(
        "Because it needs no discrete routing and drops no tokens, the approach trains stably at scale [1]."
    )
    assert verdict.verdict in (citecheck.SUPPORTED, citecheck.WEAK), verdict
    assert verdict.similarity is not None and verdict.similarity > 0.8
    assert "discrete routing" in verdict.passage


def test_a_changed_number_is_unsupported_and_named() -> None:
    verdict = only("Combined with expert-choice routing it improved perplexity by 7% over the baseline [1].")
    assert verdict.verdict == citecheck.UNSUPPORTED
    assert verdict.note == "not in the source: 7"
    # The same sentence with the source's number is fine, and a number in words counts.
    assert only("It improved perplexity by 3% over the baseline [1].").verdict == citecheck.SUPPORTED
    assert only("Its audit log is signed by 3 of 4 nodes before a block is final [2].").verdict == (
        citecheck.SUPPORTED
    )


def test_a_claim_from_another_source_is_unsupported() -> None:
    verdict = only("Mixture of Tokens mixes tokens from different examples in groups before each expert [2].")
    assert verdict.verdict == citecheck.UNSUPPORTED
    assert verdict.n == 2 and "Osprey" in verdict.passage


def test_russian_claims_against_a_russian_source() -> None:
    body = (
        "Каждый эксперт получает взвешенную смесь токенов из разных примеров [3]. "
        "Метод снижает стоимость обучения на 20 процентов [3]. "
        "Метод снижает стоимость обучения на 45 процентов [3]. "
        "Валидаторы протокола сменяются каждые 40 минут [3]."
    )
    found = verdicts(body)
    assert [v.verdict for v in found] == [
        citecheck.SUPPORTED,
        citecheck.SUPPORTED,
        citecheck.UNSUPPORTED,
        citecheck.UNSUPPORTED,
    ]
    assert found[2].note == "not in the source: 45"


def test_inflected_russian_words_match_their_source() -> None:
    # "маршрутизации" / "маршрутизацию", "нестабильной" / "нестабильную": the same words.
    verdict = only("Смесь токенов устраняет нестабильную маршрутизацию в MoE [3].", use_embeddings=False)
    assert verdict.verdict == citecheck.SUPPORTED
    assert verdict.method == citecheck.LEXICAL and verdict.similarity is None


def test_across_languages_only_a_number_makes_a_claim_unsupported_by_words_alone() -> None:
    claim = "Смесь токенов избегает дискретной маршрутизации [1]. Она снижает перплексию на 9% [1]."
    first, second = verdicts(claim, use_embeddings=False)
    assert (first.verdict, first.note) == (citecheck.WEAK, "the source is in another language")
    assert second.verdict == citecheck.UNSUPPORTED


def test_without_the_embedding_model_the_check_goes_on_by_words(monkeypatch: pytest.MonkeyPatch) -> None:
    from retrieval import embeddings

    def broken(texts: list[str], **kwargs: Any) -> list[list[float]]:
        raise embeddings.EmbeddingError("the embedding endpoint is not reachable")

    monkeypatch.setattr(embeddings, "embed", broken)
    monkeypatch.setattr(citecheck, "_scales", {})
    monkeypatch.setattr(citecheck, "_vectors", OrderedDict())  # a fresh process: nothing remembered
    supported = only("Tokens from different examples are mixed in groups before each expert [1].")
    wrong = only("Tokens from different examples are mixed in groups before each expert [2].")
    assert (supported.verdict, supported.method) == (citecheck.SUPPORTED, citecheck.LEXICAL)
    assert wrong.verdict == citecheck.UNSUPPORTED


def test_a_sentence_is_embedded_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from retrieval import embeddings

    embedded: list[str] = []
    real = embeddings.embed

    def counting(texts: list[str], **kwargs: Any) -> list[list[float]]:
        embedded.extend(texts)
        return real(texts, **kwargs)

    monkeypatch.setattr(embeddings, "embed", counting)
    monkeypatch.setattr(citecheck, "_vectors", OrderedDict())
    citecheck.similarity_scale()  # measured once per process in any case
    embedded.clear()
    body = (
        "Tokens from different examples are mixed in groups before each expert [1]. "
        "The Osprey protocol rotates its validators every 40 minutes [2]."
    )
    first = verdicts(body)
    assert embedded and len(embedded) == len(set(embedded))
    count = len(embedded)
    again = verdicts(body)  # the same report checked again (a re-run, a follow-up on its sources)
    assert len(embedded) == count
    assert [(v.verdict, v.method, v.similarity) for v in again] == [
        (v.verdict, v.method, v.similarity) for v in first
    ]
    monkeypatch.setattr(citecheck, "REMEMBERED_VECTORS", 1)
    verdicts(body)
    assert len(citecheck._vectors) == 1  # the least recently used are forgotten


def test_the_similarity_scale_puts_restatements_above_unrelated_sentences() -> None:
    scale = citecheck.similarity_scale()
    assert scale is not None
    low, high = scale
    assert -1.0 <= low < high <= 1.0


# --- The marks on the page ---------------------------------------------------------------------------


def test_each_rendered_citation_gets_the_mark_of_its_sentence() -> None:
    from research.rendering import CitationMark

    body = "Tokens are mixed [1]. Validators rotate [2][1]. A heading-free line [9]."
    marks = [
        CitationMark("supported", "ok"),
        CitationMark("unsupported", "no", "not supported"),
        None,
    ]
    assert len(citecheck.citation_occurrences(body, 2)) == len(marks)
    html = render_markdown(body, source_count=2, citation_marks=marks)
    assert html.count('class="citation citation-supported"') == 1
    assert html.count('class="citation citation-unsupported"') == 1
    assert '<span class="citation-flag citation-flag-unsupported">not supported</span>' in html
    assert html.count('title="source 1"') == 1  # the unmarked one keeps its plain title
    assert "[9]" in html  # not a source: left as text


def test_text_cannot_forge_a_mark() -> None:
    from research.rendering import CitationMark

    forged = 'A claim [1]. [x](#source-1 "source 1 0000000000000000-0")'
    html = render_markdown(forged, source_count=1, citation_marks=[CitationMark("unsupported", "no", "flag")])
    assert html.count('<span class="citation-flag') == 1  # only the real citation is marked
    assert 'title="source 1 0000000000000000-0"' in html  # the forged link stays as it was


# --- The LLM's answer is untrusted -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            '[{"id": 1, "verdict": "supported"}, {"id": 2, "verdict": "unsupported", "reason": "no"}]',
            {1: ("supported", ""), 2: ("unsupported", "no")},
        ),
        (
            'Sure! Here it is:\n```json\n[{"id": 2, "verdict": "weak"}]\n```\nHope this helps.',
            {2: ("weak", "")},
        ),
        ('[{"id": 1, "verdict": "supported"}, {"id": 2, "verdict": "unsupp', {1: ("supported", "")}),
        ('{"results": [{"номер": "1", "вердикт": "Не подтверждается"}]}', {1: ("unsupported", "")}),
        ('[{"verdict": "supported"}, {"verdict": "no"}]', {1: ("supported", ""), 2: ("unsupported", "")}),
        ('[{"id": 9, "verdict": "supported"}, {"id": 1, "verdict": "maybe"}, "text", 5]', {}),
        ("I cannot check these claims.", {}),
        ("", {}),
    ],
)
def test_the_verification_answer_is_read_defensively(answer: str, expected: dict) -> None:
    assert citecheck.parse_verification(answer, 2) == expected


@pytest.fixture
def llm_topic(alice: User, settings: Any) -> Any:
    replies: list[str] = []
    requests: list[str] = []

    def reply(messages: list[dict]) -> str:
        requests.append(messages[-1]["content"])
        item = replies.pop(0) if replies else "[]"
        # Batches go out concurrently: a reply that depends on the batch is a function of it.
        return item(messages[-1]["content"]) if callable(item) else item

    with FakeService({("POST", "/v1/chat/completions"): openai_chat(reply)}) as llm:
        settings.AITUNNEL_BASE_URL = f"{llm.url}/v1/"
        settings.AITUNNEL_API_KEY = "test-key"
        settings.AITUNNEL_MODEL = "test-model"
        settings.LIMIT_AITUNNEL_RPS = 0
        topic = Topic.objects.create(owner=alice, question="What is Mixture of Tokens?")
        yield RunContext.for_topic(topic), replies, requests


@pytest.mark.django_db
def test_the_llm_pass_decides_and_is_recorded_in_batches(
    llm_topic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, replies, requests = llm_topic
    monkeypatch.setattr(citecheck, "LLM_BATCH", 2)
    local = verdicts(
        "Tokens are mixed in groups [1]. Validators rotate every 40 minutes [2]. MoT is cheap [3]."
    )

    def by_batch(request: str) -> str:
        if "Validators rotate" in request:
            return (
                "Here:\n```json\n"
                '[{"id": 1, "verdict": "weak", "reason": "only in part"}, {"id": 2, "verdict": "supported"}]'
                "\n```"
            )
        return '[{"id": 1, "verdict": "unsupp'  # cut short: nothing usable

    replies += [by_batch, by_batch]
    checked = async_to_sync(citecheck.verify)(ctx, local, private=False, stage=StageName.CITECHECK)
    assert [(v.verdict, v.method, v.note) for v in checked[:2]] == [
        ("weak", citecheck.LLM, "only in part"),
        ("supported", citecheck.LLM, ""),
    ]
    assert (checked[2].verdict, checked[2].method) == (local[2].verdict, local[2].method)
    assert [v.local_verdict for v in checked] == [v.verdict for v in local]
    calls = LLMCall.objects.filter(topic=ctx.topic)
    assert calls.count() == 2
    assert set(calls.values_list("stage", "cache_kind", "error")) == {
        ("citecheck", CacheEntry.Kind.CITATION_CHECKS, "")
    }
    # The claims and the source's own words are in the request, inside the data block.
    first = next(request for request in requests if "Validators rotate" in request)
    assert "Validators rotate every 40 minutes." in first and "Osprey protocol" in first
    assert first.index("<<<ДАННЫЕ") < first.index("Validators rotate")


@pytest.mark.django_db
def test_the_llm_does_not_overturn_a_missing_number_or_a_copied_sentence(llm_topic: Any) -> None:
    ctx, replies, _requests = llm_topic
    local = verdicts(
        "The Osprey protocol rotates its validators every 90 minutes [2]. "
        "The Osprey protocol rotates its validators every 40 minutes [2]. "
        "MoT is cheap [3]."
    )
    assert [v.verdict for v in local[:2]] == ["unsupported", "supported"]
    replies.append(
        '[{"id": 1, "verdict": "supported"}, {"id": 2, "verdict": "unsupported"},'
        ' {"id": 3, "verdict": "unsupported", "reason": "not said"}]'
    )
    checked = async_to_sync(citecheck.verify)(ctx, local, private=False, stage=StageName.CITECHECK)
    assert [v.verdict for v in checked[:2]] == ["unsupported", "supported"]
    assert "the LLM said supported" in checked[0].note and "the LLM said unsupported" in checked[1].note
    assert (checked[2].verdict, checked[2].method) == ("unsupported", citecheck.LLM)  # not settled: LLM


@pytest.mark.django_db
def test_a_failing_llm_leaves_the_local_verdicts(
    llm_topic: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mindsearch.clients import llm as llm_client

    ctx, _replies, _requests = llm_topic
    monkeypatch.setattr(llm_client, "MAX_ATTEMPTS", 1)
    settings.AITUNNEL_BASE_URL = "http://127.0.0.1:9/v1/"  # nothing listens there
    local = verdicts("Tokens are mixed in groups [1]. Validators rotate every 40 minutes [1].")
    checked = async_to_sync(citecheck.verify)(ctx, local, private=False, stage=StageName.CITECHECK)
    assert [(v.verdict, v.method) for v in checked] == [(v.verdict, v.method) for v in local]
    assert LLMCall.objects.get(topic=ctx.topic).error


def test_the_summary_counts_and_the_rule_for_asking_again() -> None:
    def made(*names: str) -> list[citecheck.Verdict]:
        return [
            citecheck.Verdict(i, "s", 1, name, 0.0, 0.0, None, "", "local") for i, name in enumerate(names)
        ]

    assert citecheck.counts(made("supported", "weak", "unsupported", "unsupported")) == {
        "supported": 1,
        "weak": 1,
        "unsupported": 2,
        "total": 4,
    }
    assert citecheck.mostly_unsupported(made("unsupported", "unsupported", "supported"))
    assert not citecheck.mostly_unsupported(made("unsupported", "supported"))
    assert not citecheck.mostly_unsupported(made("unsupported"))  # one citation is not a pattern
    assert citecheck.quality(made("supported")) > citecheck.quality(made("weak")) > citecheck.quality([])
    assert (
        json.dumps(citecheck.feedback(made("unsupported"), russian=True), ensure_ascii=False).count(
            "не подтверждается"
        )
        == 1
    )
