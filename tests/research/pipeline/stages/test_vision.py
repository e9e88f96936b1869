"""A question with a picture: accepted by content without metadata, described by the vision model
through the LLM limits and the cache, its labels joining planning and search, shown only to its
owner (and on share links)."""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from PIL import Image

from research import images, workflow
from research.models import CacheEntry, LLMCall, RunEvent, SearchQuery, ShareLink, SubQuery, Topic, TopicImage
from research.pipeline.run import plan_topic, run_topic
from tests.support.domain_world import VISION_MODEL, DomainWorld, loopback_domain_world, picture
from tests.support.world import prompt_kind

pytestmark = pytest.mark.django_db

RED, BLUE = (220, 30, 30), (20, 40, 230)
QUESTION = "What is this building and when was it built?"


@pytest.fixture
def world(settings: Any) -> Iterator[DomainWorld]:
    with loopback_domain_world(settings) as w:
        yield w


def start(owner: User, data: bytes, question: str = QUESTION, **fields: Any) -> Topic:
    topic = Topic(question=question, **fields)
    return workflow.start_topic(topic, owner, image=images.prepare(data))


# --- accepting a picture -------------------------------------------------------------------------------


def test_metadata_is_stripped_and_the_pixels_kept() -> None:
    original = picture(RED, exif_gps=True)
    assert b"SpyCam" in original
    with Image.open(io.BytesIO(original)) as opened:
        assert opened.getexif().get_ifd(0x8825), "the test picture must carry a GPS position"
    prepared = images.prepare(original)
    assert b"SpyCam" not in prepared.data and b"Exif" not in prepared.data
    with Image.open(io.BytesIO(prepared.data)) as clean:
        assert not clean.getexif() and clean.size == (64, 48)
        pixel = clean.convert("RGB").resize((1, 1)).getpixel((0, 0))
        assert isinstance(pixel, tuple) and pixel[0] > 180


def test_the_type_is_read_from_the_content_not_the_name(settings: Any) -> None:
    png = io.BytesIO()
    Image.new("RGBA", (10, 10), (0, 0, 255, 128)).save(png, format="PNG")
    assert images.prepare(png.getvalue()).content_type == "image/png"  # transparency kept as PNG
    for bad in (
        b"%PDF-1.7 not a picture",
        b"<svg xmlns='http://www.w3.org/2000/svg'/>",
        b"\xff\xd8\xff broken",
    ):
        with pytest.raises(images.ImageRejected):
            images.prepare(bad)
    settings.TOPIC_IMAGE_MAX_BYTES = 1000
    with pytest.raises(images.ImageRejected, match="limit"):
        images.prepare(picture(RED, size=(400, 400)) + b"\0" * 1000)


def test_a_decompression_bomb_is_refused() -> None:
    out = io.BytesIO()
    Image.new("1", (12_000, 12_000)).save(out, format="PNG")  # tiny file, 144 megapixels
    with pytest.raises(images.ImageRejected):
        images.prepare(out.getvalue())


def test_a_picture_decoded_whole_is_held_to_fewer_pixels_than_a_jpeg() -> None:
    """A PNG of 40 MP in RGBA compresses to ~150 KB and would decode to 160 MB (JPEGs are
    decoded at a reduced scale, PNGs are not)."""
    out = io.BytesIO()
    Image.new("RGBA", (6_300, 6_300)).save(out, format="PNG")
    with pytest.raises(images.ImageRejected, match="too many pixels"):
        images.prepare(out.getvalue())
    assert images.prepare(picture(RED, size=(6_300, 6_300))).width == images.MAX_SIDE


# --- the vision stage -------------------------------------------------------------------------------


