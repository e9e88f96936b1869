from __future__ import annotations

from django.urls import path

from retrieval import views, views_notes

urlpatterns = [
    path("", views.document_list, name="document_list"),
    path("upload/", views.document_upload, name="document_upload"),
    path("rows/", views.document_rows, name="document_rows"),
    path("search/", views.document_search, name="document_search"),
    path("<int:document_id>/", views.document_detail, name="document_detail"),
    path("<int:document_id>/status/", views.document_status, name="document_status"),
    path("<int:document_id>/file/", views.document_file, name="document_file"),
    path("<int:document_id>/delete/", views.document_delete, name="document_delete"),
    path("<int:document_id>/retry/", views.document_retry, name="document_retry"),
    # Notes on passages (retrieval/notes.py)
    path("notes/", views_notes.note_list, name="note_list"),
    path("notes/<int:note_id>/", views_notes.note_edit, name="note_edit"),
    path("notes/<int:note_id>/delete/", views_notes.note_delete, name="note_delete"),
    path("<int:document_id>/notes/", views_notes.note_add, name="note_add"),
]
