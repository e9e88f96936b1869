"""The stage contract (research/pipeline/stage.py): one spelling of every stage name, one shape of
a stage, outcomes the run loop reads by name, and a stage's "done" kept in rows."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from types import ModuleType
from typing import Any, get_type_hints

import pytest
from django.contrib.auth.models import User

from research import images, presenters, watchers
from research.models import Document, LLMCall, Report, RunEvent, SearchQuery, SubQuery, Topic, TopicImage
from research.pipeline import followup, read_and_summarise, run
from research.pipeline.context import RunContext
from research.pipeline.run import Stage
from research.pipeline.stage import Outcome, StageName
from research.pipeline.stages import domain, queries, read, route, search, vision, years
from research.pipeline.stages.answer import direct, local_rag
from tests.support.code import ROOT, application_modules, name_of
from tests.support.domain_world import picture
from tests.support.fakes import Request, searxng_search
from tests.support.world import PAGES, TOPIC, World, search_pages


def pipeline_modules() -> list[ModuleType]:
    import research.pipeline

    names = [info.name for info in pkgutil.walk_packages(research.pipeline.__path__, "research.pipeline.")]
    return [importlib.import_module(name) for name in sorted(names)]


def test_every_stage_constant_of_the_pipeline_is_a_stage_name() -> None:
    named = {
        (module.__name__, attribute): getattr(module, attribute)
        for module in pipeline_modules()
        for attribute in ("STAGE", "CHECK_STAGE")
        if hasattr(module, attribute)
    }
    assert len(named) >= 15  # every stage module, the follow-ups, the citation check
    wrong = {where: value for where, value in named.items() if not isinstance(value, StageName)}
    assert not wrong, f"stage names spelled as plain strings: {wrong}"


# Calls whose first argument is a stage: what a stage tells and asks (`RunContext`, `prompting`).
STAGE_FIRST = {"emit", "begin", "finish", "warn", "ask", "answer", "record"}


def stage_literals(source: str) -> list[tuple[int, str]]:
    """(line, value) of every stage name spelled as a string where a stage is meant: compared
    with a `stage`, given as `stage=`/`stage__in=`, assigned to a `…STAGE(S)` constant, or the
    first argument of what takes a stage first (`ctx.emit("search", …)`)."""
    names = set(StageName.values)

    def literals(node: ast.expr | None) -> list[ast.Constant]:
        elements: list[ast.expr | None] = [node]
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            elements = list(node.elts)
        return [e for e in elements if isinstance(e, ast.Constant) and e.value in names]

    def is_stage(node: ast.AST) -> bool:
        return name_of(node).lower().endswith("stage")

    found: list[ast.Constant] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(map(is_stage, [node.left, *node.comparators])):
            found += [c for side in [node.left, *node.comparators] for c in literals(side)]
        elif isinstance(node, ast.Call):
            stages = [k.value for k in node.keywords if (k.arg or "").startswith("stage")]
            found += [c for value in stages for c in literals(value)]
            if node.args and name_of(node.func) in STAGE_FIRST:
                found += literals(node.args[0])
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id.endswith(("STAGE", "STAGES")) for t in targets):
                found += literals(node.value)
    return sorted((c.lineno, str(c.value)) for c in found)


def test_stage_literals_finds_a_stage_spelled_as_a_string() -> None:
    source = """
