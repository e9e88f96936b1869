"""The run loop and its stages (research/pipeline/run.py, research/pipeline/stages/): every stage of
the shape the loop calls, outcomes the loop reads by name, a stage's "done" kept in rows, and the
route that decides while the loop dispatches. Which module may import which is `make lint`'s
(import-linter's contracts in pyproject.toml); that a stage is named by a `StageName`, never a
string, is mypy's (every `stage` parameter is a `StageName`)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType
from typing import Any, get_type_hints

import pytest
from django.contrib.auth.models import User

from research import images, presenters, watchers
from research.models import Document, LLMCall, Report, RunEvent, SearchQuery, SubQuery, Topic, TopicImage
from research.pipeline import followup, read_and_summarise, run
from research.pipeline.context import RunContext
from research.pipeline.run import Stage
from research.pipeline.stage import Outcome, StageName
from research.pipeline.stages import domain, queries, read, route, search, vision, years
from research.pipeline.stages.answer import direct, local_rag
from tests.support.domain_world import picture
from tests.support.fakes import Request, searxng_search
from tests.support.world import PAGES, TOPIC, World, search_pages


def pipeline_modules() -> list[ModuleType]:
    import research.pipeline

    names = [info.name for info in pkgutil.walk_packages(research.pipeline.__path__, "research.pipeline.")]
    return [importlib.import_module(name) for name in sorted(names)]


def test_the_pages_know_every_stage_name_and_only_those() -> None:
    assert set(presenters.STAGE_LABELS) == set(StageName.values)
    assert {key for key, _ in presenters.STAGES} <= set(StageName.values)
    assert set(watchers.PANELS) <= set(StageName.values)


@pytest.mark.django_db
def test_a_run_writes_no_stage_outside_the_enum(alice: User, loopback: World) -> None:
    topic = Topic.objects.create(owner=alice, question=TOPIC, auto_approve=True)
    assert run.plan_topic(topic.pk) is True
    assert run.run_topic(topic.pk) == Topic.Status.COMPLETED
    written = set(RunEvent.objects.filter(topic=topic).values_list("stage", flat=True))
    written |= set(LLMCall.objects.filter(topic=topic).values_list("stage", flat=True))
    assert {StageName.PLAN, StageName.SEARCH, StageName.ANSWER, StageName.DONE} <= written
    assert written <= set(StageName.values)


@pytest.mark.parametrize(
    "stage", [*run.STAGES, *followup.SEARCH_STAGES], ids=lambda stage: stage.__name__.rsplit(".", 1)[-1]
)
def test_every_stage_the_runs_call_has_the_stage_shape(stage: ModuleType) -> None:
    assert isinstance(stage, Stage)
    assert isinstance(stage.STAGE, StageName)
    assert get_type_hints(stage.run)["return"] is Outcome


def test_the_run_loop_runs_every_stage_module_of_the_pipeline() -> None:
    """A module with a stage's shape that no run calls would be a stage someone forgot (or calls
    from another stage, by a side door); read and summarise are run by their composition."""
    stages = {
        module
        for module in pipeline_modules()
        if isinstance(module, Stage) and list(inspect.signature(module.run).parameters) == ["ctx"]
    }
    assert stages == set(run.STAGES) | set(read_and_summarise.COMPOSES)
    assert read_and_summarise in run.ROUND_STAGES and read not in run.ROUND_STAGES
    assert read_and_summarise in followup.SEARCH_STAGES and read not in followup.SEARCH_STAGES


def years_world(loopback: World) -> None:
    """The broad search covers 2022 only, so 2021 and 2023 get sub-queries of their own."""
    base = search_pages(loopback.web.url, PAGES)

    def dated(request: Request) -> list[dict]:
        results = base(request)
        if "2023" not in request.param("q"):
            for result in results[:1]:
                result["publishedDate"] = "2022-03-01T00:00:00"
        return results

    loopback.searxng.routes[("GET", "/search")] = searxng_search(dated)


@pytest.mark.django_db
def test_years_asks_the_run_loop_to_search_and_its_done_state_is_a_row(alice: User, loopback: World) -> None:
    years_world(loopback)
    topic = Topic.objects.create(owner=alice, question=TOPIC + " в 2021–2023 годах", auto_approve=True)
    assert run.plan_topic(topic.pk) is True
    ctx = RunContext.for_topic(Topic.objects.get(pk=topic.pk))
    queries.run(ctx)
    search.run(ctx)
    assert years.run(ctx) is Outcome.SEARCH_AGAIN
    per_year = SearchQuery.objects.filter(subquery__topic=topic, subquery__origin=SubQuery.Origin.PERIOD)
    assert (
        per_year.count() == 4 and not per_year.filter(searched_at__isnull=False).exists()
    )  # years searches none
    # The worker died here, and the event log was lost (an export, a clean-up): the row says done.
    RunEvent.objects.filter(topic=topic).delete()
    assert run.run_topic(topic.pk) == Topic.Status.COMPLETED
    assert not per_year.filter(searched_at__isnull=True).exists()  # the run loop searched them
    assert not RunEvent.objects.filter(topic=topic, stage=StageName.YEARS).exists()
    assert SubQuery.objects.filter(topic=topic, origin=SubQuery.Origin.PERIOD).count() == 2
    assert Topic.objects.get(pk=topic.pk).years_checked


# --- the route decides, the run loop dispatches --------------------------------------------------

NO_SEARCH = '{"domain": "general", "needs_search": false}'


def test_the_loop_tries_the_branches_of_a_question_that_needs_no_search_in_order() -> None:
    """route.py decides only; the loop answers from the owner's documents, else directly."""
    assert [(branch, branch.ROUTE) for branch in run.ANSWER_BRANCHES] == [
        (local_rag, Topic.Route.DOCUMENTS),
        (direct, Topic.Route.DIRECT),
    ]


