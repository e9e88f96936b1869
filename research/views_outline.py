"""The report's outline and length on the plan review page (issue 30; research/pipeline/outline.py).

The sections are rows of the plan form (`section`, in order, and `new_section`), with the length
(`report_length`): *Approve* sends them with the rest of the plan (`typed_outline`, into
`workflow.ShownPlan`), and the rows' buttons (up, down, delete, add) post the whole form here,
which saves what was typed of the plan and the outline with the one change, through the workflow.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse
from django.views.decorators.http import require_POST

from mindsearch.requests import HtmxHttpRequest
from research import workflow

# Set on the form so that an older page (without the outline's rows) keeps the stored outline.
SHOWN_FIELD = "outline_shown"


def typed_outline(request: HtmxHttpRequest) -> dict[str, Any]:
    """`ShownPlan`'s outline and length as the form sent them ({} from a form without them)."""
    if SHOWN_FIELD not in request.POST:
        return {}
    titles = [title for title in request.POST.getlist("section")]
    new = request.POST.get("new_section", "").strip()
    if new:
        titles.append(new)
    return {"outline": titles, "length": _length(request)}


def _length(request: HtmxHttpRequest) -> str:
    chosen = request.POST.get("report_length", "")
    words = request.POST.get("report_words", "").strip()
    return words if chosen == "words" else chosen


@require_POST
def outline_edit(request: HtmxHttpRequest, topic_id: int) -> HttpResponse:
    """A row's button: `op` is "up-K", "down-K", "delete-K" (K from 0) or "add"."""
    from research import views  # the plan page's own steps (views imports this module)

    topic = views._reviewable(request, topic_id)
    if (failed := views._with_typed_saved(request, topic)) is not None:
        return failed
    typed = typed_outline(request)
    titles = [title for title in request.POST.getlist("section")]
    action, _, place = request.POST.get("op", "").partition("-")
    if action == "add":
        titles = typed.get("outline", titles)
    elif place.isdigit() and int(place) < len(titles):
        k = int(place)
        if action == "delete":
            del titles[k]
        elif action == "up" and k > 0:
            titles[k - 1], titles[k] = titles[k], titles[k - 1]
        elif action == "down" and k + 1 < len(titles):
            titles[k + 1], titles[k] = titles[k], titles[k + 1]
    try:
        workflow.set_outline(topic, titles, typed.get("length"))
    except workflow.BadOutline as refused:
        request.outline_typed = titles  # type: ignore[attr-defined]  # shown again, not lost
        return views._plan_response(request, topic, error=refused.message)
    except workflow.Refused as refused:  # approved meanwhile, in another tab
        raise Http404(refused.message) from None
    return views._plan_response(request, topic, keep_new=True)
