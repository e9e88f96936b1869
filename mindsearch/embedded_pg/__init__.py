"""Django's PostgreSQL backend for the embedded server (DATABASE_URL not set): the server starts
when the first connection is opened, not when the settings are imported, so that importing them
(mypy, a command that needs no database) starts no PostgreSQL."""