@pytest.mark.django_db
def test_the_route_is_stored_and_the_run_loop_answers_from_it(alice: User, loopback: World) -> None:
    topic = Topic.objects.create(owner=alice, question="Привет! Как дела?", auto_approve=True)
    ctx = RunContext.for_topic(topic)
    assert route.run(ctx) is Outcome.CONTINUE
    topic.refresh_from_db()
    assert topic.route == Topic.Route.DIRECT and topic.domain == Topic.Domain.GENERAL
    assert not Report.objects.filter(topic=topic).exists()  # deciding wrote nothing
    # The worker died here: the run picks the stored route up and the direct stage answers.
    assert run.plan_topic(topic.pk) is False
    topic.refresh_from_db()
    assert topic.status == Topic.Status.COMPLETED and topic.route == Topic.Route.DIRECT
    assert Report.objects.get(topic=topic).sources == []
    # Run again (a re-queue), nothing is written twice.
    Topic.objects.filter(pk=topic.pk).update(status=Topic.Status.PLANNING)
    assert run.plan_topic(topic.pk) is False
    assert RunEvent.objects.filter(topic=topic, message__startswith="Answered directly").count() == 1


@pytest.mark.django_db
def test_a_branch_that_cannot_answer_hands_the_topic_on(alice: User, loopback: World) -> None:
    """documents → direct → search: an owner without documents, an LLM with no direct reply."""
    loopback.script.route = lambda user: NO_SEARCH  # type: ignore[method-assign]
    loopback.script.direct = lambda user: ""  # type: ignore[method-assign]
    topic = Topic.objects.create(owner=alice, question="Mixture of Tokens?", auto_approve=True)
    assert run.plan_topic(topic.pk) is True
    topic.refresh_from_db()
    assert topic.route == Topic.Route.SEARCH and topic.subqueries.exists()
    assert not Report.objects.filter(topic=topic).exists()
    # The route line is written when the topic goes to the search: after the branches handed it on.
    [line] = RunEvent.objects.filter(topic=topic, stage=StageName.ROUTE)
    assert line.message.startswith("Domain: General (by the LLM)") and line.data["by_llm"] is True
    assert not RunEvent.objects.filter(topic=topic, stage=StageName.ANSWER, seq__gt=line.seq).exists()
    asked = dict(loopback.script.calls)
    assert asked["route"] == 1 and asked["direct"]  # (the client asks again for an empty reply)
    assert run.run_topic(topic.pk) == Topic.Status.COMPLETED
    assert loopback.searxng.requests and Report.objects.get(topic=topic).sources
    assert loopback.script.calls["route"] == 1 and loopback.script.calls["direct"] == asked["direct"]


