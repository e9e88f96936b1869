"""The admin as a cache and cost audit desk: staff see what the cache holds and saved and what
every user spent; others cannot; entries are purged in bulk; payloads are readable, not editable."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django_q.models import OrmQ, Schedule, Task

from research.models import (
    CacheCounter,
    CacheEntry,
    Document,
    Hit,
    HitScore,
    LLMCall,
    Report,
    RunEvent,
    SearchQuery,
    SubQuery,
    Summary,
    SummaryScore,
    Topic,
)
from research.pipeline import cache

pytestmark = pytest.mark.django_db

Kind = CacheEntry.Kind
STATS = "admin:research_cacheentry_stats"
USAGE = "admin:research_llmcall_usage"
ENTRIES = "admin:research_cacheentry_changelist"
CALLS = "admin:research_llmcall_changelist"


@pytest.fixture
def prices(settings: Any) -> None:
    settings.LLM_PRICE_INPUT_PER_1K = 1.0
    settings.LLM_PRICE_OUTPUT_PER_1K = 2.0
    settings.LLM_MODEL_PRICES = {}
    settings.LLM_PRICE_CURRENCY = "USD"


@pytest.fixture
def staff_client(db: None) -> Client:
    user = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def entry(
    kind: str, key: str, payload: Any, *, expired: bool = False, hits: int = 0, **fields: Any
) -> CacheEntry:
    cache.put(kind, key, payload, **fields)
    changes: dict[str, Any] = {"hit_count": hits}
    if expired:
        changes["expires_at"] = timezone.now() - timedelta(hours=1)
    CacheEntry.objects.filter(key_hash=key).update(**changes)
    return CacheEntry.objects.get(key_hash=key)


def call(user: User | None, topic: Topic | None = None, **fields: Any) -> LLMCall:
    fields = {"stage": "summarise", "model": "m", "cache_kind": Kind.SUMMARIES, **fields}
    return LLMCall.objects.create(user=user, topic=topic, **fields)


def listed(response: Any) -> list[Any]:
    return list(response.context["cl"].result_list)


# --- Who may look ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [STATS, USAGE, ENTRIES, CALLS])
def test_signed_in_users_who_are_not_staff_are_sent_to_the_admin_login(
    alice_client: Client, name: str
) -> None:
    response = alice_client.get(reverse(name))
    assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))
    assert Client().get(reverse(name)).status_code == 302


def test_staff_without_the_view_permission_get_403(db: None) -> None:
    clerk = User.objects.create_user("clerk", password="pw", is_staff=True)
    client = Client()
    client.force_login(clerk)
    assert client.get(reverse(STATS)).status_code == 403
    assert client.get(reverse(USAGE)).status_code == 403
    clerk.user_permissions.add(
        Permission.objects.get(codename="view_cacheentry"), Permission.objects.get(codename="view_llmcall")
    )
    client.force_login(User.objects.get(pk=clerk.pk))
    assert client.get(reverse(STATS)).status_code == 200
    assert client.get(reverse(USAGE)).status_code == 200
    # Viewing is not purging.
    entry(Kind.DOCS, "old", {"x": 1}, expired=True)
    assert client.post(reverse("admin:research_cacheentry_purge_expired")).status_code == 403
    assert CacheEntry.objects.count() == 1


def test_the_admin_index_leads_to_the_desk(staff_client: Client) -> None:
    html = staff_client.get(reverse("admin:index")).content.decode()
    assert reverse(STATS) in html and reverse(USAGE) in html


# --- Cache statistics ---------------------------------------------------------------------------------


def test_staff_see_statistics_per_kind_for_a_period(staff_client: Client, alice: User, prices: None) -> None:
    entry(Kind.SUMMARIES, "s1", {"text": "a summary"})
    entry(Kind.SUMMARIES, "s2", {"text": "another"}, expired=True)
    entry(Kind.DOCS, "d1", {"markdown": "page"})
    today = timezone.localdate()
    CacheCounter.objects.create(kind=Kind.SUMMARIES, day=today, hits=3, misses=1)
    CacheCounter.objects.create(kind=Kind.SUMMARIES, day=today - timedelta(days=20), hits=100, misses=100)
    CacheCounter.objects.create(kind=Kind.DOCS, day=today, hits=2, misses=2)
    for _ in range(3):  # the three summary hits, each recorded with the original call's tokens
        call(alice, prompt_tokens=1000, completion_tokens=500, cache_hit=True)
    old = call(alice, prompt_tokens=9000, cache_hit=True)
    LLMCall.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=20))

    response = staff_client.get(reverse(STATS), {"days": 7})
    assert response.status_code == 200
    rows = {row.kind: row for row in response.context["rows"]}
    summaries, docs = rows[Kind.SUMMARIES], rows[Kind.DOCS]
    assert (summaries.entries, summaries.expired, summaries.hits, summaries.misses) == (1, 1, 3, 1)
    assert (summaries.hit_rate, summaries.saved.saved_tokens, summaries.saved.saved_cost) == (0.75, 4500, 6.0)
    assert (docs.hits, docs.hit_rate, docs.saved.saved_tokens) == (2, 0.5, 0)
    total = response.context["total"]
    assert (total.entries, total.hits, total.misses, total.saved.saved_cost) == (2, 5, 3, 6.0)
    html = response.content.decode()
    assert "75%" in html and "6.0000" in html and "Purge 1 expired entry" in html
    assert f'<a href="{reverse(ENTRIES)}">' in html  # the breadcrumbs lead back to the entries

    ever = staff_client.get(reverse(STATS), {"days": 0}).context
    ever_summaries = next(row for row in ever["rows"] if row.kind == Kind.SUMMARIES)
    assert (ever_summaries.hits, ever_summaries.saved.saved_tokens) == (103, 13_500)
    assert staff_client.get(reverse(STATS), {"days": "nonsense"}).context["days"] == 7


def test_statistics_say_when_no_prices_are_configured(staff_client: Client, settings: Any) -> None:
    settings.LLM_PRICE_INPUT_PER_1K = settings.LLM_PRICE_OUTPUT_PER_1K = 0
    settings.LLM_MODEL_PRICES = {}
    assert "No LLM prices are configured" in staff_client.get(reverse(STATS)).content.decode()


# --- Cache entries ----------------------------------------------------------------------------------


def test_entries_filter_by_kind_expiry_age_size_hits_and_sharing(staff_client: Client, alice: User) -> None:
    small = entry(Kind.DOCS, "small", {"markdown": "x"}, hits=12)
    big = entry(Kind.DOCS, "big", {"markdown": "x" * 200_000})
    old = entry(Kind.SEARCH_RESULTS, "old", {"results": []}, expired=True, hits=3)
    private = entry(Kind.SUMMARIES, "private", {"text": "mine"}, owner_id=alice.pk)
    CacheEntry.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=60))
    url = reverse(ENTRIES)
    assert set(listed(staff_client.get(url, {"kind__exact": Kind.DOCS}))) == {small, big}
    assert listed(staff_client.get(url, {"expiry": "expired"})) == [old]
    assert set(listed(staff_client.get(url, {"expiry": "later"}))) == {small, big, private}
    assert listed(staff_client.get(url, {"size": "large"})) == [big]
    assert set(listed(staff_client.get(url, {"size": "small"}))) == {small, old, private}
    assert not listed(staff_client.get(url, {"size": "huge"}))
    assert set(listed(staff_client.get(url, {"hits": "0"}))) == {big, private}
    assert listed(staff_client.get(url, {"hits": "10+"})) == [small]
    assert listed(staff_client.get(url, {"hits": "1-9"})) == [old]
    assert listed(staff_client.get(url, {"sharing": "private"})) == [private]
    recent = staff_client.get(url, {"created_at__gte": (timezone.now() - timedelta(days=7)).isoformat()})
    assert old not in listed(recent) and len(listed(recent)) == 3
    by_size = listed(staff_client.get(url, {"o": "-4"}))  # the size column, largest first
    assert by_size[0] == big
    html = staff_client.get(url).content.decode()
    assert "195.3\xa0KB" in html and "Purge 1 expired entry" in html


def test_a_payload_is_shown_as_readable_json_and_cannot_be_edited(staff_client: Client) -> None:
    shown = entry(Kind.DOCS, "page", {"title": "Mixture <script>alert(1)</script>", "markdown": "# Тема"})
    url = reverse("admin:research_cacheentry_change", args=[shown.pk])
    response = staff_client.get(url)
    html = response.content.decode()
    assert response.status_code == 200
    assert '<pre class="payload">' in html and "\n  &quot;markdown&quot;: &quot;# Тема&quot;,\n" in html
    # Laid out by the desk's stylesheet: the CSP blocks inline styles.
    assert "css/admin-desk.css" in html and "style=" not in html.split('id="content-main"')[1]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    assert 'name="_save"' not in html and 'name="payload"' not in html
    staff_client.post(url, {"kind": Kind.ANSWERS, "payload": "{}"})
    assert CacheEntry.objects.get(pk=shown.pk).payload["markdown"] == "# Тема"
    assert staff_client.get(reverse("admin:research_cacheentry_add")).status_code == 403


def test_bulk_purge_of_selected_entries(staff_client: Client) -> None:
    keep = entry(Kind.DOCS, "keep", {"markdown": "k"})
    doomed = [entry(Kind.DOCS, f"gone{i}", {"markdown": "g"}) for i in range(3)]
    selected = {"action": "purge_selected", "_selected_action": [e.pk for e in doomed], "index": 0}
    # The action asks first (issue 29), and nothing is gone until the answer is yes.
    asked = staff_client.post(reverse(ENTRIES), selected).content.decode()
    assert "Purge 3 cache entries" in asked and "3 of them are still live" in asked
    assert 'name="confirm" value="yes"' in asked and CacheEntry.objects.count() == 4
    response = staff_client.post(reverse(ENTRIES), {**selected, "confirm": "yes"}, follow=True)
    assert list(CacheEntry.objects.all()) == [keep]
    assert "Purged 3 cache entries." in response.content.decode()


def test_purge_of_every_expired_entry(staff_client: Client) -> None:
    live = entry(Kind.DOCS, "live", {"markdown": "l"})
    for i in range(4):
        entry(Kind.SEARCH_RESULTS, f"old{i}", {"results": []}, expired=True)
    purge = reverse("admin:research_cacheentry_purge_expired")
    assert staff_client.get(purge).status_code == 405
    response = staff_client.post(purge, {"back": "stats"})
    assert response.status_code == 302 and response["Location"] == reverse(STATS)
    assert list(CacheEntry.objects.all()) == [live]
    response = staff_client.post(purge, follow=True)
    assert response.redirect_chain[-1][0] == reverse(ENTRIES)
    assert "Purged 0 cache entries." in response.content.decode()


# --- LLM calls and spending -----------------------------------------------------------------------------


def test_llm_calls_filter_by_user_topic_stage_model_and_outcome_with_totals(
    staff_client: Client, alice: User, bob: User, prices: None
) -> None:
    topic = Topic.objects.create(owner=alice, question="MoT?", status="completed")
    a1 = call(
        alice, topic, stage="plan", model="small", prompt_tokens=1000, completion_tokens=1000, latency_ms=100
    )
    a2 = call(alice, topic, stage="answer", model="large", error="timeout", latency_ms=300)
    b1 = call(bob, stage="plan", model="small", prompt_tokens=500, latency_ms=200)
    url = reverse(CALLS)
    assert set(listed(staff_client.get(url, {"user__id__exact": alice.pk}))) == {a1, a2}
    assert listed(staff_client.get(url, {"stage": "answer"})) == [a2]
    assert set(listed(staff_client.get(url, {"model": "small"}))) == {a1, b1}
    assert listed(staff_client.get(url, {"outcome": "error"})) == [a2]
    assert set(listed(staff_client.get(url, {"q": "MoT?"}))) == {a1, a2}
    response = staff_client.get(url, {"user__id__exact": alice.pk})
    totals = response.context["totals"]
    assert (totals["usage"].calls, totals["usage"].failed_calls, totals["usage"].cost) == (2, 1, 3.0)
    assert totals["latency"] == {"average": 200.0, "slowest": 300}
    html = response.content.decode()
    assert "Estimated cost 3.0000 USD" in html and "3.0000" in html
    today = timezone.localdate()
    day = staff_client.get(url, {"created_at__year": today.year, "created_at__month": today.month})
    assert len(listed(day)) == 3


def test_per_user_spend_for_a_period(staff_client: Client, alice: User, bob: User, prices: None) -> None:
    call(alice, prompt_tokens=1000)  # 1.0
    call(alice, completion_tokens=1000)  # 2.0
    old = call(alice, prompt_tokens=50_000)
    LLMCall.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=10))
    call(bob, prompt_tokens=4000)  # 4.0
    call(bob, prompt_tokens=99_000, imported=True)
    call(bob, prompt_tokens=1000, cache_hit=True)  # saved 1.0

    response = staff_client.get(reverse(USAGE), {"days": 7})
    users = [
        (spender.label, spender.usage.cost, spender.usage.saved_cost)
        for spender, _url in response.context["users"]
    ]
    assert users == [("bob", 4.0, 1.0), ("alice", 3.0, 0.0)]
    assert response.context["total"].cost == 7.0
    assert f'<a href="{reverse(CALLS)}">' in response.content.decode()  # breadcrumbs to the calls
    html = response.content.decode()
    assert "4.0000" in html and "3.0000" in html

    alice_only = staff_client.get(reverse(USAGE), {"days": "30", "q": "alice"})
    spender, calls_url = alice_only.context["users"][0]
    assert len(alice_only.context["users"]) == 1 and spender.usage.cost == 53.0
    listed_calls = listed(staff_client.get(calls_url))
    assert len(listed_calls) == 3 and {c.user for c in listed_calls} == {alice}
    week_url = response.context["users"][1][1]
    assert len(listed(staff_client.get(week_url))) == 2  # the old call is outside the week


def test_the_topic_page_in_the_admin_shows_its_usage(staff_client: Client, alice: User, prices: None) -> None:
    topic = Topic.objects.create(owner=alice, question="MoT?", status="completed")
    call(alice, topic, prompt_tokens=1000, completion_tokens=500)
    html = staff_client.get(reverse("admin:research_topic_change", args=[topic.pk])).content.decode()
    assert "1 calls (0 from the cache, 0 failed), 1000 prompt + 500 completion tokens" in html
    assert "estimated cost 2.0000 USD" in html


def test_run_events_are_listed_and_searchable(staff_client: Client, alice: User) -> None:
    topic = Topic.objects.create(owner=alice, question="MoT?", status="completed")
    RunEvent.objects.create(topic=topic, seq=1, stage="search", message="12 results for mixture")
    RunEvent.objects.create(topic=topic, seq=2, stage="read", level="warning", message="page unreadable")
    url = reverse("admin:research_runevent_changelist")
    assert len(listed(staff_client.get(url))) == 2
    assert [e.seq for e in listed(staff_client.get(url, {"q": "unreadable"}))] == [2]
    assert [e.seq for e in listed(staff_client.get(url, {"level__exact": "warning"}))] == [2]


# --- django-q2 --------------------------------------------------------------------------------------------


def test_django_q_tasks_failures_schedules_and_queue_are_in_the_admin(staff_client: Client) -> None:
    now = timezone.now()
    for success in (True, False):
        Task.objects.create(
            id=uuid.uuid4().hex,
            name=f"task-{success}",
            func="research.tasks.run_topic_task",
            started=now,
            stopped=now,
            success=success,
            result="boom" if not success else None,
        )
    Schedule.objects.create(func="research.tasks.resume_stalled", schedule_type=Schedule.MINUTES, minutes=1)
    OrmQ.objects.create(key="mindsearch", payload="x", lock=now)
    for name in ("success", "failure", "schedule", "ormq"):
        response = staff_client.get(reverse(f"admin:django_q_{name}_changelist"))
        assert response.status_code == 200, name
    assert "task-False" in staff_client.get(reverse("admin:django_q_failure_changelist")).content.decode()
    assert "task-True" in staff_client.get(reverse("admin:django_q_success_changelist")).content.decode()


def test_every_research_page_of_the_admin_opens(staff_client: Client, alice: User) -> None:
    from django.contrib import admin

    topic = Topic.objects.create(owner=alice, question="MoT?", status="completed")
    call(alice, topic)
    models = [model for model in admin.site._registry if model._meta.app_label == "research"]
    assert len(models) >= 14
    for model in models:
        name = f"admin:research_{model._meta.model_name}_changelist"
        assert staff_client.get(reverse(name)).status_code == 200, name


# --- Topics: an audit view of the run -------------------------------------------------------------------


def test_a_topics_run_state_and_plan_are_read_only_in_the_admin(staff_client: Client, alice: User) -> None:
    """Staff see a topic's question, state and plan; changing any of them would skip the
    workflow's row lock and limits, so the admin has no field, inline or page that does."""
    topic = Topic.objects.create(owner=alice, question="MoT?", status=Topic.Status.RUNNING, stage="read")
    subquery = SubQuery.objects.create(topic=topic, text="What is it?", position=0)
    url = reverse("admin:research_topic_change", args=[topic.pk])
    page = staff_client.get(url)
    assert "What is it?" in page.content.decode() and "MoT?" in page.content.decode()  # shown
    assert page.context["has_change_permission"] is False  # a view, with no field to edit
    edit = {"owner": alice.pk, "question": "Changed?", "mode": "deep", "sources": "web", "status": "queued"}
    assert staff_client.post(url, edit).status_code == 403
    topic.refresh_from_db()
    assert (topic.question, topic.mode, topic.status) == ("MoT?", "quick", "running")
    inline = next(i for i in page.context["inline_admin_formsets"] if i.opts.model is SubQuery)
    assert not inline.has_add_permission and not inline.has_change_permission
    assert not inline.has_delete_permission
    assert staff_client.get(reverse("admin:research_topic_add")).status_code == 403

    subquery_url = reverse("admin:research_subquery_change", args=[subquery.pk])
    assert staff_client.get(subquery_url).status_code == 200  # viewable
    staff_client.post(subquery_url, {"topic": topic.pk, "text": "changed", "position": 0, "round": 1})
    assert staff_client.get(reverse("admin:research_subquery_add")).status_code == 403
    delete = reverse("admin:research_subquery_delete", args=[subquery.pk])
    assert staff_client.post(delete, {"post": "yes"}).status_code == 403
    changelist = staff_client.get(reverse("admin:research_subquery_changelist"))
    assert changelist.context["action_form"] is None  # no bulk delete either
    subquery.refresh_from_db()
    assert subquery.text == "What is it?"


