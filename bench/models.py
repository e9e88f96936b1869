"""Benchmark: one quick topic of the loopback world (tests/support/world.py) per kind of model a
user points MindSearch at.

The stand-ins speak each provider's documented answers (tests/support/fakes.py `Dialect`):
OpenAI's reasoning models (400s on max_tokens and temperature, hidden reasoning tokens), a
<think> model on Ollama, a reasoning_content model (vLLM's reasoning parser, DeepSeek), Mistral's
content parts; and the real small model, SmolLM2-135M-Instruct on llama.cpp's own server
(tests/support/llama_server.py; skipped, with why, when xllamacpp is not installed).

Prints JSON, per profile: whether the topic completed, the stages that ran without the model
(fell back) and those that warned (with the warnings), the marks of its report (cut off,
uncited, wrong language, unsupported), wall time, LLM calls made (refused ones included) and the
failed ones with their errors, answer and reasoning tokens, and whether any reasoning text
leaked into the report, plan, events or summaries. Exits 1 when a stand-in topic did not
complete or leaked reasoning (the real model's fallbacks are expected and only reported).

    .venv/bin/python bench/models.py [--profiles think-tags,real-small] [--real-context 2048]
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import argument_parser, print_report, setup_django

# The stand-ins' dialects, by the name docs/BENCHMARKS.md uses (tests/support/fakes.py).
STAND_INS = {
    "openai-reasoning": "OPENAI_REASONING",
    "think-tags": "OLLAMA_THINK",
    "reasoning-content": "DEEPSEEK_REASONER",
    "content-parts": "MAGISTRAL",
}
REAL = "real-small"
PROFILES = (*STAND_INS, REAL)
REASONING_MARKERS = ("<think", "</think>", "Okay, the user wants", "Let me think")


def parse_args() -> argparse.Namespace:
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--profiles", default=",".join(PROFILES), help=f"comma-separated, of {', '.join(PROFILES)}"
    )
    parser.add_argument("--real-context", type=int, default=2048, help="the real server's n_ctx")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    chosen = [name.strip() for name in args.profiles.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(PROFILES))
    if unknown:
        sys.exit(f"unknown profiles: {', '.join(unknown)}")
    setup_django("mindsearch_bench_models")
    from django.contrib.auth.models import User

    owner, _ = User.objects.get_or_create(username="bench-models")
    results = {name: run_profile(name, owner, args) for name in chosen}
    leaked = any(result.get("reasoning_leaked") for result in results.values())
    failed = any(not result.get("completed") for name, result in results.items() if name in STAND_INS)
    print_report({"benchmark": "models", "profiles": results}, ok=not (leaked or failed))


def run_profile(name: str, owner: Any, args: argparse.Namespace) -> dict[str, Any]:
    from django.conf import settings

    from mindsearch.clients import llm
    from tests.support import fakes
    from tests.support.world import TOPIC, world

    with ExitStack() as stack:
        w = stack.enter_context(world())
        overrides: dict[str, Any] = {**w.settings(), "LLM_CACHE_SCOPE": "user"}
        if name == REAL:
            from tests.support.llama_server import llama_server, missing

            if reason := missing():
                return {"skipped": f"{reason} not installed (make install)"}
            server = stack.enter_context(llama_server(n_ctx=args.real_context))
            overrides.update(server.settings())
        else:
            dialect = getattr(fakes, STAND_INS[name])
            w.llm.routes[("POST", "/v1/chat/completions")] = fakes.openai_chat(w.script, dialect=dialect)
        for setting, value in overrides.items():
            setattr(settings, setting, value)
        llm.forget_endpoints()
        result = run_topic(owner, f"{TOPIC} ({name})")
        if name != REAL:
            result["llm_requests"] = sum(1 for r in w.llm.requests if r.path == "/v1/chat/completions")
        return result


def run_topic(owner: Any, question: str) -> dict[str, Any]:
    from django.db.models import Sum

    from research.models import LLMCall, Topic
    from research.pipeline.run import plan_topic, run_topic

    topic = Topic.objects.create(owner=owner, question=question, auto_approve=True)
    started = time.perf_counter()
    if not plan_topic(topic.pk):
        topic.refresh_from_db()
        topic.set_status(Topic.Status.QUEUED)
    run_topic(topic.pk)
    wall = time.perf_counter() - started
    topic.refresh_from_db()
    calls = LLMCall.objects.filter(topic=topic, cache_hit=False)
    sums = calls.aggregate(completion=Sum("completion_tokens"), reasoning=Sum("reasoning_tokens"))
    report = getattr(topic, "report", None)
    completion, reasoning = sums["completion"] or 0, sums["reasoning"] or 0
    return {
        "completed": topic.status == Topic.Status.COMPLETED,
        "status": topic.status,
        "error": topic.error,
        "wall_seconds": round(wall, 1),
        "warned_stages": sorted(
            {event.stage for event in topic.events.filter(level="warning") if event.stage != "llm"}
        ),
        "without_model": report.without_model if report else [],
        "report_marks": report.marks if report else [],
        "report_by": report.model if report else "",
        "llm_calls": calls.count(),
        "failed_calls": [f"{c.stage}: {c.error}"[:300] for c in calls.exclude(error="").order_by("pk")],
        "answer_tokens": completion - reasoning,
        "reasoning_tokens": reasoning,
        "reasoning_leaked": leaked(topic),
        "warnings": [
            f"{event.stage}: {event.message}"[:300]
            for event in topic.events.filter(level="warning").order_by("seq")
        ],
    }


def leaked(topic: Any) -> list[str]:
    """Where reasoning text shows: the report, the plan, the events, the summaries."""
    from research.models import Summary

    places = {
        "report": topic.report.markdown if hasattr(topic, "report") else "",
        "plan": "\n".join(topic.subqueries.values_list("text", flat=True)),
        "events": "\n".join(f"{e.message} {e.data}" for e in topic.events.all()),
        "summaries": "\n".join(Summary.objects.filter(document__topic=topic).values_list("text", flat=True)),
    }
    return sorted(place for place, text in places.items() if any(m in text for m in REASONING_MARKERS))


if __name__ == "__main__":
    main()
