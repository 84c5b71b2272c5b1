"""The delivery worker: claim due outbox rows, send them signed, record what happened.

Runs as a thread in every API process (``SHUNTER_DELIVER_WEBHOOKS``). A row is claimed by
one conditional UPDATE (``status = 'pending'`` and its claim free or expired, on the
database clock), so two processes never send one row at once; the claim outlives the
request's time bound. A process killed between the send and the record sends the row again
after the claim expires, under the same ``webhook-id``: receivers de-duplicate on it, as
Standard Webhooks says. Each attempt re-checks the URL (``ssrf``), connects to the address
it checked, follows no redirect, and reads at most ``max_response_bytes`` of the answer.

Order and fairness (``due_rows``): one job's rows to one endpoint go in row order, one at a
time, and the heads of these streams are dealt round-robin across endpoints, so a backlog
delays no other job or endpoint. The thread keeps ``senders`` requests in flight and claims
again as each ends; at most ``senders - 1`` go to one endpoint.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import ColumnElement, case, delete, func, or_, select, update
from sqlalchemy.orm import Session

from service.db.engine import Database
from service.db.sqltime import as_utc, utcnow, utcnow_plus
from service.db.tables import WebhookDelivery, WebhookEndpoint
from service.settings import Settings
from service.webhooks.outbox import waker
from service.webhooks.retry import RETRY_DELAYS_S, classify, next_delay, should_disable
from service.webhooks.signing import signature_headers
from service.webhooks.ssrf import Network, Resolver, UrlRefused, check_url, parse_allow

__all__ = [
    "AttemptResult",
    "Claimed",
    "DeliveryConfig",
    "DeliveryWorker",
    "claim",
    "claim_due",
    "claim_next",
    "deliver_due",
    "due_rows",
    "prune",
    "record",
    "send",
]

log = logging.getLogger(__name__)
USER_AGENT = "Shunter-Webhooks/1"


@dataclass(frozen=True, kw_only=True)
class DeliveryConfig:
    allow: tuple[Network, ...] = ()
    timeout_s: float = 10.0
    max_response_bytes: int = 64 * 1024
    retry_delays_s: tuple[float, ...] = RETRY_DELAYS_S
    disable_after_failures: int = 20
    disable_after_s: float = 24 * 3600.0
    batch: int = 20  # candidate rows read per pass
    senders: int = 4  # requests in flight at once per process
    # A stream's head that failed this many attempts stops holding the job's later events
    # (3: at once, 5 s, 5 min by the default schedule).
    order_hold_attempts: int = 3
    resolve: Resolver | None = None  # None: the system resolver (tests inject one)
    keep_s: float = 30 * 24 * 3600.0  # finished rows older than this are deleted
    prune_every_s: float = 600.0

    @property
    def lease_s(self) -> float:
        """How long a claim holds: well past one attempt's time bound."""
        return 3 * self.timeout_s + 30.0

    @property
    def per_endpoint(self) -> int:
        """Requests in flight at once to one endpoint: all senders but one, so a slow or
        dead endpoint never takes every sender from the others."""
        return max(1, self.senders - 1)

    @classmethod
    def from_settings(cls, settings: Settings) -> DeliveryConfig:
        return cls(
            allow=parse_allow(settings.webhook_allow),
            timeout_s=settings.webhook_timeout_s,
            max_response_bytes=settings.webhook_max_response_bytes,
            retry_delays_s=tuple(settings.webhook_retry_delays_s) or RETRY_DELAYS_S,
            disable_after_failures=settings.webhook_disable_after_failures,
            disable_after_s=settings.webhook_disable_after_s,
            keep_s=settings.webhook_keep_s,
        )


@dataclass(frozen=True, kw_only=True)
class Claimed:
    """A row this process holds: what to send and how to sign it."""

    id: int
    msg_id: str
    endpoint_id: str
    url: str
    body: str
    attempts: int
    secrets: tuple[str, ...]  # current first; the previous one during a rotation
    token: str


@dataclass(frozen=True, kw_only=True)
class AttemptResult:
    status_code: int | None
    error: str | None = None
    elapsed_s: float = 0.0


def _free() -> ColumnElement[bool]:
    return or_(WebhookDelivery.claimed_until.is_(None), WebhookDelivery.claimed_until < utcnow())


