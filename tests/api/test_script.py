"""A script with nothing but a token runs a topic start to finish over HTTP: a real daphne serves
the API, a real qcluster researches the topic against the scripted loopback world."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import Client

from research.models import Topic
from tests.support import processes
from tests.support.world import TOPIC, world

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

FINISHED = {"completed", "failed", "cancelled"}


def poll(api: httpx.Client, path: str, until: Any, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        data = api.get(path).raise_for_status().json()
        if until(data):
            return data
        assert time.monotonic() < deadline, f"gave up waiting on {path}: {data}"
        time.sleep(0.3)


def test_a_script_with_a_token_runs_a_topic_start_to_finish(alice_client: Client, alice: User) -> None:
    form = {"name": "research script", "expires_in_days": "", "scopes": ["read", "research"]}
    page = alice_client.post("/settings/tokens/", form)
    found = re.search(r'id="new-token" readonly value="([^"]+)"', page.content.decode())
    assert found is not None
    token = found.group(1)
    with world() as w:
        env = processes.process_env(**w.env())
        with processes.daphne(env) as host, processes.qcluster(env):
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=f"http://{host}/api", headers=headers, timeout=30) as api:
                assert httpx.get(f"http://{host}/api/topics").status_code == 401
                created = api.post("/topics", json={"question": TOPIC, "sources": "web"})
                assert created.status_code == 201, created.text
                topic_id = created.json()["id"]

                poll(api, f"/topics/{topic_id}", lambda t: t["status"] == "awaiting_approval", 120)
                plan = api.get(f"/topics/{topic_id}/plan").json()
                assert plan["editable"] and len(plan["subqueries"]) == 3
                first, second, _third = plan["subqueries"]
                edited = {
                    "subqueries": [
                        {"id": first["id"], "text": "Что такое Mixture of Tokens простыми словами?"},
                        {"id": second["id"], "text": second["text"]},
                    ]
                }
                assert api.put(f"/topics/{topic_id}/plan", json=edited).status_code == 200
                approved = api.post(f"/topics/{topic_id}/plan/approve")
                assert approved.status_code == 200 and approved.json()["status"] == "queued"

                seqs, status, since = [], "queued", 0
                deadline = time.monotonic() + 240
                while status not in FINISHED:
                    assert time.monotonic() < deadline, "the run did not finish"
                    page = api.get(f"/topics/{topic_id}/events", params={"since": since}).json()
                    seqs += [event["seq"] for event in page["events"]]
                    status, since = page["status"], page["last_seq"]
                    time.sleep(0.3)
                seqs += [
                    e["seq"]
                    for e in api.get(f"/topics/{topic_id}/events", params={"since": since}).json()["events"]
                ]

                markdown = api.get(f"/topics/{topic_id}/report.md")
                report = api.get(f"/topics/{topic_id}/report").json()
    assert status == "completed", Topic.objects.get(pk=topic_id).error
    # Every event arrived once and in order, across all the polls.
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > 8
    assert markdown.status_code == 200 and markdown.headers["content-type"].startswith("text/markdown")
    text = markdown.text
    assert "- Что такое Mixture of Tokens простыми словами?" in text
    assert "- Какие есть улучшения Mixture of Tokens и их преимущества?" not in text  # deleted
    assert "Mixture of Tokens" in text and "/pages/mot-" in text
    assert report["sources"] and report["model"] == "test-model"
    topic = Topic.objects.get(pk=topic_id)
    assert list(topic.subqueries.filter(round=1).values_list("text", flat=True)) == [
        "Что такое Mixture of Tokens простыми словами?",
        second["text"],
    ]
    # The worker planned queries for exactly the approved sub-queries.
    assert w.script.calls["queries"] == 2
