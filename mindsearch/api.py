"""The one NinjaAPI, served under /api/: authentication, error answers, and the app routers.

Two ways in: a personal API token (`Authorization: Bearer <token>`, made on /settings/tokens/)
for scripts, and the browser's session, which must then send its CSRF token on unsafe methods.
Every error answers JSON `{"detail": "<message>"}` with a fitting status; ids another user owns
answer 404 exactly like ids that do not exist.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ImproperlyConfigured, RequestDataTooBig, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, URLResolver, reverse
from ninja import NinjaAPI, Router, Swagger
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.operation import Operation
from ninja.renderers import JSONRenderer
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from mindsearch.api_common import SCOPE_ATTRIBUTE
from mindsearch.models import ApiToken, TokenScope, missing_scope
from research import workflow
from research.api import router as research_router
from retrieval.api import router as retrieval_router


class BearerTokenAuth(HttpBearer):
    """A personal API token; a token that was presented but is no good is a 401 at once."""

    def authenticate(self, request: HttpRequest, token: str) -> AbstractBaseUser:
        row = ApiToken.objects.find(token.strip())
        if row is None or not row.owner.is_active:
            raise HttpError(401, "The API token is unknown, expired or revoked.")
        row.touch()
        needed = getattr(request, NEEDED_SCOPE, None)
        if needed is not None and not row.allows(needed):
            raise HttpError(403, missing_scope(needed, f"{request.method} {request.path}"))
        return row.owner


# Where `scoped` tells the token check which scope the operation being run needs.
NEEDED_SCOPE = "_mindsearch_needed_scope"


def scope_of(operation: Operation) -> str | None:
    """The token scope an operation needs: its `api_common.needs` mark, else "read" for a GET.
    An unmarked operation of any other method stops the API from starting, so a new route
    cannot forget its scope. None: an operation open to anyone (the unknown-path answer)."""
    scope = getattr(operation.view_func, SCOPE_ATTRIBUTE, None)
    name = operation.view_func.__name__
    if scope is None and operation.auth_callbacks:
        if operation.methods != ["GET"]:
            raise ImproperlyConfigured(
                f"The API operation {name} needs a token scope: mark it with @needs(...)."
            )
        scope = TokenScope.READ
    if scope is not None and scope not in TokenScope.values:
        raise ImproperlyConfigured(f"Unknown API token scope {scope!r} on the API operation {name}.")
    return scope


def scoped(run: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap an operation's run so that an API token is checked for the operation's scope (in
    `BearerTokenAuth`, before the input is read). The signed-in browser session is not limited
    by scopes: it is the account itself."""
    scope = scope_of(run.__self__)  # type: ignore[attr-defined]

    @functools.wraps(run)
    def running(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        setattr(request, NEEDED_SCOPE, scope)
        return run(request, **kwargs)

    return running


class SessionCsrfAuth(APIKeyCookie):
    """The signed-in browser session; unsafe methods must carry the CSRF token.

    ninja's own session auth checks CSRF before it knows whether anyone is signed in, which
    answers an anonymous POST with 403 instead of 401.
    """

    param_name = settings.SESSION_COOKIE_NAME

    def _get_key(self, request: HttpRequest) -> str | None:
        return request.COOKIES.get(self.param_name)

    def authenticate(self, request: HttpRequest, key: str | None) -> AbstractBaseUser | None:
        user = request.user
        if not user.is_authenticated:
            return None
        if not getattr(request, "_ninja_csrf_exempt", False) and check_csrf(request) is not None:
            raise HttpError(
                403,
                "CSRF check failed: a signed-in browser must send the X-CSRFToken header "
                "(scripts should use an API token instead).",
            )
        return user


class Utf8JSONRenderer(JSONRenderer):
    """JSON with Cyrillic (and every other script) as it is, not as \\u escapes: readable in a
    terminal and a third smaller for Russian text; the response's charset is utf-8."""

    json_dumps_params = {"ensure_ascii": False}


class MindSearchAPI(NinjaAPI):
    def get_openapi_operation_id(self, operation: Operation) -> str:
        # verb_noun names are unique across the routers and read well in generated clients.
        return operation.view_func.__name__


DESCRIPTION = """
The MindSearch REST API: research topics (start, review the plan, follow the run, read the
report), share links, your private documents and search over them.

**Authentication.** Create a personal API token on the *API tokens* settings page
(`/settings/tokens/`) and send it as `Authorization: Bearer <token>`. In the browser, the
signed-in session works too (unsafe methods need the `X-CSRFToken` header; this page sends it).

**Errors** answer JSON `{"detail": "..."}`: 401 not authenticated, 403 not allowed or CSRF,
404 not found (also for anything another user owns), 409 not possible in the topic's current
state, 413 too large, 422 invalid input (with `errors` per field).
"""

api = MindSearchAPI(
    title="MindSearch API",
    version="1",
    description=DESCRIPTION,
    urls_namespace="api",
    renderer=Utf8JSONRenderer(),
    auth=[BearerTokenAuth(), SessionCsrfAuth()],
    docs=Swagger(settings={"persistAuthorization": True}),
    docs_url="/docs",
)


@api.exception_handler(ValidationError)
def invalid_input(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    detail = "; ".join(_describe(error) for error in exc.errors) or "Invalid input."
    return api.create_response(request, {"detail": detail, "errors": exc.errors}, status=422)


REQUEST_PARTS = {"body", "query", "path", "file", "form", "header", "cookie"}


def _describe(error: dict[str, Any]) -> str:
    # ("body", "payload", "question") → "question": where in the request is noise for a reader.
    location = [str(part) for part in error.get("loc", ())]
    if location and location[0] in REQUEST_PARTS:
        location = location[1:]
    if location and location[0] == "payload":
        location = location[1:]
    message = str(error.get("msg", "invalid"))
    return f"{'.'.join(location)}: {message}" if location else message


@api.exception_handler(AuthenticationError)
def not_authenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    detail = (
        "Authentication required: send 'Authorization: Bearer <token>' with a personal API token "
        "(create one at /settings/tokens/) or sign in."
    )
    response = api.create_response(request, {"detail": detail}, status=401)
    response["WWW-Authenticate"] = 'Bearer realm="MindSearch"'
    return response


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    response = api.create_response(request, {"detail": exc.message}, status=exc.status_code)
    if exc.status_code == 401:
        response["WWW-Authenticate"] = 'Bearer realm="MindSearch", error="invalid_token"'
    return response


@api.exception_handler(Http404)
def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "Not found."}, status=404)


