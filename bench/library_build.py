"""Build the mixed-library benchmark (bench/library.py) from public repositories' test documents.

    .venv/bin/python bench/library_build.py [--mirrors /work/.mirror] [--folder bench/data/library]

The files are other projects' test documents — Russian laws, specifications and RSS pages in old
code pages, English papers, Word and RTF test files, scans — that nobody here wrote or picked one
by one: every file under the folders listed in POOLS whose extension the app accepts and whose
size is 800 bytes to 300 KB is a candidate, taken in an order fixed by the hash of its path, at
most `cap` per pool (chardet's pages come in several code pages: one encoding per page). The
repositories are read from git snapshots (`git show`), never from a working tree.

Queries come from an extractor that is not ours, so they do not inherit our reader's mistakes:
pdftotext (poppler-utils) for PDFs, pdftoppm + tesseract (rus+eng) for PDFs whose text layer is
empty, pandoc for DOCX, HTML, RTF and Markdown, iconv from the code page chardet's folder names
for its pages, and the bytes as UTF-8 otherwise (apt-get install poppler-utils pandoc; tesseract
is already on the machine). The extracted text is split into sentences; a sentence qualifies when
it has 8–40 words (at least 60 % of them distinct), is at least 75 % letters, is in Cyrillic or
Latin script and occurs in no other file of the library. Per file, two of them are taken in an
order fixed by their hash:

- verbatim: the sentence as the extractor gave it;
- paraphrase: another sentence (the same one when the file has only one), rewritten by rule:
  stop words and numbers dropped, every third remaining word dropped, the two halves swapped, and
  a question frame put around it ("What is said about …?" / "Что говорится о …?").

The rewrite's weakness, stated in the README too: it keeps two thirds of the sentence's own words
and forms, so the keyword leg can still match them; it tests neither synonyms nor a question
whose words are not in the text. A file with no qualifying sentence stays in the library as a
distractor, without queries.

Writes FOLDER/files/…, FOLDER/queries.json and bench/library_manifest.tsv (file, repository,
commit, path, licence, sha256, type, language, extractor). The documents are other projects' data
and are not committed here: the manifest records where each came from and its hash, so the same
library can be built again from the same commits.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import unicodedata
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "bench" / "library_manifest.tsv"
DEFAULT_FOLDER = ROOT / "bench" / "data" / "library"
EXTENSIONS = {".pdf", ".docx", ".rtf", ".html", ".htm", ".txt", ".md", ".xml"}
MIN_BYTES, MAX_BYTES = 800, 300_000


@dataclass(frozen=True)
class Pool:
    repo: str  # owner/name
    folders: tuple[str, ...]
    cap: int
    pattern: str = "*"


POOLS = (
    Pool(
        "ispras/dedoc",
        (
            "tests/data/docx",
            "tests/data/htmls",
            "tests/data/laws",
            "tests/data/pdf_auto",
            "tests/data/pdf_with_text_layer",
            "tests/data/scanned",
            "tests/data/tables",
            "tests/data/txt",
            "tests/data/tz",
            "tests/data/fintoc",
            "dedoc/api/web/examples",
        ),
        60,
    ),
    Pool(
        "chardet/chardet",
        (
            "tests/KOI8-R",
            "tests/windows-1251-russian",
            "tests/IBM866",
            "tests/MacCyrillic",
            "tests/iso-8859-5-russian",
        ),
        16,
    ),
    Pool(
        "apache/tika",
        (
            "tika-parsers/tika-parsers-standard/tika-parsers-standard-modules/tika-parser-microsoft-module/src/test/resources/test-documents",
            "tika-parsers/tika-parsers-standard/tika-parsers-standard-modules/tika-parser-html-module/src/test/resources/test-documents",
            "release-tools/uat/test-files",
        ),
        20,
    ),
    Pool("Unstructured-IO/unstructured", ("example-docs", "example-docs/pdf"), 25),
    Pool(
        "docling-project/docling",
        (
            "tests/data/docx/sources",
            "tests/data/html/sources",
            "tests/data/md/sources",
            "tests/data/pdf/sources",
            "tests/data/ocr/sources",
        ),
        15,
    ),
    Pool("py-pdf/sample-files", ("",), 8, "*/*.pdf"),
    Pool("ocrmypdf/OCRmyPDF", ("tests/resources",), 8, "*.pdf"),
)
# chardet's folders name the code page of the pages in them.
CHARDET_ENCODINGS = {
    "KOI8-R": "KOI8-R",
    "windows-1251-russian": "CP1251",
    "IBM866": "CP866",
    "MacCyrillic": "MACCYRILLIC",
    "iso-8859-5-russian": "ISO-8859-5",
}
LICENCE_NAMES = (
    ("Apache License", "Apache-2.0"),
    ("MIT License", "MIT"),
    ("LESSER GENERAL PUBLIC LICENSE", "LGPL-2.1"),
    ("Attribution-ShareAlike 4.0", "CC-BY-SA-4.0"),
    ("Mozilla Public License Version 2.0", "MPL-2.0"),
)
SENTENCE_END = re.compile(r"(?<=[.!?…])\s+(?=[«\"(A-ZА-ЯЁ])")
WORD = re.compile(r"[^\W\d_]+(?:[-'’][^\W\d_]+)*")
STOP_TEXT = """a an the of to in on for and or but is are was were be been being by with at from as that this
    these those it its which who whom what when where how than then there their they them he she we
    you i not no if so such can could may might will would shall should must do does did has have had
    into over under also all any each other more most some only about after before between through
    и в во не на с со что как а но же из за по к ко у о об от до для при это этот эта эти то тот та
    те так или ли бы был была было были быть есть его ее её их им ими он она оно они мы вы я который
    которая которое которые также только уже все всё всех при над под без через между после перед"""
STOP_WORDS = frozenset(STOP_TEXT.split())


def main() -> None:
    args = parse_args()
    files_dir = args.folder / "files"
    if files_dir.exists():
        shutil.rmtree(files_dir)
    files_dir.mkdir(parents=True)
    picked = [item for pool in POOLS for item in candidates(args.mirrors, pool)]
    rows, texts = [], {}
    for repo, commit, path, data, licence in picked:
        name = stored_name(repo, path)
        (files_dir / name).write_bytes(data)
        kind, text, extractor = extract(files_dir / name, path)
        texts[name] = text
        rows.append(
            {
                "file": name,
                "repository": repo,
                "commit": commit,
                "path": path,
                "licence": licence,
                "sha256": hashlib.sha256(data).hexdigest(),
                "type": kind,
                "extractor": extractor,
            }
        )
        print(f"{name}: {kind}, {len(text)} characters by {extractor}", file=sys.stderr)
    queries = make_queries(texts)
    for row in rows:
        asked = [query for query in queries if query["file"] == row["file"]]
        row["language"] = asked[0]["language"] if asked else ""
    write_manifest(rows)
    (args.folder / "queries.json").write_text(
        json.dumps(
            {"files": {row["file"]: row["type"] for row in rows}, "queries": queries},
            indent=1,
            ensure_ascii=False,
        ),
        encoding="utf-8",
    )
    total = sum((files_dir / row["file"]).stat().st_size for row in rows)
    print(
        json.dumps(
            {
                "files": len(rows),
                "bytes": total,
                "files_with_queries": len({query["file"] for query in queries}),
                "queries": len(queries),
            }
        )
    )


# --- Choosing the files --------------------------------------------------------------------------


def git(mirror: Path, *arguments: str) -> bytes:
    return subprocess.run(["git", "-C", str(mirror), *arguments], check=True, capture_output=True).stdout


def candidates(mirrors: Path, pool: Pool) -> list[tuple[str, str, str, bytes, str]]:
    """(repo, commit, path, bytes, licence) of the pool's files, at most pool.cap."""
    mirror = mirrors / pool.repo.replace("/", "+") / "repo"
    commit = git(mirror, "rev-parse", "HEAD").decode().strip()
    listing = git(mirror, "ls-tree", "-r", "-l", "HEAD").decode("utf-8", "replace").splitlines()
    sizes: dict[str, int] = {}
    for line in listing:
        meta, path = line.split("\t", 1)
        size_field = meta.split()[3]
        if size_field.isdigit():
            sizes[path] = int(size_field)
    paths = []
    for path, size in sizes.items():
        folder, _, name = path.rpartition("/")
        inside = any(folder == f or (not f and fnmatch.fnmatch(path, pool.pattern)) for f in pool.folders)
        if not inside or not fnmatch.fnmatch(name if pool.folders != ("",) else path, pool.pattern):
            continue
        if Path(name).suffix.lower() in EXTENSIONS and MIN_BYTES <= size <= MAX_BYTES:
            paths.append(path)
    paths.sort(key=lambda path: hashlib.sha256(path.encode()).hexdigest())
    if pool.repo == "chardet/chardet":  # the same page in several code pages: one of them
        seen, distinct = set(), []
        for path in paths:
            page = path.rsplit("/", 1)[1]
            if page not in seen:
                seen.add(page)
                distinct.append(path)
        paths = distinct
    licences = licence_rules(mirror)
    chosen, digests = [], set()
    for path in paths:
        data = git(mirror, "show", f"HEAD:{path}")
        digest = hashlib.sha256(data).hexdigest()
        if digest in digests:
            continue
        digests.add(digest)
        chosen.append((pool.repo, commit, path, data, licence_of(path, licences)))
        if len(chosen) == pool.cap:
            break
    return chosen


