"""MindSearch as an MCP server: the same operations as the REST API, as MCP tools and resources.

Every tool calls the API's own operation (research/api.py, retrieval/api.py) with a request
whose `auth` is the caller, so ownership, the workflow's limits and the answers' shapes are the
API's. An operation's refusal (404, 409, 422, 429, 503) becomes an MCP tool error carrying the
API's message.

Who the caller is: over Streamable HTTP (`/mcp`, see `mcphub.http`) the personal API token of
the request, checked before the SDK sees it; over stdio (`manage.py mcp --user NAME`) the user
the command was started for. An HTTP request never falls back to the stdio user.

What the caller may do: each tool needs one API token scope (`TokenScope`), as the REST
operation it calls does; a token without it gets a tool error naming the scope. The stdio
server acts as its user with every scope.
"""

from __future__ import annotations

import contextvars
from typing import Annotated, Any, Literal

from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from django.http import Http404, HttpRequest
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError
from pydantic import Field, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from mindsearch.api_common import MAX_OFFSET, MAX_PAGE, Text
from mindsearch.models import TokenScope, missing_scope
from research import api as research_api
from research import workflow
from retrieval import api as retrieval_api

CHECKED_TEXT: TypeAdapter[str] = TypeAdapter(Text)
# Where mcphub.http puts the authenticated user's id in the ASGI scope.
SCOPE_USER_KEY = "mindsearch.mcp_user_id"
# …and the scopes of the token it presented.
SCOPE_TOKEN_SCOPES_KEY = "mindsearch.mcp_token_scopes"  # noqa: S105 — a key name, not a secret
# The user a stdio server acts as (set by `manage.py mcp`); None in the web process.
stdio_user_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "mindsearch_mcp_stdio_user", default=None
)

INSTRUCTIONS = (
    "MindSearch researches questions on the web and in your own documents and writes cited "
    "reports. Start a topic with start_research, poll get_topic_status with the returned "
    "last_seq as `since` until the status is completed, failed or cancelled, then read "
    "get_report (or the resource mindsearch://topics/{id}/report). A topic started without "
    "auto_approve waits for its plan to be approved (approve_plan)."
)

server = MCPServer("MindSearch", instructions=INSTRUCTIONS)


# --- Who is calling --------------------------------------------------------------------------------


def _user_id(ctx: Context) -> int:
    request = ctx.request_context.request
    if request is not None:
        scope = getattr(request, "scope", None) or {}
        user_id = scope.get(SCOPE_USER_KEY)
        if user_id is None:
            raise ToolError(
                "Not authenticated: send 'Authorization: Bearer <token>' with a personal API token."
            )
        return int(user_id)
    user_id = stdio_user_id.get()
    if user_id is None:
        raise ToolError("Not authenticated: this MCP server was started without a user.")
    return user_id


def _check_scope(ctx: Context, scope: TokenScope, what: str) -> None:
    """A tool error unless the caller's token has `scope` (the stdio server has every scope)."""
    request = ctx.request_context.request
    if request is None:
        return
    granted = (getattr(request, "scope", None) or {}).get(SCOPE_TOKEN_SCOPES_KEY) or ()
    if scope not in granted:
        raise ToolError(missing_scope(scope, what))


def _api_request(user_id: int) -> HttpRequest:
    """A request as the API's authentication leaves it: `auth` (and `user`) is the caller."""
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    if user is None:
        raise ToolError("The account this MCP connection acts for is unknown or disabled.")
    request = HttpRequest()
    request.method = "POST"
    request.auth = user  # type: ignore[attr-defined]
    request.user = user
    return request


def _describe(errors: list[dict[str, Any]]) -> str:
    parts = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ()) if part not in ("body", "query"))
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg", "invalid")))
    return "; ".join(parts) or "Invalid input."


def _call(user_id: int, operation: Any, *args: Any, **kwargs: Any) -> Any:
    """Run one API operation as the caller; its refusals become tool errors with its message."""
    try:
        return operation(_api_request(user_id), *args, **kwargs)
    except Http404 as missing:
        raise ToolError(str(missing) or "Not found.") from None
    except HttpError as refused:
        raise ToolError(refused.message) from None
    except NinjaValidationError as invalid:
        raise ToolError(_describe(list(invalid.errors))) from None
    except PydanticValidationError as invalid:
        raise ToolError(_describe(invalid.errors())) from None  # type: ignore[arg-type]
    except workflow.Refused as refused:
        raise ToolError(refused.message) from None


