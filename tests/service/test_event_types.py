"""Event types are one enum (``shunter.jobspec.vocab.EventType``, issue 31): every type has a
writer in the service, every type says in the webhook map whether it notifies, and the
database refuses a type that is not in it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError
from svc_helpers import submit

from service.db.tables import Event
from service.jobs.states import JobStatus
from service.webhooks.events import EVENT_TO_WEBHOOK, webhook_type
from shunter.jobspec.vocab import EVENT_TYPES, WEBHOOK_EVENT_TYPES, EventType

SERVICE = Path(__file__).resolve().parents[2] / "service"
MAP_MODULE = SERVICE / "webhooks" / "events.py"


# A module that writes events: it builds an ``Event`` row or passes ``event_type=`` to a move.
_WRITES = re.compile(r"\bEvent\(|\bevent_type=")


def _written(replace: dict[Path, str] | None = None) -> set[str]:
    """The members that modules writing events name (``EventType.X``), and the job statuses:
    ``states.transition`` writes the new status when a move names no type. Modules that only
    read events (the Prometheus counters, the health counts) and the webhook map name types
    too; they do not count. ``replace``: a module's text instead of the file's (the test of
    this test)."""
    named = set()
    for path in SERVICE.rglob("*.py"):
        source = (replace or {}).get(path) or path.read_text()
        if path != MAP_MODULE and _WRITES.search(source):
            named |= set(re.findall(r"\bEventType\.([A-Z_]+)\b", source))
    return named | {s.name for s in JobStatus}


def test_every_event_type_has_a_writer() -> None:
    missing = [t.name for t in EventType if t.name not in _written()]
    assert missing == [], f"event types no code writes: {missing}"


def test_a_type_only_read_has_no_writer() -> None:
    # The straggler watch is the one writer of these two; the Prometheus counters and the
    # health counts read them. Without the writer, both are missing.
    straggler = SERVICE / "health" / "straggler.py"
    without = re.sub(
        r"\bEventType\.(STRAGGLER|THROUGHPUT_DROPPED)\b", "None", straggler.read_text()
    )
    written = _written({straggler: without})
    assert {"STRAGGLER", "THROUGHPUT_DROPPED"} & written == set()
    assert set(EventType.__members__) - {"STRAGGLER", "THROUGHPUT_DROPPED"} <= written


def test_every_writer_names_a_member() -> None:
    # A free string where an event is written would miss the two tests here; none is left.
    loose = []
    for path in SERVICE.rglob("*.py"):
        for m in re.finditer(r"Event\((?:[^()]|\([^()]*\))*?\btype=\"", path.read_text()):
            loose.append(f"{path.relative_to(SERVICE)}:{m.group(0)[:40]}")
        for m in re.finditer(r"\bevent_type=\"[a-z_]+\"", path.read_text()):
            loose.append(f"{path.relative_to(SERVICE)}:{m.group(0)}")
    assert loose == []


def test_the_webhook_map_covers_every_type_and_nothing_else() -> None:
    assert set(EVENT_TO_WEBHOOK) == set(EventType)
    assert {w for w in EVENT_TO_WEBHOOK.values() if w} <= set(WEBHOOK_EVENT_TYPES)
    # Every webhook type but job.checkpoint (no event row) comes from some event type.
    assert {w for w in EVENT_TO_WEBHOOK.values() if w} == set(WEBHOOK_EVENT_TYPES) - {
        "job.checkpoint"
    }
    # A terminal move notifies by its status, whatever type it names.
    assert webhook_type(event_type="attempt_lost", to_status="failed") == "job.failed"
    assert webhook_type(event_type="phase", to_status=None) is None


def test_every_job_status_is_an_event_type() -> None:
    assert {str(s) for s in JobStatus} <= set(EVENT_TYPES)


def test_the_model_and_the_migrated_database_check_the_same_list(
    sqlite_template: Path, tmp_path: Path
) -> None:
    (check,) = [c for c in Event.__table__.constraints if c.name == "ck_events_type"]
    assert set(re.findall(r"'([a-z_]+)'", str(check.sqltext))) == set(EVENT_TYPES)
    engine = create_engine(f"sqlite:///{sqlite_template}")
    with engine.connect() as conn:
        sql = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'events'")).scalar()
    engine.dispose()
    assert set(re.findall(r"'([a-z_]+)'", sql.split("CONSTRAINT ck_events_type", 1)[1])) == set(
        EVENT_TYPES
    )


def test_the_database_refuses_an_unknown_type(client: Any, db: Any, admin_token: str) -> None:
    job = submit(client, admin_token)

    def add(type_: str) -> None:
        db.write(lambda s: s.add(Event(job_id=job["id"], type=type_, message="m")))

    add(EventType.PHASE)  # a member is stored
    with pytest.raises(IntegrityError, match=r"ck_events_type|CHECK constraint"):
        add("hang_detected")  # mapped once, written never: now not a type at all
