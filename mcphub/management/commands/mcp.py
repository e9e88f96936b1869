"""`manage.py mcp --user NAME`: the MCP server over stdio, acting as that user.

For an MCP client on the same machine (Claude Desktop, Cursor and the like start it as a
subprocess). Every tool acts as NAME with the same ownership rules as NAME's API token would.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import anyio
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from mcphub.server import server, stdio_user_id


class Command(BaseCommand):
    help = "Serve MindSearch as an MCP server over stdio, acting as the given user."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--user", required=True, help="The username whose topics and documents the tools use."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"No user named {options['user']!r}.")
        if not user.is_active:
            raise CommandError(f"The account {options['user']!r} is disabled.")
        # stdout carries the protocol: everything else (logs, warnings) goes to stderr.
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
        stdio_user_id.set(user.pk)
        anyio.run(server.run_stdio_async)
