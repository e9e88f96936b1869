"""Binary-quantised search: bit strings find candidates, full-precision vectors decide."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from retrieval import quantized, search
from retrieval.models import EMBEDDING_DIMENSIONS, Chunk, UploadedDocument


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


def store_vectors(owner: User, vectors: np.ndarray) -> list[int]:
    document = UploadedDocument.objects.create(
        owner=owner, original_name="vectors", sha256=f"{owner.pk:064d}", status=UploadedDocument.Status.READY
    )
    chunks = Chunk.objects.bulk_create(
        Chunk(
            document=document,
            owner=owner,
            position=i,
            text=f"chunk {i}",
            char_start=0,
            char_end=1,
            embedding=v,
        )
        for i, v in enumerate(vectors.tolist())
    )
    return [chunk.pk for chunk in chunks]


@pytest.fixture
def clustered(alice: User, bob: User) -> tuple[list[int], np.ndarray]:
    """200 of alice's vectors in 20 clusters, and 50 of bob's near the same centres."""
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(20, EMBEDDING_DIMENSIONS))
    points = np.array(
        [unit(centres[i % 20] + 0.3 * rng.normal(size=EMBEDDING_DIMENSIONS)) for i in range(200)]
    )
    ids = store_vectors(alice, points)
    store_vectors(
        bob, np.array([unit(c + 0.3 * rng.normal(size=EMBEDDING_DIMENSIONS)) for c in centres[:50]])
    )
    return ids, points


def build_index_in_test_transaction() -> None:
    # The chunk table's deferred triggers (keyword statistics) must fire before DDL on it.
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    quantized.create_index(concurrently=False)


def literal(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{value:.8g}" for value in vector) + "]"


@pytest.mark.django_db
def test_binary_search_with_rescoring_finds_the_exact_neighbours(
    alice: User, clustered: tuple[list[int], np.ndarray]
) -> None:
    ids, points = clustered
    build_index_in_test_transaction()
    query = unit(points[7] + 0.05)
    exact = search.nearest_chunks(alice.pk, query.tolist(), 10, exact=True)
    found = quantized.nearest_chunks_binary(alice.pk, literal(query), 10, rescore=4)
    assert [i for i, _ in found][:5] == [i for i, _ in exact][:5]
    assert len({i for i, _ in found} & {i for i, _ in exact}) >= 9
    assert set(i for i, _ in found) <= set(ids)  # only alice's chunks
    assert found[0][1] == pytest.approx(exact[0][1], abs=1e-6)  # cosine at full precision


@pytest.mark.django_db
def test_the_option_uses_the_binary_index_once_it_exists(
    alice: User, clustered: tuple[list[int], np.ndarray], settings: Any
) -> None:
    _ids, points = clustered
    query = points[3].tolist()

    def sql_of_search() -> str:
        with CaptureQueriesContext(connection) as captured:
            search.nearest_chunks(alice.pk, query, 10, exact=False)
        return " ".join(q["sql"] for q in captured.captured_queries)

    settings.RETRIEVAL_BINARY_QUANTIZATION = False
    assert "binary_quantize" not in sql_of_search()
    settings.RETRIEVAL_BINARY_QUANTIZATION = True
    assert "binary_quantize" not in sql_of_search()  # no index yet: the plain one answers
    build_index_in_test_transaction()
    assert "binary_quantize" in sql_of_search()


@pytest.mark.django_db(transaction=True)
def test_the_command_builds_and_drops_the_index_concurrently(alice: User) -> None:
    call_command("binary_index", stdout=open("/dev/null", "w"))  # noqa: SIM115
    assert quantized.index_exists()
    call_command("binary_index", "--drop", stdout=open("/dev/null", "w"))  # noqa: SIM115
    assert not quantized.index_exists()