if event.stage in ("vision", "domain"): pass
if "deep" == stage: pass
RunEvent.objects.filter(stage="score_hits", stage__in=["read"])
ctx.emit("citecheck", "Checked")
CHECK_STAGE = "citecheck"
load_prompt("queries"); Asking("plan", kind); data["search"] = 1; status == "done"
"""
    assert stage_literals(source) == [
        (2, "domain"),
        (2, "vision"),
        (3, "deep"),
        (4, "read"),
        (4, "score_hits"),
        (5, "citecheck"),
        (6, "citecheck"),
    ]


def test_the_application_spells_no_stage_name_as_a_string() -> None:
    """Outside stage.py and the migrations (which keep the values they were written with), a stage
    is a `StageName` member: a literal "score_hits" is a rename waiting to break silently."""
    spelled = {}
    for path in application_modules():
        relative = path.relative_to(ROOT).as_posix()
        if relative == "research/pipeline/stage.py":
            continue
        found = stage_literals(path.read_text(encoding="utf-8"))
        if found:
            spelled[relative] = found
    assert spelled == {}


def test_the_pages_know_every_stage_name_and_only_those() -> None:
    assert set(presenters.STAGE_LABELS) == set(StageName.values)
    assert {key for key, _ in presenters.STAGES} <= set(StageName.values)
    assert set(watchers.PANELS) <= set(StageName.values)


@pytest.mark.django_db
def test_a_run_writes_no_stage_outside_the_enum(alice: User, loopback: World) -> None:
    topic = Topic.objects.create(owner=alice, question=TOPIC, auto_approve=True)
    assert run.plan_topic(topic.pk) is True
    assert run.run_topic(topic.pk) == Topic.Status.COMPLETED
    written = set(RunEvent.objects.filter(topic=topic).values_list("stage", flat=True))
    written |= set(LLMCall.objects.filter(topic=topic).values_list("stage", flat=True))
    assert {StageName.PLAN, StageName.SEARCH, StageName.ANSWER, StageName.DONE} <= written
    assert written <= set(StageName.values)


@pytest.mark.parametrize(
    "stage", [*run.STAGES, *followup.SEARCH_STAGES], ids=lambda stage: stage.__name__.rsplit(".", 1)[-1]
)
def test_every_stage_the_runs_call_has_the_stage_shape(stage: ModuleType) -> None:
    assert isinstance(stage, Stage)
    assert isinstance(stage.STAGE, StageName)
    assert get_type_hints(stage.run)["return"] is Outcome


def test_the_run_loop_runs_every_stage_module_of_the_pipeline() -> None:
    """A module with a stage's shape that no run calls would be a stage someone forgot (or calls
    from another stage, by a side door); read and summarise are run by their composition."""
    stages = {
        module
        for module in pipeline_modules()
        if isinstance(module, Stage) and list(inspect.signature(module.run).parameters) == ["ctx"]
    }
    assert stages == set(run.STAGES) | set(read_and_summarise.COMPOSES)
    assert read_and_summarise in run.ROUND_STAGES and read not in run.ROUND_STAGES
    assert read_and_summarise in followup.SEARCH_STAGES and read not in followup.SEARCH_STAGES


COMPOSERS = {"overlap", "read_and_summarise"}  # explicit compositions of stages, for the overlap
# A stage uses nothing of another stage module. Work two stages share, as the report both the
# answer stage and the local-RAG branch write, lives in a module that is no stage: report_writer.py;
# the picture's prompt blocks, as every stage's prompt-building, are prompting.py's; what another
# stage stored is the topic's: the period the route stored, `Topic.period`, the domain data the
# domain stage saved, `Topic.domain_documents`.


def pipeline_imports(source: str) -> set[str]:
    """The modules of research/pipeline/ that `source` (a module of it) imports, in any form:
    `from research.pipeline import x`, `from research.pipeline.x import y`, `import
    research.pipeline.x` and their relative spellings."""
    package = "research.pipeline"
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith(package + ".")}
        elif isinstance(node, ast.ImportFrom):
            base = f"{package}.{node.module or ''}".rstrip(".") if node.level == 1 else node.module or ""
            if base in PACKAGES:
                found |= {f"{base}.{alias.name}" for alias in node.names}
            elif base.startswith(package + "."):
                found.add(base)
    return {short_name(name) for name in found}


PACKAGES = ("research.pipeline", "research.pipeline.stages", "research.pipeline.stages.answer")


def short_name(module: str) -> str:
    """`research.pipeline.stages.answer.report_writer` → `report_writer`; `….route.inner` → `route`."""
    for package in reversed(PACKAGES):
        if module.startswith(package + "."):
            return module.removeprefix(package + ".").split(".")[0]
    return module


def test_pipeline_imports_sees_every_import_form() -> None:
    source = """
