"""The stage contract (research/pipeline/stage.py): one spelling of every stage name."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest
from django.contrib.auth.models import User

from research import feeds, presenters
from research.models import LLMCall, RunEvent, Topic
from research.pipeline import run
from research.pipeline.stage import StageName
from tests.support.world import TOPIC, World


def pipeline_modules() -> list[ModuleType]:
    import research.pipeline

    names = [info.name for info in pkgutil.iter_modules(research.pipeline.__path__)]
    return [importlib.import_module(f"research.pipeline.{name}") for name in sorted(names)]


def test_every_stage_constant_of_the_pipeline_is_a_stage_name() -> None:
    named = {
        (module.__name__, attribute): getattr(module, attribute)
        for module in pipeline_modules()
        for attribute in ("STAGE", "CHECK_STAGE")
        if hasattr(module, attribute)
    }
    assert len(named) >= 15  # every stage module, the follow-ups, the citation check
    wrong = {where: value for where, value in named.items() if not isinstance(value, StageName)}
    assert not wrong, f"stage names spelled as plain strings: {wrong}"


def test_the_pages_know_every_stage_name_and_only_those() -> None:
    assert set(presenters.STAGE_LABELS) == set(StageName.values)
    assert {key for key, _ in presenters.STAGES} <= set(StageName.values)
    assert set(feeds.PANELS) <= set(StageName.values)


@pytest.mark.django_db
def test_a_run_writes_no_stage_outside_the_enum(alice: User, loopback: World) -> None:
    topic = Topic.objects.create(owner=alice, question=TOPIC, auto_approve=True)
    assert run.plan_topic(topic.pk) is True
    assert run.run_topic(topic.pk) == Topic.Status.COMPLETED
    written = set(RunEvent.objects.filter(topic=topic).values_list("stage", flat=True))
    written |= set(LLMCall.objects.filter(topic=topic).values_list("stage", flat=True))
    assert {StageName.PLAN, StageName.SEARCH, StageName.ANSWER, StageName.DONE} <= written
    assert written <= set(StageName.values)
