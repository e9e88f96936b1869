"""What a user does to a topic, shared by the pages, the API, MCP, the console and the admin:
start it, edit and approve its plan, cancel it, research it again, delete it. Views, API
operations and commands only parse their input, call one step here and answer; none writes a
topic's plan or status itself (`tests/research/test_workflow.py` reads the code to hold it).

Each step checks the topic's state under a row lock, so two tabs or a page and a script cannot
approve a plan twice or edit one the worker already runs. A step that the topic's state does not
allow raises `Refused` with a message for the user.

The fair-use limits live here too, so that the page, the API, the console and an imported
archive all meet the same ones: a plan has at most `RESEARCH_MAX_SUBQUERIES` sub-queries (to
edit, to approve, and to run again), and one user has at most `RESEARCH_MAX_ACTIVE_TOPICS`
topics planning, awaiting approval, queued or running at a time (`OverLimit`, a kind of `Refused`).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Case, Max, Value, When
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from research import images, tasks
from research.images import PreparedImage
from research.models import FollowUp, Report, SubQuery, Topic, TopicImage
from research.pipeline import outline
from research.pipeline.replies import is_russian


class Refused(Exception):
    """The topic's state does not allow this step; `message` says why, for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotInPlan(Refused):
    """A sub-query id that is not one of this topic's (another topic's, or none at all)."""


class BadQuestion(Refused):
    """A follow-up question that cannot be asked as written: empty, too long, or naming a section
    the report does not have."""


class OverLimit(Refused):
    """A fair-use limit: too many sub-queries in a plan, or too many topics running at once."""


class PlanChanged(Refused):
    """The plan was changed elsewhere (another tab, a script) after the user was shown it."""


# --- Fair-use limits ---------------------------------------------------------------------------


def max_subqueries() -> int:
    return settings.RESEARCH_MAX_SUBQUERIES


def check_plan_size(count: int) -> None:
    """A plan of `count` sub-queries may be kept and run; OverLimit otherwise."""
    limit = max_subqueries()
    if count > limit:
        raise OverLimit(
            ngettext(
                "A plan may have at most %(limit)d sub-query; this one has %(count)d.",
                "A plan may have at most %(limit)d sub-queries; this one has %(count)d.",
                limit,
            )
            % {"limit": limit, "count": count}
        )


def planned_count(topic: Topic) -> int:
    """The sub-queries of the plan the user approved (deep rounds add their own later)."""
    return topic.subqueries.filter(round=1).count()


COUNTED_AS_ACTIVE = (*Topic.ACTIVE_STATUSES, Topic.Status.AWAITING_APPROVAL)


def check_can_start(owner: User, exclude: Topic | None = None) -> None:
    """One more topic of `owner` may be planning, awaiting approval, queued or running;
    OverLimit otherwise."""
    limit = settings.RESEARCH_MAX_ACTIVE_TOPICS
    if not limit:
        return
    # A plan awaiting approval counts: otherwise one user could hold any number of plans, each
    # a planning run's LLM calls, and approve them one after another (issue 26).
    active = Topic.objects.filter(owner=owner, status__in=COUNTED_AS_ACTIVE)
    if exclude is not None:
        active = active.exclude(pk=exclude.pk)
    # A follow-up being answered is research going on too (its search, reads and LLM calls).
    answering = FollowUp.objects.filter(topic__owner=owner).pending().count()
    if active.count() + answering >= limit:
        raise OverLimit(
            ngettext(
                "You already have %(limit)d topic being researched; wait for it to finish or cancel it.",
                "You already have %(limit)d topics being researched; wait for one to finish or cancel one.",
                limit,
            )
            % {"limit": limit}
        )


