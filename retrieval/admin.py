from __future__ import annotations

from django.contrib import admin

from retrieval.models import Chunk, UploadedDocument


@admin.register(UploadedDocument)
class UploadedDocumentAdmin(admin.ModelAdmin):
    list_display = ("original_name", "owner", "status", "size_bytes", "chunk_count", "created_at")
    list_filter = ("status",)
    search_fields = ("original_name", "sha256", "owner__username")
    raw_id_fields = ("owner",)
    readonly_fields = ("sha256", "created_at", "updated_at")


@admin.register(Chunk)
class ChunkAdmin(admin.ModelAdmin):
    list_display = ("document", "position", "page", "char_start", "char_end")
    raw_id_fields = ("document", "owner")
    search_fields = ("text",)
    exclude = ("embedding",)
