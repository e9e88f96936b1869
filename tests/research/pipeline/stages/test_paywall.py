"""A subscription notice read in place of an article is not a source: the next-best hit reads."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from research.models import Document, RunEvent, Topic
from research.pipeline.stages.read import paywalled
from tests.reliability.runs import research
from tests.support.fakes import Request, Response, reader_text
from tests.support.world import World

STUB = (
    "# Mixture of Tokens: Efficient LLMs\n\n**Subscribe to continue reading.** This article is "
    "available to subscribers only. Already a subscriber? Sign in. Purchase access: $39.95 for 24 hours."
)


def test_a_short_subscription_notice_is_a_paywall_and_an_article_about_subscriptions_is_not() -> None:
    assert paywalled(STUB)
    assert paywalled("Чтобы продолжить чтение, оформите подписку. Доступно подписчикам.")
    article = "Subscription businesses ask readers to subscribe to continue reading. " + "Long text. " * 400
    assert not paywalled(article)
    assert not paywalled("Mixture of Tokens mixes tokens across examples.")


@pytest.mark.django_db
def test_a_paywalled_page_gives_its_place_to_the_next_hit(alice: User, loopback: World) -> None:
    real = loopback.reader.fallback
    assert real is not None

    def with_paywall(request: Request) -> Response:
        target = request.raw_path.removeprefix("/")
        if "/pages/mot-paper" in target:
            return Response(200, reader_text("Mixture of Tokens", target, STUB))
        return real(request)

    loopback.reader.fallback = with_paywall
    topic = research(alice)
    assert topic.status == Topic.Status.COMPLETED, topic.error
    assert not Document.objects.filter(topic=topic, url__contains="/pages/mot-paper").exists()
    assert RunEvent.objects.filter(topic=topic, stage="read", message__contains="paywall").exists()
    assert Document.objects.filter(topic=topic).count() >= 5