@pytest.mark.django_db
def test_the_migration_stores_the_route_of_topics_routed_before(alice: User) -> None:
    from django.apps import apps

    store_routes = importlib.import_module("research.migrations.0013_topic_route").store_routes
    direct_topic, documents_topic, searched, unrouted = (
        Topic.objects.create(owner=alice, question=str(n), domain="general" if n < 3 else "")
        for n in range(4)
    )
    for topic in (direct_topic, documents_topic):
        Report.objects.create(topic=topic, markdown="…", sources=[])
    Document.objects.create(topic=documents_topic, title="memo", url="", text="…", fetched_via="private")
    SubQuery.objects.create(topic=searched, text="a sub-query")
    store_routes(apps, None)
    routes = [Topic.objects.get(pk=t.pk).route for t in (direct_topic, documents_topic, searched, unrouted)]
    assert routes == [Topic.Route.DIRECT, Topic.Route.DOCUMENTS, Topic.Route.SEARCH, ""]


# --- the vision and domain stages keep their "done" in rows ------------------------------------------


@pytest.mark.django_db
def test_vision_and_domain_data_are_looked_at_once_though_the_event_log_is_lost(
    alice: User, settings: Any
) -> None:
    """Nothing configured: each stage warns once. The events lost (an export, a clean-up), a run
    again finds its row state and says nothing twice."""
    settings.VISION_MODEL = ""
    settings.OPEN_METEO_URL = ""
    topic = Topic.objects.create(owner=alice, question="Погода в Казани завтра?", domain=Topic.Domain.WEATHER)
    images.save(topic, images.prepare(picture((220, 30, 30))))

    def warnings_of_a_run() -> list[str]:
        ctx = RunContext.for_topic(Topic.objects.get(pk=topic.pk))
        assert vision.run(ctx) is Outcome.CONTINUE and domain.run(ctx) is Outcome.CONTINUE
        warned = RunEvent.objects.filter(topic=topic, level=RunEvent.Level.WARNING)
        return sorted(warned.values_list("stage", flat=True))

    assert warnings_of_a_run() == [StageName.DOMAIN, StageName.VISION]
    RunEvent.objects.filter(topic=topic).delete()
    assert warnings_of_a_run() == []
    topic.refresh_from_db()
    assert topic.vision_checked and topic.domain_data_checked


@pytest.mark.django_db
def test_the_migration_marks_vision_and_domain_done_by_their_old_flags(alice: User) -> None:
    from django.apps import apps

    mark_checked = importlib.import_module("research.migrations.0014_topic_checked").mark_checked
    told, fetched, untouched, pending = (Topic.objects.create(owner=alice, question=str(n)) for n in range(4))
    for stage in (StageName.VISION, StageName.DOMAIN):
        RunEvent.objects.create(topic=told, seq=told.next_event_seq(), stage=stage, message="…")
    # "Describing the picture" was said, and the worker stopped before the answer: not done.
    RunEvent.objects.create(topic=pending, seq=pending.next_event_seq(), stage=StageName.VISION, message="…")
    for topic, analysis in ((told, TopicImage.Analysis.FAILED), (pending, TopicImage.Analysis.PENDING)):
        TopicImage.objects.create(
            topic=topic,
            data=b"png",
            content_type="image/png",
            width=1,
            height=1,
            sha256="0" * 64,
            analysis=analysis,
        )
    Document.objects.create(topic=fetched, title="weather", url="", text="…", fetched_via="domain")
    mark_checked(apps, None)
    flags = Topic.objects.order_by("pk").values_list("vision_checked", "domain_data_checked")
    assert list(flags.filter(pk__in=(told.pk, fetched.pk, untouched.pk, pending.pk))) == [
        (True, True),
        (False, True),
        (False, False),
        (False, False),
    ]


@pytest.mark.django_db
def test_begin_takes_its_counts_by_position_and_refuses_them_as_message_arguments(alice: User) -> None:
    topic = Topic.objects.create(owner=alice, question="Counts?")
    ctx = RunContext(topic=topic, llm_enabled=False, model="")
    event = ctx.begin(StageName.SEARCH, "Searching %(n)s queries", 2, 5, n=5)
    assert (event.done, event.total, event.message) == (3, 5, "Searching 5 queries")
    with pytest.raises(TypeError, match="by position"):
        ctx.begin(StageName.SEARCH, "Searching %(n)s queries", total=5, n=5)
