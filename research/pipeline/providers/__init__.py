"""Domain data providers: the live facts of a weather, place, finance, sports or route question.

One module per provider, each with its client in `mindsearch/clients/`: it names its `DOMAIN` (a
`Topic.Domain`), says whether it `is_configured()` and what the log says when it is not
(`NOT_CONFIGURED`, a msgid), and `fetch(ctx)` saves what it found as the topic's domain document
(`common.publish`) or warns that the topic goes on with the web alone (`common.web_alone`). The
domain stage (`research/pipeline/stages/domain.py`) asks the one registered for the topic's domain.
Adding a provider is its module here, its client, and its line in `PROVIDERS`.
"""

from __future__ import annotations

from typing import Protocol

from research.models import Topic
from research.pipeline.context import RunContext
from research.pipeline.providers import finance, places, sports, transport, weather


class Provider(Protocol):
    DOMAIN: Topic.Domain
    NOT_CONFIGURED: str

    def is_configured(self) -> bool: ...

    def fetch(self, ctx: RunContext) -> None: ...


REGISTERED: tuple[Provider, ...] = (weather, places, finance, sports, transport)
# The provider of each live domain; a domain without one goes on with the web alone.
PROVIDERS: dict[str, Provider] = {provider.DOMAIN: provider for provider in REGISTERED}