@api.exception_handler(RequestDataTooBig)
def too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    detail = f"The request body is too large: at most {limit} bytes (files are uploaded as multipart)."
    return api.create_response(request, {"detail": detail}, status=413)


@api.exception_handler(workflow.OverLimit)
def over_limit(request: HttpRequest, exc: workflow.OverLimit) -> HttpResponse:
    """A fair-use limit (too many topics at once, too many sub-queries): 429."""
    return api.create_response(request, {"detail": exc.message}, status=429)


@api.exception_handler(workflow.Refused)
def refused(request: HttpRequest, exc: workflow.Refused) -> HttpResponse:
    return api.create_response(request, {"detail": exc.message}, status=409)


@api.exception_handler(SuspiciousOperation)
def bad_request(request: HttpRequest, exc: SuspiciousOperation) -> HttpResponse:
    return api.create_response(request, {"detail": f"Bad request: {exc}"}, status=400)


api.add_decorator(scoped, mode="view")
api.add_router("/", research_router)
api.add_router("/", retrieval_router)

# Last, so that it only catches what no operation matched: a JSON 404, not the site's HTML page.
unmatched = Router()


@unmatched.api_operation(
    ["GET", "POST", "PUT", "PATCH", "DELETE"], "/{path:rest}", auth=None, include_in_schema=False
)
def unknown_operation(request: HttpRequest, rest: str) -> HttpResponse:
    raise Http404(f"There is no API operation at {request.path}; see /api/docs for the list.")


api.add_router("/", unmatched)


def urls() -> tuple[list[URLPattern | URLResolver], str, str]:
    """The API's URLs, open to LoginRequiredMiddleware: the API authenticates by itself, and
    answers 401 in JSON rather than redirecting a script to the sign-in page."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if not isinstance(pattern, URLPattern):  # ninja lists only its own views' patterns
            raise TypeError(f"Unexpected URL resolver in the API's URLs: {pattern!r}")
        if pattern.name == "api-root":
            pattern.callback = api_root
        pattern.callback.login_required = False  # type: ignore[attr-defined]
    return patterns, app_name, namespace


def api_root(request: HttpRequest) -> JsonResponse:
    """/api/ itself: where the docs and the schema are (ninja's own answers an HTML 404)."""
    return JsonResponse(
        {
            "detail": "The MindSearch API. Send 'Authorization: Bearer <token>' (see /settings/tokens/).",
            "docs": reverse("api:openapi-view"),
            "schema": reverse("api:openapi-json"),
        }
    )
