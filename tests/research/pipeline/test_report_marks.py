"""Weak models degrade honestly: the sources are fitted to the model's context window (trimmed,
never failed), a report cut off at the token limit is asked for again and marked if still cut,
and a report that cites nothing, is in the wrong language or whose citations are mostly
unsupported is marked — on the page, in the files and in the API — as are the stages that ran
without the model. Marks are stored with the report, not computed when the page is shown."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from mindsearch.clients import llm as llm_client
from mindsearch.models import ApiToken
from research import export, presenters, progress
from research.management.commands.research import written_by
from research.models import Report, RunEvent, Topic
from research.pipeline import report_checks, scoring, window
from research.pipeline.context import RunContext
from research.pipeline.stage import StageName
from research.pipeline.stages import summarise
from research.pipeline.stages.answer import report_writer
from tests.research.pipeline.test_citation_report import researched, script_answers
from tests.research.pipeline.test_followups import answered, completed_topic
from tests.support.fakes import Request, Response, Route, openai_chat
from tests.support.world import World, prompt_kind

pytestmark = pytest.mark.django_db

# The question (tests.support.world.TOPIC) is Russian.
UNCITED = (
    "# Mixture of Tokens\n\n## Введение\n\nMixture of Tokens смешивает токены разных примеров в группы.\n\n"
    "## Заключение\n\nМетод обходится без дискретной маршрутизации."
)
RUSSIAN = (
    "# Mixture of Tokens\n\n## Введение\n\nMixture of Tokens смешивает токены (Tokens) разных примеров "
    "в группы [1].\n\n## Заключение\n\nМетод Mixture of Tokens обходится без дискретной маршрутизации [1]."
)
THOUGHT = "Okay, I need to write a structured report from the numbered sources."
ENGLISH = (
    "# Mixture of Tokens\n\n## Introduction\n\nMixture of Tokens mixes tokens from different examples "
    "in groups [1].\n\n## Conclusion\n\nMixture of Tokens avoids discrete routing [1]."
)


# --- Fitting the sources to a window --------------------------------------------------------------


def passage(words: str, filler: str, count: int = 60) -> str:
    return f"{words} " + " ".join([filler] * count) + "."


def test_texts_that_fit_are_left_as_they_are() -> None:
    texts = {1: "Mixture of Tokens mixes tokens.", 2: "Experts are routed."}
    assert window.fit(texts, "mixture of tokens", 10_000) == (texts, None)


def test_the_least_relevant_passages_go_first_and_each_source_keeps_its_best() -> None:
    first = passage("Mixture of Tokens mixes tokens across examples", "mixture")
    second = passage("Mixture of Tokens avoids routing of tokens", "tokens")
    unrelated = [passage(f"Arcade machines of the {n}0s", "arcade") for n in range(5, 9)]
    texts = {1: "\n\n".join([first, unrelated[0], second, unrelated[1]]), 2: "\n\n".join(unrelated[2:])}
    budget = window.tokens(texts) * 55 // 100
    fitted, trimmed = window.fit(texts, "mixture of tokens", budget)
    assert trimmed is not None and window.tokens(fitted) <= budget
    assert first in fitted[1] and second in fitted[1]  # the passages about the question stay
    assert "Arcade" not in fitted[1]
    assert fitted[2].strip()  # a source with nothing relevant keeps its best passage
    assert trimmed.passages == 3 and trimmed.cut == 0 and trimmed.sources == 2
    assert trimmed.before == window.tokens(texts) > trimmed.after == window.tokens(fitted)


def test_when_the_best_passages_alone_are_too_long_every_text_is_cut_to_its_share() -> None:
    texts = {n: passage(f"Mixture of Tokens source {n}", "tokens", 200) for n in (1, 2, 3)}
    fitted, trimmed = window.fit(texts, "mixture of tokens", 150)
    assert trimmed is not None and trimmed.cut == 3
    assert window.tokens(fitted) <= 150
    assert all(
        text.startswith(f"Mixture of Tokens source {n}") and text.endswith("…") for n, text in fitted.items()
    )


def test_the_answer_gets_its_room_and_the_rest_is_the_sources() -> None:
    assert window.answer_room(None, 4096) == 4096
    assert window.answer_room(3000, 4096) == 1000
    assert window.source_budget(8192, 1000, 2000) < 8192 - 3000


def test_a_context_overflow_with_an_unknown_window_is_trimmed_to_what_it_says_and_asked_once_more(
    alice: User, loopback: World, settings: Any
) -> None:
    settings.AITUNNEL_CONTEXT_TOKENS = 0  # not known
    topic = Topic.objects.create(owner=alice, question="mixture of tokens")
    ctx = RunContext.for_topic(topic)
    texts = {n: passage(f"Mixture of Tokens source {n}", "tokens", 300) for n in (1, 2)}
    sent: list[tuple[str, int | None]] = []

    async def send(request: str, max_tokens: int | None) -> llm_client.Completion:
        sent.append((request, max_tokens))
        if len(sent) == 1:
            raise llm_client.LLMContextOverflow("too long", context_tokens=600)
        return llm_client.Completion("ok", "test-model", 1, 1, 1, 1)

    completion, used = async_to_sync(window.ask_within)(
        ctx,
        StageName.ANSWER,
        texts,
        "mixture",
        lambda t: "\n".join(t.values()),
        send,
        fixed="",
        answer_tokens=300,
    )
    assert completion.text == "ok" and len(sent) == 2
    assert sent[0][1] == 300 and sent[1][1] == 200  # the answer's room shrank with the window
    assert window.tokens(used) < window.tokens(texts) and sent[1][0] == "\n".join(used.values())
    warned = RunEvent.objects.get(topic=topic, stage="answer", level=RunEvent.Level.WARNING)
    assert warned.message.startswith("The sources did not fit the model's context window (600 tokens)")


# --- Checks of the whole report -------------------------------------------------------------------


def test_a_report_is_marked_for_what_is_wrong_with_it_as_a_whole() -> None:
    question = "Что такое Mixture of Tokens?"
    russian = "## Введение\n\nMixture of Tokens смешивает токены разных примеров [1]."

    def marks(body: str, *, by_model: bool = True, truncated: bool = False, verdicts: Any = ()) -> list[str]:
        return report_checks.marks_of(
            body,
            question=question,
            by_model=by_model,
            truncated=truncated,
            sources=2,
            verdicts=list(verdicts),
        )

    supported = [type("V", (), {"verdict": "supported"})()] * 2
    unsupported = [type("V", (), {"verdict": "unsupported"})()] * 2
    assert marks(russian, verdicts=supported) == []
    assert marks(russian) == ["uncited"]
    assert marks(ENGLISH, verdicts=supported) == ["wrong_language"]
    assert marks(ENGLISH, by_model=False, verdicts=supported) == []  # the extractive engine quotes
    assert marks(russian, truncated=True, verdicts=unsupported) == ["truncated", "unsupported"]


# --- Thinking ----------------------------------------------------------------------------------------


def test_while_the_model_reasons_the_page_says_it_is_thinking_until_text_arrives(
    alice: User, alice_client: Client
) -> None:
    topic = Topic.objects.create(owner=alice, question="mixture of tokens", status=Topic.Status.RUNNING)
    draft = report_writer.Draft(RunContext(topic=topic, llm_enabled=True, model="m"))
    async_to_sync(draft.thinking)()
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "The model is thinking…" in page and 'data-state="writing"' in page
    russian = alice_client.get(reverse("topic_detail", args=[topic.pk]), headers={"accept-language": "ru"})
    assert "Модель думает…" in russian.content.decode()
    progress.save_draft(topic.pk, "Mixture of Tokens mixes")
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "The model is thinking…" not in page and "Mixture of Tokens mixes" in page


def reasoning_first(loopback: World, thought: str) -> None:
    """The stand-in LLM streams its report answers as vLLM and DeepSeek do for a reasoning model:
    `reasoning_content` deltas first, then the answer's."""
    inner = openai_chat(loopback.script)

    def route(request: Request) -> Response:
        response = inner(request)
        messages = (request.json() or {}).get("messages", [])
        if prompt_kind(messages[0]["content"]) == "answer" and response.chunks is not None:
            response.chunks = _thinking_first(list(response.chunks), thought)
        return response

    loopback.llm.routes[("POST", "/v1/chat/completions")] = route


