"""The one fragment cache (research/fragments.py) is never stale.

Its key rule: a topic's version is what PostgreSQL holds for the topic's row and every row that
belongs to it. These tests change each row kind the cached panels show, behind the app's back
(a bare UPDATE: no event, no `updated_at`, no signal), and assert the panel changes and equals a
render made without the cache; they change every field of every row kind and assert the version
moves; and they fail when a model that belongs to a topic is added without saying which cached
panel shows it.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.cache import caches
from django.db import connection, models, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone, translation

from research import fragments, presenters
from research.models import (
    Citation,
    Delivery,
    Document,
    FollowUp,
    Hit,
    HitScore,
    LLMCall,
    Report,
    ReportDraft,
    Round,
    RunEvent,
    SearchQuery,
    ShareLink,
    SubQuery,
    Summary,
    SummaryScore,
    Topic,
    TopicImage,
    TopicSchedule,
)
from research.progress import record_event
from retrieval.models import PassageNote
from tests.research.test_views import completed

pytestmark = pytest.mark.django_db


def rich_topic(owner: User) -> Topic:
    """A finished deep topic with a row of every kind the cached panels show."""
    topic = completed(owner)
    Topic.objects.filter(pk=topic.pk).update(
        mode=Topic.Mode.DEEP, started_at=timezone.now() - datetime.timedelta(seconds=90)
    )
    topic.refresh_from_db()
    record_event(topic, "queries", "Wrote the queries", done=2, total=2)
    record_event(topic, "search", "Searched the web", done=3, total=3)
    report = Report.objects.get(topic=topic)
    Citation.objects.create(
        report=report,
        sentence_index=0,
        sentence="Tokens are mixed.",
        n=1,
        verdict=Citation.Verdict.SUPPORTED,
        local_verdict=Citation.Verdict.SUPPORTED,
        method=Citation.Method.LOCAL,
        score=0.9,
    )
    LLMCall.objects.create(user=owner, topic=topic, stage="answer", model="m", prompt_tokens=100)
    Round.objects.create(topic=topic, number=1, subqueries=1, documents=1, new_documents=1, growth_rate=1.0)
    Document.objects.create(
        topic=topic, title="Forecast for Kazan", url="", text="Rain.", fetched_via=Document.FetchedVia.DOMAIN
    )
    return topic


def panel(topic: Topic, name: str) -> str:
    return str(presenters.cached_panels(topic, [name])[name])


def fresh(topic: Topic, name: str) -> str:
    caches["fragments"].clear()
    return panel(topic, name)


def first(model: type[models.Model], topic: Topic, **where: Any) -> Any:
    """The topic's first row of this kind (matching `where`), as a queryset to update."""
    lookup = dict(fragments.ROW_KINDS)[model]
    rows = model._base_manager.filter(**{lookup: topic.pk}, **where).order_by("pk")
    return model._base_manager.filter(pk__in=rows.values("pk")[:1])


def unfinished_with_draft(topic: Topic) -> None:
    Report.objects.filter(topic=topic).delete()
    Topic.objects.filter(pk=topic.pk).update(status=Topic.Status.RUNNING)
    ReportDraft.objects.create(topic=topic, text="The first words of the report", version=1)


