"""Shared set-up for benchmarks: Django on a database of their own, never the user's data."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]


def argument_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's parser: its module docstring, line breaks kept, is the --help text."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def print_report(report: dict[str, Any], *, ok: bool) -> None:
    """Print the report as JSON; exit 1 when it missed its target, so a script can tell."""
    print(json.dumps(report, indent=2, ensure_ascii=False))
    if not ok:
        sys.exit(1)


def add_limit_arguments(parser: argparse.ArgumentParser, *, searxng_rpm: float, searxng_help: str) -> None:
    """The global rate limits a benchmark runs under (LIMIT_* settings)."""
    parser.add_argument("--llm-rps", type=float, default=2.0, help="LIMIT_AITUNNEL_RPS (its default: 2)")
    parser.add_argument("--reader-rps", type=float, default=5.0, help="LIMIT_JINA_RPS (its default: 5)")
    parser.add_argument("--searxng-rpm", type=float, default=searxng_rpm, help=searxng_help)


def limit_settings(args: argparse.Namespace) -> dict[str, float]:
    return {
        "LIMIT_AITUNNEL_RPS": args.llm_rps,
        "LIMIT_JINA_RPS": args.reader_rps,
        "LIMIT_SEARXNG_RPM": args.searxng_rpm,
    }


def setup_django(database: str = "mindsearch_bench") -> None:
    """Start (or join) the embedded server, give the benchmark a fresh database, migrate it."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mindsearch.settings")
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    if not os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = _fresh_embedded_database(database)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _fresh_embedded_database(database: str) -> str:
    import psycopg
    from psycopg import sql

    from mindsearch import embedded_db

    data_dir = Path(os.environ.get("MINDSEARCH_DATA_DIR") or ROOT / "var").resolve()
    host = embedded_db.start(data_dir)["HOST"]
    with psycopg.connect(host=host, user="postgres", dbname="postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    return f"postgres://postgres@{quote(host, safe='')}/{database}"