def licence_rules(mirror: Path) -> tuple[list[tuple[list[str], str]], str]:
    """REUSE.toml's per-path licences (if any) and the repository's own LICENSE."""
    names = git(mirror, "ls-tree", "--name-only", "HEAD").decode().splitlines()
    rules = []
    if "REUSE.toml" in names:
        for annotation in tomllib.loads(git(mirror, "show", "HEAD:REUSE.toml").decode()).get(
            "annotations", []
        ):
            paths = annotation["path"]
            rules.append(
                ([paths] if isinstance(paths, str) else paths, annotation["SPDX-License-Identifier"])
            )
    licence_file = next(name for name in names if name.upper().startswith(("LICENSE", "COPYING")))
    head = git(mirror, "show", f"HEAD:{licence_file}").decode("utf-8", "replace")[:2000]
    default = next((spdx for marker, spdx in LICENCE_NAMES if marker in head), f"see {licence_file}")
    return rules, default


def licence_of(path: str, licences: tuple[list[tuple[list[str], str]], str]) -> str:
    rules, default = licences
    for patterns, spdx in rules:
        if any(fnmatch.fnmatch(path, pattern.replace("**", "*")) for pattern in patterns):
            return spdx
    return default


def stored_name(repo: str, path: str) -> str:
    """owner_path_flattened, its extension what the app accepts (chardet's RSS pages as .txt)."""
    owner = repo.split("/")[0].lower().split("-")[0]
    parts = path.split("/")
    flat = "_".join(parts[-2:]) if len(parts) > 1 else parts[0]
    flat = re.sub(r"[^\w.\-]+", "_", flat)
    if flat.endswith(".xml"):
        flat = flat[:-4] + ".txt"
    return f"{owner}__{flat}"


