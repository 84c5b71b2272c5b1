"""Alembic environment: the URL comes from the Alembic config (set by service.db.migrate) or
else from ``Settings`` (SHUNTER_DATABASE_URL / SHUNTER_HOME); metadata from the models."""

from __future__ import annotations

from alembic import context

from service.db.engine import make_engine
from service.db.tables import Base
from service.settings import Settings

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    return url or Settings().database_url


def run_migrations_offline() -> None:
    context.configure(
        url=_url(), target_metadata=target_metadata, literal_binds=True, render_as_batch=True
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(
            connection=connection, target_metadata=target_metadata, render_as_batch=True
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(_url(), pool_size=1).execution_options(shunter_write=True)
    try:
        with engine.connect() as conn:
            context.configure(
                connection=conn, target_metadata=target_metadata, render_as_batch=True
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
