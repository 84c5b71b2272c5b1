"""The webhook tests drive delivery themselves (``deliver_due``) unless they build their own
app: the shared ``app`` fixture runs no delivery thread here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def settings(make_settings: Callable[..., Any]) -> Any:
    return make_settings(deliver_webhooks=False)