async def _run(ctx: Context, scope: TokenScope, operation: Any, *args: Any, **kwargs: Any) -> Any:
    """Run an API operation for a tool as the caller, if the caller's token has the tool's `scope`."""
    user_id = _user_id(ctx)
    _check_scope(ctx, scope, "this tool")
    return await database_sync_to_async(_call)(user_id, operation, *args, **kwargs)


def _dump(schema: Any, value: Any) -> dict[str, Any]:
    return schema.model_validate(value).model_dump(mode="json")


# --- Tools -------------------------------------------------------------------------------------------

TopicId = Annotated[int, Field(ge=1, le=research_api.MAX_INT, description="The topic's id.")]


def _start(request: HttpRequest, payload: dict[str, Any]) -> dict[str, Any]:
    status = research_api.create_topic(request, research_api.TopicIn(**payload))
    return _dump(research_api.TopicOut, status.value)


@server.tool()
async def start_research(
    ctx: Context,
    question: Annotated[str, Field(min_length=1, max_length=2000, description="The question to research.")],
    sources: Annotated[
        Literal["web", "docs", "both", "papers"],
        Field(description="Search the web, my documents, both, or scholarly papers only."),
    ] = "web",
    papers: Annotated[
        Literal["auto", "always", "never"],
        Field(
            description="Search papers (OpenAlex, arXiv, PubMed, Crossref) beside the web: auto = when the "
            "question is a scholarly one."
        ),
    ] = "auto",
    mode: Annotated[Literal["quick", "deep"], Field(description="Deep mode searches in rounds.")] = "quick",
    auto_approve: Annotated[
        bool, Field(description="Run the plan at once instead of waiting for approve_plan.")
    ] = True,
    time_range: Annotated[
        Literal["", "day", "week", "month", "year"], Field(description="Only results from this period.")
    ] = "",
    image: Annotated[
        str | None,
        Field(
            description="A picture the question is about, base64 or a data URL (JPEG, PNG, GIF or WebP); "
            "stored without its metadata and described by the vision model, whose labels join the question."
        ),
    ] = None,
    sites_only: Annotated[
        list[str], Field(description="Only web results on these sites (host names, with their subdomains).")
    ] = [],  # noqa: B006 — the SDK builds the schema from it; never mutated
    sites_prefer: Annotated[list[str], Field(description="Read and cite pages of these sites first.")] = [],  # noqa: B006
    sites_avoid: Annotated[list[str], Field(description="Never web results on these sites.")] = [],  # noqa: B006
    token_cap: Annotated[
        int | None,
        Field(
            ge=1,
            description="Past this many tokens the run stops gathering and writes its report "
            "from what it has.",
        ),
    ] = None,
    # The report's shape (issue 30, research/pipeline/outline.py).
    report_kind: Annotated[
        Literal["", "brief", "detailed", "review", "comparison"],
        Field(description="'' writes the report in one pass; detailed, review and comparison plan sections."),
    ] = "",
    outline: Annotated[
        list[str], Field(description="The report's sections in order (empty: proposed for the kind).")
    ] = [],  # noqa: B006 — the SDK builds the schema from it; never mutated
    report_length: Annotated[
        str, Field(max_length=12, description="short, standard, long or a number of words (100–20000).")
    ] = "",
) -> dict[str, Any]:
    """Start researching a question. Returns the new topic; poll get_topic_status until its
    status is completed, failed or cancelled, then read get_report."""
    payload = {
        "question": question,
        "sources": sources,
        "papers": papers,
        "mode": mode,
        "auto_approve": auto_approve,
        "time_range": time_range,
        "image": image,
        "sites_only": sites_only,
        "sites_prefer": sites_prefer,
        "sites_avoid": sites_avoid,
        "token_cap": token_cap,
        "report_kind": report_kind,
        "outline": outline,
        "report_length": report_length,
    }
    return await _run(ctx, TokenScope.RESEARCH, _start, payload)


def _status(request: HttpRequest, topic_id: int, since: int, limit: int) -> dict[str, Any]:
    topic = _dump(research_api.TopicOut, research_api.get_topic(request, topic_id))
    events = _dump(
        research_api.EventsOut, research_api.list_events(request, topic_id, since=since, limit=limit)
    )
    return {"topic": topic, **{key: events[key] for key in ("last_seq", "has_more", "events")}}


@server.tool()
async def get_topic_status(
    ctx: Context,
    topic_id: TopicId,
    since: Annotated[
        int, Field(ge=0, le=research_api.MAX_INT, description="Only events after this sequence number.")
    ] = 0,
    limit: Annotated[
        int, Field(ge=1, le=research_api.MAX_EVENTS, description="At most this many events.")
    ] = 200,
) -> dict[str, Any]:
    """A topic's status and its run events after `since`, oldest first. Pass the returned
    last_seq as `since` next time to get only newer events."""
    return await _run(ctx, TokenScope.READ, _status, topic_id, since, limit)


