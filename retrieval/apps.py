from __future__ import annotations

import logging
import threading
from typing import Any

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

log = logging.getLogger(__name__)


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = _("Private documents")

    def ready(self) -> None:
        from django_q.signals import post_spawn

        # Each worker process loads the model as it starts (not the cluster's parent: OpenMP
        # threads started before a fork would hang the children).
        post_spawn.connect(_preload_in_worker, dispatch_uid="retrieval.preload_embeddings")


def preload_embeddings() -> None:
    """Load the embedding model now, so that no search or upload waits for it; a model that
    cannot load is logged here and reported again where it is used."""
    from retrieval.embeddings import EmbeddingError, preload

    try:
        seconds = preload()
    except EmbeddingError as error:
        log.warning("the embedding model could not be loaded: %s", error)
    else:
        log.info("embedding model loaded in %.2f s", seconds)


def preload_in_background() -> threading.Thread:
    """For the web process: load the model beside serving (a search that comes first waits)."""
    thread = threading.Thread(target=preload_embeddings, name="preload-embeddings", daemon=True)
    thread.start()
    return thread


def _preload_in_worker(sender: Any, **kwargs: Any) -> None:
    preload_embeddings()