def test_the_vision_model_describes_the_picture_and_its_labels_join_the_plan(
    alice: User, world: DomainWorld
) -> None:
    topic = start(alice, picture(RED, exif_gps=True))
    plan_topic(topic.pk)
    image = TopicImage.objects.get(topic=topic)
    assert image.analysis == TopicImage.Analysis.DONE
    assert image.labels == ["Eiffel Tower", "Paris", "wrought-iron lattice tower"]
    assert image.text == "TOUR EIFFEL 1889" and image.vision_model == VISION_MODEL
    # The picture went to the vision model as a data URL in an image_url part, without its EXIF.
    sent = world.script.seen_images[0]
    assert sent.startswith("data:image/jpeg;base64,")
    assert b"SpyCam" not in base64.b64decode(sent.split(",", 1)[1])
    vision_requests = [
        r for r in world.llm.requests_to("/v1/chat/completions") if r.json()["model"] == VISION_MODEL
    ]
    assert len(vision_requests) == 1
    # One LLMCall row, under the vision model, in the vision cache kind.
    call = LLMCall.objects.get(topic=topic, stage="vision")
    assert (call.model, call.cache_kind, call.cache_hit) == (VISION_MODEL, CacheEntry.Kind.VISION, False)
    assert CacheEntry.objects.filter(kind=CacheEntry.Kind.VISION, owner=alice).count() == 1
    # The labels joined the question the planner saw, and so the plan.
    plans = [
        m
        for m in world.script.requests
        if "подзапрос" in m[0]["content"].lower() and isinstance(m[-1]["content"], str)
    ]
    assert any(
        "Eiffel Tower" in m[-1]["content"] and "Контекст изображения" in m[-1]["content"] for m in plans
    )
    planned = list(SubQuery.objects.filter(topic=topic).values_list("text", flat=True))
    assert any("Eiffel Tower" in text for text in planned)
    event = RunEvent.objects.get(topic=topic, stage="vision", data__labels__isnull=False)
    assert "Eiffel Tower" in event.message


def test_the_labels_reach_the_search_queries_and_the_report_prompt(alice: User, world: DomainWorld) -> None:
    topic = start(alice, picture(RED), auto_approve=True)
    assert plan_topic(topic.pk)
    run_topic(topic.pk)
    topic.refresh_from_db()
    assert topic.status == Topic.Status.COMPLETED, topic.error
    searched = list(SearchQuery.objects.filter(subquery__topic=topic).values_list("text", flat=True))
    assert any("Eiffel Tower" in text for text in searched)
    assert any("Eiffel Tower" in r.param("q") for r in world.searxng.requests_to("/search"))
    answer = [m for m in world.script.requests if prompt_kind(str(m[0]["content"])) == "answer"]
    assert answer and "Текст на изображении: TOUR EIFFEL 1889" in answer[-1][-1]["content"]


def test_the_same_picture_again_is_described_from_the_cache(alice: User, world: DomainWorld) -> None:
    plan_topic(start(alice, picture(BLUE)).pk)
    again = start(alice, picture(BLUE), question="Where is this lake?")
    plan_topic(again.pk)
    assert world.script.calls["vision"] == 1
    assert TopicImage.objects.get(topic=again).labels[0] == "Lake Baikal"
    assert LLMCall.objects.get(topic=again, stage="vision").cache_hit


def test_researching_again_keeps_the_picture_and_its_labels(alice: User, world: DomainWorld) -> None:
    topic = start(alice, picture(RED), auto_approve=True)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    copy = workflow.rerun_topic(Topic.objects.get(pk=topic.pk))
    run_topic(copy.pk)
    copy.refresh_from_db()
    assert copy.status == Topic.Status.COMPLETED, copy.error
    image = TopicImage.objects.get(topic=copy)
    assert image.labels[0] == "Eiffel Tower" and bytes(image.data) == bytes(
        TopicImage.objects.get(topic=topic).data
    )
    assert world.script.calls["vision"] == 1  # described once, for the first topic
    assert TopicImage.objects.filter(topic=topic).exists()


def test_another_users_identical_picture_is_not_served_from_her_cache(
    alice: User, bob: User, world: DomainWorld
) -> None:
    plan_topic(start(alice, picture(BLUE)).pk)
    plan_topic(start(bob, picture(BLUE)).pk)
    assert world.script.calls["vision"] == 2  # a picture is private: its description is too
    assert world.script.calls["plan"] == 2  # and so is every answer its labels went into
    assert not CacheEntry.objects.filter(owner__isnull=True, kind=CacheEntry.Kind.SEARCH_QUERIES).exists()


