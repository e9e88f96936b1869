"""`manage.py research "QUESTION"`: run a topic in the foreground and print the report.

The plan is shown for review (edit, add or delete sub-queries) unless --yes approves it as is.
Progress is drawn as one bar per stage, from the same RunEvents the web page streams; the
report's text is printed as the LLM writes it, then what the checks changed (or the sources).

Ctrl-C (or SIGTERM) stops the run as a stopping worker does (`mindsearch.lifecycle`): before its
next outside call, with every answer received saved; the topic goes back to the queue, where a
worker (`make run`) continues it. A second Ctrl-C quits at once.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from mindsearch import lifecycle
from research import export, images, tasks, workflow
from research.models import RunEvent, SubQuery, Topic
from research.pipeline import outline, sites
from research.pipeline.run import plan_topic, run_topic
from research.pipeline.stage import StageName
from research.pipeline.stages.answer.report_writer import SOURCES_HEADING, clean_citations

BAR_WIDTH = 30


class Listener:
    """What the run tells the console: events drawn as bars and lines, and the report's text
    printed piece by piece as it is written (`report_text`, see
    research/pipeline/stages/answer/report_writer.py)."""

    def __init__(self, command: Command) -> None:
        self.command = command
        self.printed = ""

    def __call__(self, event: RunEvent) -> None:
        self.command.draw(event)

    def report_text(self, text: str) -> None:
        out = self.command.stdout
        if not self.printed:
            out.write("\n\nThe report, as it is written:\n")
        elif not text.startswith(self.printed):  # a new attempt after a broken stream
            out.write("\n\n(The answer broke off; written again:)\n")
            self.printed = ""
        out.write(text[len(self.printed) :], ending="")
        out.flush()
        self.printed = text


class Command(BaseCommand):
    help = "Research a question in the foreground and print the report with its sources."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("question")
        parser.add_argument("--user", default="", help="Owner of the topic (default: the first superuser).")
        parser.add_argument("--yes", action="store_true", help="Approve the planned sub-queries unedited.")
        parser.add_argument("--sources", choices=Topic.Sources.values, default=Topic.Sources.WEB)
        parser.add_argument(
            "--papers",
            choices=Topic.Papers.values,
            default=Topic.Papers.AUTO,
            help="Search papers (OpenAlex, arXiv, PubMed, Crossref) beside the web; auto: when scholarly.",
        )
        parser.add_argument("--time-range", choices=[c for c in Topic.TimeRange.values if c], default="")
        parser.add_argument(
            "--mode", choices=Topic.Mode.values, default=Topic.Mode.QUICK, help="deep: search in rounds"
        )
        parser.add_argument(
            "--only-sites", default="", help="Only web results on these sites (comma-separated)."
        )
        parser.add_argument(
            "--prefer-sites", default="", help="Read and cite these sites first (comma-separated)."
        )
        parser.add_argument(
            "--avoid-sites", default="", help="Never web results on these sites (comma-separated)."
        )
        parser.add_argument(
            "--token-cap",
            type=int,
            default=None,
            help="Stop gathering past this many tokens; write the report.",
        )
        # The report's shape (issue 30, research/pipeline/outline.py).
        parser.add_argument(
            "--kind",
            choices=[k for k in outline.KINDS if k],
            default="",
            help="brief, detailed, review or comparison (the last three are planned in sections).",
        )
        parser.add_argument(
            "--section",
            action="append",
            default=[],
            help="A section of the report, in order (repeat it); the report is written section by section.",
        )
        parser.add_argument("--length", default="", help="short, standard, long or a number of words.")
        parser.add_argument(
            "--image",
            default="",
            help="A picture the question is about (JPEG, PNG, GIF or WebP); VISION_MODEL describes it.",
        )

    def handle(self, *args: Any, question: str, user: str, yes: bool, sources: str, **options: Any) -> None:
        owner = self._owner(user)
        image = self._image(options["image"]) if options.get("image") else None
        try:
            rules = {
                name: sites.clean(options.get(option) or "")
                for name, option in (
                    ("sites_only", "only_sites"),
                    ("sites_prefer", "prefer_sites"),
                    ("sites_avoid", "avoid_sites"),
                )
            }
        except ValueError as error:
            raise CommandError(str(error)) from None
        if options.get("token_cap") is not None and options["token_cap"] < 1:
            raise CommandError("--token-cap is a number of tokens, 1 or more.")
        try:
            shape = {
                "report_kind": outline.read_kind(options.get("kind") or ""),
                "outline": outline.read_outline(options.get("section") or []),
                "report_length": outline.read_length(options.get("length") or ""),
            }
        except outline.OutlineError as error:
            raise CommandError(str(error)) from None
        topic = Topic(
            question=question,
            sources=sources,
            papers=options.get("papers") or Topic.Papers.AUTO,
            time_range=options["time_range"],
            mode=options["mode"],
            auto_approve=yes,
            token_cap=options.get("token_cap"),
            **rules,
            **shape,
        )
        try:
            workflow.create_topic(topic, owner, image)
        except workflow.OverLimit as over:
            raise CommandError(over.message) from None
        self.listener = Listener(self)
        listeners: list[Callable[[RunEvent], None]] = [self.listener]
        self.stdout.write(f"Topic #{topic.pk}: {question}")
        with self._stopped_by_signals(topic):
            planned = plan_topic(topic.pk, listeners)
        if not planned:
            topic.refresh_from_db()
            if topic.status == Topic.Status.COMPLETED:  # answered directly, without a search
                self._print_report(topic)
                return
            if topic.status != Topic.Status.AWAITING_APPROVAL:
                raise CommandError(topic.error or f"Planning ended with status {topic.status}")
            try:
                self._approve(topic, self._review(topic))
            except (KeyboardInterrupt, EOFError):
                waits = f"\nNot approved: the plan of topic #{topic.pk} waits for review on its page."
                raise CommandError(waits, returncode=130) from None
        with self._stopped_by_signals(topic):
            status = run_topic(topic.pk, listeners)
        self.stdout.write("")
        topic.refresh_from_db()
        if status != Topic.Status.COMPLETED:
            raise CommandError(f"The topic {status}: {topic.error}")
        self._print_report(topic)

    @contextmanager
    def _stopped_by_signals(self, topic: Topic) -> Iterator[None]:
        """Ctrl-C or SIGTERM: the run stops at its next saved point and the topic is handed back
        to the queue; a second signal quits at once (the topic then resumes when a worker finds
        it silent)."""

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if lifecycle.stopping():
                raise KeyboardInterrupt
            self.stderr.write("\nStopping at the next saved point (Ctrl-C again to quit at once)…")
            lifecycle.request_stop()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        except KeyboardInterrupt:
            raise CommandError(
                f"Stopped at once: topic #{topic.pk} keeps what was saved; a worker (make run) resumes "
                "it once it has been silent a while.",
                returncode=130,
            ) from None
        except BaseException as exc:
            if not lifecycle.is_stop(exc):
                raise
            status = tasks.hand_back(topic.pk)
            raise CommandError(
                f"Stopped: topic #{topic.pk} ({status}) is saved where it stood and waits in the queue; "
                "a worker (make run) continues it from there.",
                returncode=130,
            ) from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _image(self, path: str) -> images.PreparedImage:
        """The picture, read by its content and re-encoded; a clear error before anything is saved."""
        try:
            with open(path, "rb") as file:
                data = file.read(images.max_bytes() + 1)
        except OSError as exc:
            raise CommandError(f"Cannot read the picture {path}: {exc.strerror or exc}") from None
        try:
            return images.prepare(data)
        except images.ImageRejected as rejected:
            raise CommandError(f"{path}: {rejected.message}") from None

    def _owner(self, username: str) -> User:
        users = User.objects
        if username:
            owner = users.filter(username=username).first()
            if owner is None:
                raise CommandError(
                    f"No user named {username!r}; create one with `manage.py createsuperuser`."
                )
            return owner
        owner = users.filter(is_superuser=True).order_by("pk").first()
        if owner is None:
            raise CommandError("No superuser exists: pass --user NAME or run `manage.py createsuperuser`.")
        return owner

    def _review(self, topic: Topic) -> str:
        """Show the plan; the user keeps it, edits a line, deletes one or adds one. The version
        of the plan last shown, which is the one approved."""
        if not sys.stdin.isatty():
            raise CommandError(
                "The plan needs review: run in a terminal, or pass --yes to approve it as planned."
            )
        while True:
            version = topic.plan_version()  # taken first: a change while listing is refused later
            subqueries = list(topic.subqueries.order_by("position"))
            self.stdout.write("\nPlanned sub-queries:")
            for i, subquery in enumerate(subqueries, 1):
                self.stdout.write(f"  {i}. {subquery.text}")
            self._show_outline(topic)
            choice = input(
                "[Enter] approve · e N edit · d N delete · a add · o sections · l length: "
            ).strip()
            if not choice:
                if subqueries:
                    return version
                self.stderr.write("Add at least one sub-query.")
                continue
            self._apply(topic, subqueries, choice)

    def _approve(self, topic: Topic, version: str) -> None:
        """Approve the plan last shown as the page does — in one workflow step, under the row lock,
        within the plan's size and the owner's active topics — to run it here rather than in a
        worker. A plan changed elsewhere since it was shown is refused."""
        try:
            workflow.approve_plan(topic, workflow.ShownPlan(version=version), queue=False)
        except workflow.Refused as refused:
            raise CommandError(f"The plan of topic #{topic.pk} was not approved: {refused.message}") from None

    def _show_outline(self, topic: Topic) -> None:
        topic.refresh_from_db(fields=["outline", "report_length"])
        if topic.outline:
            self.stdout.write("Report sections: " + " | ".join(topic.outline))
        else:
            self.stdout.write("Report sections: none (written in one pass)")
        self.stdout.write(f"Length: {topic.report_length or 'standard'}")

    def _apply(self, topic: Topic, subqueries: list[SubQuery], choice: str) -> None:
        action, _, number = choice.partition(" ")
        try:
            if action == "o":  # the report's sections, in order, separated by "|" (empty: one pass)
                typed = input("Sections (A | B | C): ")
                workflow.set_outline(topic, [t for t in typed.split("|") if t.strip()])
                return
            if action == "l":
                workflow.set_outline(topic, None, input("Length (short, standard, long or words): "))
                return
            if action == "a":
                text = input("New sub-query: ").strip()
                if text:
                    workflow.add_subquery(topic, text)
                return
            if not number.isdigit() or not 1 <= int(number) <= len(subqueries):
                self.stderr.write("Unknown choice.")
                return
            subquery = subqueries[int(number) - 1]
            if action == "d":
                workflow.delete_subquery(topic, subquery.pk)
            elif action == "e":
                text = input(f"{subquery.text}\n> ").strip()
                if text:
                    workflow.update_subquery(topic, subquery.pk, text)
        except workflow.Refused as refused:
            self.stderr.write(refused.message)

    def draw(self, event: RunEvent) -> None:
        if event.total:
            filled = int(BAR_WIDTH * (event.done or 0) / event.total)
            bar = "#" * filled + "-" * (BAR_WIDTH - filled)
            line = f"\r{event.stage:<16} [{bar}] {event.done or 0}/{event.total}"
            self.stdout.write(line, ending="")
            if (event.done or 0) >= event.total:
                self.stdout.write("")
                # What the picture shows, what data came.
                if event.stage in (StageName.VISION, StageName.DOMAIN):
                    self.stdout.write(event.message)
        elif event.level != RunEvent.Level.INFO:
            self.stdout.write(f"\n{event.level.upper()}: {event.message}")
        elif event.stage in (StageName.DEEP, StageName.DOMAIN):  # rounds and their growth; web alone
            self.stdout.write(f"\n{event.message}")
        self.stdout.flush()

    def _print_report(self, topic: Topic) -> None:
        report = topic.report
        self.stdout.write(f"\nWritten by {written_by(topic)}.\n")
        for line in export.report_notes(topic):
            self.stdout.write(line)
        heading = SOURCES_HEADING.search(report.markdown)
        printed = self.listener.printed
        streamed = clean_citations(printed, len(report.sources)) if printed else ""
        if heading and streamed and streamed.strip() == report.markdown[: heading.start()].strip():
            # The text is on the screen already: only the sources list, which the stage writes.
            self.stdout.write("\n" + report.markdown[heading.start() :])
        else:
            self.stdout.write(report.markdown)


def written_by(topic: Topic) -> str:
    """Who wrote the report: the model, or the extractive engine — because no LLM is configured,
    or because the configured one was given up on (or could not write it)."""
    model = topic.report.model
    if model:
        return f"model {model}"
    if topic.llm_model:
        return f"the extractive engine (the model {topic.llm_model} was given up on)"
    return "the extractive engine (no LLM configured)"
