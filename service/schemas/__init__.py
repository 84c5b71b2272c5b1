"""API v1 request and response schemas (pydantic), one module a resource. Separate from
the DB models on purpose: these are the public contract (docs/api.md); the models are storage.

- ``base``: ``_In`` (strict requests), ``_Out`` (responses read from rows), ``ErrorBody``, ``Utc``;
- ``jobs``: a job, its record, events, metrics, checkpoints, logs;
- ``cluster``: the queue, the cluster's nodes, cordoned nodes;
- ``sweeps``, ``teams`` (teams, quotas, budgets, tokens), ``webhooks``;
- ``internal``: what a job's driver sends and gets;
- ``openai``: the OpenAI-compatible API's wire models.

Import from the module: ``from service.schemas.jobs import JobRead``.
"""
