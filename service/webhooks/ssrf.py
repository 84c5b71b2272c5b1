"""Which URLs a webhook may call (server-side request forgery guard).

Only ``http``/``https``, no credentials in the URL, and every address the host resolves to
must be public: private, loopback, link-local, multicast, reserved, shared and unspecified
addresses are refused unless the admin allow-list (``SHUNTER_WEBHOOK_ALLOW``: addresses or
CIDR networks, comma-separated) names them. The check runs at registration (a 422 naming the
field) and again before every delivery, which then connects to the very address it checked
(``Target.address``), so a DNS answer that changes in between (rebinding) cannot redirect it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from service.errors import Unprocessable

__all__ = [
    "Network",
    "Target",
    "UrlRefused",
    "check_url",
    "parse_allow",
    "refuse_unsafe",
]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]
MAX_URL_CHARS = 2048


class UrlRefused(ValueError):
    """The URL may not be called; the message says why."""


@dataclass(frozen=True, kw_only=True)
class Target:
    """A checked URL and the address to connect to (the first allowed one)."""

    url: str
    scheme: str
    host: str
    port: int
    address: str

    def connect_url(self) -> str:
        """The URL with the checked address in place of the host name."""
        parts = urlsplit(self.url)
        host = f"[{self.address}]" if ":" in self.address else self.address
        netloc = f"{host}:{self.port}"
        path = parts.path or "/"
        return f"{self.scheme}://{netloc}{path}" + (f"?{parts.query}" if parts.query else "")

    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def parse_allow(entries: Iterable[str]) -> tuple[Network, ...]:
    """``["127.0.0.1", "10.0.0.0/8"]`` -> networks; raises ValueError naming a bad entry."""
    nets: list[Network] = []
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        try:
            nets.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(
                f"SHUNTER_WEBHOOK_ALLOW: {entry!r} is not an address or a CIDR network"
            ) from None
    return tuple(nets)


def _resolve(host: str, port: int) -> Sequence[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UrlRefused(f"host {host!r} does not resolve ({exc})") from None
    return [str(info[4][0]) for info in infos]


def _public(ip: Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return _public(ip.ipv4_mapped)
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_unspecified)


def _allowed(ip: Address, allow: Sequence[Network]) -> bool:
    return _public(ip) or any(ip.version == net.version and ip in net for net in allow)


def check_url(url: str, *, allow: Sequence[Network] = (), resolve: Resolver = _resolve) -> Target:
    """The checked target of ``url``; raises ``UrlRefused`` saying why it may not be called."""
    if len(url) > MAX_URL_CHARS:
        raise UrlRefused(f"the URL is longer than {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(f"not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UrlRefused("only http:// and https:// URLs are allowed")
    if parts.username or parts.password:
        raise UrlRefused("credentials in the URL are not allowed; the signature authenticates")
    host = parts.hostname
    if not host:
        raise UrlRefused("the URL has no host")
    port = port or (443 if scheme == "https" else 80)
    addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in resolve(host, port)]
    if not addresses:
        raise UrlRefused(f"host {host!r} does not resolve")
    refused = [a for a in addresses if not _allowed(a, allow)]
    if refused:
        raise UrlRefused(
            f"{host} resolves to {refused[0]}, a private, loopback, link-local or reserved "
            "address; an admin may allow it with SHUNTER_WEBHOOK_ALLOW"
        )
    return Target(url=url, scheme=scheme, host=host, port=port, address=str(addresses[0]))


def refuse_unsafe(
    url: str, *, field: str, allow: Sequence[Network] = (), resolve: Resolver = _resolve
) -> Target:
    """``check_url`` for an API input: a refusal is a 422 naming ``field``."""
    try:
        return check_url(url, allow=allow, resolve=resolve)
    except UrlRefused as exc:
        raise Unprocessable(f"{field}: {exc}", detail=[{"loc": field, "msg": str(exc)}]) from None
