"""``Client``: a typed, synchronous Python client for Shunter's public API v1.

One method per public endpoint (DESIGN.md, "Public API v1"). Lists come back as iterators
that follow ``next_cursor`` lazily, so ``for job in client.list(): ...`` walks every page and
``itertools.islice`` stops early without fetching the rest. Errors are raised as the typed
exceptions of :mod:`shunter.client.errors`; nothing returns an error value.

Example::

    with Client() as c:                      # URL and token from the environment
        job = c.submit("examples/sst2.yaml")
        for ev in c.stream_metrics(job.id):  # live points until the job ends
            ...
        final = c.wait(job.id, timeout=600)
"""

from __future__ import annotations

from shunter.client.admin_api import AdminAPI
from shunter.client.jobs_api import JobsAPI
from shunter.client.store_api import StoreAPI
from shunter.client.sweeps_api import SweepsAPI
from shunter.client.transport import SpecInput, load_spec
from shunter.client.webhooks_api import WebhooksAPI

__all__ = ["Client", "SpecInput", "load_spec"]


class Client(JobsAPI, SweepsAPI, AdminAPI, WebhooksAPI, StoreAPI):
    """A connection to one Shunter server with one token.

    ``url``/``token`` default as described in :mod:`shunter.client.config`. ``timeout`` is the
    per-request timeout in seconds (streams use it only to connect). ``transport`` lets tests
    plug in ``httpx.MockTransport`` or an ASGI transport.

    The endpoints are grouped by resource in the classes it joins (``jobs_api``,
    ``sweeps_api``, ``admin_api``, ``webhooks_api``, ``store_api``); the connection is
    :class:`shunter.client.transport.Transport`.
    """