def due_rows(session: Session, *, limit: int, hold_attempts: int = 3) -> list[Sequence[Any]]:
    """Up to ``limit`` due, unclaimed rows of enabled endpoints that may go now: a plain read,
    so an idle poll takes no write lock.

    Order per job: the pending rows of one (endpoint, job) form a stream sent in row order
    (the order its events were written), one at a time. Only a stream's head may go; a head
    that is in flight (claimed) or backing off holds the rest back, until it has failed
    ``hold_attempts`` attempts: then it leaves the stream (it and the other such rows form
    a second stream of their own) so one undeliverable event cannot hold a job's later ones
    for 72 h. Fairness: the heads are dealt round-robin across endpoints (each endpoint's
    oldest due head first), so a backlog on one endpoint or one job delays no other, and a
    new job's head goes in the next pass whatever a long-running job has queued."""
    d = WebhookDelivery
    released = d.attempts >= hold_attempts
    pos = (
        func.row_number()
        .over(partition_by=(d.endpoint_id, d.job_id, released), order_by=d.id)
        .label("pos")
    )
    streams = select(d.id.label("id"), pos).where(d.status == "pending").subquery()
    heads = (
        select(
            d.id.label("id"),
            func.row_number()
            .over(partition_by=d.endpoint_id, order_by=(d.next_attempt_at, d.id))
            .label("turn"),
        )
        .join(streams, streams.c.id == d.id)
        .join(WebhookEndpoint, WebhookEndpoint.id == d.endpoint_id)
        .where(
            streams.c.pos == 1,
            d.next_attempt_at <= utcnow(),
            WebhookEndpoint.disabled_at.is_(None),
            _free(),
        )
        .subquery()
    )
    previous = case(
        (WebhookEndpoint.previous_secret_until > utcnow(), WebhookEndpoint.previous_secret),
        else_=None,
    )
    return list(
        session.execute(
            select(
                d.id,
                d.msg_id,
                d.endpoint_id,
                WebhookEndpoint.url,
                d.body,
                d.attempts,
                WebhookEndpoint.secret,
                previous,
            )
            .join(heads, heads.c.id == d.id)
            .join(WebhookEndpoint, WebhookEndpoint.id == d.endpoint_id)
            .order_by(heads.c.turn, d.next_attempt_at, d.id)
            .limit(limit)
        ).all()
    )


def claim(session: Session, rows: Sequence[Sequence[Any]], *, lease_s: float) -> list[Claimed]:
    """Claim each of ``rows`` by one conditional UPDATE; the ones another sender took first
    (or that stopped being due) are left out."""
    claimed: list[Claimed] = []
    for row_id, msg_id, endpoint_id, url, body, attempts, secret, old in rows:
        token = secrets.token_hex(16)
        won = session.execute(
            update(WebhookDelivery)
            .where(
                WebhookDelivery.id == row_id,
                WebhookDelivery.status == "pending",
                WebhookDelivery.attempts == attempts,
                _free(),
            )
            .values(claimed_until=utcnow_plus(lease_s), claim_token=token)
            .execution_options(synchronize_session=False)
        ).rowcount  # type: ignore[attr-defined]
        if won == 1:
            claimed.append(
                Claimed(
                    id=row_id,
                    msg_id=msg_id,
                    endpoint_id=endpoint_id,
                    url=url,
                    body=body,
                    attempts=attempts,
                    secrets=(secret,) if not old else (secret, old),
                    token=token,
                )
            )
    return claimed


def claim_due(
    session: Session, *, limit: int, lease_s: float, hold_attempts: int = 3
) -> list[Claimed]:
    """``due_rows`` then ``claim`` in one session."""
    rows = due_rows(session, limit=limit, hold_attempts=hold_attempts)
    return claim(session, rows, lease_s=lease_s)


def send(c: Claimed, *, config: DeliveryConfig, client: httpx.Client) -> AttemptResult:
    """One signed POST to the checked address; never raises."""
    start = time.monotonic()
    try:
        if config.resolve is None:
            target = check_url(c.url, allow=config.allow)
        else:
            target = check_url(c.url, allow=config.allow, resolve=config.resolve)
    except UrlRefused as exc:
        return AttemptResult(status_code=None, error=f"refused: {exc}")
    body = c.body.encode()
    headers = signature_headers(
        secrets_=c.secrets, msg_id=c.msg_id, timestamp=int(time.time()), body=body
    )
    headers.update(
        {"content-type": "application/json", "host": target.host_header(), "user-agent": USER_AGENT}
    )
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    deadline = start + config.timeout_s
    try:
        with client.stream(
            "POST",
            target.connect_url(),
            content=body,
            headers=headers,
            extensions=extensions,
            timeout=config.timeout_s,
        ) as resp:
            _drain(resp, limit=config.max_response_bytes, deadline=deadline)
            return AttemptResult(status_code=resp.status_code, elapsed_s=time.monotonic() - start)
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:500]
        return AttemptResult(status_code=None, error=error, elapsed_s=time.monotonic() - start)


