"""Domain data before the web: the provider of the question's domain asked first.

When the route stage puts a question in a domain that has a data provider
(`research/pipeline/providers/`), the provider's structured facts are fetched first and saved as a
`Document` (fetched via "domain"), with the time they were fetched in its title and text. The
report gets them as its first sources, as "pre-context" it must prefer for figures (the answer
stage); the web then adds the rest. A domain whose provider is not configured goes on with the web
alone, and the topic's log says so. Fetched data is cached (`CacheEntry` kind "domain_data") for
`DOMAIN_DATA_TTL_MINUTES`; a failure is a warning and never cached. What the question names (a
place, a company, a team, a route's ends) is read by `question_domain.py`.
"""

from __future__ import annotations

from research.models import Topic
from research.pipeline.context import RunContext
from research.pipeline.providers import PROVIDERS
from research.pipeline.stage import Outcome, StageName

STAGE = StageName.DOMAIN


def run(ctx: RunContext) -> Outcome:
    """Fetch the domain's data once; `Topic.domain_data_checked` says it was asked for, whatever
    came of it (a document, or a warning that the topic goes on with the web alone)."""
    topic = ctx.topic
    provider = PROVIDERS.get(topic.domain)
    if provider is None or _done(topic):
        return Outcome.CONTINUE
    if provider.is_configured():
        provider.fetch(ctx)
    else:
        ctx.warn(STAGE, provider.NOT_CONFIGURED, args={})
    topic.domain_data_checked = True
    topic.save(update_fields=["domain_data_checked", "updated_at"])
    return Outcome.CONTINUE


def _done(topic: Topic) -> bool:
    """Asked for already; or its document saved by a run that stopped before it could say so."""
    return topic.domain_data_checked or topic.domain_documents.exists()
