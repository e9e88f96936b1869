"""The real LLM server for the tests of this folder (tests/support/llama_server.py): one with a
normal window and one whose window is too small for the pipeline's prompts, each started once
per session and stopped after it. Without xllamacpp and the model they skip by name (fail under CI)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import needs
from tests.support.llama_server import HOW, LlamaServer, llama_server, missing

# SmolLM2 was trained on 8192 tokens; a quick topic's prompts fit in 2048 but for the report's
# sources, which are fitted to it.
NORMAL_CONTEXT = 2048
# Above the fixed prompts (the plan's is ~940 real tokens with SmolLM2's tokenizer, more than
# llm.estimate_tokens says of Russian) with a short answer, below the report's with its sources:
# those must be trimmed to fit.
SMALL_CONTEXT = 1536


def _server(n_ctx: int) -> Iterator[LlamaServer]:
    if reason := missing():
        needs.absent(HOW.format(missing=reason))
    with llama_server(n_ctx=n_ctx) as server:
        yield server


@pytest.fixture(scope="session")
def llama() -> Iterator[LlamaServer]:
    yield from _server(NORMAL_CONTEXT)


@pytest.fixture(scope="session")
def llama_small() -> Iterator[LlamaServer]:
    yield from _server(SMALL_CONTEXT)