# Each row kind a cached panel shows: the panel, an optional set-up, and a change behind the
# app's back that the panel must show.
Change = tuple[str, Callable[[Topic], None] | None, Callable[[Topic], Any]]
SHOWN: dict[type[models.Model], list[Change]] = {
    Topic: [("progress", None, lambda t: first(Topic, t).update(status=Topic.Status.FAILED))],
    RunEvent: [
        ("events", None, lambda t: first(RunEvent, t).update(message="A line rewritten")),
        ("progress", None, lambda t: first(RunEvent, t, stage="search").update(done=1)),
    ],
    LLMCall: [("progress", None, lambda t: first(LLMCall, t).update(prompt_tokens=4321))],
    Round: [("progress", None, lambda t: first(Round, t).update(new_documents=7))],
    SubQuery: [("hits", None, lambda t: first(SubQuery, t).update(text="A renamed sub-query"))],
    Hit: [("hits", None, lambda t: first(Hit, t).update(title="A retitled hit"))],
    HitScore: [
        ("hits", None, lambda t: first(HitScore, t).update(total=2.5)),
        ("report", None, lambda t: first(HitScore, t).update(total=3.5)),
    ],
    Document: [
        ("documents", None, lambda t: first(Document, t).update(title="A retitled page")),
        ("report", None, lambda t: first(Document, t).update(hit=None)),
    ],
    Summary: [("documents", None, lambda t: first(Summary, t).update(text="A rewritten summary"))],
    SummaryScore: [("documents", None, lambda t: first(SummaryScore, t).update(total=1.5))],
    Report: [("report", None, lambda t: first(Report, t).update(markdown="# Answer\n\nRewritten [1]."))],
    Citation: [("report", None, lambda t: first(Citation, t).update(verdict=Citation.Verdict.UNSUPPORTED))],
    ReportDraft: [
        ("report", unfinished_with_draft, lambda t: first(ReportDraft, t).update(text="Other words"))
    ],
}
# Row kinds no cached panel shows: the panels with forms that show them are rendered per request.
NOT_CACHED = {
    TopicImage: "the status panel (forms)",
    FollowUp: "the thread panel (forms)",
    ShareLink: "the sharing panel (forms)",
    SearchQuery: "the plan panel (forms)",
    TopicSchedule: "the schedule card (forms), rendered per request",
    Delivery: "the admin only",
    PassageNote: "a citation card's notes (forms), rendered per request",
}


def test_every_row_kind_of_a_topic_is_versioned_and_accounted_for() -> None:
    """Every model with a chain of foreign keys to Topic counts in the version, and says which
    cached panel shows it (or that none does): a new one fails here until it is added."""
    versioned = {model for model, _ in fragments.ROW_KINDS}

    def reaches_topic(model: type[models.Model], seen: frozenset[type[models.Model]] = frozenset()) -> bool:
        if model is Topic:
            return True
        targets = [f.related_model for f in model._meta.concrete_fields if f.many_to_one or f.one_to_one]
        return any(
            isinstance(t, type) and t not in seen and reaches_topic(t, seen | {model}) for t in targets
        )

    belonging = {model for model in apps.get_models() if reaches_topic(model)}
    assert belonging <= versioned
    assert versioned == set(SHOWN) | set(NOT_CACHED)


CASES = [(model, n) for model, changes in SHOWN.items() for n in range(len(changes))]


@pytest.mark.parametrize(("model", "n"), CASES, ids=[f"{m.__name__}-{n}" for m, n in CASES])
def test_a_change_of_each_row_kind_shows_in_its_cached_panel(alice: User, model: type, n: int) -> None:
    name, setup, change = SHOWN[model][n]
    topic = rich_topic(alice)
    if setup:
        setup(topic)
    before = panel(topic, name)
    assert panel(topic, name) == before  # from the cache now
    assert change(topic) == 1
    after = panel(topic, name)
    assert after != before, f"changing {model.__name__} left the {name} panel as it was"
    assert after == fresh(topic, name)


def other_value(field: models.Field, value: Any) -> Any:
    """A different value a column of this kind accepts."""
    if field.choices:
        return next(choice for choice, _ in field.flatchoices if choice != value)
    if isinstance(field, models.BooleanField):
        return not value
    if isinstance(field, models.DateTimeField):
        return (value or timezone.now()) + datetime.timedelta(seconds=1)
    if isinstance(field, models.DateField):
        return (value or timezone.localdate()) + datetime.timedelta(days=1)
    if isinstance(field, models.DecimalField):
        return (value or Decimal(0)) + 1
    if isinstance(field, models.IntegerField | models.FloatField):
        return (value or 0) + 1000  # clear of the row's neighbours (unique sequence numbers)
    if isinstance(field, models.JSONField):
        return {"changed": True}
    if isinstance(field, models.UUIDField):
        return uuid.uuid4()
    if isinstance(field, models.BinaryField):
        return b"changed"
    if field.max_length:
        return "y" if value == "x" else "x"
    return f"{value or ''}x"


