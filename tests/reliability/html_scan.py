"""What in an HTML page could run script, restyle it or send a form elsewhere, besides the site's
own script files.

Used by the CSP tests (the site must keep to its policy) and by the XSS tests (hostile text
must never become any of these).
"""

from __future__ import annotations

from html.parser import HTMLParser

URL_ATTRIBUTES = {"href", "src", "action", "formaction", "data", "poster", "xlink:href", "srcdoc"}
# Inline <svg> is not here: Django's admin draws its icons with it, and an injected one is
# caught by its handler attributes or <script> like any other tag.
ACTIVE_TAGS = {"iframe", "object", "embed", "base", "frame", "frameset", "applet", "link"}
FORM_TARGETS = {"action", "formaction"}
UNSAFE_SCHEMES = ("javascript:", "vbscript:", "data:text/html")


class _Scanner(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._in_inline_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "script" and "src" not in values and values.get("type") != "application/json":
            self.found.append(f"inline <script> {values}")
        if tag == "style":
            self.found.append("a <style> element")
        if tag == "meta" and values.get("http-equiv", "").lower() == "refresh":
            self.found.append(f"<meta refresh> {values}")
        if tag in ACTIVE_TAGS and not (tag == "link" and values.get("rel") in ("stylesheet", "icon")):
            self.found.append(f"<{tag}> {values}")
        for name, value in values.items():
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}={value!r}>")
            elif name == "style":
                self.found.append(f"<{tag} style={value!r}>")
            elif name in URL_ATTRIBUTES and value.strip().lower().startswith(UNSAFE_SCHEMES):
                self.found.append(f"<{tag} {name}={value!r}>")
            elif name in FORM_TARGETS and value.strip().lower().startswith(("//", "http:", "https:")):
                self.found.append(f"<{tag} {name}={value!r}> sends to another site")

    handle_startendtag = handle_starttag


def active_content(html: str) -> list[str]:
    """Each inline script, handler attribute, style, script URL or embedding tag in `html`."""
    scanner = _Scanner()
    scanner.feed(html)
    scanner.close()
    return scanner.found