def _drain(resp: httpx.Response, *, limit: int, deadline: float) -> None:
    """Read at most ``limit`` bytes of the answer until ``deadline``. Only the status counts,
    so a body that stalls or breaks after it changes nothing."""
    read = 0
    try:
        for chunk in resp.iter_raw():
            read += len(chunk)
            if read >= limit or time.monotonic() > deadline:
                return
    except httpx.HTTPError:
        return


def record(session: Session, c: Claimed, result: AttemptResult, *, config: DeliveryConfig) -> str:
    """Write one attempt's outcome (only while the claim is still ours); return its kind."""
    outcome = classify(result.status_code, result.error)
    attempts = c.attempts + 1
    values: dict[str, object] = {
        "attempts": attempts,
        "last_attempt_at": utcnow(),
        "last_status_code": result.status_code,
        "last_error": None if outcome.kind == "delivered" else outcome.detail[:1000],
        "claimed_until": None,
        "claim_token": None,
    }
    if outcome.kind == "delivered":
        values.update(status="delivered", delivered_at=utcnow())
    elif outcome.kind == "gone" or (delay := next_delay(attempts, config.retry_delays_s)) is None:
        values.update(status="failed")
    else:
        values.update(next_attempt_at=utcnow_plus(delay))
    mine = session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == c.id, WebhookDelivery.claim_token == c.token)
        .values(**values)
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    if mine != 1:  # the claim expired and another process took the row
        return "lost"
    _endpoint_health(session, c.endpoint_id, outcome.kind, outcome.detail, config)
    return outcome.kind


def _endpoint_health(
    session: Session, endpoint_id: str, kind: str, detail: str, config: DeliveryConfig
) -> None:
    ep = WebhookEndpoint
    if kind == "delivered":
        session.execute(
            update(ep).where(ep.id == endpoint_id).values(failures=0, failing_since=None)
        )
        return
    if kind == "gone":
        session.execute(
            update(ep)
            .where(ep.id == endpoint_id, ep.disabled_at.is_(None))
            .values(disabled_at=utcnow(), disabled_reason=detail)
        )
        return
    row = session.execute(
        update(ep)
        .where(ep.id == endpoint_id)
        .values(failures=ep.failures + 1, failing_since=func.coalesce(ep.failing_since, utcnow()))
        .returning(ep.failures, ep.failing_since)
    ).first()
    now = session.execute(select(utcnow())).scalar_one()
    if row is not None and should_disable(
        failures=row[0],
        failing_since=as_utc(row[1]),
        now=as_utc(now) or datetime.now(UTC),
        after_failures=config.disable_after_failures,
        after_s=config.disable_after_s,
    ):
        reason = (
            f"{row[0]} consecutive failed attempts since {row[1]:%Y-%m-%d %H:%M} UTC "
            f"(last: {detail})"
        )
        session.execute(
            update(ep)
            .where(ep.id == endpoint_id, ep.disabled_at.is_(None))
            .values(disabled_at=utcnow(), disabled_reason=reason)
        )


def prune(session: Session, *, keep_s: float, limit: int = 1000) -> int:
    """Delete up to ``limit`` delivered or failed rows created more than ``keep_s`` ago."""
    old = (
        select(WebhookDelivery.id)
        .where(
            WebhookDelivery.status.in_(("delivered", "failed")),
            WebhookDelivery.created_at < utcnow_plus(-keep_s),
        )
        .limit(limit)
    )
    ids = list(session.execute(old).scalars())
    if ids:
        session.execute(delete(WebhookDelivery).where(WebhookDelivery.id.in_(ids)))
    return len(ids)


