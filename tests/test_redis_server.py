"""The tests' Redis: the machine's, a private server, or a skip by name (a failure under CI)."""

from __future__ import annotations

import shutil

import pytest
import redis

from tests.support import redis_server


def no_machine_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_server, "MACHINE_REDIS", "redis://127.0.0.1:9")


@pytest.mark.skipif(not shutil.which("redis-server"), reason="needs the redis-server binary")
def test_a_private_server_is_started_when_the_machine_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    no_machine_redis(monkeypatch)
    with redis_server.redis_base_url() as url:
        assert url != redis_server.MACHINE_REDIS
        assert redis.Redis.from_url(url).ping()
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()


def test_without_any_redis_the_test_is_skipped_saying_how(monkeypatch: pytest.MonkeyPatch) -> None:
    no_machine_redis(monkeypatch)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with (
        pytest.raises(pytest.skip.Exception, match="apt-get install redis-server"),
        redis_server.redis_base_url(),
    ):
        pass


def test_under_ci_a_missing_redis_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    no_machine_redis(monkeypatch)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI requires it"), redis_server.redis_base_url():
        pass