def test_without_a_vision_model_the_topic_goes_on_with_the_text(
    alice: User, world: DomainWorld, settings: Any
) -> None:
    settings.VISION_MODEL = ""
    topic = start(alice, picture(RED))
    plan_topic(topic.pk)
    topic.refresh_from_db()
    assert topic.status == Topic.Status.AWAITING_APPROVAL
    assert TopicImage.objects.get(topic=topic).analysis == TopicImage.Analysis.NO_VISION
    warning = RunEvent.objects.get(topic=topic, stage="vision")
    assert warning.level == RunEvent.Level.WARNING and "VISION_MODEL" in warning.message
    assert not world.script.seen_images
    # The text model was never sent the picture (it would refuse it, as OpenAI's do).
    assert all(r.json()["model"] != VISION_MODEL for r in world.llm.requests)


def test_a_failing_vision_model_is_a_warning_and_the_plan_is_written(
    alice: User, world: DomainWorld, settings: Any
) -> None:
    settings.VISION_MODEL = "no-such-vision-model"
    topic = start(alice, picture(RED))
    plan_topic(topic.pk)
    topic.refresh_from_db()
    image = TopicImage.objects.get(topic=topic)
    assert image.analysis == TopicImage.Analysis.FAILED and "404" in image.error
    assert topic.status == Topic.Status.AWAITING_APPROVAL and SubQuery.objects.filter(topic=topic).exists()
    assert LLMCall.objects.get(topic=topic, stage="vision").error
    assert not CacheEntry.objects.filter(kind=CacheEntry.Kind.VISION).exists()


# --- the page, the API, the console ----------------------------------------------------------------


def test_the_start_form_takes_a_picture_and_only_its_owner_sees_it(
    alice: User, alice_client: Client, bob_client: Client, world: DomainWorld
) -> None:
    upload = SimpleUploadedFile("holiday.txt", picture(RED, exif_gps=True), content_type="text/plain")
    response = alice_client.post(
        reverse("topic_create"), {"question": QUESTION, "sources": "web", "mode": "quick", "image": upload}
    )
    assert response.status_code == 302
    topic = Topic.objects.get(owner=alice)
    url = reverse("topic_image", args=[topic.pk])
    served = alice_client.get(url)
    assert served.status_code == 200 and served["Content-Type"] == "image/jpeg"
    assert served["X-Content-Type-Options"] == "nosniff" and b"SpyCam" not in served.content
    assert bob_client.get(url).status_code == 404
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert url in page and "described before the plan" in page
    plan_topic(topic.pk)
    page = alice_client.get(reverse("topic_detail", args=[topic.pk])).content.decode()
    assert "Eiffel Tower" in page and "TOUR EIFFEL 1889" in page


def test_a_file_that_is_not_a_picture_is_refused_and_nothing_is_saved(
    alice: User, alice_client: Client
) -> None:
    upload = SimpleUploadedFile("photo.jpg", b"%PDF-1.7 a pdf called photo", content_type="image/jpeg")
    response = alice_client.post(
        reverse("topic_create"), {"question": QUESTION, "sources": "web", "mode": "quick", "image": upload}
    )
    assert response.status_code == 400
    assert "not a JPEG, PNG, GIF or WebP" in response.content.decode()
    assert not Topic.objects.exists()


def test_a_share_link_shows_the_picture(
    alice: User, alice_client: Client, client: Client, world: DomainWorld
) -> None:
    topic = start(alice, picture(RED), auto_approve=True)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    _, token = ShareLink.issue(topic)
    page = client.get(reverse("shared_report", args=[token])).content.decode()
    image_url = reverse("shared_topic_image", args=[token])
    assert image_url in page and "Eiffel Tower" in page
    shown = client.get(image_url)
    # Not kept by the browser: a revoked link stops showing it at once.
    assert shown["Content-Type"] == "image/jpeg" and shown["Cache-Control"] == "no-store"
    ShareLink.objects.filter(topic=topic).update(revoked_at="2026-01-01T00:00:00Z")
    assert client.get(image_url).status_code == 404


