"""The text quality gate: noise of any kind is never indexed as text, and what is left out is
named by page. Fixtures are drawn here with Pillow (DejaVu fonts, Debian's) and read by tesseract."""

from __future__ import annotations

import random
import textwrap
import time
import zlib

import pytest

from retrieval.parsing import ParseError, page_ranges, parse
from retrieval.readers import pdf as pdf_reader
from retrieval.readers import quality
from retrieval.readers.text import decode
from tests.support import needs

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"
RU = (
    "Настоящий отчёт описывает результаты исследования качества поиска по частным документам."
    " Пользователи хранят отчёты, статьи и сканы на русском и английском языках. Старые файлы"
    " часто сохранены в старых кодировках, и программа должна прочитать их так же хорошо, как"
    " современный текст."
)
EN = (
    "The committee reviewed the annual budget and approved the new library building. Members"
    " agreed that the reading rooms should stay open in the evening and that the collection of"
    " local newspapers must be kept for researchers."
)


@pytest.fixture
def ocr() -> None:
    if not pdf_reader.ocr_available() or not pdf_reader.osd_available():
        needs.absent(
            "tesseract with Russian, English and OSD data is missing: run scripts/ensure-tesseract"
            " (Debian: tesseract-ocr tesseract-ocr-rus tesseract-ocr-eng tesseract-ocr-osd)"
        )


def page_image(text: str):  # -> PIL.Image.Image
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(FONT, 42)
    image = Image.new("L", (2480, 3508), 255)
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(textwrap.wrap(text, 70)):
        draw.text((200, 300 + 70 * row), line, font=font, fill=0)
    return image


def handwriting():  # -> PIL.Image.Image
    """Pen strokes along lines, loops and hooks: what OCR makes noise of, like a handwritten page."""
    from PIL import Image, ImageDraw

    rng = random.Random(7)
    image = Image.new("L", (2480, 3508), 255)
    draw = ImageDraw.Draw(image)
    for row in range(14):
        baseline, x = 300 + row * 200, 200
        while x < 2200:
            points = []
            for _ in range(rng.randint(3, 9)):
                points.append((x, baseline + rng.randint(-40, 40)))
                x += rng.randint(12, 40)
            draw.line(points, fill=0, width=6, joint="curve")
            if rng.random() < 0.5:
                draw.arc(
                    (x - 25, baseline - 30, x + 25, baseline + 30),
                    rng.randint(0, 180),
                    rng.randint(200, 360),
                    fill=0,
                    width=6,
                )
            x += rng.randint(20, 70)
    return image


def scan_pdf(images: list, layers: list[str] | None = None) -> bytes:
    """A PDF of page images at 300 dpi, each with an invisible text layer if given (as a
    scanner's OCR leaves one)."""
    layers = layers or [""] * len(images)
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    font = None
    if any(layers):
        objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
        font = len(objects)
    for image, layer in zip(images, layers, strict=True):
        raw = image.convert("L").tobytes()
        objects.append(
            b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray"
            b" /BitsPerComponent 8 /Filter /FlateDecode /Length %d >>\nstream\n"
            % (image.width, image.height, len(zlib.compress(raw)))
            + zlib.compress(raw)
            + b"\nendstream"
        )
        image_number = len(objects)
        width, height = image.width * 72 // 300, image.height * 72 // 300
        content = b"q %d 0 0 %d 0 0 cm /Im Do Q" % (width, height)
        if layer:
            lines = b" ".join(b"(%s) Tj T*" % line.encode("latin-1") for line in textwrap.wrap(layer, 80))
            content += b" BT 3 Tr /F1 10 Tf 12 TL 60 %d Td %s ET" % (height - 60, lines)
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
        fonts = b" /Font << /F1 %d 0 R >>" % font if font else b""
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Contents %d 0 R"
            b" /Resources << /XObject << /Im %d 0 R >>%s >> >>"
            % (width, height, len(objects), image_number, fonts)
        )
        kids.append(len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % kid for kid in kids),
        len(kids),
    )
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def known_words(text: str, expected: str) -> float:
    words = set(expected.lower().replace(".", " ").replace(",", " ").split())
    return len(words & set(text.lower().replace(".", " ").replace(",", " ").split())) / len(words)