def _lock_owner(owner: User) -> None:
    """One start at a time per user between counting the active topics and adding one."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext('research.start'), %s::integer)", [owner.pk])


# --- Steps -------------------------------------------------------------------------------------


def start_topic(topic: Topic, owner: User, image: PreparedImage | None = None) -> Topic:
    """Save a new topic (from a validated form), with its picture if any, and queue its plan."""
    with transaction.atomic():
        create_topic(topic, owner, image)
        tasks.enqueue_plan(topic)
    return topic


def create_topic(topic: Topic, owner: User, image: PreparedImage | None = None) -> Topic:
    """Save a new topic within the owner's limits, its language the question's, without queueing
    it: for the console, which plans and runs it in its own process."""
    topic.owner = owner
    topic.language = "ru" if is_russian(topic.question) else "en"
    with transaction.atomic():
        _lock_owner(owner)
        check_can_start(owner)
        topic.save()
        if image is not None:
            save_image(topic, image)
    return topic


def save_image(topic: Topic, image: PreparedImage) -> TopicImage:
    return images.save(topic, image)


def _lock_reviewable(topic: Topic) -> Topic:
    locked = Topic.objects.select_for_update().get(pk=topic.pk)
    if locked.status == Topic.Status.PLANNING:
        raise Refused(_("The plan is still being written; edit it once the topic waits for approval."))
    if locked.status != Topic.Status.AWAITING_APPROVAL:
        raise Refused(_("The plan of this topic can no longer be edited."))
    return locked


def add_subquery(topic: Topic, text: str) -> SubQuery:
    with transaction.atomic():
        _lock_reviewable(topic)
        check_plan_size(planned_count(topic) + 1)
        position = (topic.subqueries.aggregate(Max("position"))["position__max"] or 0) + 1
        return SubQuery.objects.create(topic=topic, text=text, position=position, origin=SubQuery.Origin.USER)


def _in_plan(topic: Topic, subquery_id: int) -> SubQuery:
    subquery = topic.subqueries.filter(pk=subquery_id).first()
    if subquery is None:
        raise NotInPlan(_("Sub-query %(id)s is not part of this plan.") % {"id": subquery_id})
    return subquery


def update_subquery(topic: Topic, subquery_id: int, text: str) -> SubQuery:
    """Change one sub-query's text; changed, it becomes the user's own."""
    with transaction.atomic():
        _lock_reviewable(topic)
        subquery = _in_plan(topic, subquery_id)
        _save_subquery(subquery, text, subquery.position)
    return subquery


def delete_subquery(topic: Topic, subquery_id: int) -> None:
    with transaction.atomic():
        _lock_reviewable(topic)
        _in_plan(topic, subquery_id).delete()


def move_subquery(topic: Topic, subquery_id: int, *, up: bool) -> None:
    """Swap a sub-query with its neighbour above (`up`) or below, and number the plan 0…n in
    one statement. At either end it stays where it is."""
    with transaction.atomic():
        _lock_reviewable(topic)
        ordered = list(topic.subqueries.order_by("position", "id").values_list("pk", flat=True))
        if subquery_id not in ordered:
            raise NotInPlan(_("Sub-query %(id)s is not part of this plan.") % {"id": subquery_id})
        index = ordered.index(subquery_id)
        other = index - 1 if up else index + 1
        if 0 <= other < len(ordered):
            ordered[index], ordered[other] = ordered[other], ordered[index]
        _renumber(topic, ordered)


def _renumber(topic: Topic, ordered: list[int]) -> None:
    positions = [When(pk=pk, then=Value(position)) for position, pk in enumerate(ordered)]
    topic.subqueries.filter(pk__in=ordered).update(position=Case(*positions))


def replace_plan(topic: Topic, items: list[tuple[int | None, str]]) -> None:
    """Make the plan exactly these (id or None for a new one, text) sub-queries, in this order.

    Sub-queries left out are deleted; one whose text changed becomes the user's own.
    """
    with transaction.atomic():
        _replace_locked(_lock_reviewable(topic), items)


def _replace_locked(topic: Topic, items: list[tuple[int | None, str]]) -> None:
    """`replace_plan` within a transaction that holds the topic's row lock."""
    check_plan_size(len(items))
    existing = {subquery.pk: subquery for subquery in topic.subqueries.all()}
    ids = [pk for pk, _text in items if pk is not None]
    for pk in ids:
        if pk not in existing:
            raise NotInPlan(_("Sub-query %(id)s is not part of this plan.") % {"id": pk})
    if len(ids) != len(set(ids)):
        raise Refused(_("A sub-query appears twice in the plan."))
    topic.subqueries.exclude(pk__in=ids).delete()
    for position, (item_id, text) in enumerate(items):
        if item_id is None:
            origin = SubQuery.Origin.USER
            SubQuery.objects.create(topic=topic, text=text, position=position, origin=origin)
        else:
            _save_subquery(existing[item_id], text, position)


def _save_subquery(subquery: SubQuery, text: str, position: int) -> None:
    if subquery.text == text and subquery.position == position:
        return
    if subquery.text != text:
        subquery.text, subquery.origin = text, SubQuery.Origin.USER
    subquery.position = position
    subquery.save(update_fields=["text", "origin", "position"])


@dataclass(frozen=True)
class ShownPlan:
    """The plan as the user leaves it when approving: `version` is `Topic.plan_version()` of the plan
    they were shown (None: approve whatever is stored), `items` the plan they approve —
    (id, text) for a shown sub-query, (None, text) for a new one, in order; None keeps the
    stored plan as it is."""

    version: str | None = None
    items: list[tuple[int | None, str]] | None = None
    # The topic's own token cap as typed (research/pipeline/cap.py): "" for none, None to keep it.
    token_cap: str | None = None
    # The report's sections in order (research/pipeline/outline.py): [] for a report in one pass,
    # None to keep them; and its length as typed ("", short, standard, long or words), None to keep it.
    outline: list[str] | None = None
    length: str | None = None