def _thinking_first(frames: list[bytes], thought: str) -> list[bytes]:
    first = json.loads(frames[0][len(b"data: ") :])
    pieces = [thought[i : i + 8] for i in range(0, len(thought), 8)]
    thinking = []
    for piece in pieces:
        delta = {"index": 0, "delta": {"reasoning_content": piece}, "finish_reason": None}
        frame = {**first, "choices": [delta]}
        thinking.append(b"data: " + json.dumps(frame).encode() + b"\n\n")
    return [frames[0], *thinking, *frames[1:]]


def test_a_reasoning_model_s_report_shows_thinking_then_its_words_never_its_reasoning(
    alice: User, loopback: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    script_answers(loopback, RUSSIAN)
    reasoning_first(loopback, THOUGHT)
    seen: list[tuple[str, dict[str, Any] | None]] = []
    save_draft = progress.save_draft

    def saved(topic_id: int, text: str) -> int:  # the real save, and the card it makes
        version = save_draft(topic_id, text)
        seen.append((text, presenters.draft_of(Topic.objects.get(pk=topic_id))))
        return version

    monkeypatch.setattr(progress, "save_draft", saved)
    topic = researched(alice)
    assert seen[0][0] == "" and seen[0][1] == {"html": "", "version": 1, "thinking": True}
    assert seen[-1][0].startswith("# Mixture of Tokens") and not (seen[-1][1] or {}).get("thinking")
    assert not any("Okay, I need" in text for text, _card in seen)
    assert "Okay, I need" not in topic.report.markdown and topic.report.marks == []


# --- Whole topics against weak models ------------------------------------------------------------


def answers_cut(loopback: World, cut: Callable[[int], bool]) -> list[str]:
    """The stand-in LLM's report answers end with finish_reason "length" where `cut(n)` says so
    (n: the report answer's number, from 1), streamed or not; the requests' texts in order."""
    inner = openai_chat(loopback.script)
    asked: list[str] = []

    def route(request: Request) -> Response:
        messages = (request.json() or {}).get("messages", [])
        if prompt_kind(messages[0]["content"]) != "answer":
            return inner(request)
        asked.append(messages[-1]["content"])
        response = inner(request)
        if cut(len(asked)):
            _finish_with_length(response)
        return response

    loopback.llm.routes[("POST", "/v1/chat/completions")] = route
    return asked


def _finish_with_length(response: Response) -> None:
    stop, length = b'"finish_reason": "stop"', b'"finish_reason": "length"'
    if response.chunks is not None:
        response.chunks = (frame.replace(stop, length) for frame in response.chunks)
    elif isinstance(response.body, dict):
        response.body["choices"][0]["finish_reason"] = "length"


def context_limited(loopback: World, window_tokens: Callable[[int], int], kind: str = "answer") -> list[int]:
    """The stand-in LLM refuses a `kind` prompt longer than its window as vLLM and OpenAI do
    (400, "maximum context length is N tokens"); the window is `window_tokens(first prompt's
    tokens)`, counted as the client estimates them (a real tokenizer counts a little less). The
    prompt sizes of the `kind` requests, in order."""
    inner: Route = openai_chat(loopback.script)
    sizes: list[int] = []
    limit: list[int] = []

    def route(request: Request) -> Response:
        messages = (request.json() or {}).get("messages", [])
        if prompt_kind(messages[0]["content"]) != kind:
            return inner(request)
        tokens = llm_client.estimate_tokens("".join(str(m.get("content", "")) for m in messages))
        sizes.append(tokens)
        limit.extend([] if limit else [window_tokens(tokens)])
        if tokens > limit[0]:
            message = (
                f"This model's maximum context length is {limit[0]} tokens. However, you requested "
                f"{tokens + 4096} tokens ({tokens} in the messages, 4096 in the completion). "
                "Please reduce the length of the messages or completion."
            )
            error = {"message": message, "type": "BadRequestError", "param": None, "code": 400}
            return Response(400, {"object": "error", **error})
        return inner(request)

    loopback.llm.routes[("POST", "/v1/chat/completions")] = route
    return sizes


def api_report(owner: User, topic: Topic) -> dict[str, Any]:
    _row, token = ApiToken.issue(owner, "tests")
    response = Client().get(f"/api/topics/{topic.pk}/report", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    return response.json()


def page_marks(client: Client, topic: Topic) -> list[str]:
    page = client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    return re.findall(r'class="report-mark" data-mark="(\w+)"', page)


def test_a_report_cut_off_twice_is_asked_again_shorter_and_marked_cut(
    alice: User, alice_client: Client, loopback: World
) -> None:
    asked = answers_cut(loopback, lambda n: True)
    topic = researched(alice)
    assert len(asked) == 2 and report_writer.SHORTER_INSTRUCTION in asked[1]
    assert topic.report.marks == ["truncated"]
    assert page_marks(alice_client, topic) == ["truncated"]
    assert api_report(alice, topic)["marks"] == ["truncated"]
    # The file speaks the report's language (Russian, as the question), whatever the interface's.
    assert "Обрезан: ответ модели упёрся в ограничение длины" in export.report_markdown(topic)
    lines = RunEvent.objects.filter(topic=topic, stage="answer").values_list("message", flat=True)
    assert "The second report was cut off too: it is kept, marked as cut off" in lines


def test_a_report_cut_off_once_is_replaced_by_the_whole_second_answer(alice: User, loopback: World) -> None:
    asked = answers_cut(loopback, lambda n: n == 1)
    topic = researched(alice)
    assert len(asked) == 2
    assert topic.report.marks == []


def test_a_cut_report_asked_again_keeps_its_room_in_a_small_window(
    alice: User, loopback: World, settings: Any
) -> None:
    settings.AITUNNEL_CONTEXT_TOKENS = 2_500  # the sources must be cut to fit
    answers_cut(loopback, lambda n: True)
    researched(alice)
    asked = [r.json() for r in loopback.llm.requests_to("/v1/chat/completions")]
    reports = [r for r in asked if prompt_kind(r["messages"][0]["content"]) == "answer"]
    assert 2 <= len(reports) <= 3  # cut, cut (then, uncited, once more for citations)
    room = window.answer_room(2_500, report_writer.REPORT_TOKENS)
    first, second = reports[0]["max_tokens"], reports[1]["max_tokens"]
    # The first may lend some of its room to the sources' least; the cut one asked again gets all.
    assert first >= room // 2 and second >= room
    text = "\n".join(m["content"] for m in reports[1]["messages"])
    assert report_writer.SHORTER_INSTRUCTION in text
    assert llm_client.estimate_tokens(text) + second <= 2_500


def test_a_report_is_asked_at_most_twice_for_length_and_once_for_citations(
    alice: User, loopback: World
) -> None:
    script_answers(loopback, UNCITED)
    asked = answers_cut(loopback, lambda n: True)
    topic = researched(alice)
    assert len(asked) == 3 and report_writer.UNCITED_FEEDBACK_RU in asked[2]
    assert set(topic.report.marks) >= {"truncated", "uncited"}


def test_an_overflowing_context_is_trimmed_and_the_report_written(
    alice: User, alice_client: Client, loopback: World, settings: Any
) -> None:
    settings.AITUNNEL_CONTEXT_TOKENS = 0  # not known until the 400 says it
    sizes = context_limited(loopback, lambda first: first * 3 // 4)
    topic = researched(alice)
    assert sizes[1] <= sizes[0] * 3 // 4  # asked once more, fitted; any later ask is fitted too
    assert all(size <= sizes[0] * 3 // 4 for size in sizes[1:2])
    assert topic.report.model == "test-model" and "truncated" not in topic.report.marks
    trimmed = RunEvent.objects.get(topic=topic, stage="answer", message__startswith="The sources did not fit")
    assert trimmed.level == RunEvent.Level.WARNING
    assert api_report(alice, topic)["without_model"] == []


def test_an_uncited_report_and_an_unreadable_plan_are_marked_on_the_page_in_files_and_the_api(
    alice: User, alice_client: Client, loopback: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = script_answers(loopback, UNCITED)
    monkeypatch.setattr(loopback.script, "plan", lambda user: "I would rather not plan this.")
    topic = researched(alice)
    assert len(requests) == 2 and report_writer.UNCITED_FEEDBACK_RU in requests[1]  # asked once more
    assert topic.report.marks == ["uncited"]
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert page_marks(alice_client, topic) == ["uncited"] and 'data-stage="plan"' in page
    data = api_report(alice, topic)
    assert data["marks"] == ["uncited"]
    assert data["without_model"] == [{"stage": "plan", "count": 3, "total": 3}]
    markdown = export.report_markdown(topic)
    assert "Не ссылается ни на один из источников" in markdown and "Без модели test-model" in markdown
    assert RunEvent.objects.filter(
        topic=topic, stage="citecheck", message="The report cites none of its sources"
    )


@pytest.mark.parametrize(
    "answer", ["I cannot classify this.", '{"domain": "astrology", "needs_search": true}']
)
def test_a_route_that_fell_back_to_keywords_is_listed_as_without_the_model(
    alice: User, loopback: World, monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    monkeypatch.setattr(loopback.script, "route", lambda user: answer)
    topic = researched(alice)
    assert RunEvent.objects.filter(topic=topic, stage="route", message__contains="by keywords")
    assert {"stage": "route", "count": None, "total": None} in api_report(alice, topic)["without_model"]


def test_a_report_in_the_wrong_language_is_marked(alice: User, alice_client: Client, loopback: World) -> None:
    script_answers(loopback, ENGLISH)
    topic = researched(alice)
    assert topic.report.marks == ["wrong_language"]
    assert page_marks(alice_client, topic) == ["wrong_language"]
    assert api_report(alice, topic)["marks"] == ["wrong_language"]
    Report.objects.filter(pk=topic.report.pk).update(marks=[])  # stored, not worked out on the page
    assert page_marks(alice_client, topic) == []


def test_a_summary_prompt_over_the_window_is_trimmed_and_asked_once_more(
    alice: User, loopback: World, settings: Any
) -> None:
    settings.AITUNNEL_CONTEXT_TOKENS = 0  # not known until the 400 says it
    # The window leaves the system prompt, the summary's room and a few lines of the excerpt.
    sizes = context_limited(loopback, lambda first: first * 9 // 10, kind="summarise")
    topic = Topic.objects.create(owner=alice, question="Mixture of Tokens")
    ctx = RunContext.for_topic(topic)
    excerpt = "\n\n".join(
        [passage("Mixture of Tokens mixes tokens across examples.", "tokens", 40)]
        + [passage(f"Arcade machines of the {n}0s.", "arcade", 80) for n in range(5, 9)]
    )
    summary = async_to_sync(summarise._asked)(ctx, excerpt, False)
    assert summary.startswith("Mixture of Tokens mixes tokens across examples.")
    assert len(sizes) == 2 and sizes[1] <= sizes[0] * 9 // 10
    assert RunEvent.objects.filter(
        topic=topic, stage="summarise", message__startswith="The sources did not fit"
    )


def test_the_console_says_the_model_was_given_up_on_when_one_was_configured(alice: User) -> None:
    topic = Topic.objects.create(owner=alice, question="Mixture of Tokens", llm_model="qwen3:0.6b")
    Report.objects.create(topic=topic, markdown="Extracts [1].", model="")
    assert written_by(topic) == "the extractive engine (the model qwen3:0.6b was given up on)"
    assert "the model qwen3:0.6b was given up on" in export.report_markdown(topic)
    Topic.objects.filter(pk=topic.pk).update(llm_model="")
    topic.refresh_from_db()
    assert written_by(topic) == "the extractive engine (no LLM configured)"


def test_a_follow_up_answer_cut_off_is_asked_again_shorter(alice: User, loopback: World) -> None:
    asked = answers_cut(loopback, lambda n: True)  # a follow-up's answer is asked like a report
    followup = answered(completed_topic(alice))
    assert len(asked) == 2 and report_writer.SHORTER_INSTRUCTION in asked[1]
    lines = list(
        RunEvent.objects.filter(topic=followup.topic, stage="followup").values_list("message", flat=True)
    )
    assert any(line.startswith("The model's answer was cut off at its token limit") for line in lines)
    assert "The second answer was cut off too: it is kept as it is" in lines


def test_marks_an_archive_brought_are_read_carefully(alice: User) -> None:
    topic = Topic.objects.create(owner=alice, question="Mixture of Tokens", status=Topic.Status.COMPLETED)
    hostile = [{"stage": "plan", "count": "<b>9</b>", "total": 3}, {"stage": "nope", "count": 1}, "plan"]
    marks = ["uncited", "<script>"]
    report = Report.objects.create(topic=topic, markdown="x", marks=marks, without_model=hostile)
    assert [mark["mark"] for mark in presenters.marks_of(report)] == ["uncited"]
    plan = {"stage": "plan", "label": "Plan", "count": None, "total": 3}
    assert presenters.without_model_of(report) == [plan]


def test_a_scoring_batch_too_big_for_a_known_window_is_split_not_squeezed(
    alice: User, loopback: World, settings: Any
) -> None:
    settings.AITUNNEL_CONTEXT_TOKENS = 2_500
    topic = Topic.objects.create(owner=alice, question="Mixture of Tokens")
    ctx = RunContext.for_topic(topic)
    items = [(f"Title {i}", passage(f"Mixture of Tokens fact {i}.", "tokens", 150)) for i in range(10)]
    assert llm_client.estimate_tokens("".join(text for _title, text in items)) > 2_500
    _scores, origins = async_to_sync(scoring.score_batch)(
        ctx, StageName.SCORE_SUMMARIES, "Mixture of Tokens", items
    )
    assert origins == ["llm"] * 10  # every title still there, scored by the model
    asked = [r.json() for r in loopback.llm.requests_to("/v1/chat/completions")]
    assert 1 < len(asked) < 10  # in smaller batches, each as big as fits
    for request in asked:
        text = "".join(m["content"] for m in request["messages"])
        assert llm_client.estimate_tokens(text) + request["max_tokens"] <= 2_500
        listed = [i for i in range(10) if f"Title {i}\n" in text]
        # Every text keeps its opening and more, and the answer has room for every item's scores.
        assert all(f"Mixture of Tokens fact {i}. tokens tokens tokens" in text for i in listed)
        assert request["max_tokens"] >= scoring.score_tokens([f"Title {i}" for i in listed])
    texts = ["".join(m["content"] for m in request["messages"]) for request in asked]
    assert sorted(i for text in texts for i in range(10) if f"Title {i}\n" in text) == list(range(10))


def test_a_window_the_scoring_prompt_fills_alone_is_scored_by_keywords_without_asking(
    alice: User, loopback: World, settings: Any
) -> None:
    settings.AITUNNEL_CONTEXT_TOKENS = 1_500  # less than the prompt, one result and its scores
    topic = Topic.objects.create(owner=alice, question="Mixture of Tokens")
    ctx = RunContext.for_topic(topic)
    items = [(f"Title {i}", passage(f"Mixture of Tokens fact {i}.", "tokens", 150)) for i in range(4)]
    _scores, origins = async_to_sync(scoring.score_batch)(
        ctx, StageName.SCORE_SUMMARIES, "Mixture of Tokens", items
    )
    assert origins == ["fallback"] * 4
    assert loopback.llm.requests_to("/v1/chat/completions") == []
    assert RunEvent.objects.filter(
        topic=topic, stage="score_summaries", message__startswith="LLM scoring failed"
    )
