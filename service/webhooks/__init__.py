"""Webhooks: signed notifications of job events (Standard Webhooks), through a durable outbox.

Modules, each with one job:

- ``events``: which job events become which webhook types, and the payload (pure);
- ``signing``: ``whsec_`` secrets and the ``webhook-*`` headers (pure);
- ``ssrf``: which URLs may be called (http/https; no private addresses unless allowed);
- ``retry``: the retry schedule and when an endpoint is disabled (pure);
- ``outbox``: one ``webhook_deliveries`` row per (endpoint, event), written in the
  transaction that records the event;
- ``endpoints``: a team's endpoints (create, list, rotate, delete);
- ``deliveries``: a team's deliveries (list, read one, re-send one);
- ``sender``: the worker that claims due rows and sends them.

Errors are the service's (``service.errors``): a refused URL is ``Unprocessable`` naming
the field.
"""
