from __future__ import annotations

from django import template

from research.presenters import STAGE_LABELS

register = template.Library()


@register.filter
def stage_label(stage: str) -> str:
    """A stage's name for people, in the page's language ("score_hits" → "Score hits")."""
    return str(STAGE_LABELS.get(stage, stage))
