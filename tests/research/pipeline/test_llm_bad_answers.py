"""An unusable answer is not a dead LLM: a run gives the LLM up after three failed asks in a row
(each already retried), but only after ten empty answers — one prompt answered empty (a deep
round's "no new sub-query to propose", three of them at once) falls back for that stage alone
and the report is still written by the LLM."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from mindsearch.clients import llm as llm_client
from research.models import RunEvent, Topic
from research.pipeline.context import RunContext

pytestmark = pytest.mark.django_db


def context(owner: User) -> RunContext:
    topic = Topic.objects.create(owner=owner, question="What is Mixture of Tokens?")
    return RunContext(topic=topic, llm_enabled=True, model="test-model")


def given_up(ctx: RunContext) -> bool:
    return RunEvent.objects.filter(topic=ctx.topic, message__startswith="Continuing without the LLM").exists()


def test_three_empty_answers_at_once_leave_the_llm_on(alice: User) -> None:
    ctx = context(alice)
    for _ in range(3):
        ctx.llm_failed(llm_client.LLMBadAnswer("The LLM returned an empty answer"))
    assert ctx.llm_enabled and not given_up(ctx)


def test_ten_empty_answers_in_a_row_give_it_up(alice: User) -> None:
    ctx = context(alice)
    for _ in range(9):
        ctx.llm_failed(llm_client.LLMBadAnswer("The LLM returned an empty answer"))
    assert ctx.llm_enabled
    ctx.llm_failed(llm_client.LLMBadAnswer("The LLM returned an empty answer"))
    assert not ctx.llm_enabled and given_up(ctx)


def test_three_failed_asks_give_it_up_as_before(alice: User) -> None:
    ctx = context(alice)
    for _ in range(2):
        ctx.llm_failed(llm_client.LLMError("The LLM endpoint did not answer within 60 s"))
    assert ctx.llm_enabled
    ctx.llm_failed(llm_client.LLMError("The LLM endpoint did not answer within 60 s"))
    assert not ctx.llm_enabled and given_up(ctx)


def test_a_wrong_key_gives_it_up_at_once(alice: User) -> None:
    ctx = context(alice)
    ctx.llm_failed(llm_client.LLMAuthError("The LLM endpoint rejected the API key (HTTP 401)"))
    assert not ctx.llm_enabled
