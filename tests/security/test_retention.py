"""Retention: DELETE of a finished job removes its rows and storage and leaves an audit row;
DELETE of a running job is 409; ``POST /v1/admin/gc`` (``shunter admin gc``) deletes finished
jobs past an age, or lists them with dry_run. (On main 187a972 there was no delete at all.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sec_helpers import bearer, set_status, submit
from sqlalchemy import func, select

from service.db.tables import AuditLog, Event, Job


def _storage_dir(settings: Any, job_id: str) -> Path:
    path = Path(settings.storage) / job_id
    (path / "checkpoint-1").mkdir(parents=True)
    (path / "checkpoint-1" / "model.safetensors").write_bytes(b"x" * 10)
    return path


def test_delete_of_a_finished_job_removes_rows_and_storage(
    client: Any, db: Any, settings: Any, make_token: Any
) -> None:
    member = make_token("alpha")
    job_id = submit(client, member)["id"]
    storage = _storage_dir(settings, job_id)
    set_status(db, job_id, "succeeded")
    r = client.delete(f"/v1/jobs/{job_id}", headers=bearer(member))
    assert r.status_code == 204, r.text
    assert not storage.exists()
    assert client.get(f"/v1/jobs/{job_id}", headers=bearer(member)).status_code == 404
    count = db.read(lambda s: s.scalar(select(func.count()).where(Event.job_id == job_id)))
    assert count == 0
    audit = db.read(lambda s: s.execute(select(AuditLog)).scalars().all())
    assert [(a.action, a.target, a.actor_team) for a in audit] == [("job.delete", job_id, "alpha")]


def test_delete_of_a_running_job_is_409_and_keeps_it(
    client: Any, db: Any, settings: Any, admin_token: str
) -> None:
    job_id = submit(client, admin_token)["id"]
    storage = _storage_dir(settings, job_id)
    set_status(db, job_id, "running")
    r = client.delete(f"/v1/jobs/{job_id}", headers=bearer(admin_token))
    assert r.status_code == 409, r.text
    assert "cancel it first" in r.json()["message"]
    assert storage.exists()
    assert db.read(lambda s: s.get(Job, job_id)) is not None


def test_delete_is_404_for_another_team_and_403_for_a_viewer(
    client: Any, db: Any, make_token: Any
) -> None:
    owner = make_token("alpha")
    job_id = submit(client, owner)["id"]
    set_status(db, job_id, "failed")
    other = make_token("beta")
    viewer = make_token("alpha", role="viewer")
    assert client.delete(f"/v1/jobs/{job_id}", headers=bearer(other)).status_code == 404
    assert client.delete(f"/v1/jobs/{job_id}", headers=bearer(viewer)).status_code == 403
    assert db.read(lambda s: s.get(Job, job_id)) is not None


def test_gc_deletes_only_finished_jobs_past_the_age(
    client: Any, db: Any, settings: Any, admin_token: str
) -> None:
    old = submit(client, admin_token)["id"]
    recent = submit(client, admin_token)["id"]
    running = submit(client, admin_token)["id"]
    set_status(db, old, "failed", days_ago=40)
    set_status(db, recent, "succeeded", days_ago=2)
    set_status(db, running, "running")
    storage = _storage_dir(settings, old)
    body = {"older_than": "30d", "dry_run": True}
    dry = client.post("/v1/admin/gc", json=body, headers=bearer(admin_token)).json()
    assert dry == {"job_ids": [old], "deleted": [], "dry_run": True}
    assert storage.exists()
    body["dry_run"] = False
    done = client.post("/v1/admin/gc", json=body, headers=bearer(admin_token)).json()
    assert done["deleted"] == [old]
    assert not storage.exists()
    left = db.read(lambda s: set(s.execute(select(Job.id)).scalars()))
    assert left == {recent, running}
    bad = client.post("/v1/admin/gc", json={"older_than": "soon"}, headers=bearer(admin_token))
    assert bad.status_code == 422 and "30d" in bad.json()["message"]


def test_gc_is_admin_only(client: Any, make_token: Any) -> None:
    member = make_token("alpha")
    r = client.post("/v1/admin/gc", json={"older_than": "1d"}, headers=bearer(member))
    assert r.status_code == 403
