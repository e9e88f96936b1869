"""MCP sources in the admin. Headers are secrets: they are typed in as `Name: value` lines,
never shown back (the list and the form show only their names), and a blank field keeps the
ones stored."""

from __future__ import annotations

import re

from django import forms
from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from mcphub.models import McpSource

HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Set by the MCP client itself; a source must not change how the protocol is spoken.
RESERVED = {"content-type", "accept", "content-length", "host", "mcp-session-id", "mcp-protocol-version"}
MAX_HEADERS = 20


def parse_headers(text: str) -> dict[str, str]:
    """`Name: value` lines as a dict; ValidationError naming the line that is not one."""
    headers: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, colon, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not HEADER_NAME.match(name) or not value:
            raise forms.ValidationError(
                _("Line %(number)d is not a header: write one 'Name: value' per line."),
                params={"number": number},
            )
        if name.lower() in RESERVED:
            raise forms.ValidationError(
                _("Line %(number)d: the MCP client sets %(name)s itself."),
                params={"number": number, "name": name},
            )
        if any((ord(char) < 32 and char != "\t") or ord(char) == 127 for char in value):
            raise forms.ValidationError(
                _("Line %(number)d: a header value cannot hold control characters."),
                params={"number": number},
            )
        headers[name] = value
    if len(headers) > MAX_HEADERS:
        raise forms.ValidationError(_("At most %(count)d headers."), params={"count": MAX_HEADERS})
    return headers


def header_names(source: McpSource) -> str:
    return ", ".join(sorted(source.headers or {})) or "—"


class McpSourceForm(forms.ModelForm):
    url = forms.URLField(
        label=_("URL"),
        max_length=500,
        assume_scheme="https",
        help_text=_("The server's Streamable HTTP endpoint."),
    )
    headers_text = forms.CharField(
        label=_("Headers"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
        help_text=_(
            "One 'Name: value' per line, for example 'Authorization: Bearer …'. Never shown again; "
            "leave empty to keep the headers stored."
        ),
    )
    clear_headers = forms.BooleanField(label=_("Remove the stored headers"), required=False)

    class Meta:
        model = McpSource
        fields = ["name", "url", "tool", "enabled", "requests_per_minute", "timeout_seconds", "max_results"]

    def clean_headers_text(self) -> dict[str, str] | None:
        text = self.cleaned_data.get("headers_text") or ""
        return parse_headers(text) if text.strip() else None

    def save(self, commit: bool = True) -> McpSource:
        source = super().save(commit=False)
        typed = self.cleaned_data.get("headers_text")
        if self.cleaned_data.get("clear_headers"):
            source.headers = {}
        if typed:
            source.headers = typed
        if commit:
            source.save()
        return source


@admin.register(McpSource)
class McpSourceAdmin(admin.ModelAdmin):
    form = McpSourceForm
    list_display = ["name", "url", "tool", "enabled", "requests_per_minute", "stored_headers"]
    list_filter = ["enabled"]
    search_fields = ["name", "url"]
    readonly_fields = ["stored_headers", "created_at", "updated_at"]
    fields = [
        "name",
        "url",
        "tool",
        "enabled",
        "requests_per_minute",
        "timeout_seconds",
        "max_results",
        "stored_headers",
        "headers_text",
        "clear_headers",
        "created_at",
        "updated_at",
    ]

    @admin.display(description=_("stored headers (names only)"))
    def stored_headers(self, source: McpSource) -> str:
        return header_names(source)
