"""Standard Webhooks signing: ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``.

The signature is ``v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`` where ``key`` is
the base64-decoded part of a ``whsec_...`` secret. During a secret rotation the header holds
one signature per valid secret, space-separated; a receiver accepts any that matches. The
official ``openai`` client's ``webhooks.unwrap`` verifies these headers unchanged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence

__all__ = ["SECRET_PREFIX", "new_secret", "sign", "signature_headers", "verify"]

SECRET_PREFIX = "whsec_"
_KEY_BYTES = 32  # 256-bit keys, as Standard Webhooks recommends (24-64 bytes)


def new_secret() -> str:
    """A fresh ``whsec_<base64 of 32 random bytes>`` secret."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(_KEY_BYTES)).decode()


def _key(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError("a webhook secret starts with 'whsec_'")
    return base64.b64decode(secret[len(SECRET_PREFIX) :])


def sign(*, secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature of ``msg_id.timestamp.body``."""
    signed = msg_id.encode() + b"." + str(timestamp).encode() + b"." + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signature_headers(
    *, secrets_: Sequence[str], msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three headers, signed with every secret in ``secrets_`` (current first)."""
    if not secrets_:
        raise ValueError("at least one secret is needed to sign")
    sigs = " ".join(sign(secret=s, msg_id=msg_id, timestamp=timestamp, body=body) for s in secrets_)
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp), "webhook-signature": sigs}


def verify(
    *, secret: str, headers: dict[str, str], body: bytes, now: int, tolerance_s: int = 300
) -> bool:
    """True when one of the header's signatures is ``secret``'s and the timestamp is fresh."""
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        msg_id = lowered["webhook-id"]
        timestamp = int(lowered["webhook-timestamp"])
        header = lowered["webhook-signature"]
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = sign(secret=secret, msg_id=msg_id, timestamp=timestamp, body=body)
    return any(hmac.compare_digest(expected, part) for part in header.split())
