"""WhiteNoise finds the static files once per test process, not once per test client.

Django's test `Client` builds its own middleware chain at its first request, and
WhiteNoiseMiddleware's constructor (with WHITENOISE_USE_FINDERS, as in mindsearch/settings.py)
walks every static file through the finders and builds a response template for each: ~185
files, a `stat` and a set of headers apiece. A cProfile of
reliability/test_isolation.py's walk of every URL (1,144 clients) found 519 of its 950 s in those
constructors. A web or worker process builds its middleware once and is not concerned.

`find_once()` makes `add_files_from_finders` remember, per process, the files it added for the
same prefix, headers policy and finder settings, and give a later middleware the same
`StaticFile` objects (WhiteNoise serves every request from them unchanged: each response is made
anew from the file's stored headers). The static files do not change while tests run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from whitenoise.middleware import WhiteNoiseMiddleware  # type: ignore[import-untyped]

_found: dict[tuple[object, ...], dict[str, Any]] = {}


def _key(middleware: WhiteNoiseMiddleware) -> tuple[object, ...]:
    """What the files found and their headers depend on."""
    return (
        middleware.static_prefix,
        middleware.max_age,
        middleware.allow_all_origins,
        middleware.charset,
        middleware.add_headers_function,
        middleware.index_file,
        repr(getattr(settings, "WHITENOISE_MIMETYPES", None)),
        repr(getattr(settings, "WHITENOISE_IMMUTABLE_FILE_TEST", None)),
        repr(settings.STATICFILES_DIRS),
        tuple(settings.STATICFILES_FINDERS),
    )


def find_once() -> Callable[[], None]:
    """Put the remembering `add_files_from_finders` in place; returns what undoes it."""
    real = WhiteNoiseMiddleware.add_files_from_finders

    def add_files_from_finders(self: WhiteNoiseMiddleware) -> None:
        key = _key(self)
        if key not in _found:
            before = dict(self.files)
            real(self)
            _found[key] = {url: file for url, file in self.files.items() if before.get(url) is not file}
        self.files.update(_found[key])

    WhiteNoiseMiddleware.add_files_from_finders = add_files_from_finders

    def undo() -> None:
        WhiteNoiseMiddleware.add_files_from_finders = real

    return undo
