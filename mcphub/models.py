"""MCP tool servers an admin registers as sources of search results (mcphub/sources.py)."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

ENGINE_PREFIX = "mcp:"


class McpSource(models.Model):
    """An MCP server reached over Streamable HTTP whose search-like tool every topic that
    searches the web also asks. `headers` (for example an API key) are secrets: the admin shows
    only their names, and nothing logs them."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    url = models.URLField(_("URL"), max_length=500, help_text=_("The server's Streamable HTTP endpoint."))
    headers = models.JSONField(_("headers"), default=dict, blank=True)
    tool = models.CharField(
        _("tool"),
        max_length=200,
        blank=True,
        help_text=_("The search tool's name; empty: the first tool that takes a 'query' string."),
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    requests_per_minute = models.PositiveIntegerField(
        _("requests per minute"),
        default=60,
        validators=[MinValueValidator(1), MaxValueValidator(6000)],
        help_text=_("Shared by every topic and worker, like the other services' limits."),
    )
    timeout_seconds = models.FloatField(
        _("timeout (seconds)"), default=20.0, validators=[MinValueValidator(1.0), MaxValueValidator(300.0)]
    )
    max_results = models.PositiveSmallIntegerField(
        _("results per query"), default=10, validators=[MinValueValidator(1), MaxValueValidator(50)]
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("MCP source")
        verbose_name_plural = _("MCP sources")

    def __str__(self) -> str:
        return self.name

    @property
    def engine(self) -> str:
        """What a hit from this source records as its engine."""
        return f"{ENGINE_PREFIX}{self.name}"[:100]

    @property
    def rate_limit_name(self) -> str:
        return f"mcp-{self.pk}"