from research.pipeline import text
from research.pipeline import deep as d
from research.pipeline.score_hits import score_batch
from research.pipeline.route.inner import x
import research.pipeline.years
import research.pipeline.plan as planning
from . import queries
from .read import run
from research.models import Topic
"""
    expected = {"deep", "text", "score_hits", "route", "years", "plan", "queries", "read"}
    assert pipeline_imports(source) == expected


def test_no_stage_calls_into_another_stages_work() -> None:
    """Reading does not summarise, routing does not answer, a follow-up does not call the route
    stage's classifier: no module of the pipeline imports a stage module — a stage, a module that
    speaks as a stage (its own `STAGE`: the follow-ups, the diversity pick, the report writer) or
    a helper alike — but the run loop (run.py) and the composers (overlap.py,
    read_and_summarise.py): the piping of one stage's rows into another's work is theirs; what two
    stages share lives in a module that is no stage."""
    modules = {module.__name__.rsplit(".", 1)[-1]: module for module in pipeline_modules()}
    stages = {name for name, module in modules.items() if isinstance(module, Stage)}
    speakers = {name for name, module in modules.items() if hasattr(module, "STAGE")}
    assert {"followup", "diversity", "report_writer"} <= speakers - stages
    used = {
        name: sorted((pipeline_imports(inspect.getsource(module)) & stages) - {name})
        for name, module in modules.items()
        if name not in COMPOSERS | {"run"}
    }
    assert "summarise" not in used["read"]
    assert {name: others for name, others in used.items() if others} == {}


# Who may import the run loop or call its `drive` inside the pipeline, besides run.py, and why: a
# stage that did could run stages of its own (`run.drive(ctx, ...)`), the side door again.
RUN_COMPOSERS = {"followup": "a follow-up's search is the run loop's round on a sub-query of its own"}


def drive_calls(source: str) -> list[int]:
    """The lines of `source` that call the run loop's `drive` (`drive(...)`, `run.drive(...)`, any
    receiver) or import it by name (`from research.pipeline.run import drive as d`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            if name_of(node.func) == "drive":
                found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("run"):
            found += [node.lineno for alias in node.names if alias.name == "drive"]
    return sorted(found)


def test_drive_calls_sees_every_spelling() -> None:
    source = """
from research.pipeline.run import drive as go
from .run import ROUND_STAGES, drive
run.drive(ctx, SEARCH_STAGES)
drive(ctx, stages, show=False)
pipeline.run.drive(ctx, stages)
go(ctx)
ctx.drive_home(); test_drive(); drivers.count()
"""
    assert drive_calls(source) == [2, 3, 4, 5, 6]


def test_only_the_run_loop_and_its_composers_import_it_or_drive_stages() -> None:
    """A stage importing `research.pipeline.run` to call `run.drive(...)` would run stages of its
    own: inside the pipeline only run.py and the composers of a run (followup.py) import run.py,
    and nothing in the application but they calls `drive` (the console and the worker start a run
    through `plan_topic`/`run_topic`)."""
    importers = {
        module.__name__
        for module in pipeline_modules()
        if "run" in pipeline_imports(inspect.getsource(module))
    }
    assert importers == {f"research.pipeline.{name}" for name in RUN_COMPOSERS}
    allowed = {"research/pipeline/run.py", *(f"research/pipeline/{name}.py" for name in RUN_COMPOSERS)}
    drivers = {}
    for path in application_modules():
        relative = path.relative_to(ROOT).as_posix()
        lines = drive_calls(path.read_text(encoding="utf-8"))
        if lines and relative not in allowed:
            drivers[relative] = lines
    assert drivers == {}


def years_world(loopback: World) -> None:
    """The broad search covers 2022 only, so 2021 and 2023 get sub-queries of their own."""
    base = search_pages(loopback.web.url, PAGES)

    def dated(request: Request) -> list[dict]:
        results = base(request)
        if "2023" not in request.param("q"):
            for result in results[:1]:
                result["publishedDate"] = "2022-03-01T00:00:00"
        return results

    loopback.searxng.routes[("GET", "/search")] = searxng_search(dated)


@pytest.mark.django_db
def test_years_asks_the_run_loop_to_search_and_its_done_state_is_a_row(alice: User, loopback: World) -> None:
    years_world(loopback)
    topic = Topic.objects.create(owner=alice, question=TOPIC + " в 2021–2023 годах", auto_approve=True)
    assert run.plan_topic(topic.pk) is True
    ctx = RunContext.for_topic(Topic.objects.get(pk=topic.pk))
    queries.run(ctx)
    search.run(ctx)
    assert years.run(ctx) is Outcome.SEARCH_AGAIN
    per_year = SearchQuery.objects.filter(subquery__topic=topic, subquery__origin=SubQuery.Origin.PERIOD)
    assert (
        per_year.count() == 4 and not per_year.filter(searched_at__isnull=False).exists()
    )  # years searches none
    # The worker died here, and the event log was lost (an export, a clean-up): the row says done.
    RunEvent.objects.filter(topic=topic).delete()
    assert run.run_topic(topic.pk) == Topic.Status.COMPLETED
    assert not per_year.filter(searched_at__isnull=True).exists()  # the run loop searched them
    assert not RunEvent.objects.filter(topic=topic, stage=StageName.YEARS).exists()
    assert SubQuery.objects.filter(topic=topic, origin=SubQuery.Origin.PERIOD).count() == 2
    assert Topic.objects.get(pk=topic.pk).years_checked


def test_only_the_run_loop_runs_a_stage() -> None:
    """Stages are run by the run loop (`run.py`: `_stage`, and `drive` for a follow-up's search),
    never by each other nor by a loop of a module's own: no other module of the pipeline calls a
    `run` — of a stage module by name (`years` calling `search.run`) or of a stage in a list
    (`for stage in SEARCH_STAGES: stage.run(ctx)`, the follow-ups' old second run loop)."""
    calls = {}
    for module in pipeline_modules():
        name = module.__name__.rsplit(".", 1)[-1]
        if name == "run":
            continue
        tree = ast.parse(inspect.getsource(module))
        lines = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"
        ]
        if lines:
            calls[name] = lines
    assert not calls, f"stages run outside the run loop: {calls}"


