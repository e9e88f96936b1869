"""The PostgreSQL backend with one change: with no HOST yet, the embedded server of the settings'
DATA_DIR is started (or joined) and its socket folder becomes the HOST, on the first connection."""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base as postgresql

from mindsearch import embedded_db


class DatabaseWrapper(postgresql.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        embedded_db.fill_host(self.settings_dict)
        params: dict[str, Any] = super().get_connection_params()
        return params
