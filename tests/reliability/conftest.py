"""Alice's estate: one of everything a user can own, for the walks over every URL."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from mindsearch.models import ApiToken
from research import images, workflow
from research.models import (
    Citation,
    Document,
    FollowUp,
    Hit,
    HitScore,
    Report,
    ShareLink,
    SubQuery,
    Summary,
    SummaryScore,
    Topic,
)
from retrieval.models import PassageNote

# A 1×1 PNG, the picture Alice's topic was asked with.
PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

# Words that appear only in Alice's things: a page another user sees must not contain them.
SECRET = "Quetzalcoatl-7731"
SCORES = dict.fromkeys(HitScore.CRITERIA, 8.0)


@dataclass
class Estate:
    owner: User
    topic: Topic  # finished, with a report and a share link
    plan: Topic  # waiting for plan review
    subquery: SubQuery
    link: ShareLink
    share_token: str
    document: Any
    api_token: ApiToken
    import_job: str = ""
    note: Any = None  # a note on the passage the report's citation rests on (retrieval/notes.py)

    def params(self) -> dict[str, object]:
        """A value for every URL parameter the project uses, pointing at Alice's things."""
        return {
            "topic_id": self.topic.pk,
            "subquery_id": self.subquery.pk,
            "link_id": self.link.pk,
            "token": self.share_token,
            "document_id": self.document.pk,
            "token_id": self.api_token.pk,
            "object_id": self.topic.pk,
            "content_type_id": ContentType.objects.get_for_model(Topic).pk,
            "id": self.owner.pk,
            "app_label": "research",
            "url": "no-such-admin-page/",
            "rest": "no/such/operation",
            "job_id": self.import_job,
            "index": 0,
            "followup_id": self.topic.followups.values_list("pk", flat=True).first(),
            "note_id": self.note.pk if self.note is not None else 0,
        }


def _finished_topic(owner: User) -> Topic:
    topic = Topic.objects.create(
        owner=owner, question=f"What is {SECRET}?", status=Topic.Status.COMPLETED, finished_at=timezone.now()
    )
    subquery = SubQuery.objects.create(topic=topic, text=f"{SECRET} origins")
    url = f"https://example.org/{SECRET}"
    hit = Hit.objects.create(topic=topic, subquery=subquery, url=url, normalized_url=url, title=SECRET)
    HitScore.objects.create(hit=hit, **SCORES)
    document = Document.objects.create(
        topic=topic, hit=hit, title=SECRET, url=url, text=SECRET, fetched_via="reader"
    )
    summary = Summary.objects.create(document=document, text=f"{SECRET} summary.")
    SummaryScore.objects.create(summary=summary, **SCORES)
    sources = [{"n": 1, "title": SECRET, "url": url, "document_id": document.pk, "fetched_via": "reader"}]
    Report.objects.create(topic=topic, markdown=f"# {SECRET}\n\nFound [1].", sources=sources, model="m")
    workflow.save_image(topic, images.prepare(base64.b64decode(PIXEL_PNG)))  # asked with a picture
    FollowUp.objects.create(
        topic=topic,
        position=1,
        question=f"And {SECRET}?",
        status=FollowUp.Status.COMPLETED,
        answer=f"{SECRET} again [1].",
        citations=[  # checked: its passage can be noted (retrieval/notes.py)
            {
                "sentence_index": 0,
                "sentence": f"{SECRET} again.",
                "n": 1,
                "verdict": "supported",
                "local_verdict": "supported",
                "method": "local",
                "score": 0.9,
                "coverage": 1.0,
                "similarity": None,
                "passage": f"The passage on {SECRET}.",
                "note": "",
            }
        ],
    )
    return topic


@pytest.fixture
def estate(alice: User, settings: Any, tmp_path: Any) -> Estate:
    from research import imports
    from retrieval.uploads import accept_upload

    settings.MEDIA_ROOT = tmp_path
    topic = _finished_topic(alice)
    plan = Topic.objects.create(owner=alice, question=f"Plan for {SECRET}", status="awaiting_approval")
    subquery = SubQuery.objects.create(topic=plan, text=f"{SECRET} sub-query")
    link, share_token = ShareLink.issue(topic)
    upload = SimpleUploadedFile(f"{SECRET}.md", f"# {SECRET}\n\nPrivate notes on {SECRET}.\n".encode())
    document, _ = accept_upload(alice, upload)
    api_token, _plain = ApiToken.issue(alice, f"{SECRET} script")
    job = imports.start(SimpleUploadedFile("topic.zip", b"PK not really"), alice)
    citation = Citation.objects.create(
        report=topic.report,
        sentence_index=0,
        sentence="Found.",
        n=1,
        verdict=Citation.Verdict.SUPPORTED,
        local_verdict=Citation.Verdict.SUPPORTED,
        method=Citation.Method.LOCAL,
        score=0.9,
        passage=f"The passage on {SECRET}.",
    )
    note = PassageNote.objects.create(
        owner=alice, text=f"My note on {SECRET}", passage=citation.passage, citation=citation
    )
    return Estate(alice, topic, plan, subquery, link, share_token, document, api_token, job, note)


def snapshot() -> dict[str, list]:
    """Every row of every MindSearch table and of the users, to show nothing changed."""
    models = [*apps.get_app_config("research").get_models(), *apps.get_app_config("retrieval").get_models()]
    models += [*apps.get_app_config("mindsearch").get_models(), User]
    # `rendering`: a report's or answer's HTML, made once on the first view of a row saved before
    # it was stored (research/presenters.py) — a cache of the text, not a change to it.
    skip = {"last_login", "last_used_at", "heartbeat_at", "updated_at", "hit_count", "last_hit_at"}
    skip.add("rendering")
    rows = {}
    for model in models:
        fields = [f.attname for f in model._meta.concrete_fields if f.attname not in skip]
        rows[model._meta.label] = sorted(map(repr, model._default_manager.values_list(*fields)))
    return rows
