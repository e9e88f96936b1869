"""The owner's documents searched for each sub-query (`private.search_documents`), before the web.

A stage of its own in the run loop, so the web search neither runs it nor depends on being the
one who did; in the progress log and bars it is part of the search, whose name it writes under.
A web-only topic skips it; a documents-only topic has nothing else to search.
"""

from __future__ import annotations

from research.pipeline import private
from research.pipeline.context import RunContext
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.SEARCH


def run(ctx: RunContext) -> Outcome:
    private.search_documents(ctx, STAGE)
    return Outcome.CONTINUE