def test_the_api_takes_a_picture_as_base64_and_reports_its_labels(
    alice: User, alice_client: Client, bob_client: Client, world: DomainWorld
) -> None:
    body = {
        "question": QUESTION,
        "image": "data:image/jpeg;base64," + base64.b64encode(picture(RED)).decode(),
    }
    created = alice_client.post("/api/topics", body, content_type="application/json")
    assert created.status_code == 201, created.content
    topic_id = created.json()["id"]
    plan_topic(topic_id)
    shown = alice_client.get(f"/api/topics/{topic_id}").json()["image"]
    assert shown["analysis"] == "done" and "Eiffel Tower" in shown["labels"]
    assert alice_client.get(shown["url"])["Content-Type"] == "image/jpeg"
    assert bob_client.get(shown["url"]).status_code == 404
    refused = alice_client.post(
        "/api/topics",
        {"question": QUESTION, "image": "bm90IGEgcGljdHVyZQ=="},
        content_type="application/json",
    )
    assert refused.status_code == 422 and refused.json()["detail"].startswith("image: ")
    assert Topic.objects.count() == 1


def test_the_console_takes_a_picture(alice: User, world: DomainWorld, tmp_path: Any) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    path = tmp_path / "tower.jpg"
    path.write_bytes(picture(RED))
    out = io.StringIO()
    call_command("research", QUESTION, user="alice", yes=True, image=str(path), stdout=out)
    topic = Topic.objects.get(owner=alice)
    assert TopicImage.objects.get(topic=topic).labels[0] == "Eiffel Tower"
    assert "Eiffel Tower" in out.getvalue()
    bad = tmp_path / "notes.jpg"
    bad.write_text("just text")
    with pytest.raises(CommandError, match="not a JPEG"):
        call_command("research", QUESTION, user="alice", yes=True, image=str(bad), stdout=io.StringIO())
    assert Topic.objects.count() == 1


def test_an_archive_carries_the_picture_and_refuses_one_that_is_not(
    alice: User, bob: User, world: DomainWorld
) -> None:
    import json
    import zipfile

    from research import archive
    from research.archive.checks import ArchiveError

    topic = start(alice, picture(RED, exif_gps=True), auto_approve=True)
    plan_topic(topic.pk)
    run_topic(topic.pk)
    exported = archive.export_topic(Topic.objects.get(pk=topic.pk))
    copy = archive.import_archive(io.BytesIO(exported), bob)
    image = TopicImage.objects.get(topic=copy)
    assert image.labels[0] == "Eiffel Tower" and image.analysis == TopicImage.Analysis.DONE
    assert image.content_type == "image/jpeg" and b"SpyCam" not in bytes(image.data)
    with zipfile.ZipFile(io.BytesIO(exported)) as opened:
        data = json.loads(opened.read("topic.json"))
    data["image"]["data"] = base64.b64encode(b"%PDF-1.7 not a picture").decode()
    before = Topic.objects.count()
    with pytest.raises(ArchiveError, match="picture"):
        archive.import_topic(data, bob)
    assert Topic.objects.count() == before


def test_the_pictures_labels_reach_every_prompt_only_inside_the_data_block(
    alice: User, world: DomainWorld
) -> None:
    """What the vision model read off a picture is untrusted data, like a page: a prompt quotes
    the user's own words as the question, and the labels reach it only inside a data block. (A
    sub-query the planner wrote from them is the plan the user approved, and is quoted as such.)"""
    topic = start(alice, picture(RED), auto_approve=True)
    assert plan_topic(topic.pk)
    run_topic(topic.pk)
    prompts = [
        (prompt_kind(str(m[0]["content"])), m[-1]["content"])
        for m in world.script.requests
        if isinstance(m[-1]["content"], str)
    ]
    quoting = re.compile(r'^(?:Запрос: "(.*)"|Исходный запрос: (.*)|Сообщение пользователя: (.*))$', re.M)
    quoted = {
        kind: [next(g for g in m.groups() if g is not None) for m in quoting.finditer(text)]
        for kind, text in prompts
    }
    assert {"route", "plan", "score", "answer"} <= {kind for kind, lines in quoted.items() if lines}
    for kind, lines in quoted.items():
        assert all(line == QUESTION for line in lines), (kind, lines)
    for kind, text in prompts:
        if kind in ("route", "plan", "score", "answer"):
            data = "".join(re.findall(r"<<<ДАННЫЕ\n.*?\nДАННЫЕ>>>", text, flags=re.S))
            assert "Eiffel Tower" in data, (kind, text)  # the labels still reach it, as data
    # The planner still used them: the sub-queries name what the picture shows.
    planned = SubQuery.objects.filter(topic=topic).values_list("text", flat=True)
    assert any("Eiffel Tower" in text for text in planned)
