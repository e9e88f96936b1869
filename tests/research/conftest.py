"""Fixtures shared by the tests of private documents in research runs (test_private_sources,
test_local_rag, test_rerank)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.world import World


@pytest.fixture
def media_root(settings: Any, tmp_path: Any) -> None:
    """Uploads go to a folder of the test's own."""
    settings.MEDIA_ROOT = tmp_path


@pytest.fixture
def private_loopback(loopback: World, media_root: None) -> World:
    """The loopback world whose scripted LLM scores a private passage by what it says."""
    from tests.research.pipeline.test_private_sources import judge_passages_by_content

    judge_passages_by_content(loopback)
    return loopback
