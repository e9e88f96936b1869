"""What every stage is handed: the topic, how to report progress, and whether an LLM is on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils.translation import gettext_noop

from mindsearch import lifecycle
from mindsearch.clients import llm as llm_client
from research.models import RunEvent, Topic, TopicImage
from research.pipeline.stage import StageName
from research.progress import record_event

T = TypeVar("T")


# Errors no later call can mend (a key, a quota, a model that is not there): the LLM is given
# up on at the first.
FATAL_LLM_ERRORS = (
    llm_client.LLMAuthError,
    llm_client.LLMNotConfigured,
    llm_client.LLMQuotaError,
    llm_client.LLMUnknownModel,
)


class StageError(Exception):
    """A stage cannot go on; the message is shown to the user on the topic.

    With `args` (`{}` for none), `message` is a msgid marked with gettext_noop: the topic keeps
    it in English and the page shows it in the reader's language (research/event_text.py);
    without, it is text from elsewhere (a service's own error) and shown as it came."""

    def __init__(self, message: str, args: dict[str, Any] | None = None) -> None:
        self.msgid, self.i18n_args = message, args
        super().__init__(message % args if args else message)


class Cancelled(Exception):
    """The user cancelled the topic; the run stops between two steps."""


def db(function: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """Run ORM code from the pipeline's async parts, on the worker's own thread and connection."""
    return sync_to_async(function, thread_sensitive=True)


@dataclass
class RunContext:
    topic: Topic
    llm_enabled: bool
    model: str
    listeners: list[Callable[[RunEvent], None]] = field(default_factory=list)
    llm_failures: int = 0  # in points: FAILURE_POINTS per failed ask, BAD_ANSWER_POINTS per bad answer
    # What the vision model saw in the question's picture (research/pipeline/stages/vision.py).
    image_labels: list[str] = field(default_factory=list)
    image_context: str = ""
    # The stages that fell back from the model in this run (`fell_back`), for the report's note.
    fallen_back: list[str] = field(default_factory=list)

    # After this many failed asks in a row (each already retried), the LLM is given up on for
    # the rest of the run and the extractive engine does the work.
    MAX_LLM_FAILURES = 3
    # An answer that came back but was unusable (empty, even after retries) weighs less: the
    # endpoint is alive, and one prompt's empty answer — "no new sub-query to propose", a
    # reasoning model that spent its tokens thinking — is that stage's fallback, not a dead LLM.
    # Three concurrent empty proposals of a deep round used to switch the LLM off for the
    # report. Ten such answers in a row still give it up.
    FAILURE_POINTS = 10
    BAD_ANSWER_POINTS = 3

    @classmethod
    def for_topic(cls, topic: Topic, listeners: list[Callable[[RunEvent], None]] | None = None) -> Self:
        enabled = llm_client.is_configured()
        model = settings.AITUNNEL_MODEL if enabled else ""
        ctx = cls(topic=topic, llm_enabled=enabled, model=model, listeners=list(listeners or []))
        image = TopicImage.objects.filter(topic=topic).first()
        if image is not None:
            ctx.load_image(image)
        return ctx

    def load_image(self, image: TopicImage) -> None:
        self.image_labels = [*image.labels, *image.entities]
        self.image_context = image.image_context

    @property
    def asked(self) -> str:
        """The question in the user's own words, as a prompt quotes it. The picture's labels are
        the vision model's reading of an untrusted image: prompts get them in a data block
        (`prompting.image_labels_block`, `prompting.image_context_block`), never beside these words."""
        return self.topic.question

    @property
    def question(self) -> str:
        """The question as search and the keyword fallbacks see it: with the picture's labels."""
        if not self.image_labels:
            return self.asked
        return f"{self.asked} ({', '.join(dict.fromkeys(self.image_labels))})"

    @property
    def owner_id(self) -> int:
        return self.topic.owner_id

    def emit(self, stage: StageName, message: str, **fields: Any) -> RunEvent:
        """`fields` are record_event's: with `args`, `message` is a msgid the page translates."""
        event = record_event(self.topic, stage, message, **fields)
        for listener in self.listeners:
            listener(event)
        return event

    def begin(
        self, stage: StageName, message: str, pending: int = 1, total: int = 1, /, **args: Any
    ) -> RunEvent:
        """The event that `stage` sets to work on `pending` of its `total` steps, the others done
        before (by a run that stopped, or in an earlier round); a stage of one step by default.
        `message` is a msgid, `args` its values (never named `pending` or `total`: those are the
        counts, given in order)."""
        if {"pending", "total"} & args.keys():
            raise TypeError("begin() takes pending and total by position, not as message arguments")
        return self.emit(stage, message, args=args, done=total - pending, total=total)

    def finish(
        self, stage: StageName, message: str, /, *, data: dict[str, Any] | None = None, **args: Any
    ) -> RunEvent:
        """The event that a stage of one step has done it (1 of 1): `message` is a msgid, `args`
        its values; `data` is the event's own (what the page shows beside the line)."""
        return self.emit(stage, message, args=args, done=1, total=1, data=data)

    def warn(self, stage: StageName, message: str, **fields: Any) -> RunEvent:
        return self.emit(stage, message, level=RunEvent.Level.WARNING, **fields)

    def fell_back(self, stage: StageName, message: str, error: Exception) -> RunEvent:
        """The warning that a step failed with `error` and the stage goes on another way (the
        extractive engine, keywords): `message` is a msgid with `%(error)s`."""
        self.fallen_back.append(stage)
        return self.warn(stage, message, args={"error": str(error)})

    def llm_failed(self, error: llm_client.LLMError) -> None:
        bad_answer = isinstance(error, llm_client.LLMBadAnswer)
        self.llm_failures += self.BAD_ANSWER_POINTS if bad_answer else self.FAILURE_POINTS
        given_up = self.llm_failures >= self.MAX_LLM_FAILURES * self.FAILURE_POINTS
        if self.llm_enabled and (isinstance(error, FATAL_LLM_ERRORS) or given_up):
            self.llm_enabled = False
            # The model was configured: say which one was given up on, and why.
            self.warn(
                StageName.LLM,
                gettext_noop(
                    "Continuing without the LLM %(model)s: it is configured, but this run gave it up"
                    " after: %(error)s"
                ),
                args={"model": self.model or settings.AITUNNEL_MODEL, "error": str(error)},
            )

    def check_cancelled(self) -> None:
        lifecycle.raise_if_stopping()  # a stopping worker hands the topic back between stages
        if self.is_cancelled():
            raise Cancelled

    def is_cancelled(self) -> bool:
        status = Topic.objects.filter(pk=self.topic.pk).values_list("status", flat=True).first()
        return status in (None, Topic.Status.CANCELLED)  # None: the topic was deleted
