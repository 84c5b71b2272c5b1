"""The scheduler leader lease: one leader, takeover after expiry, fencing of the deposed."""

from __future__ import annotations

import time
from typing import Any

from service.scheduler.leader import LeaderLease


def test_one_leader_takeover_after_expiry_and_the_deposed_is_fenced(db: Any) -> None:
    a = LeaderLease(db, lease_s=0.5, holder="a")
    b = LeaderLease(db, lease_s=0.5, holder="b")
    assert a.acquire() and a.epoch == 1
    assert not b.acquire()
    assert a.acquire() and a.epoch == 1  # renewal keeps the epoch
    assert db.read(a.fence) and not db.read(b.fence)
    time.sleep(0.7)  # a stops renewing (it died)
    assert not db.read(a.fence)  # expired on the database clock
    assert b.acquire() and b.epoch == 2
    assert not a.acquire() and not db.read(a.fence)
    b.release()
    assert a.acquire() and a.epoch == 3  # a released lease is taken at once