RECORDS = ["searchquery", "hit", "hitscore", "document", "summary", "summaryscore", "report"]


@pytest.fixture
def run_records(alice: User) -> dict[str, Any]:
    """One of each row a run writes, under a topic still running."""
    topic = Topic.objects.create(owner=alice, question="MoT?", status=Topic.Status.RUNNING, stage="read")
    subquery = SubQuery.objects.create(topic=topic, text="What is it?", position=0)
    query = SearchQuery.objects.create(subquery=subquery, text="mixture of tokens", language="en")
    url = "https://example.org/mot"
    hit = Hit.objects.create(
        topic=topic, subquery=subquery, search_query=query, url=url, normalized_url=url, title="MoT"
    )
    document = Document.objects.create(
        topic=topic, hit=hit, title="MoT", url=url, text="Full text", fetched_via="reader"
    )
    summary = Summary.objects.create(document=document, text="Tokens are mixed.")
    scores = dict.fromkeys(HitScore.CRITERIA, 8.0)
    return {
        "searchquery": query,
        "hit": hit,
        "hitscore": HitScore.objects.create(hit=hit, **scores),
        "document": document,
        "summary": summary,
        "summaryscore": SummaryScore.objects.create(summary=summary, **scores),
        "report": Report.objects.create(topic=topic, markdown="# MoT\n\nMixed [1].", model="m"),
    }


