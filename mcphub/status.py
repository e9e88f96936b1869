"""The status page's line for MCP sources: each enabled source is connected to and its tools
listed, as the search stage would (through its rate limit, as calls made for nobody)."""

from __future__ import annotations

import asyncio

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils.translation import gettext as _
from django.utils.translation import ngettext, pgettext

from mcphub.models import McpSource
from mcphub.sources import Probe, probe
from mindsearch.status_check import ERROR, OFF, OK, WARN, Check


def check_sources() -> Check:
    name = pgettext("status page row", "MCP sources")
    sources = list(McpSource.objects.filter(enabled=True))
    if not sources:
        return Check(name, OFF, _("None registered"), _("Add MCP servers as sources in the admin."))
    probes = async_to_sync(_probe_all)(sources)
    failed = [p for p in probes if p.error]
    lines = [
        f"{p.source}: "
        + (_("failed: %(error)s") % {"error": p.error} if p.error else _("tool %(tool)s") % {"tool": p.tool})
        for p in probes
    ]
    summary = ngettext("%(count)d source", "%(count)d sources", len(sources)) % {"count": len(sources)}
    if failed:
        state = ERROR if len(failed) == len(probes) else WARN
        summary += " · " + ngettext("%(count)d failing", "%(count)d failing", len(failed)) % {
            "count": len(failed)
        }
    else:
        state = OK
    return Check(name, state, summary, "; ".join(lines))


async def _probe_all(sources: list[McpSource]) -> list[Probe]:
    timeout = settings.STATUS_CHECK_TIMEOUT
    return list(await asyncio.gather(*(probe(source, timeout) for source in sources)))
