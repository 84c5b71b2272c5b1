"""Shared fixtures: database URLs (SQLite, and PostgreSQL when SHUNTER_TEST_POSTGRES_URL is
set), settings, an app with the in-memory launcher, a TestClient, tokens.

Isolation: a SQLite test starts from a copy of a template migrated once per session; a
PostgreSQL test runs in the session's migrated schema (``search_path`` in the URL), emptied
before each test and dropped at the end. ``empty_db_url`` gives a database with no tables.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Ray nodes started by tests (ray.cluster_utils.Cluster, embedded heads) stay on 127.0.0.1
# instead of Ray's default of the machine's outward IP; read by Ray at import, so set first.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Tests send hundreds of requests from one client; the per-client rate limit is tested on
# its own (tests/security/test_rate_limit.py passes rate_limit_per_minute explicitly).
os.environ.setdefault("SHUNTER_RATE_LIMIT_PER_MINUTE", "0")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO / ".." / "shared" / "data").resolve()
PG_ENV = "SHUNTER_TEST_POSTGRES_URL"


def pg_base_url() -> str | None:
    return os.environ.get(PG_ENV) or None


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh, empty schema (dropped afterwards)."""
    base = pg_base_url()
    if base is None:
        pytest.skip(f"{PG_ENV} not set")
    import sqlalchemy as sa

    schema = "t_" + secrets.token_hex(6)
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in base else "?"
    try:
        yield f"{base}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@pytest.fixture(scope="session")
def _pg_schema() -> Iterator[str]:
    """One migrated PostgreSQL schema for the session; each test empties it (fast) instead of
    creating and migrating its own (slow on a busy server). Once per module it cost a schema
    and a migration to head (~1 s) in each of some 60 modules."""
    base = pg_base_url()
    if base is None:
        pytest.skip(f"{PG_ENV} not set")
    import sqlalchemy as sa

    from service.db.migrate import upgrade

    schema = "m_" + secrets.token_hex(6)
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in base else "?"
    url = f"{base}{sep}options=-csearch_path%3D{schema}"
    try:
        upgrade(url)
        yield url
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def _truncate_all(url: str) -> None:
    """Empty every table and restart the sequences they own: what ``TRUNCATE ... RESTART
    IDENTITY`` does, as DELETEs (children first). On a few rows that is ~5x faster than
    TRUNCATE, which makes new files for every table (~0.3 s a test on a busy server)."""
    import sqlalchemy as sa

    from service.db.tables import Base

    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for table in reversed(Base.metadata.sorted_tables):
                conn.execute(table.delete())
            # RESTART IDENTITY's part: the sequences owned by columns (serial or identity).
            conn.execute(
                sa.text(
                    "SELECT setval(s.oid, 1, false) FROM pg_class s"
                    " JOIN pg_namespace n ON n.oid = s.relnamespace"
                    " JOIN pg_depend d ON d.objid = s.oid AND d.deptype IN ('a', 'i')"
                    " AND d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass"
                    " WHERE s.relkind = 'S' AND n.nspname = current_schema()"
                )
            )
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path) -> str:
    """A migrated, empty database: a copy of the SQLite template, or the session's
    PostgreSQL schema emptied (skipped when SHUNTER_TEST_POSTGRES_URL is unset)."""
    if request.param == "sqlite":
        target = tmp_path / "shunter.db"
        shutil.copyfile(sqlite_template, target)
        return f"sqlite:///{target}"
    url: str = request.getfixturevalue("_pg_schema")
    _truncate_all(url)
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database with no tables at all (for the migrations tests)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    url: str = request.getfixturevalue("pg_schema_url")
    return url


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    """``$home/data`` with a tiny ``train.tsv`` the specs below point at."""
    root = tmp_path / "home" / "data"
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.tsv").write_text("sentence\tlabel\ngood film\t1\nbad film\t0\n")
    return root


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head once per session; tests start from a copy of it."""
    from service.db.migrate import upgrade

    path = tmp_path_factory.mktemp("template") / "shunter.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def make_settings(tmp_path: Path, db_url: str, data_root: Path) -> Callable[..., Any]:
    """Settings for an app on ``db_url`` (already migrated; the migrations themselves are
    tested in test_migrations.py)."""
    from service.settings import Settings

    def _make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "home": tmp_path / "home",
            "database_url": db_url,
            "data_roots": [data_root],
            "launcher": "memory",
            "run_scheduler": False,
            "migrate_on_start": False,
            "sse_poll_seconds": 0.05,
            "rate_limit_per_minute": 0,  # tests/security/test_rate_limit.py turns it on
            **overrides,
        }
        return Settings(**values)

    return _make


@pytest.fixture
def settings(make_settings: Callable[..., Any]) -> Any:
    return make_settings()


@pytest.fixture
def launcher() -> Any:
    from service.launch import InMemoryLauncher

    return InMemoryLauncher()


@pytest.fixture
def app(settings: Any, launcher: Any) -> Any:
    from service.app import create_app

    return create_app(settings, launcher=launcher)


@pytest.fixture
def client(app: Any) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    with TestClient(app) as c:
        yield c


@pytest.fixture
def db(app: Any) -> Any:
    """The app's ``Database`` (for arranging state the API cannot create directly)."""
    return app.state.shunter.db


@pytest.fixture
def admin_token(settings: Any, app: Any) -> str:
    return str(settings.admin_token_path.read_text().strip())


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def make_token(client: Any, admin_token: str) -> Callable[..., str]:
    """``make_token(team, role)`` -> plaintext; creates the team on first use."""

    def _make(team: str = "default", role: str = "member", name: str | None = None) -> str:
        r = client.post("/v1/teams", json={"name": team}, headers=bearer(admin_token))
        assert r.status_code in (201, 409), r.text
        r = client.post(
            "/v1/tokens",
            json={"team": team, "role": role, "name": name or f"{team}-{role}"},
            headers=bearer(admin_token),
        )
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    return _make
