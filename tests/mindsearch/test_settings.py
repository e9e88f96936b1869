"""Configuration: the specification's variable names work as written, and every name is documented."""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from mindsearch.env import env_bool, env_float, env_int, env_list, load_env_file
from tests.support import processes

SETTINGS_FILE = processes.ROOT / "mindsearch" / "settings.py"
ENV_EXAMPLE = processes.ROOT / ".env.example"

PRINT_SETTINGS = (
    "import json; from django.conf import settings as s; print(json.dumps({n: getattr(s, n) for n in "
    "['AITUNNEL_API_KEY', 'AITUNNEL_MODEL', 'AITUNNEL_BASE_URL', 'SEARXNG_URL', 'SEARXNG_BASIC_AUTH_LOGIN',"
    " 'SEARXNG_BASIC_AUTH_PASSWORD', 'JINA_READER_URL', 'JINA_API_KEY', 'LIMIT_SEARXNG_RPM',"
    " 'LIMIT_JINA_RPS', 'LIMIT_AITUNNEL_RPS', 'CACHE_TTL_DAYS', 'EMBEDDING_BACKEND',"
    " 'MINDSEARCH_ALLOW_PRIVATE_URLS']}))"
)


def names_read_by_settings() -> set[str]:
    return set(re.findall(r'env_(?:str|bool|int|float|list|name)\("([A-Z0-9_]+)"', SETTINGS_FILE.read_text()))


def test_every_setting_is_documented_in_env_example() -> None:
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", ENV_EXAMPLE.read_text(), re.MULTILINE))
    assert names_read_by_settings() - documented == set()


def test_design_names_are_all_read() -> None:
    design = {
        "AITUNNEL_API_KEY", "AITUNNEL_MODEL", "AITUNNEL_BASE_URL", "SEARXNG_URL",
        "SEARXNG_BASIC_AUTH_LOGIN", "SEARXNG_BASIC_AUTH_PASSWORD", "JINA_READER_URL", "JINA_API_KEY",
        "LIMIT_SEARXNG_RPM", "LIMIT_JINA_RPS", "LIMIT_AITUNNEL_RPS", "CACHE_TTL_DAYS", "DATABASE_URL",
        "REDIS_URL", "MINDSEARCH_DATA_DIR", "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "EMBEDDING_BACKEND",
        "MINDSEARCH_ALLOW_PRIVATE_URLS",
    }  # fmt: skip
    assert design - names_read_by_settings() == set()


@pytest.mark.processes
@pytest.mark.django_db
def test_the_specifications_names_work_as_written() -> None:
    env = processes.process_env(
        AITUNNEL_API_KEY="sk-seed",
        AITUNNEL_MODEL="gpt-seed",
        AITUNNEL_BASE_URL="http://127.0.0.1:11434/v1/",
        SEARXNG_URL="http://127.0.0.1:8080",
        SEARCHXNG_BASIC_AUTH_LOGIN="seed-login",  # the specification spells these three so
        SEARCHXNG_BASIC_AUTH_PASSWORD="seed-password",
        JINA_READER_URL="http://127.0.0.1:9000/",
        JINA_API_KEY="jina-seed",
        LIMIT_SEARCHXNG_RPM="7",
        LIMIT_JINA_RPS="3",
        LIMIT_AITUNNEL_RPS="1.5",
        CACHE_TTL_DAYS="9",
        EMBEDDING_BACKEND="openai",
        MINDSEARCH_ALLOW_PRIVATE_URLS="true",
    )
    done = processes.manage("shell", "-c", PRINT_SETTINGS, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "AITUNNEL_API_KEY": "sk-seed",
        "AITUNNEL_MODEL": "gpt-seed",
        "AITUNNEL_BASE_URL": "http://127.0.0.1:11434/v1/",
        "SEARXNG_URL": "http://127.0.0.1:8080",
        "SEARXNG_BASIC_AUTH_LOGIN": "seed-login",
        "SEARXNG_BASIC_AUTH_PASSWORD": "seed-password",
        "JINA_READER_URL": "http://127.0.0.1:9000/",
        "JINA_API_KEY": "jina-seed",
        "LIMIT_SEARXNG_RPM": 7.0,
        "LIMIT_JINA_RPS": 3.0,
        "LIMIT_AITUNNEL_RPS": 1.5,
        "CACHE_TTL_DAYS": 9,
        "EMBEDDING_BACKEND": "openai",
        "MINDSEARCH_ALLOW_PRIVATE_URLS": True,
    }


@pytest.mark.processes
@pytest.mark.django_db
def test_searxng_spelled_right_wins_over_the_specifications_spelling() -> None:
    env = processes.process_env(
        SEARXNG_BASIC_AUTH_LOGIN="login",
        SEARCHXNG_BASIC_AUTH_LOGIN="seed-login",
        SEARXNG_BASIC_AUTH_PASSWORD="password",
        LIMIT_SEARXNG_RPM="8",
    )
    done = processes.manage("shell", "-c", PRINT_SETTINGS, env=env)
    values = json.loads(done.stdout.strip().splitlines()[-1])
    auth = (values["SEARXNG_BASIC_AUTH_LOGIN"], values["SEARXNG_BASIC_AUTH_PASSWORD"])
    assert auth == ("login", "password")
    assert values["LIMIT_SEARXNG_RPM"] == 8.0


