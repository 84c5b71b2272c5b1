"""``shunter doctor``'s checks against the session's real Ray head and a real database: a
healthy setup passes, and each broken part is reported as a failure with its fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.db.engine import Database
from service.db.migrate import upgrade
from service.doctor import Outcome, run_checks
from service.settings import Settings

pytestmark = pytest.mark.slow


def _by_name(checks: list[Any]) -> dict[str, Any]:
    return {c.name: c for c in checks}


def test_doctor_on_a_healthy_embedded_deployment(tmp_path: Path, ray_launcher: Any) -> None:
    settings = Settings(home=tmp_path / "home", storage=str(tmp_path / "storage"))
    settings.home.mkdir()
    upgrade(settings.database_url)
    db = Database(settings.database_url)
    try:
        checks = _by_name(run_checks(settings=settings, db=db, launcher=ray_launcher))
    finally:
        db.dispose()
    assert checks["database reachable and migrated"].outcome is Outcome.OK
    ray = checks["Ray reachable, same version"]
    assert ray.outcome is Outcome.OK and "cluster Ray 2." in ray.detail, ray
    assert checks["storage writable from a worker"].outcome is Outcome.OK
    # This machine has no GPU: a warning that names the fix, not a pass and not a failure.
    gpus = checks["GPUs visible to a worker"]
    assert gpus.outcome is Outcome.WARN and "gpu" in gpus.fix
    assert checks["HF cache and Hub access"].outcome in {Outcome.OK, Outcome.WARN}


def test_doctor_reports_an_unmigrated_database_and_unwritable_storage(
    tmp_path: Path, ray_launcher: Any
) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the storage directory should be")
    settings = Settings(home=tmp_path / "home", storage=str(blocked / "storage"))
    (tmp_path / "home").mkdir()
    db = Database(settings.database_url)  # never migrated
    try:
        checks = _by_name(run_checks(settings=settings, db=db, launcher=ray_launcher))
    finally:
        db.dispose()
    database = checks["database reachable and migrated"]
    assert database.outcome is Outcome.FAIL and "shunter db upgrade" in database.fix
    storage = checks["storage writable from a worker"]
    assert storage.outcome is Outcome.FAIL and "SHUNTER_STORAGE" in storage.fix, storage
