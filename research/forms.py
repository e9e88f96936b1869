from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from research import images
from research.models import SubQuery, Topic, TopicSchedule
from research.pipeline import outline, papers, sites

MAX_QUESTION_CHARS = 2000
MAX_SUBQUERY_CHARS = 500
SITE_FIELDS = ("sites_only", "sites_prefer", "sites_avoid")


class TopicForm(forms.ModelForm):
    image = forms.FileField(
        label=_("Picture (optional)"),
        required=False,
        help_text=_(
            "A photo or screenshot the question is about (JPEG, PNG, GIF or WebP). It is stored "
            "privately, without its metadata (EXIF, location), and described by the vision model."
        ),
        widget=forms.ClearableFileInput(attrs={"accept": "image/jpeg,image/png,image/gif,image/webp"}),
    )
    sites_only = forms.CharField(
        label=_("Only these sites"),
        required=False,
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 1, "placeholder": "example.org, docs.python.org"}),
        help_text=_(
            "Web results from other sites are dropped (a site covers its subdomains). Empty: any site."
        ),
    )
    sites_prefer = forms.CharField(
        label=_("Prefer these sites"),
        required=False,
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 1}),
        help_text=_("Their pages are read and cited first among pages of equal score."),
    )
    sites_avoid = forms.CharField(
        label=_("Never these sites"),
        required=False,
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 1}),
    )
    token_cap = forms.IntegerField(
        label=_("Stop at (tokens, optional)"),
        required=False,
        min_value=1,
        max_value=2_000_000_000,
        help_text=_("Past this many tokens the run stops gathering and writes its report from what it has."),
    )
    remember_sites = forms.BooleanField(
        label=_("Use these site lists for my next topics too"), required=False
    )
    # The report's shape (issue 30, research/pipeline/outline.py).
    report_kind = forms.ChoiceField(
        label=_("Kind of report"),
        required=False,
        choices=list(outline.KINDS.items()),
        help_text=_(
            "A detailed report, a literature review or a comparison is planned in sections you can edit."
        ),
    )
    outline = forms.CharField(
        label=_("Sections (optional)"),
        required=False,
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("One title a line, in order; empty: the plan proposes them for the kind chosen."),
    )
    report_length = forms.CharField(
        label=_("Length"),
        required=False,
        max_length=12,
        help_text=_("short, standard, long or a number of words."),
    )
    field_order = (
        "question",
        "image",
        "sources",
        "papers",
        "mode",
        "time_range",
        "auto_approve",
        "sites_only",
        "sites_prefer",
        "sites_avoid",
        "remember_sites",
        "token_cap",
        "report_kind",
        "outline",
        "report_length",
    )

    class Meta:
        model = Topic
        fields = ("question", "sources", "papers", "mode", "time_range", "auto_approve")
        labels = {
            "question": _("Your question"),
            "sources": _("Search in"),
            "papers": _("Papers too"),
            "mode": _("Depth"),
            "time_range": _("Time range"),
            "auto_approve": _("Start without reviewing the plan"),
        }
        help_texts = {
            "question": _("Ask it as you would ask an expert; MindSearch plans sub-queries you can edit."),
            "mode": _("Deep mode searches in rounds until little new is found."),
            "papers": _(
                "OpenAlex, arXiv, PubMed and Crossref, searched beside the web: papers with DOIs, their "
                "open-access PDFs read in full. By default when the question asks about studies or papers."
            ),
            "time_range": _("Or say it in the question: “за последние 3 дня”, “past 6 months”, “2015–2023”."),
        }
        widgets = {
            # Enter sends the form, Shift+Enter makes a new line (static/js/ui.js).
            "question": forms.Textarea(
                attrs={
                    "rows": 3,
                    "maxlength": MAX_QUESTION_CHARS,
                    "autofocus": True,
                    "data-enter-submits": True,
                }
            ),
            "sources": forms.RadioSelect,
            "papers": forms.RadioSelect,
            "mode": forms.RadioSelect,
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["papers"].required = False  # left out (an older form, a script): the default
        if not settings.SEARXNG_URL:
            # A first run has no SearXNG: say so where the source is chosen, and start from the
            # source that works without it.
            self.fields["sources"].initial = Topic.Sources.DOCS
            self.fields["sources"].help_text = _(
                "Web search is not configured on this server (SEARXNG_URL is empty), so <em>Web</em> "
                "will fail; <em>My documents</em> searches the files you upload on the Documents page, "
                "and <em>Web and my documents</em> searches your documents only."
            )

    def clean_sources(self) -> str:
        """*Web* is refused while web search is not configured: planned, reviewed and approved, it
        would only fail at its first search (the API and MCP answer the same)."""
        sources = self.cleaned_data["sources"]
        if sources == Topic.Sources.WEB and not settings.SEARXNG_URL:
            raise forms.ValidationError(
                _(
                    "Web search is not configured on this server (SEARXNG_URL is empty), so a Web topic "
                    "cannot start: choose My documents, or ask the administrator to set SEARXNG_URL "
                    "(the status page says how)."
                ),
                code="web_search_not_configured",
            )
        if sources == Topic.Sources.PAPERS and not papers.configured():
            raise forms.ValidationError(papers.NOT_CONFIGURED, code="papers_not_configured")
        return sources

    def clean_papers(self) -> str:
        return self.cleaned_data.get("papers") or Topic.Papers.AUTO

    def clean_image(self) -> images.PreparedImage | None:
        """The picture re-encoded without metadata (read by its content, within the size limit)."""
        upload = self.cleaned_data.get("image")
        if not upload:
            return None
        if upload.size > images.max_bytes():
            raise forms.ValidationError(
                _("The picture is %(size).1f MB; the limit is %(limit).1f MB.")
                % {"size": upload.size / 2**20, "limit": images.max_bytes() / 2**20}
            )
        try:
            return images.prepare(upload.read(images.max_bytes() + 1))
        except images.ImageRejected as rejected:
            raise forms.ValidationError(rejected.message) from None

    def _clean_sites(self, name: str) -> list[str]:
        try:
            return sites.clean(self.cleaned_data.get(name) or "")
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None

    def clean_sites_only(self) -> list[str]:
        return self._clean_sites("sites_only")

    def clean_sites_prefer(self) -> list[str]:
        return self._clean_sites("sites_prefer")

    def clean_sites_avoid(self) -> list[str]:
        return self._clean_sites("sites_avoid")

    def clean_outline(self) -> list[str]:
        try:
            return outline.read_outline(self.cleaned_data.get("outline") or "")
        except outline.OutlineError as error:
            raise forms.ValidationError(str(error)) from None

    def clean_report_length(self) -> str:
        try:
            return outline.read_length(self.cleaned_data.get("report_length") or "")
        except outline.OutlineError as error:
            raise forms.ValidationError(str(error)) from None

    def save(self, commit: bool = True) -> Topic:
        topic = super().save(commit=False)
        for name in SITE_FIELDS:
            setattr(topic, name, self.cleaned_data.get(name) or [])
        topic.token_cap = self.cleaned_data.get("token_cap")
        topic.report_kind = self.cleaned_data.get("report_kind") or ""
        topic.outline = self.cleaned_data.get("outline") or []
        topic.report_length = self.cleaned_data.get("report_length") or ""
        if commit:
            topic.save()
        return topic

    def clean_question(self) -> str:
        question = " ".join(self.cleaned_data["question"].split())
        if len(question) < 3:
            raise forms.ValidationError(_("Write a question of at least a few words."))
        if len(question) > MAX_QUESTION_CHARS:
            raise forms.ValidationError(_("Keep the question under %d characters.") % MAX_QUESTION_CHARS)
        return question


class SubQueryForm(forms.ModelForm):
    class Meta:
        model = SubQuery
        fields = ("text",)
        labels = {"text": _("Sub-query")}
        widgets = {"text": forms.TextInput(attrs={"maxlength": MAX_SUBQUERY_CHARS})}
        error_messages = {"text": {"required": _("A sub-query cannot be empty.")}}

    def clean_text(self) -> str:
        text = " ".join(self.cleaned_data["text"].split())
        if not text:
            raise forms.ValidationError(_("A sub-query cannot be empty."))
        return text[:MAX_SUBQUERY_CHARS]


class ShareLinkForm(forms.Form):
    EXPIRY_CHOICES = [("", _("Never")), ("1", _("1 day")), ("7", _("7 days")), ("30", _("30 days"))]
    expires_in_days = forms.TypedChoiceField(
        label=_("Link expires"), choices=EXPIRY_CHOICES, coerce=int, empty_value=None, required=False
    )
    pinned = forms.BooleanField(
        label=_("Always show this version"),
        required=False,
        help_text=_("Without it the link shows the newest version once the topic is researched again."),
    )


class ScheduleForm(forms.Form):
    """Keep a topic current: research it again on a schedule and deliver what changed."""

    every = forms.ChoiceField(label=_("Research again"), choices=TopicSchedule.Every.choices)
    cron = forms.CharField(
        label=_("Or a cron line (staff)"),
        required=False,
        max_length=100,
        help_text=_("minute hour day month weekday, in UTC; used instead of the choice above."),
    )
    email = forms.BooleanField(label=_("E-mail me what changed"), required=False, initial=True)
    webhook_url = forms.URLField(
        label=_("Webhook (optional)"),
        required=False,
        max_length=2000,
        assume_scheme="https",
        help_text=_("A signed POST with what changed is sent here after each run."),
    )
    deliver_unchanged = forms.BooleanField(label=_("Deliver also when nothing changed"), required=False)