# --- The independent extractor -------------------------------------------------------------------


def run(command: list[str], data: bytes | None = None) -> str:
    completed = subprocess.run(command, input=data, capture_output=True, timeout=300)
    return completed.stdout.decode("utf-8", "replace") if completed.returncode == 0 else ""


def extract(path: Path, source_path: str) -> tuple[str, str, str]:
    """(type, text, extractor) by tools other than the app's reader."""
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        text = run(["pdftotext", "-enc", "UTF-8", str(path), "-"])
        if len(WORD.findall(text)) >= 20:
            return "pdf", text, "pdftotext"
        return "scanned pdf", ocr(path), "pdftoppm+tesseract rus+eng"
    if suffix == ".docx":
        return "docx", run(["pandoc", "-f", "docx", "-t", "plain", "--wrap=none", str(path)]), "pandoc"
    if suffix == ".rtf":
        return "other", run(["pandoc", "-f", "rtf", "-t", "plain", "--wrap=none", str(path)]), "pandoc"
    if suffix in (".html", ".htm"):
        return "other", run(["pandoc", "-f", "html", "-t", "plain", "--wrap=none", str(path)]), "pandoc"
    if suffix == ".md":
        return "other", run(["pandoc", "-f", "markdown", "-t", "plain", "--wrap=none", str(path)]), "pandoc"
    folder = source_path.rsplit("/", 2)[-2] if "/" in source_path else ""
    if folder in CHARDET_ENCODINGS:
        encoding = CHARDET_ENCODINGS[folder]
        return "other", run(["iconv", "-f", encoding, "-t", "UTF-8", str(path)]), f"iconv -f {encoding}"
    return "other", path.read_bytes().decode("utf-8", "replace"), "utf-8"


