"""Stage 8: the report, written from the best passages of the chosen documents, with citations.

The documents are chosen here: the domain data first, as the pre-context the report must prefer
(`domain.py`), then the best documents by `diversity` (minimum score, a cap per site, MMR; in deep
mode the best of every round first). The writing — the passages sent, the streamed draft, the
citations, their check, the question's language, the sources list — is `report_writer.py`'s,
which the local-RAG branch (`local_rag.py`) writes its report with too.
"""

from __future__ import annotations

from research.models import Hit, Report
from research.pipeline.context import RunContext, StageError
from research.pipeline.stage import Outcome, StageName
from research.pipeline.stages.answer import diversity, report_writer

STAGE = StageName.ANSWER


def run(ctx: RunContext) -> Outcome:
    if Report.objects.filter(topic=ctx.topic).exists():
        return Outcome.CONTINUE
    # Domain data comes first, as the pre-context the report must prefer (domain.py).
    chosen = list(ctx.topic.domain_documents)
    documents = chosen + [d for d in diversity.final_documents(ctx) if d not in chosen]
    if not documents:
        raise StageError(_nothing_to_write_from(ctx))
    report_writer.write_report(ctx, documents)
    return Outcome.CONTINUE


def _nothing_to_write_from(ctx: RunContext) -> str:
    if not Hit.objects.filter(topic=ctx.topic).exists():
        return (
            "The search found nothing for any query of the plan: "
            "try other words, a wider time range or other sources."
        )
    return "No page or document could be read, so there is nothing to write a report from."
