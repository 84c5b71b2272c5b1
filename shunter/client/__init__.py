"""Python client for Shunter's public API v1.

``Client`` is the entry point; responses are the typed models of :mod:`.responses`; failures
raise the exceptions of :mod:`.errors` (see the tree drawn there). Both modules' names are
re-exported here as they list them.
"""

from __future__ import annotations

from shunter.client import errors, responses
from shunter.client.client import Client, SpecInput, load_spec
from shunter.client.config import DEFAULT_URL, resolve_token, resolve_url
from shunter.client.errors import *  # noqa: F403  (every error class)
from shunter.client.responses import *  # noqa: F403  (every response model)

__all__ = ["DEFAULT_URL", "Client", "SpecInput", "load_spec", "resolve_token", "resolve_url"]
__all__ += errors.__all__
__all__ += responses.__all__
