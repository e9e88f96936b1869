"""The follow-up thread of a finished topic: asking a question, or *Expand this section*.

The owner asks on the topic page; the question is queued through `workflow.ask_followup` and
answered by the worker (research/pipeline/followup.py), which streams the answer into the thread.
A refused question (too long, the thread full, one still being answered, too much research going
on) comes back on the page with its text kept and the reason beside the field.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from research import workflow
from research.presenters import topic_page_context
from research.views import _topic

# Longer than any allowed question: what was typed is kept to be shown back, not stored.
KEEP_TYPED_CHARS = 20_000


@require_POST
def followup_create(request: HttpRequest, topic_id: int) -> HttpResponse:
    topic = _topic(request, topic_id)
    question = request.POST.get("question", "")[:KEEP_TYPED_CHARS]
    section = request.POST.get("section", "")[:KEEP_TYPED_CHARS]
    try:
        followup = workflow.ask_followup(topic, question=question, section=section)
    except workflow.Refused as refused:
        status = 429 if isinstance(refused, workflow.OverLimit) else 400
        context = topic_page_context(topic, followup_error=refused.message, followup_text=question)
        return render(request, "research/topic_detail.html", context, status=status)
    return redirect(reverse("topic_detail", args=[topic.pk]) + f"#followup-{followup.pk}")