@pytest.mark.parametrize("name", RECORDS)
def test_the_rows_a_run_wrote_are_read_only_in_the_admin(
    staff_client: Client, run_records: dict[str, Any], name: str
) -> None:
    """A worker may be writing these very rows: staff see them and may delete them (as every
    record of what happened), never add or edit one."""
    record = run_records[name]
    url = reverse(f"admin:research_{name}_change", args=[record.pk])
    page = staff_client.get(url)
    assert page.status_code == 200 and page.context["has_change_permission"] is False
    assert staff_client.post(url, {}).status_code == 403
    assert staff_client.get(reverse(f"admin:research_{name}_add")).status_code == 403
    delete = reverse(f"admin:research_{name}_delete", args=[record.pk])
    assert staff_client.get(delete).status_code == 200


def test_a_topic_deleted_in_the_admin_goes_through_the_workflow(
    staff_client: Client, alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    from research import workflow

    deleted: list[int] = []
    real = workflow.delete_topic

    def delete_topic(topic: Topic) -> None:
        deleted.append(topic.pk)
        real(topic)

    monkeypatch.setattr(workflow, "delete_topic", delete_topic)
    one, two = (Topic.objects.create(owner=alice, question=f"Q{n}?", status="completed") for n in (1, 2))
    for topic in (one, two):
        SubQuery.objects.create(topic=topic, text="part", position=0)
    # One from its page (its sub-queries go with it, though none may be deleted alone) …
    response = staff_client.post(reverse("admin:research_topic_delete", args=[one.pk]), {"post": "yes"})
    assert response.status_code == 302
    # … and one by the list's action.
    staff_client.post(
        reverse("admin:research_topic_changelist"),
        {"action": "delete_selected", "_selected_action": [two.pk], "post": "yes"},
    )
    assert deleted == [one.pk, two.pk]
    assert not Topic.objects.exists() and not SubQuery.objects.exists()