@pytest.mark.processes
@pytest.mark.django_db
def test_defaults_follow_the_specification() -> None:
    env = processes.process_env()
    for name in (
        "LIMIT_SEARXNG_RPM",
        "LIMIT_JINA_RPS",
        "LIMIT_AITUNNEL_RPS",
        "CACHE_TTL_DAYS",
        "JINA_READER_URL",
    ):
        env.pop(name, None)
    done = processes.manage("shell", "-c", PRINT_SETTINGS, env=env)
    values = json.loads(done.stdout.strip().splitlines()[-1])
    assert (values["LIMIT_SEARXNG_RPM"], values["LIMIT_JINA_RPS"], values["LIMIT_AITUNNEL_RPS"]) == (
        10,
        5,
        2,
    )
    assert values["CACHE_TTL_DAYS"] == 30
    assert values["AITUNNEL_BASE_URL"] == "https://api.aitunnel.ru/v1/"
    assert values["JINA_READER_URL"] == "https://r.jina.ai/"
    assert values["EMBEDDING_BACKEND"] == "local"


@pytest.mark.processes
@pytest.mark.django_db
def test_bad_values_stop_the_start_with_a_clear_message() -> None:
    done = processes.manage("check", env=processes.process_env(LIMIT_JINA_RPS="fast"))
    assert done.returncode != 0
    assert "LIMIT_JINA_RPS must be a number" in done.stderr


@pytest.mark.processes
@pytest.mark.django_db
def test_production_settings_pass_check_deploy() -> None:
    env = processes.process_env(
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="search.example.org",
        LLM_DAILY_TOKEN_BUDGET="200000",
    )
    done = processes.manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout
    # Open sign-up (the default) without a daily budget is the one thing it then warns of.
    env["LLM_DAILY_TOKEN_BUDGET"] = "0"
    done = processes.manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert done.returncode != 0
    assert "mindsearch.W001" in done.stdout + done.stderr


@pytest.mark.processes
@pytest.mark.django_db
def test_production_refuses_to_start_without_a_secret_key() -> None:
    env = processes.process_env(DEBUG="0", SECRET_KEY="")
    done = processes.manage("check", env=env)
    assert done.returncode != 0
    assert "SECRET_KEY must be set" in done.stderr


def test_dotenv_is_read_but_the_environment_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("MINDSEARCH_TEST_FROM_FILE=file\nMINDSEARCH_TEST_BOTH=file\n")
    monkeypatch.setenv("MINDSEARCH_TEST_BOTH", "environment")
    monkeypatch.delenv("MINDSEARCH_TEST_FROM_FILE", raising=False)
    load_env_file(dotenv)
    assert os.environ["MINDSEARCH_TEST_FROM_FILE"] == "file"
    assert os.environ["MINDSEARCH_TEST_BOTH"] == "environment"
    monkeypatch.delenv("MINDSEARCH_TEST_FROM_FILE")


def test_env_helpers_are_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_BOOL", "maybe")
    with pytest.raises(ImproperlyConfigured):
        env_bool("X_BOOL")
    monkeypatch.setenv("X_BOOL", "Yes")
    assert env_bool("X_BOOL") is True
    monkeypatch.setenv("X_INT", "3.5")
    with pytest.raises(ImproperlyConfigured, match="X_INT must be an integer"):
        env_int("X_INT", 1)
    monkeypatch.setenv("X_FLOAT", "fast")
    with pytest.raises(ImproperlyConfigured, match="X_FLOAT must be a number"):
        env_float("X_FLOAT", 1.0)
    monkeypatch.setenv("X_FLOAT", " 2.5 ")
    assert env_float("X_FLOAT", 1.0) == 2.5 and env_int("X_UNSET", 7) == 7
    monkeypatch.setenv("X_LIST", " a.example, ,b.example ")
    assert env_list("X_LIST", []) == ["a.example", "b.example"]


PRINT_SECRET_KEY = "from django.conf import settings; print(settings.SECRET_KEY)"


@pytest.mark.processes
@pytest.mark.django_db
@pytest.mark.parametrize("debug", [None, "", "1"], ids=["unset", "empty", "on"])
def test_development_generates_a_secret_key_into_the_data_directory(
    tmp_path: Path, debug: str | None
) -> None:
    """`manage.py createsuperuser` in a fresh clone (DEBUG unset, or empty as .env.example has it)."""
    env = processes.process_env(SECRET_KEY="", MINDSEARCH_DATA_DIR=str(tmp_path))
    env.pop("DEBUG")
    if debug is not None:
        env["DEBUG"] = debug
    first = processes.manage("shell", "-v", "0", "-c", PRINT_SECRET_KEY, env=env)
    assert first.returncode == 0, first.stderr
    stored = tmp_path / "secret_key"
    key = stored.read_text().strip()
    assert len(key) >= 50
    assert first.stdout.strip() == key
    assert stored.stat().st_mode & 0o777 == 0o600
    again = processes.manage("shell", "-v", "0", "-c", PRINT_SECRET_KEY, env=env)
    assert again.stdout.strip() == key  # sessions and signed links survive a restart
    assert [path.name for path in tmp_path.iterdir() if "secret" in path.name] == ["secret_key"]
