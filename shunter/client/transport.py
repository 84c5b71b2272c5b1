"""The HTTP plumbing under :class:`shunter.client.Client`: one ``httpx`` connection with the
token, typed errors for every failed request, lazy cursor pages, and the polling that ``wait``
and ``wait_sweep`` share. Also what a spec may be given as (:data:`SpecInput`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import httpx
import yaml
from pydantic import BaseModel

from shunter.client.config import resolve_token, resolve_url
from shunter.client.errors import ConnectionFailed, ShunterError, raise_for_response
from shunter.client.responses import Page

__all__ = [
    "SpecInput",
    "Transport",
    "load_spec",
    "poll_until_terminal",
    "raise_for_response_stream",
]

M = TypeVar("M", bound=BaseModel)

# A spec as a user holds it: a mapping, a path to a YAML/JSON file, or a pydantic JobSpec.
SpecInput = Mapping[str, Any] | str | Path | BaseModel


def load_spec(spec: SpecInput) -> dict[str, Any]:
    """Turn any :data:`SpecInput` into the JSON-ready dict that is POSTed.

    A ``str`` is always a file path (YAML or JSON; JSON is YAML). A pydantic model is dumped
    with only the fields that were set, so the server fills its own defaults.
    """
    if isinstance(spec, BaseModel):
        return spec.model_dump(mode="json", exclude_unset=True)
    if isinstance(spec, str | Path):
        data = yaml.safe_load(Path(spec).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ShunterError(
                f"{spec}: a spec file must hold a mapping, not {type(data).__name__}"
            )
        return data
    return dict(spec)


class Transport:
    """The connection under :class:`shunter.client.Client` (its arguments are described
    there): requests that raise typed errors, JSON bodies, and cursor pages."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = resolve_url(url)
        self.token = resolve_token(token, url=self.url)
        headers = {"Accept": "application/json", "User-Agent": "shunter-client/0.1"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        # No redirects: the token goes to the configured URL and nowhere else.
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as e:
            raise ConnectionFailed(f"cannot reach {self.url}: {e}") from e
        raise_for_response(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        if not response.content:
            return None
        return response.json()

    def _pages(self, path: str, model: type[M], params: dict[str, Any]) -> Iterator[M]:
        """Yield every item of a cursor-paginated list, fetching pages as they are needed."""
        params = {k: v for k, v in params.items() if v is not None}
        while True:
            page = self._page(path, model, params)
            yield from page.data
            if not page.next_cursor:
                return
            params = {**params, "cursor": page.next_cursor}

    def _page(self, path: str, model: type[M], params: dict[str, Any]) -> Page[M]:
        body = self._json("GET", path, params=params)
        if isinstance(body, list):  # an endpoint that is not paginated (yet)
            return Page[model](data=body)  # type: ignore[valid-type]
        return Page[model].model_validate(body)  # type: ignore[valid-type]


def raise_for_response_stream(response: httpx.Response) -> None:
    """Like :func:`raise_for_response` for a streamed response (reads the body first)."""
    if not response.is_success:
        response.read()
        raise_for_response(response)


class Finishing(Protocol):
    """A job or a sweep as polled: whether it has ended, and its status."""

    @property
    def terminal(self) -> bool: ...

    @property
    def status(self) -> str: ...


F = TypeVar("F", bound=Finishing)


def poll_until_terminal(
    fetch: Callable[[], F], what: str, *, timeout: float | None, poll: float
) -> F:
    """Fetch every ``poll`` seconds until the answer is terminal; return it. TimeoutError
    (naming ``what``) after ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        item = fetch()
        if item.terminal:
            return item
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"{what} still {item.status} after {timeout}s")
        time.sleep(poll if deadline is None else min(poll, max(0.0, deadline - time.monotonic())))
