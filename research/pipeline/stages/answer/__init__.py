"""Stage 8: the report, written from the best passages of the chosen documents, with citations.

The documents are chosen here: the domain data first, as the pre-context the report must prefer
(`domain.py`), then the best documents by `diversity` (minimum score, a cap per site, MMR; in deep
mode the best of every round first). The writing — the passages sent, the streamed draft, the
citations, their check, the question's language, the sources list — is `report_writer.py`'s,
which the local-RAG branch (`local_rag.py`) writes its report with too.
"""

from __future__ import annotations

from django.utils import translation
from django.utils.translation import gettext_noop

from research.models import Hit, Report, SearchQuery
from research.pipeline import sites
from research.pipeline.context import RunContext, StageError
from research.pipeline.stage import Outcome, StageName
from research.pipeline.stages.answer import diversity, report_writer, sections

STAGE = StageName.ANSWER


def run(ctx: RunContext) -> Outcome:
    if Report.objects.filter(topic=ctx.topic).exists():
        return Outcome.CONTINUE
    # Domain data comes first, as the pre-context the report must prefer (domain.py).
    chosen = list(ctx.topic.domain_documents)
    # A topic with an outline is written section by section (sections.py, issue 30).
    ranked = sections.documents_for(ctx) if ctx.topic.outline else diversity.final_documents(ctx)
    documents = chosen + [d for d in ranked if d not in chosen]
    if not documents:
        if _sites_left_nothing(ctx):
            return Outcome.CONTINUE
        raise StageError(_nothing_to_write_from(ctx), {})
    if ctx.topic.outline:
        sections.write_report(ctx, documents)
    else:
        report_writer.write_report(ctx, documents)
    return Outcome.CONTINUE


def _sites_left_nothing(ctx: RunContext) -> bool:
    """The topic's site rules dropped every web result: a short report says so (the topic
    completes; it is the answer to "what do these sites say"), and True."""
    rules = sites.Rules.of(ctx.topic)
    if not (rules.only or rules.avoid) or Hit.objects.filter(topic=ctx.topic).exists():
        return False
    dropped = sum(len(q.dropped) for q in SearchQuery.objects.filter(subquery__topic=ctx.topic))
    if not dropped:
        return False
    ctx.warn(
        STAGE,
        gettext_noop(
            "Your site rules left no web result: %(count)s results were on other sites. "
            "Widen the list of allowed sites to find more."
        ),
        args={"count": dropped},
    )
    with translation.override(ctx.topic.language if ctx.topic.language in ("ru", "en") else "en"):
        listed = ", ".join(rules.only) if rules.only else ""
        text = (
            translation.gettext("No page on the allowed sites (%(sites)s) was found for this question.")
            % {"sites": listed}
            if rules.only
            else translation.gettext("Every page found was on a site you avoid.")
        )
        advice = translation.gettext(
            "%(count)s results on other sites were left out. Widen the site lists and research again."
        ) % {"count": dropped}
    Report.objects.create(
        topic=ctx.topic, markdown=f"# {ctx.topic.question}\n\n{text} {advice}\n", sources=[]
    )
    return True


def _nothing_to_write_from(ctx: RunContext) -> str:
    if not Hit.objects.filter(topic=ctx.topic).exists():
        return gettext_noop(
            "The search found nothing for any query of the plan: "
            "try other words, a wider time range or other sources."
        )
    return gettext_noop("No page or document could be read, so there is nothing to write a report from.")
