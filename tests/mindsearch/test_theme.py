"""One set of theme variables for every stylesheet: a colour is written only where the theme defines
its variables (the light `:root` block and the two dark ones in static/css/mindsearch.css); every
other rule of every stylesheet names a variable. A stylesheet that hard-codes a colour is what made
*My documents* light grey on near-white in dark mode."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import django.contrib.admin

from tests.support.code import ROOT

STYLESHEETS = sorted((ROOT / "static" / "css").glob("*.css"))
THEME = ROOT / "static" / "css" / "mindsearch.css"
# The selectors of the theme's definition blocks: light, the system's dark, the switch's dark.
LIGHT = ":root"
DARK = (":root:not([data-theme=light])", ":root[data-theme=dark]")
# The admin's own stylesheets define the variables its pages are themed with (light and dark);
# static/css/admin-desk.css styles admin pages and uses those.
ADMIN_CSS = Path(django.contrib.admin.__file__).parent / "static" / "admin" / "css"

NAMED = [
    "white",
    "black",
    "red",
    "green",
    "blue",
    "gray",
    "grey",
    "silver",
    "yellow",
    "orange",
    "purple",
    "navy",
    "maroon",
    "teal",
    "olive",
    "lime",
    "aqua",
    "fuchsia",
    "pink",
    "brown",
    "gold",
    "beige",
    "ivory",
    "snow",
    "linen",
    "khaki",
    "coral",
    "salmon",
    "tomato",
    "crimson",
    "indigo",
    "violet",
    "tan",
    "whitesmoke",
    "gainsboro",
    "lightgray",
    "lightgrey",
    "darkgray",
    "darkgrey",
    "dimgray",
    "dimgrey",
    "lightyellow",
    "lightblue",
]
COLOUR = re.compile(
    r"#[0-9a-f]{3,8}\b|\b(?:rgba?|hsla?|hwb|lab|lch|oklab|oklch|color)\(|"
    + r"(?<![-\w])(?:"
    + "|".join(NAMED)
    + r")(?![-\w])",
    re.IGNORECASE,
)


@dataclass
class Declaration:
    selector: str
    prop: str
    value: str
    line: int


def declarations(css: str) -> list[Declaration]:
    """Every declaration with the selector of the rule it is in (at-rules are looked through)."""
    css = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), css, flags=re.DOTALL)
    found: list[Declaration] = []
    stack: list[str] = []
    start = 0
    for i, char in enumerate(css):
        if char == "{":
            stack.append(" ".join(css[start:i].split()))
            start = i + 1
        elif char in ";}":
            text = css[start:i]
            if stack and ":" in text:
                prop, value = text.split(":", 1)
                line = css.count("\n", 0, start + len(text) - len(text.lstrip())) + 1
                found.append(Declaration(stack[-1], prop.strip(), value.strip(), line))
            if char == "}" and stack:
                stack.pop()
            start = i + 1
    return found


def stray_colours(css: str) -> list[str]:
    """Colours written outside the theme's definition blocks, as "line: selector { prop: value }"."""
    stray = []
    for d in declarations(css):
        in_theme = d.selector in (LIGHT, *DARK) and d.prop.startswith("--")
        if not in_theme and COLOUR.search(d.value):
            stray.append(f"{d.line}: {d.selector} {{ {d.prop}: {d.value} }}")
    return stray


def theme_variables(selector: str) -> set[str]:
    return {
        d.prop for d in declarations(THEME.read_text()) if d.selector == selector and d.prop.startswith("--")
    }


def test_no_stylesheet_writes_a_colour_outside_the_theme() -> None:
    assert {path.name for path in STYLESHEETS} >= {"mindsearch.css", "documents.css", "report-live.css"}
    stray = {path.name: stray_colours(path.read_text()) for path in STYLESHEETS}
    assert not {name: lines for name, lines in stray.items() if lines}


def test_the_check_sees_the_colours_that_made_documents_unreadable() -> None:
    # documents.css as it was: its own light backgrounds, loaded after the theme.
    before = """
    .dropzone { border: 2px dashed var(--line); background: #fbfbfa; }
    @media (max-width: 40rem) { .doc-status-ready { background: rgb(230 244 234); color: var(--ok); } }
    .passage-text mark { background: Gold; white-space: pre-line; }
    :root { --card: #fff; }
    .x { --local: #123456; }
    """
    assert len(stray_colours(before)) == 4
    assert (
        stray_colours(":root { --card: #fff; } .card { background: var(--card); white-space: nowrap; }") == []
    )


def test_dark_mode_defines_every_variable_the_light_theme_does() -> None:
    light = theme_variables(LIGHT)
    assert {"--bg", "--fg", "--card", "--line", "--accent", "--mark", "--on-accent"} <= light
    for selector in DARK:
        assert theme_variables(selector) == light, selector


def test_every_variable_a_stylesheet_uses_is_defined() -> None:
    ours = set().union(*(theme_variables(s) for s in (LIGHT, *DARK)))
    admin = {
        d.prop
        for path in ADMIN_CSS.glob("*.css")
        for d in declarations(path.read_text())
        if d.prop.startswith("--")
    }
    assert admin, ADMIN_CSS
    for path in STYLESHEETS:
        known = ours | admin if path.name.startswith("admin") else ours
        used = set(re.findall(r"var\((--[\w-]+)", path.read_text()))
        assert used <= known, (path.name, used - known)


def test_every_select_is_drawn_like_the_other_fields() -> None:
    """A <select> outside `.field` (the topic list's status filter, a share link's expiry) was the
    browser's own control (issue 29 point 9): a rule for every `select` gives it the page's font, the
    theme's line and rounded corners. tests/browser/test_look.py checks the computed style."""
    bare = {
        d.prop: d.value
        for d in declarations(THEME.read_text())
        if "select" in [part.strip() for part in d.selector.split(",")]
    }
    assert bare.get("font") == "inherit", bare
    assert "var(--line)" in bare.get("border", ""), bare
    assert bare.get("border-radius"), bare
