from __future__ import annotations

from django import template

from research.models import Topic, TopicImage
from research.presenters import STAGE_LABELS

register = template.Library()


@register.filter
def stage_label(stage: str) -> str:
    """A stage's name for people, in the page's language ("score_hits" → "Score hits")."""
    return str(STAGE_LABELS.get(stage, stage))


@register.simple_tag
def question_image(topic: Topic) -> TopicImage | None:
    """The picture a topic's question came with, without its bytes (the page links to them)."""
    return TopicImage.objects.defer("data").filter(topic=topic).first()
