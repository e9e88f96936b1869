from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: object) -> Iterator[None]:
    """Point the PostgreSQL channel layer at the test database pytest-django created."""
    from channels.layers import channel_layers
    from django.conf import settings
    from django.db import connection

    config = settings.CHANNEL_LAYERS["default"].get("CONFIG", {})
    if "NAME" in config:
        config["NAME"] = connection.settings_dict["NAME"]
    channel_layers.backends.clear()
    yield
    # The channel layer's connection pool (and any child process) may still hold sessions on
    # the test database; end them so pytest-django can drop it.
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture
def alice(db: None) -> User:
    return User.objects.create_user("alice", "alice@example.com", "correct horse battery")


@pytest.fixture
def bob(db: None) -> User:
    return User.objects.create_user("bob", "bob@example.com", "another staple battery")