def _report(request: HttpRequest, topic_id: int) -> dict[str, Any]:
    report = _dump(research_api.ReportOut, research_api.get_report(request, topic_id))
    report.pop("html", None)  # the Markdown is the report; the HTML is the page's rendering of it
    return report


@server.tool()
async def get_report(ctx: Context, topic_id: TopicId) -> dict[str, Any]:
    """The finished report: Markdown with its numbered sources list, the sources, and, when the
    citations were checked, each cited sentence's verdict (supported, weak, unsupported)."""
    return await _run(ctx, TokenScope.READ, _report, topic_id)


def _approve(request: HttpRequest, topic_id: int, version: str) -> dict[str, Any]:
    return _dump(research_api.TopicOut, research_api.approve_plan(request, topic_id, version))


def _plan(request: HttpRequest, topic_id: int) -> dict[str, Any]:
    return _dump(research_api.PlanOut, research_api.get_plan(request, topic_id))


@server.tool()
async def get_plan(ctx: Context, topic_id: TopicId) -> dict[str, Any]:
    """A topic's plan: its sub-queries in order, the report's sections and length, whether it
    still waits for approval, and its version (pass it to approve_plan to approve exactly this plan)."""
    return await _run(ctx, TokenScope.READ, _plan, topic_id)


@server.tool()
async def approve_plan(
    ctx: Context,
    topic_id: TopicId,
    version: Annotated[
        str,
        Field(
            max_length=64,
            description="The plan's version from get_plan: a plan changed since then is not approved.",
        ),
    ] = "",
) -> dict[str, Any]:
    """Run a topic's plan (a topic started without auto_approve waits for this). With `version`,
    only the plan you were shown: one changed since is refused and nothing is approved."""
    return await _run(ctx, TokenScope.RESEARCH, _approve, topic_id, version)


def _list(request: HttpRequest, query: str, status: str | None, limit: int, offset: int) -> dict[str, Any]:
    found = research_api.list_topics(
        request,
        q=query,
        status=research_api.TopicStatus(status) if status else None,
        limit=limit,
        offset=offset,
    )
    return _dump(research_api.TopicPage, found)


@server.tool()
async def list_topics(
    ctx: Context,
    query: Annotated[str, Field(max_length=500, description="Words in the question or a sub-query.")] = "",
    status: Annotated[
        Literal["planning", "awaiting_approval", "queued", "running", "completed", "failed", "cancelled"]
        | None,
        Field(description="Only topics in this status."),
    ] = None,
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 25,
    offset: Annotated[int, Field(ge=0, le=MAX_OFFSET)] = 0,
) -> dict[str, Any]:
    """My research topics, newest first."""
    return await _run(ctx, TokenScope.READ, _list, query, status, limit, offset)


def _search(request: HttpRequest, query: str, k: int) -> dict[str, Any]:
    query = CHECKED_TEXT.validate_python(query)  # the API's own check: no NUL, valid Unicode
    return _dump(retrieval_api.SearchOut, retrieval_api.search_documents(request, q=query, k=k))


@server.tool()
async def search_my_documents(
    ctx: Context,
    query: Annotated[str, Field(min_length=1, max_length=1000, description="What to look for.")],
    k: Annotated[int, Field(ge=1, le=retrieval_api.MAX_RESULTS, description="How many passages.")] = 10,
) -> dict[str, Any]:
    """The passages of my indexed documents that best match the query (meaning and keywords),
    each with its document's name and page."""
    return await _run(ctx, TokenScope.READ, _search, query, k)


# --- Resources ---------------------------------------------------------------------------------------


def _report_markdown(user_id: int, topic_id: int) -> str:
    try:
        return _call(user_id, _report, topic_id)["markdown"]
    except ToolError as error:
        raise ResourceNotFoundError(str(error)) from None


@server.resource(
    "mindsearch://topics/{topic_id}/report",
    name="report",
    title="Research report",
    description="A finished topic's report as Markdown, with its numbered sources.",
    mime_type="text/markdown",
)
async def report_resource(topic_id: str, ctx: Context) -> str:
    if not topic_id.isdigit() or not 1 <= int(topic_id) <= research_api.MAX_INT:
        raise ResourceNotFoundError(f"Topic {topic_id} not found.")
    try:
        user_id = _user_id(ctx)
        _check_scope(ctx, TokenScope.READ, "this resource")
    except ToolError as error:
        raise ResourceError(str(error)) from None
    return await database_sync_to_async(_report_markdown)(user_id, int(topic_id))
