from __future__ import annotations

from django.urls import path

from research.consumers import TopicProgressConsumer

websocket_urlpatterns = [
    path("ws/topics/<int:topic_id>/", TopicProgressConsumer.as_asgi()),
]