@pytest.mark.parametrize("model", [m for m, _ in fragments.ROW_KINDS], ids=lambda m: m.__name__)
def test_every_field_of_every_row_kind_moves_the_version(alice: User, model: type[models.Model]) -> None:
    topic = rich_topic(alice)
    ReportDraft.objects.create(topic=topic, text="Words", version=1)  # beside the report, for once
    FollowUp.objects.create(topic=topic, question="And then?", position=1)
    ShareLink.issue(topic)
    TopicImage.objects.create(
        topic=topic, data=b"png", content_type="image/png", width=1, height=1, sha256="0"
    )
    subquery = SubQuery.objects.filter(topic=topic).order_by("pk")[0]
    SearchQuery.objects.create(subquery=subquery, language="en", text="q")
    rows = first(model, topic)
    if not rows.exists():
        pytest.skip(f"no {model.__name__} row in this topic")
    row = rows.first()
    for field in model._meta.concrete_fields:
        if field.primary_key or field.is_relation:
            continue
        version = fragments.version_of(topic.pk)
        model._base_manager.filter(pk=row.pk).update(
            **{field.name: other_value(field, getattr(row, field.name))}
        )
        assert fragments.version_of(topic.pk) != version, f"{model.__name__}.{field.name}"
    version = fragments.version_of(topic.pk)
    model._base_manager.filter(pk=row.pk).delete()
    assert fragments.version_of(topic.pk) != version, f"deleting a {model.__name__}"


def test_locking_a_row_changes_nothing(alice: User) -> None:
    topic = rich_topic(alice)
    version = fragments.version_of(topic.pk)
    with transaction.atomic():
        Topic.objects.select_for_update().get(pk=topic.pk)
    assert fragments.version_of(topic.pk) == version


def test_each_language_and_setting_has_its_own_fragment(alice: User) -> None:
    topic = rich_topic(alice)
    english = panel(topic, "progress")
    with translation.override("ru"):
        assert "Ход работы" in panel(topic, "progress")
    with override_settings(LLM_PRICE_INPUT_PER_1K=1.0, LLM_PRICE_OUTPUT_PER_1K=1.0):
        assert panel(topic, "progress") != english
    assert panel(topic, "progress") == english


def listed_rows(owner: User) -> str:
    from django.core.paginator import Paginator

    from research.views import ROW_FIELDS, topic_rows

    topics = Topic.objects.for_user(owner).only(*ROW_FIELDS)
    topics = topics.annotate(row_version=fragments.row_version(Topic)).order_by("-created_at", "-id")
    page = Paginator(topics, 25).get_page(1)
    with CaptureQueriesContext(connection) as queries:
        html = str(topic_rows({"page": page, "query": "", "status": ""}))
    assert len(queries) == 1, [q["sql"] for q in queries]  # the list itself: rows from it alone
    return html


def test_the_list_rows_are_rendered_from_the_listed_rows_alone(alice: User) -> None:
    topic = rich_topic(alice)
    before = listed_rows(alice)
    assert listed_rows(alice) == before
    for change in (
        {"question": "A reworded question"},
        {"status": Topic.Status.RUNNING, "stage": "read"},
        {"mode": Topic.Mode.QUICK},
        {"sources": Topic.Sources.DOCS},
        {"created_at": timezone.now() - datetime.timedelta(days=400)},
    ):
        Topic.objects.filter(pk=topic.pk).update(**change)
        after = listed_rows(alice)
        assert after != before, change
        caches["fragments"].clear()
        assert listed_rows(alice) == after
        before = after
