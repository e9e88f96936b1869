"""The multi-host docker-compose.yml wires db, redis, searxng, web and worker together."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# The settings web and worker must both receive (docs/OPERATIONS.md, "Scale out with docker-compose").
APP_SETTINGS = {
    "AITUNNEL_API_KEY",
    "AITUNNEL_MODEL",
    "AITUNNEL_BASE_URL",
    "SEARXNG_URL",
    "SEARXNG_BASIC_AUTH_LOGIN",
    "SEARXNG_BASIC_AUTH_PASSWORD",
    "JINA_READER_URL",
    "JINA_API_KEY",
    "LIMIT_SEARXNG_RPM",
    "LIMIT_JINA_RPS",
    "LIMIT_AITUNNEL_RPS",
    "CACHE_TTL_DAYS",
    "DATABASE_URL",
    "REDIS_URL",
    "SECRET_KEY",
    "EMBEDDING_BACKEND",
}
ENV_EXAMPLE_NAME = re.compile(r"^#?\s*([A-Z][A-Z0-9_]+)=", re.MULTILINE)


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return compose["services"]


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict, whether written as a mapping or a list."""
    env = service.get("environment", {})
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {name: str(value) for name, value in env.items()}


def command_text(service: dict[str, Any]) -> str:
    command = service["command"]
    return " ".join(command) if isinstance(command, list) else command


def test_all_services_exist(services: dict[str, Any]) -> None:
    assert {"db", "redis", "searxng", "web", "worker"} <= set(services)


def test_db_is_pgvector_with_healthcheck(services: dict[str, Any]) -> None:
    db = services["db"]
    assert "pgvector" in db["image"]
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])


def test_redis_has_healthcheck(services: dict[str, Any]) -> None:
    assert services["redis"]["healthcheck"]["test"]


def test_web_migrates_then_runs_daphne(services: dict[str, Any]) -> None:
    command = command_text(services["web"])
    assert "migrate" in command
    assert "daphne" in command
    assert "mindsearch.asgi:application" in command
    assert command.index("migrate") < command.index("daphne")


def test_worker_runs_qcluster(services: dict[str, Any]) -> None:
    assert "qcluster" in command_text(services["worker"])


@pytest.mark.parametrize("name", ["web", "worker"])
def test_app_points_at_compose_hosts(services: dict[str, Any], name: str) -> None:
    env = environment(services[name])
    assert urlsplit(env["DATABASE_URL"]).hostname == "db"
    assert urlsplit(env["REDIS_URL"]).hostname == "redis"
    assert urlsplit(env["SEARXNG_URL"]).hostname == "searxng"


@pytest.mark.parametrize("name", ["web", "worker"])
def test_app_waits_for_healthy_db(services: dict[str, Any], name: str) -> None:
    assert services[name]["depends_on"]["db"]["condition"] == "service_healthy"


@pytest.mark.parametrize("name", ["web", "worker"])
def test_app_receives_every_setting(services: dict[str, Any], name: str) -> None:
    assert APP_SETTINGS - set(environment(services[name])) == set()


def test_env_example_documents_every_setting() -> None:
    documented = set(ENV_EXAMPLE_NAME.findall((ROOT / ".env.example").read_text()))
    assert APP_SETTINGS - documented == set()


def test_searxng_serves_json(services: dict[str, Any]) -> None:
    mounts = services["searxng"]["volumes"]
    assert any("deploy/searxng/settings.yml" in mount for mount in mounts)
    settings = yaml.safe_load((ROOT / "deploy" / "searxng" / "settings.yml").read_text())
    assert "json" in settings["search"]["formats"]