def approve_plan(topic: Topic, shown: ShownPlan | None = None, *, queue: bool = True) -> None:
    """Approve exactly the plan the user was shown, with their edits, and queue it for a worker
    — in one transaction under the topic's row lock, so either all of it happens or nothing.

    A plan changed elsewhere since it was shown is refused (`PlanChanged`) and nothing is saved.
    The console, which runs the topic in its own process, approves with `queue=False`: the same
    checks and refusals, no task."""
    shown = shown or ShownPlan()
    with transaction.atomic():
        locked = _lock_reviewable(topic)
        if shown.version is not None and shown.version != locked.plan_version():
            raise PlanChanged(
                _(
                    "The plan was changed elsewhere (another tab or a script) after it was shown "
                    "here, so nothing was approved. Check the plan as it is now and approve it again."
                )
            )
        if shown.items is not None:
            _replace_locked(locked, shown.items)
        if shown.token_cap is not None:
            _set_token_cap(locked, shown.token_cap)
        if shown.outline is not None or shown.length is not None:
            _set_outline(locked, shown.outline, shown.length)
        if not locked.subqueries.exists():
            raise Refused(_("Add at least one sub-query before approving the plan."))
        check_plan_size(planned_count(locked))
        _lock_owner(locked.owner)
        check_can_start(locked.owner, exclude=locked)
        locked.set_status(Topic.Status.QUEUED)
        if queue:
            tasks.enqueue_run(locked)
    topic.status = locked.status


def _set_token_cap(locked: Topic, typed: str) -> None:
    """The cap as typed ("150 000"), or none when empty; Refused for what is not a positive number."""
    text = typed.replace(" ", "").replace(",", "").replace("\u00a0", "")
    if text and (not text.isdigit() or int(text) <= 0 or int(text) > 2_000_000_000):
        raise Refused(_("The cap is a number of tokens, such as 200000, or empty for none."))
    locked.token_cap = int(text) if text else None
    locked.save(update_fields=["token_cap", "updated_at"])


# --- The report's outline and length (issue 30: research/pipeline/outline.py) -------------------


class BadOutline(Refused):
    """Sections or a length that cannot be used (too many, too long, repeated, not a length)."""


def set_outline(topic: Topic, titles: list[str] | None, length: str | None = None) -> None:
    """Make the report's sections exactly `titles`, in this order ([] for a report in one pass;
    None keeps them), and its length as typed (None keeps it), while the plan is under review."""
    with transaction.atomic():
        locked = _lock_reviewable(topic)
        _set_outline(locked, titles, length)
    topic.outline, topic.report_length = locked.outline, locked.report_length


def _set_outline(locked: Topic, titles: list[str] | None, length: str | None) -> None:
    """`set_outline` within a transaction that holds the topic's row lock; Refused for bad input."""
    try:
        if titles is not None:
            locked.outline = outline.read_outline(titles)
        if length is not None:
            locked.report_length = outline.read_length(length)
    except outline.OutlineError as exc:
        raise BadOutline(str(exc)) from None
    locked.save(update_fields=["outline", "report_length", "updated_at"])


def cancel_topic(topic: Topic) -> bool:
    """Stop a topic where it is (what was found is kept); False when it had already finished."""
    with transaction.atomic():
        locked = Topic.objects.select_for_update().get(pk=topic.pk)
        if locked.is_finished:
            return False
        locked.set_status(Topic.Status.CANCELLED, finished_at=timezone.now())
    topic.status, topic.finished_at = locked.status, locked.finished_at
    return True


def delete_topic(topic: Topic) -> None:
    """Delete a topic with every row its run and its follow-ups wrote (they cascade; its picture
    is a row too), and, once that is committed, the PDFs of its report rendered under MEDIA_ROOT
    (`export.forget_pdfs_of_deleted`, on every topic's delete): no file is left behind. Allowed in
    any state: a worker running it stops at its next step, when it finds the topic gone. Under
    the row lock, so it waits for a step under way, and a worker cannot add a row to the topic
    while its rows are deleted."""
    with transaction.atomic():
        locked = Topic.objects.select_for_update().filter(pk=topic.pk).first()
        if locked is not None:  # else already deleted (another tab), its files with it
            locked.delete()