# --- the route decides, the run loop dispatches --------------------------------------------------

NO_SEARCH = '{"domain": "general", "needs_search": false}'


def test_the_route_stage_writes_no_report_and_runs_no_branch() -> None:
    """route.py decides only: the reply, the report and the owner's documents are other stages'."""
    tree = ast.parse(inspect.getsource(route))
    froms = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported = {alias.name for node in froms for alias in node.names}
    assert not imported & {"Report", "local_rag", "answer", "direct", "transaction"}
    assert [(branch, branch.ROUTE) for branch in run.ANSWER_BRANCHES] == [
        (local_rag, Topic.Route.DOCUMENTS),
        (direct, Topic.Route.DIRECT),
    ]


@pytest.mark.django_db
def test_the_route_is_stored_and_the_run_loop_answers_from_it(alice: User, loopback: World) -> None:
    topic = Topic.objects.create(owner=alice, question="Привет! Как дела?", auto_approve=True)
    ctx = RunContext.for_topic(topic)
    assert route.run(ctx) is Outcome.CONTINUE
    topic.refresh_from_db()
    assert topic.route == Topic.Route.DIRECT and topic.domain == Topic.Domain.GENERAL
    assert not Report.objects.filter(topic=topic).exists()  # deciding wrote nothing
    # The worker died here: the run picks the stored route up and the direct stage answers.
    assert run.plan_topic(topic.pk) is False
    topic.refresh_from_db()
    assert topic.status == Topic.Status.COMPLETED and topic.route == Topic.Route.DIRECT
    assert Report.objects.get(topic=topic).sources == []
    # Run again (a re-queue), nothing is written twice.
    Topic.objects.filter(pk=topic.pk).update(status=Topic.Status.PLANNING)
    assert run.plan_topic(topic.pk) is False
    assert RunEvent.objects.filter(topic=topic, message__startswith="Answered directly").count() == 1


@pytest.mark.django_db
def test_a_branch_that_cannot_answer_hands_the_topic_on(alice: User, loopback: World) -> None:
    """documents → direct → search: an owner without documents, an LLM with no direct reply."""
    loopback.script.route = lambda user: NO_SEARCH  # type: ignore[method-assign]
    loopback.script.direct = lambda user: ""  # type: ignore[method-assign]
    topic = Topic.objects.create(owner=alice, question="Mixture of Tokens?", auto_approve=True)
    assert run.plan_topic(topic.pk) is True
    topic.refresh_from_db()
    assert topic.route == Topic.Route.SEARCH and topic.subqueries.exists()
    assert not Report.objects.filter(topic=topic).exists()
    # The route line is written when the topic goes to the search: after the branches handed it on.
    [line] = RunEvent.objects.filter(topic=topic, stage=StageName.ROUTE)
    assert line.message.startswith("Domain: General (by the LLM)") and line.data["by_llm"] is True
    assert not RunEvent.objects.filter(topic=topic, stage=StageName.ANSWER, seq__gt=line.seq).exists()
    asked = dict(loopback.script.calls)
    assert asked["route"] == 1 and asked["direct"]  # (the client asks again for an empty reply)
    assert run.run_topic(topic.pk) == Topic.Status.COMPLETED
    assert loopback.searxng.requests and Report.objects.get(topic=topic).sources
    assert loopback.script.calls["route"] == 1 and loopback.script.calls["direct"] == asked["direct"]


