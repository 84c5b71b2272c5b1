"""One scheduler leader among many ``shunter serve`` processes: a lease row on database time.

``LeaderLease.acquire()`` (each tick, before any work) renews this process's lease, or takes
over one that expired on the database clock (``epoch`` + 1), or reports that another process
leads. ``fence(session)`` is checked inside every placement transaction: it holds a shared
row lock on the lease row (PostgreSQL ``FOR SHARE``) and requires this holder, this epoch and
an unexpired lease, so a deposed leader's claims are refused, and a takeover (an UPDATE of
that row) waits until an in-flight claim has committed: two leaders never place at once.
A dead leader is replaced within ``lease_s`` plus one tick.
"""

from __future__ import annotations

import os
import socket
import uuid

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.db.engine import Database
from service.db.sqltime import utcnow, utcnow_plus
from service.db.tables import SchedulerLease

__all__ = ["LeaderLease", "new_holder_id"]


def new_holder_id() -> str:
    """host:pid:random — unique per process start."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class LeaderLease:
    def __init__(
        self, db: Database, *, lease_s: float, holder: str | None = None, name: str = "scheduler"
    ) -> None:
        self.db = db
        self.lease_s = lease_s
        self.holder = holder or new_holder_id()
        self.name = name
        self.epoch: int | None = None  # set while this process believes it leads

    def acquire(self) -> bool:
        """Renew, take over an expired lease, or learn that another process leads."""
        self.epoch = self.db.write(self._acquire)
        return self.epoch is not None

    def _acquire(self, session: Session) -> int | None:
        if self.epoch is not None:
            renewed = session.execute(
                update(SchedulerLease)
                .where(
                    SchedulerLease.name == self.name,
                    SchedulerLease.holder == self.holder,
                    SchedulerLease.epoch == self.epoch,
                    SchedulerLease.expires_at > utcnow(),
                )
                .values(expires_at=utcnow_plus(self.lease_s))
                .returning(SchedulerLease.epoch)
            ).scalar_one_or_none()
            if renewed is not None:
                return self.epoch
        taken = session.execute(
            update(SchedulerLease)
            .where(SchedulerLease.name == self.name, SchedulerLease.expires_at <= utcnow())
            .values(
                holder=self.holder,
                epoch=SchedulerLease.epoch + 1,
                expires_at=utcnow_plus(self.lease_s),
                acquired_at=utcnow(),
            )
            .returning(SchedulerLease.epoch)
        ).scalar_one_or_none()
        if taken is not None:
            return int(taken)
        exists = session.execute(
            select(SchedulerLease.name).where(SchedulerLease.name == self.name)
        ).first()
        if exists is not None:
            return None
        try:
            with session.begin_nested():
                session.execute(
                    insert(SchedulerLease).values(
                        name=self.name,
                        holder=self.holder,
                        epoch=1,
                        expires_at=utcnow_plus(self.lease_s),
                        acquired_at=utcnow(),
                    )
                )
        except IntegrityError:  # another process created it first
            return None
        return 1

    def fence(self, session: Session) -> bool:
        """Inside a placement transaction: does this process still lead? (locks the row)"""
        if self.epoch is None:
            return False
        found = session.execute(
            select(SchedulerLease.epoch)
            .where(
                SchedulerLease.name == self.name,
                SchedulerLease.holder == self.holder,
                SchedulerLease.epoch == self.epoch,
                SchedulerLease.expires_at > utcnow(),
            )
            .with_for_update(read=True)
        ).first()
        return found is not None

    def release(self) -> None:
        """Give the lease up at shutdown, so another process takes over at once."""
        if self.epoch is None:
            return
        epoch, self.epoch = self.epoch, None
        self.db.write(
            lambda s: s.execute(
                update(SchedulerLease)
                .where(
                    SchedulerLease.name == self.name,
                    SchedulerLease.holder == self.holder,
                    SchedulerLease.epoch == epoch,
                )
                .values(expires_at=utcnow())
            )
        )