# --- Noise of every kind fails the check -------------------------------------------------------------


@pytest.mark.parametrize(
    "noise",
    [
        # tesseract's reading of a Russian page scanned sideways
        "°8-T LN я тохэ1 ичннэмэ@яоэ хех ‘ошоЧох OW Wel хи чтетиьоЧи енжиой емиеалойи и ‘SOC ици"
        " 3-ИОЯ ‘1GZ[-SMOpuIM хеляоЧипоя я 1чнэнеахоэ отоеь Med э1ч4ето ‘хежмчев мохэиинлне",
        # …of a rotated table: capitals, digits and scraps
        "ЯП ММТ 67686С# ОИ ЕЕ ВВ. УЕН БЦ Ц ШШИ 7 ре ие ЕЮ " * 4,
        # …of handwriting
        "МСУ Ми хам Мм ДЛЕ лс“, мм мис Ммм СММ Кии им ДА] NOLAN ХМ MV ми LAK VEO с VX YW PRION DO TL"
        " TON NS OO NN УМУ м LAC MCA бу eI OA PDN — М М АУ ARO ERM. Sr",
        # Arabic (cp1256) read as cp1251
        "убЭШЧ Шпу нэ хаЧ ЧсугЪфЯ Чсаэ эЭЪцэ ксь фе кбШэ ицэс сЧЮЪШЧб нп ЧсЪбуэв ЧсЮЧиЦ. " * 3,
        # a scanner's bad OCR layer in Latin letters
        "Tlie cornrnittee rcvicwed tlic anmial budgct aud approvcd thc ncw librarv bnilding. Mcmbcrs"
        " agrccd tliat thc rcadiug rooms sbould stav opcu iu tbe cvcuing aud tbat tbe",
    ],
    ids=["sideways-scan", "rotated-table", "handwriting", "arabic-as-cp1251", "bad-ocr-layer"],
)
def test_noise_of_any_script_is_not_text(noise):
    verdict = quality.judge(noise)
    assert not verdict.ok and "not words" in verdict.reason


@pytest.mark.parametrize(
    "text",
    [
        RU * 2,
        EN * 2,
        "Der Ausschuss prüfte den Haushalt und genehmigte das neue Gebäude der Bibliothek. " * 3,
        "Комітет розглянув річний бюджет і схвалив нове приміщення бібліотеки для читачів. " * 3,
    ],
    ids=["russian", "english", "german", "ukrainian"],
)
def test_prose_in_a_language_with_a_word_list_passes(text):
    assert quality.judge(text).ok


def test_a_table_of_contents_with_dot_leaders_and_numbering_is_text():
    contents = "\n".join(
        f"{number}.{sub} {title} {'.' * 40} {page}"
        for number, (title, page) in enumerate(
            [("Введение", 5), ("Постановка задачи", 9), ("Обзор литературы", 14), ("Методы", 21)], start=1
        )
        for sub in (1, 2)
    )
    assert quality.judge(contents).ok
    bullets = "Глава 1 · · · · · · · · · · · · · · · · 3\nГлава 2 · · · · · · · · · · · · · · · 17\n" * 3
    assert quality.judge(bullets).ok


def test_text_mis_decoded_as_cp1251_is_read_in_its_own_encoding():
    arabic = "مرحبا بكم في هذا المستند الذي يحتوي على نص عربي طويل لاختبار فك الترميز الخاطئ. " * 5
    assert decode(arabic.encode("cp1256")) == arabic


def test_pages_are_named_as_ranges():
    assert page_ranges([3, 4, 7, 9, 10, 11]) == "3–4, 7, 9–11"