def ocr(path: Path) -> str:
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(
            ["pdftoppm", "-r", "300", "-gray", "-png", str(path), f"{folder}/page"],
            check=False,
            capture_output=True,
            timeout=600,
        )
        pages = sorted(Path(folder).glob("page*.png"))
        return "\n\n".join(run(["tesseract", str(page), "-", "-l", "rus+eng"]) for page in pages)


# --- Queries -------------------------------------------------------------------------------------


def paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks with their line breaks (and end-of-line hyphens) undone."""
    text = unicodedata.normalize("NFKC", text).replace("\r", "")
    text = re.sub(r"(\w)-\n(\w)", r"\1\2", text)
    return [re.sub(r"\s+", " ", block).strip() for block in re.split(r"\n\s*\n", text) if block.strip()]


def sentences(text: str) -> list[str]:
    return [sentence.strip() for block in paragraphs(text) for sentence in SENTENCE_END.split(block)]


def script_of(sentence: str) -> str:
    letters = [char for char in sentence if char.isalpha()]
    cyrillic = sum("CYRILLIC" in unicodedata.name(char, "") for char in letters)
    latin = sum("LATIN" in unicodedata.name(char, "") for char in letters)
    if cyrillic >= 0.9 * len(letters):
        return "ru"
    if latin >= 0.9 * len(letters):
        return "en"
    return ""


def qualifies(sentence: str) -> bool:
    words = sentence.split()
    if not 8 <= len(words) <= 40 or "http" in sentence or "www." in sentence or "@" in sentence:
        return False
    visible = [char for char in sentence if not char.isspace()]
    letters = sum(char.isalpha() for char in visible)
    if letters < 0.75 * len(visible) or sentence.isupper():
        return False
    found = [word.lower() for word in WORD.findall(sentence)]
    if len(found) < 8 or len(set(found)) < 0.6 * len(found) or max(map(len, found)) > 25:
        return False  # "ккккк ккккк …", a table's repeated cells
    return bool(script_of(sentence))


def word_key(text: str) -> str:
    return " ".join(WORD.findall(text.lower()))


def make_queries(texts: dict[str, str]) -> list[dict[str, str]]:
    keys = {name: word_key(" ".join(paragraphs(text))) for name, text in texts.items()}
    queries = []
    for name, text in texts.items():
        unique = []
        for sentence in dict.fromkeys(s for s in sentences(text) if qualifies(s)):
            key = word_key(sentence)
            if not any(key in other for other_name, other in keys.items() if other_name != name):
                unique.append(sentence)
        if not unique:
            continue
        unique.sort(key=lambda sentence: hashlib.sha256(f"{name}\n{sentence}".encode()).hexdigest())
        verbatim = unique[0]
        source = unique[1] if len(unique) > 1 else unique[0]
        queries.append({"file": name, "kind": "verbatim", "language": script_of(verbatim), "text": verbatim})
        queries.append(
            {
                "file": name,
                "kind": "paraphrase",
                "language": script_of(source),
                "text": paraphrase(source),
                "from": source,
            }
        )
    return queries


def paraphrase(sentence: str) -> str:
    """Stop words and numbers out, every third word out, halves swapped, a question frame."""
    words = [word for word in WORD.findall(sentence) if word.lower() not in STOP_WORDS and len(word) > 1]
    kept = [word for position, word in enumerate(words) if position % 3 != 2]
    middle = len(kept) // 2
    body = " ".join(kept[middle:] + kept[:middle])
    if script_of(sentence) == "ru":
        return f"Что говорится о {body[:1].lower()}{body[1:]}?"
    return f"What is said about {body[:1].lower()}{body[1:]}?"


def write_manifest(rows: list[dict[str, str]]) -> None:
    columns = ["file", "repository", "commit", "path", "licence", "sha256", "type", "language", "extractor"]
    with MANIFEST.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, columns, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--mirrors", type=Path, default=Path("/work/.mirror"), help="git snapshots, owner+name/repo"
    )
    parser.add_argument("--folder", type=Path, default=DEFAULT_FOLDER, help="where the library is written")
    return parser.parse_args()


if __name__ == "__main__":
    main()
