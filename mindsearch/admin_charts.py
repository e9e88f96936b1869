"""The admin desk's service charts: the /metrics figures over time, drawn as SVG on the server.

No script and no CDN: each chart is an inline SVG of polylines, which the CSP allows. Counters
are drawn as their change per minute between samples (a restart of the figures, such as a
purge, shows as zero, never as a negative rate); gauges as they are.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.functional import Promise as StrPromise
from django.utils.translation import gettext_lazy as _

from mindsearch import metrics
from mindsearch.models import MetricSample

WIDTH, HEIGHT = 640, 160
MAX_SERIES = 8
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
PERIODS = {1: _("1 hour"), 6: _("6 hours"), 24: _("24 hours"), 168: _("7 days")}

# (title, figure, counter?)
CHARTS = [
    (_("Topics by status"), "mindsearch_topics", False),
    (_("Queue depth (tasks)"), "mindsearch_queue_depth", False),
    (_("Worker processes"), "mindsearch_worker_processes", False),
    (_("LLM calls per minute, by stage"), "mindsearch_llm_calls", True),
    (_("LLM tokens per minute"), "mindsearch_llm_tokens", True),
    (_("LLM failures per minute, by stage"), "mindsearch_llm_failures", True),
    (_("Stage time per minute (seconds), by stage"), "mindsearch_stage_seconds", True),
    (_("Cache hits per minute, by kind"), "mindsearch_cache_hits", True),
    (_("Cache misses per minute, by kind"), "mindsearch_cache_misses", True),
    (_("Rate-limit waits per minute (seconds), by service"), "mindsearch_ratelimit_wait_seconds", True),
]


@dataclass
class Series:
    label: str
    color: str
    points: str
    last: float


@dataclass
class Chart:
    title: str
    series: list[Series]
    top: float
    empty: bool


def per_minute(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A counter's samples as its change per minute; a drop (figures reset) counts as none."""
    rates = []
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t1 > t0:
            rates.append((t1, max(0.0, v1 - v0) * 60 / (t1 - t0)))
    return rates


def build_chart(
    title: str | StrPromise,
    found: dict[str, list[tuple[float, float]]],
    counter: bool,
    start: float,
    end: float,
) -> Chart:
    lines = {label: per_minute(points) if counter else points for label, points in found.items()}
    lines = {label: points for label, points in lines.items() if points and any(v for _, v in points)}
    busiest = sorted(lines, key=lambda label: -max(v for _, v in lines[label]))[:MAX_SERIES]
    top = max((v for label in busiest for _, v in lines[label]), default=0.0) or 1.0
    span = max(end - start, 1.0)
    series = []
    for index, label in enumerate(sorted(busiest)):
        points = " ".join(
            f"{(t - start) / span * WIDTH:.1f},{HEIGHT - v / top * HEIGHT:.1f}" for t, v in lines[label]
        )
        series.append(Series(label or "total", PALETTE[index % len(PALETTE)], points, lines[label][-1][1]))
    return Chart(str(title), series, top, not series)


def data_start(period_start: datetime) -> datetime:
    """Where the charts begin: the period's start, or its first sample when the figures begin
    later (15 minutes of samples fill the width, not a 24-hour axis's last sliver)."""
    first = (
        MetricSample.objects.filter(at__gte=period_start).order_by("at").values_list("at", flat=True).first()
    )
    return max(first, period_start) if first else period_start


class MetricSampleAdmin(admin.ModelAdmin):
    list_display = ("at", "name", "labels", "value")
    list_filter = ("name",)
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        charts = self.admin_site.admin_view(self.charts_view)
        return [path("charts/", charts, name="mindsearch_metricsample_charts"), *super().get_urls()]

    def charts_view(self, request: HttpRequest) -> HttpResponse:
        try:
            hours = int(request.GET.get("hours", 24))
        except ValueError:
            hours = 24
        hours = hours if hours in PERIODS else 24
        end = timezone.now()
        start = data_start(end - timedelta(hours=hours))
        found = metrics.history([name for _, name, _ in CHARTS], start)
        charts = [
            build_chart(title, found.get(name, {}), counter, start.timestamp(), end.timestamp())
            for title, name, counter in CHARTS
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": _("Service charts"),
            "charts": charts,
            "width": WIDTH,
            "height": HEIGHT,
            "periods": [(h, label, h == hours) for h, label in PERIODS.items()],
            "start": date_format(timezone.localtime(start), "DATETIME_FORMAT"),
            "end": date_format(timezone.localtime(end), "DATETIME_FORMAT"),
            "changelist": reverse("admin:mindsearch_metricsample_changelist"),
            "samples": MetricSample.objects.filter(at__gte=start).values("at").distinct().count(),
        }
        return TemplateResponse(request, "admin/mindsearch/metricsample/charts.html", context)


admin.site.register(MetricSample, MetricSampleAdmin)