def _pick(
    rows: Sequence[Sequence[Any]], *, free: int, busy: Mapping[str, int], cap: int
) -> list[Sequence[Any]]:
    """Up to ``free`` of ``rows`` (in their order), at most ``cap`` in flight per endpoint
    counting the ``busy`` ones already sending."""
    taken: Counter[str] = Counter(busy)
    picked: list[Sequence[Any]] = []
    for row in rows:
        if len(picked) >= free:
            break
        if taken[row[2]] < cap:
            taken[row[2]] += 1
            picked.append(row)
    return picked


def _attempt(db: Database, c: Claimed, *, config: DeliveryConfig, client: httpx.Client) -> None:
    result = send(c, config=config, client=client)
    kind = db.write(lambda s: record(s, c, result, config=config))
    log.info("webhook %s to %s: %s (%s)", c.msg_id, c.endpoint_id, kind, result.status_code)


def claim_next(
    db: Database, *, config: DeliveryConfig, free: int, busy: Mapping[str, int] | None = None
) -> list[Claimed]:
    """Claim up to ``free`` rows that may go now (``due_rows``), at most
    ``config.per_endpoint`` in flight per endpoint including ``busy``."""
    if free <= 0:
        return []
    rows = db.read(
        lambda s: due_rows(s, limit=config.batch, hold_attempts=config.order_hold_attempts)
    )
    rows = _pick(rows, free=free, busy=busy or {}, cap=config.per_endpoint)
    if not rows:
        return []
    return db.write(lambda s: claim(s, rows, lease_s=config.lease_s))


def deliver_due(db: Database, *, config: DeliveryConfig, client: httpx.Client) -> int:
    """One pass: claim, send (``config.senders`` at once), record. Returns rows attempted.
    (The thread, ``DeliveryWorker``, does not wait for a whole pass: it claims again as
    each request ends.)"""
    claimed = claim_next(db, config=config, free=config.senders)
    if len(claimed) == 1 or config.senders == 1:
        for c in claimed:
            _attempt(db, c, config=config, client=client)
    elif claimed:
        with ThreadPoolExecutor(max_workers=min(config.senders, len(claimed))) as pool:
            list(pool.map(lambda c: _attempt(db, c, config=config, client=client), claimed))
    return len(claimed)


@dataclass(kw_only=True)
class DeliveryWorker:
    """The thread: up to ``config.senders`` requests in flight; it claims again as soon as
    one ends, when a commit in this process queued deliveries (``outbox.waker``), and every
    ``interval_s`` (rows other processes queued, retries coming due)."""

    db: Database
    config: DeliveryConfig
    interval_s: float = 1.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _wake: threading.Event = field(default_factory=waker)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="webhook-delivery", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout if timeout is not None else self.config.lease_s)

    def _run(self) -> None:
        pruned_at = 0.0
        in_flight: dict[Future[None], str] = {}  # request -> its endpoint
        with (
            _client() as client,
            ThreadPoolExecutor(
                max_workers=self.config.senders, thread_name_prefix="webhook-send"
            ) as pool,
        ):
            while not self._stop.is_set():
                self._wake.clear()  # a commit or an ended request from here on wakes below
                for done in [f for f in in_flight if f.done()]:
                    del in_flight[done]
                if time.monotonic() - pruned_at > self.config.prune_every_s:
                    pruned_at = time.monotonic()
                    self._prune()
                try:
                    claimed = claim_next(
                        self.db,
                        config=self.config,
                        free=self.config.senders - len(in_flight),
                        busy=Counter(in_flight.values()),
                    )
                except Exception:  # a database hiccup must not end the thread
                    log.exception("webhook delivery pass failed")
                    claimed = []
                for c in claimed:
                    future = pool.submit(self._one, c, client)
                    in_flight[future] = c.endpoint_id
                    future.add_done_callback(lambda _f: self._wake.set())
                self._wake.wait(self.interval_s)

    def _one(self, c: Claimed, client: httpx.Client) -> None:
        try:
            _attempt(self.db, c, config=self.config, client=client)
        except Exception:  # the claim expires and the row goes again
            log.exception("webhook %s: recording the attempt failed", c.msg_id)

    def _prune(self) -> None:
        try:
            self.db.write(lambda s: prune(s, keep_s=self.config.keep_s))
        except Exception:
            log.exception("webhook delivery pruning failed")


def _client(transport: httpx.BaseTransport | None = None) -> httpx.Client:
    """No redirects, no proxies or netrc from the environment, no cookies kept."""
    return httpx.Client(follow_redirects=False, trust_env=False, transport=transport)
