from __future__ import annotations

from django.urls import path

from research import (
    views,
    views_archive,
    views_citations,
    views_followups,
    views_notes,
    views_outline,
    views_schedules,
)

urlpatterns = [
    path("", views.topic_list, name="home"),
    path("topics/new/", views.topic_create, name="topic_create"),
    path("topics/history/", views.topic_history, name="topic_history"),
    path("topics/<int:topic_id>/", views.topic_detail, name="topic_detail"),
    path("topics/<int:topic_id>/subqueries/", views.subquery_add, name="subquery_add"),
    path(
        "topics/<int:topic_id>/subqueries/<int:subquery_id>/", views.subquery_update, name="subquery_update"
    ),
    path(
        "topics/<int:topic_id>/subqueries/<int:subquery_id>/delete/",
        views.subquery_delete,
        name="subquery_delete",
    ),
    path(
        "topics/<int:topic_id>/subqueries/<int:subquery_id>/move/", views.subquery_move, name="subquery_move"
    ),
    path("topics/<int:topic_id>/approve/", views.plan_approve, name="plan_approve"),
    path("topics/<int:topic_id>/outline/", views_outline.outline_edit, name="outline_edit"),
    path("topics/<int:topic_id>/cancel/", views.topic_cancel, name="topic_cancel"),
    path("topics/<int:topic_id>/rerun/", views.topic_rerun, name="topic_rerun"),
    path("topics/<int:topic_id>/delete/", views.topic_delete, name="topic_delete"),
    path("topics/<int:topic_id>/export.zip", views_archive.topic_export, name="topic_export"),
    path("topics/import/", views_archive.topic_import, name="topic_import"),
    path("topics/import/<str:job_id>/", views_archive.topic_import_status, name="topic_import_status"),
    path("topics/<int:topic_id>/schedule/", views_schedules.schedule_save, name="schedule_save"),
    path("topics/<int:topic_id>/schedule/pause/", views_schedules.schedule_pause, name="schedule_pause"),
    path("topics/<int:topic_id>/schedule/delete/", views_schedules.schedule_delete, name="schedule_delete"),
    path("unsubscribe/<str:token>/", views_schedules.schedule_unsubscribe, name="schedule_unsubscribe"),
    path(
        "topics/<int:topic_id>/documents/<int:document_id>/keep/",
        views_schedules.source_keep,
        name="source_keep",
    ),
    path("topics/<int:topic_id>/share/", views.share_create, name="share_create"),
    path("topics/<int:topic_id>/share/<int:link_id>/revoke/", views.share_revoke, name="share_revoke"),
    path("topics/<int:topic_id>/image/", views.topic_image, name="topic_image"),
    path("topics/<int:topic_id>/report.md", views.report_markdown, name="report_markdown"),
    path("topics/<int:topic_id>/report.pdf", views.report_pdf, name="report_pdf"),
    path("topics/<int:topic_id>/report.docx", views.report_docx, name="report_docx"),
    path("topics/<int:topic_id>/sources.bib", views.report_bibtex, name="report_bibtex"),
    path("topics/<int:topic_id>/sources.ris", views.report_ris, name="report_ris"),
    path("topics/<int:topic_id>/citations/<int:index>/", views_citations.citation_card, name="citation_card"),
    path(
        "topics/<int:topic_id>/citations/<int:index>/note/", views_notes.citation_note, name="citation_note"
    ),
    path("topics/<int:topic_id>/followups/", views_followups.followup_create, name="followup_create"),
    path(
        "topics/<int:topic_id>/followups/<int:followup_id>/citations/<int:index>/",
        views_citations.followup_citation_card,
        name="followup_citation_card",
    ),
    path(
        "topics/<int:topic_id>/followups/<int:followup_id>/citations/<int:index>/note/",
        views_notes.followup_citation_note,
        name="followup_citation_note",
    ),
    path("s/<str:token>/", views.shared_report, name="shared_report"),
    path(
        "s/<str:token>/followups/<int:followup_id>/citations/<int:index>/",
        views_citations.shared_followup_citation_card,
        name="shared_followup_citation_card",
    ),
    path(
        "s/<str:token>/citations/<int:index>/",
        views_citations.shared_citation_card,
        name="shared_citation_card",
    ),
    path("s/<str:token>/image/", views.shared_topic_image, name="shared_topic_image"),
    path("s/<str:token>/report.md", views.shared_report_markdown, name="shared_report_markdown"),
    path("s/<str:token>/report.pdf", views.shared_report_pdf, name="shared_report_pdf"),
    path("s/<str:token>/report.docx", views.shared_report_docx, name="shared_report_docx"),
    path("s/<str:token>/sources.bib", views.shared_report_bibtex, name="shared_report_bibtex"),
    path("s/<str:token>/sources.ris", views.shared_report_ris, name="shared_report_ris"),
]
