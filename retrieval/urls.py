from __future__ import annotations

from django.urls import path

from retrieval import views

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
]
