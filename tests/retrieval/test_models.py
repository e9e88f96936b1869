"""Uploaded documents and chunks on the real database: pgvector, its indexes and full-text search."""

from __future__ import annotations

import hashlib

import pytest
from django.contrib.auth.models import AnonymousUser
from django.contrib.postgres.search import SearchQuery
from django.db import DataError, IntegrityError, connection, transaction
from pgvector.django import CosineDistance

from retrieval.models import EMBEDDING_DIMENSIONS, KEYWORD_CONFIG, Chunk, UploadedDocument


def upload(owner, content: bytes = b"%PDF-1.7 paper") -> UploadedDocument:
    sha256 = hashlib.sha256(content).hexdigest()
    return UploadedDocument.objects.create(
        owner=owner, file=f"uploads/{owner.pk}/{sha256}", original_name="paper.pdf", sha256=sha256
    )


@pytest.fixture
def document(alice):
    return upload(alice)


def make_chunk(document: UploadedDocument, text: str = "A passage.", embedding=None) -> Chunk:
    position = document.chunks.count()
    return Chunk.objects.create(
        document=document,
        owner=document.owner,
        position=position,
        text=text,
        char_start=0,
        char_end=len(text),
        embedding=embedding,
    )


def vector(*weights: float, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """A vector whose first components are `weights` and the rest zero."""
    return [*weights, *[0.0] * (dimensions - len(weights))]


def chunk_index_definitions() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'retrieval_chunk'")
        return [row[0] for row in cursor.fetchall()]


# --- The database itself ------------------------------------------------------------------------


def test_vector_extension_is_installed(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
        assert cursor.fetchone() == (1,)


def test_chunk_embedding_has_cosine_hnsw_index(db):
    assert any(
        "USING hnsw (embedding vector_cosine_ops)" in definition for definition in chunk_index_definitions()
    )


def test_keyword_search_reads_the_stemmed_vector_only(db):
    """BM25 ranks by `stemmed_vector` (its postings); the 'simple' vector and its GIN index that
    only a benchmark read are gone (bench/retrieval.py computes its ts_rank baseline itself)."""
    columns = {field.column for field in Chunk._meta.concrete_fields}
    assert "stemmed_vector" in columns and "search_vector" not in columns
    assert not any("search_vector" in definition for definition in chunk_index_definitions())


# --- Embeddings ---------------------------------------------------------------------------------


def test_nearest_chunk_by_cosine_distance(document):
    first = make_chunk(document, "first", vector(1, 0, 0))
    second = make_chunk(document, "second", vector(0, 1, 0))
    third = make_chunk(document, "third", vector(0, 0, 1))
    query = vector(0.1, 0.9, 0.3)
    # The order itself, not the HNSW index's approximation of it: with the statistics other tests
    # leave behind the planner may read through the index, which can miss a row of three (seen
    # twice in full runs, once with an iterative scan on).
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('enable_indexscan', 'off', true)")
    nearest = Chunk.objects.order_by(CosineDistance("embedding", query))
    assert list(nearest) == [second, third, first]


def test_embedding_of_wrong_dimensions_is_rejected(document):
    with pytest.raises(DataError), transaction.atomic():
        make_chunk(document, embedding=vector(1, dimensions=EMBEDDING_DIMENSIONS - 1))
    assert not Chunk.objects.exists()


# --- Full-text search ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "word"),
    [("Mixture of Tokens improves experts", "tokens"), ("Смесь токенов", "токенов")],
    ids=["english", "russian"],
)
def test_stemmed_vector_is_generated_from_text(document, text, word):
    chunk = make_chunk(document, text)
    make_chunk(document, "Unrelated passage about routers")
    found = Chunk.objects.filter(stemmed_vector=SearchQuery(word, config=KEYWORD_CONFIG))
    assert list(found) == [chunk]


# --- Uploaded documents -------------------------------------------------------------------------


def test_same_file_twice_for_one_owner_is_refused(document, alice):
    with pytest.raises(IntegrityError), transaction.atomic():
        upload(alice)


def test_same_file_for_two_owners_is_fine(document, bob):
    bobs = upload(bob)
    assert bobs.sha256 == document.sha256
    assert UploadedDocument.objects.count() == 2


def test_uploads_for_user_are_their_own(document, alice, bob):
    upload(bob, b"bob's own paper")
    assert list(UploadedDocument.objects.for_user(alice)) == [document]


def test_uploads_for_anonymous_user_are_none(document):
    assert not UploadedDocument.objects.for_user(AnonymousUser()).exists()
