"""The names of the stages and what a stage tells the run loop.

`StageName` is the one spelling of every stage: `Topic.stage`, `RunEvent.stage` and
`LLMCall.stage` hold its values (plain strings, so stored rows and archives read as before), the
progress bars and the websocket's panels are keyed on it, and its labels are what people read
("score_hits" → "Score hits"). A few of its members are not stages but lines the run itself
writes (`LLM`, `RUN`, `DONE`, `CANCELLED`).

A stage is a module with a `STAGE: StageName` and a `run(ctx) -> Outcome` (the `Stage` protocol
of `run.py`, which calls them). `run` reads the rows of the stage before, skips what is done, saves
as it goes and says what the run loop should do next; a stage never runs another stage itself.
This module imports nothing of the pipeline: everything else may import it.
"""

from __future__ import annotations

import enum

from django.db import models
from django.utils.translation import gettext_lazy as _


class StageName(models.TextChoices):
    VISION = "vision", _("Picture")
    ROUTE = "route", _("Route")
    DOMAIN = "domain", _("Domain data")
    PLAN = "plan", _("Plan")
    QUERIES = "queries", _("Queries")
    SEARCH = "search", _("Search")
    YEARS = "years", _("Per-year search")
    SCORE_HITS = "score_hits", _("Score hits")
    READ = "read", _("Read pages")
    SUMMARISE = "summarise", _("Summarise")
    SCORE_SUMMARIES = "score_summaries", _("Score summaries")
    DEEP = "deep", _("Deep rounds")
    ANSWER = "answer", _("Write report")
    CITECHECK = "citecheck", _("Citation check")
    FOLLOWUP = "followup", _("Follow-up")
    # Lines of the run itself, not of one stage.
    LLM = "llm", _("LLM")
    RUN = "run", _("Run")
    DONE = "done", _("Done")
    CANCELLED = "cancelled", _("Cancelled")


class Outcome(enum.Enum):
    """What a stage tells the run loop; each stage says which of these it may return."""

    CONTINUE = "continue"  # the next stage follows
    ANSWERED = "answered"  # local_rag, direct: answered without a search; nothing follows
    SEARCH_AGAIN = "search_again"  # years: sub-queries were added that the search stage must run
    ANOTHER_ROUND = "another_round"  # deep: the next round is planned; its stages follow
