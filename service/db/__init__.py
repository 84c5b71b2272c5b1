"""Database layer: models, engine/transaction runner, database-clock expressions, migrations."""

from service.db.engine import Database, make_engine
from service.db.tables import (
    Attempt,
    Base,
    Checkpoint,
    Event,
    IdempotencyKey,
    Job,
    MetricPoint,
    Team,
    Token,
)

__all__ = [
    "Attempt",
    "Base",
    "Checkpoint",
    "Database",
    "Event",
    "IdempotencyKey",
    "Job",
    "MetricPoint",
    "Team",
    "Token",
    "make_engine",
]