def rerun_topic(topic: Topic) -> Topic:
    """A failed or cancelled topic resumes where it stopped; a completed one is researched anew
    as its next version (research/versions.py): a copy with the same approved plan (unchanged
    inputs are answered from the cache).

    Returns the topic that will run: the same one, or the copy.
    """
    with transaction.atomic():
        locked = Topic.objects.select_for_update().get(pk=topic.pk)
        if not locked.is_finished:
            raise Refused(_("Only a finished, failed or cancelled topic can be researched again."))
        check_plan_size(planned_count(locked))
        _lock_owner(locked.owner)
        check_can_start(locked.owner)
        if locked.status == Topic.Status.COMPLETED:
            return _copy_with_plan(locked)
        _resume(locked)
    return locked


def _resume(topic: Topic) -> None:
    if topic.subqueries.exists():
        topic.set_status(Topic.Status.QUEUED, error="", finished_at=None)
        tasks.enqueue_run(topic)
    else:
        topic.set_status(Topic.Status.PLANNING, error="", finished_at=None)
        tasks.enqueue_plan(topic)


def _copy_with_plan(topic: Topic) -> Topic:
    fields = (
        "question",
        "mode",
        "sources",
        "time_range",
        "language",
        "sites_only",
        "sites_prefer",
        "sites_avoid",
        # The report's shape (issue 30) is part of the plan a version runs again.
        "report_kind",
        "outline",
        "report_length",
        "papers",
    )
    copy = Topic.objects.create(
        owner=topic.owner,
        status=Topic.Status.QUEUED,
        series=topic.series or topic.pk,
        previous_version=topic,
        **{name: getattr(topic, name) for name in fields},
    )
    SubQuery.objects.bulk_create(
        SubQuery(topic=copy, position=sq.position, text=sq.text, origin=sq.origin)
        for sq in topic.subqueries.filter(round=1)
    )
    image = TopicImage.objects.filter(topic=topic).first()
    if image is not None:  # asked again with the same picture, as it was described
        image.pk, image.topic, image._state.adding = None, copy, True
        image.save()
    tasks.enqueue_run(copy)
    return copy


# --- Follow-ups ----------------------------------------------------------------------------------


def ask_followup(topic: Topic, question: str = "", section: str = "") -> FollowUp:
    """Queue a follow-up on a completed topic: a question, or *Expand this section* naming one
    of the report's headings. One follow-up of a topic is answered at a time; the thread has at
    most RESEARCH_MAX_FOLLOWUPS; it counts as an active topic of its owner while it is answered."""
    from research.pipeline.followup import expand_question, report_sections, russian_topic

    question, section = " ".join(question.split()), " ".join(section.split())
    with transaction.atomic():
        locked = Topic.objects.select_for_update().get(pk=topic.pk)
        report = Report.objects.filter(topic=locked).first()
        if locked.status != Topic.Status.COMPLETED or report is None:
            raise Refused(_("Follow-up questions can be asked once the topic's report is ready."))
        if section:
            if section not in report_sections(report.markdown):
                raise BadQuestion(_("The report has no section “%(section)s”.") % {"section": section[:200]})
            question = expand_question(section, russian_topic(locked))
        check_followup_text(question)
        thread = locked.followups.all()
        if thread.pending().exists():
            raise Refused(_("A follow-up of this topic is being answered; ask the next one when it is done."))
        limit = settings.RESEARCH_MAX_FOLLOWUPS
        if thread.count() >= limit:
            raise OverLimit(
                ngettext(
                    "A topic may have at most %(limit)d follow-up question.",
                    "A topic may have at most %(limit)d follow-up questions.",
                    limit,
                )
                % {"limit": limit}
            )
        _lock_owner(locked.owner)
        check_can_start(locked.owner)
        position = (thread.aggregate(Max("position"))["position__max"] or 0) + 1
        followup = FollowUp.objects.create(
            topic=locked,
            position=position,
            kind=FollowUp.Kind.EXPAND if section else FollowUp.Kind.QUESTION,
            question=question,
            section=section,
        )
        tasks.enqueue_followup(followup)
    return followup


def check_followup_text(question: str) -> None:
    """A follow-up question is not empty and at most RESEARCH_FOLLOWUP_MAX_CHARS long."""
    if not question.strip():
        raise BadQuestion(_("Write a question, or choose a section to expand."))
    limit = settings.RESEARCH_FOLLOWUP_MAX_CHARS
    if len(question) > limit:
        raise BadQuestion(
            ngettext(
                "A follow-up question may be at most %(limit)d character long; this one has %(count)d.",
                "A follow-up question may be at most %(limit)d characters long; this one has %(count)d.",
                limit,
            )
            % {"limit": limit, "count": len(question)}
        )