# --- Through the PDF reader and OCR --------------------------------------------------------------------


@pytest.mark.usefixtures("ocr")
def test_a_page_scanned_sideways_is_turned_upright_and_read():
    sideways = page_image(RU).rotate(90, expand=True)
    parsed = parse(scan_pdf([sideways]), filename="sideways.pdf")
    assert known_words(parsed.text, RU) >= 0.8
    assert quality.judge(parsed.text).ok and parsed.unreadable_pages == []


@pytest.mark.usefixtures("ocr")
def test_a_handwritten_page_is_reported_and_not_indexed():
    parsed = parse(scan_pdf([page_image(EN), handwriting()]), filename="notes.pdf")
    assert known_words(parsed.text, EN) >= 0.8
    assert parsed.unreadable_pages == [2]
    _number, start, end = parsed.pages[1]
    assert parsed.text[start:end] == ""


@pytest.mark.usefixtures("ocr")
def test_a_bad_ocr_text_layer_is_replaced_by_a_new_reading():
    layer = (
        "Tlie cornrnittee rcvicwed tlic anmial budgct aud approvcd thc ncw librarv bnilding. Mcmbcrs"
        " agrccd tliat thc rcadiug rooms sbould stav opcu iu tbe cvcuing aud tbat tbe"
    )
    parsed = parse(scan_pdf([page_image(EN)], [layer]), filename="scanner.pdf")
    assert "cornrnittee" not in parsed.text and "budgct" not in parsed.text
    assert known_words(parsed.text, EN) >= 0.8


@pytest.mark.usefixtures("ocr")
def test_a_file_of_nothing_but_handwriting_is_refused_by_page():
    with pytest.raises(ParseError, match=r"on every page"):
        parse(scan_pdf([handwriting()]), filename="letter.pdf")


# --- Bounded cost (issue 26): the checks on user text are linear and capped ---------------------

ADVERSARIAL = {
    "one word repeated": "hello " * 700_000,  # 4.2 MB: the old per-word look-ups took ~5 CPU-s
    "one word without spaces": "a" * 4_000_000,
    "one Cyrillic word repeated": "привет " * 600_000,
    "letters and digits": "a1" * 2_000_000,
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_a_huge_text_costs_a_bounded_amount_of_work(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text = ADVERSARIAL[name]
    quality._word_lists("latin"), quality._word_lists("cyrillic")  # loaded once per process
    inspected: list[int] = []
    script = quality._script

    def counted(word: str) -> str | None:
        inspected.append(len(word))
        return script(word)

    monkeypatch.setattr(quality, "_script", counted)
    started = time.process_time()
    quality.judge(text)
    spent = time.process_time() - started
    # What the per-word work looks at is capped, whatever the text's size (before: every word of
    # it, 700,000 look-ups for the first text, all 4 million characters for the second).
    assert len(inspected) <= 20_000 and sum(inspected) <= 100_000, (len(inspected), sum(inspected))
    assert spent < 0.5, f"{spent:.2f} CPU-s for {len(text):,} characters"


def test_a_long_text_is_judged_by_its_sample_from_start_to_end() -> None:
    prose = (EN + " ") * 2500  # ~540 KB of words
    assert quality.judge(prose).ok
    assert quality.words_known(prose).known_share > 0.5
    codes = "/g18/g152/g33/g7 " * 1000
    middle = len(prose) // 3
    # Garbage in the middle third only is seen, as it would be if every character were read.
    assert not quality.judge(prose[:middle] + codes * 12 + prose[middle:]).ok
    noise = "".join(random.Random(7).choice("бвгджзклмнпрст ") for _ in range(400_000))
    assert quality.judge(prose[:100_000] + noise).reason == quality.NOISE
    sampled = quality.sample("word " * 100_000)
    assert len(sampled) <= quality.SAMPLE_CHARS + quality.SAMPLE_WINDOWS
    assert set(sampled.split()) == {"word"}  # windows are cut between words, not inside them
