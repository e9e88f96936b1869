"""ASGI entry point: HTTP through Django, websockets through Channels.

Websockets are accepted only from allowed hosts' origins and carry the session user; each
consumer then checks that the user owns what it asks for.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mindsearch.settings")
# A web process keeps a pool of database connections (see DATABASE_POOL in settings).
os.environ.setdefault("DATABASE_POOL", "1")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from mcphub.http import mcp_or  # noqa: E402
from mindsearch.access_log import install_access_log_redaction  # noqa: E402
from mindsearch.bodylimit import GuardedApp, install_daphne_guard  # noqa: E402
from mindsearch.connections import install_connection_limits  # noqa: E402
from research.routing import websocket_urlpatterns  # noqa: E402
from retrieval.apps import preload_in_background  # noqa: E402

# Bodies over their route's limit are refused before they are read, and forwarded headers are
# believed only from TRUSTED_PROXIES (mindsearch/bodylimit.py); under daphne also in its own
# request object, which would otherwise buffer a whole body first.
install_daphne_guard()
# Idle and slow connections are closed by daphne itself (mindsearch/connections.py).
install_connection_limits()
# Share and invite tokens are not written to daphne's access log (mindsearch/access_log.py).
install_access_log_redaction()
# The embedding model loads now, beside serving, so the first search does not wait for it.
preload_in_background()
application = GuardedApp(
    ProtocolTypeRouter(
        {
            # /mcp is the MCP server (Streamable HTTP, API tokens: mcphub/http.py); the rest is Django.
            "http": mcp_or(django_asgi_app),
            "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)