@pytest.mark.django_db
def test_the_migration_stores_the_route_of_topics_routed_before(alice: User) -> None:
    from django.apps import apps

    store_routes = importlib.import_module("research.migrations.0013_topic_route").store_routes
    direct_topic, documents_topic, searched, unrouted = (
        Topic.objects.create(owner=alice, question=str(n), domain="general" if n < 3 else "")
        for n in range(4)
    )
    for topic in (direct_topic, documents_topic):
        Report.objects.create(topic=topic, markdown="…", sources=[])
    Document.objects.create(topic=documents_topic, title="memo", url="", text="…", fetched_via="private")
    SubQuery.objects.create(topic=searched, text="a sub-query")
    store_routes(apps, None)
    routes = [Topic.objects.get(pk=t.pk).route for t in (direct_topic, documents_topic, searched, unrouted)]
    assert routes == [Topic.Route.DIRECT, Topic.Route.DOCUMENTS, Topic.Route.SEARCH, ""]


# --- the vision and domain stages keep their "done" in rows ------------------------------------------


@pytest.mark.django_db
def test_vision_and_domain_data_are_looked_at_once_though_the_event_log_is_lost(
    alice: User, settings: Any
) -> None:
    """Nothing configured: each stage warns once. The events lost (an export, a clean-up), a run
    again finds its row state and says nothing twice."""
    settings.VISION_MODEL = ""
    settings.OPEN_METEO_URL = ""
    topic = Topic.objects.create(owner=alice, question="Погода в Казани завтра?", domain=Topic.Domain.WEATHER)
    images.save(topic, images.prepare(picture((220, 30, 30))))

    def warnings_of_a_run() -> list[str]:
        ctx = RunContext.for_topic(Topic.objects.get(pk=topic.pk))
        assert vision.run(ctx) is Outcome.CONTINUE and domain.run(ctx) is Outcome.CONTINUE
        warned = RunEvent.objects.filter(topic=topic, level=RunEvent.Level.WARNING)
        return sorted(warned.values_list("stage", flat=True))

    assert warnings_of_a_run() == [StageName.DOMAIN, StageName.VISION]
    RunEvent.objects.filter(topic=topic).delete()
    assert warnings_of_a_run() == []
    topic.refresh_from_db()
    assert topic.vision_checked and topic.domain_data_checked


@pytest.mark.django_db
def test_the_migration_marks_vision_and_domain_done_by_their_old_flags(alice: User) -> None:
    from django.apps import apps

    mark_checked = importlib.import_module("research.migrations.0014_topic_checked").mark_checked
    told, fetched, untouched, pending = (Topic.objects.create(owner=alice, question=str(n)) for n in range(4))
    for stage in (StageName.VISION, StageName.DOMAIN):
        RunEvent.objects.create(topic=told, seq=told.next_event_seq(), stage=stage, message="…")
    # "Describing the picture" was said, and the worker stopped before the answer: not done.
    RunEvent.objects.create(topic=pending, seq=pending.next_event_seq(), stage=StageName.VISION, message="…")
    for topic, analysis in ((told, TopicImage.Analysis.FAILED), (pending, TopicImage.Analysis.PENDING)):
        TopicImage.objects.create(
            topic=topic,
            data=b"png",
            content_type="image/png",
            width=1,
            height=1,
            sha256="0" * 64,
            analysis=analysis,
        )
    Document.objects.create(topic=fetched, title="weather", url="", text="…", fetched_via="domain")
    mark_checked(apps, None)
    flags = Topic.objects.order_by("pk").values_list("vision_checked", "domain_data_checked")
    assert list(flags.filter(pk__in=(told.pk, fetched.pk, untouched.pk, pending.pk))) == [
        (True, True),
        (False, True),
        (False, False),
        (False, False),
    ]


@pytest.mark.django_db
def test_begin_takes_its_counts_by_position_and_refuses_them_as_message_arguments(alice: User) -> None:
    topic = Topic.objects.create(owner=alice, question="Counts?")
    ctx = RunContext(topic=topic, llm_enabled=False, model="")
    event = ctx.begin(StageName.SEARCH, "Searching %(n)s queries", 2, 5, n=5)
    assert (event.done, event.total, event.message) == (3, 5, "Searching 5 queries")
    with pytest.raises(TypeError, match="by position"):
        ctx.begin(StageName.SEARCH, "Searching %(n)s queries", total=5, n=5)
