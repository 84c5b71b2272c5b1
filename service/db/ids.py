"""Row ids that sort by creation time: ``<prefix>-`` + 26 Crockford base32 characters of a
48-bit millisecond time and 80 random bits (jobs ``job-``, sweeps ``swp-``)."""

from __future__ import annotations

import secrets
import time

__all__ = ["sortable_id"]

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def sortable_id(prefix: str) -> str:
    """``<prefix>-`` and 26 characters; ids made later sort after (to the millisecond)."""
    value = (int(time.time() * 1000) << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        value, rem = divmod(value, 32)
        chars.append(_CROCKFORD[rem])
    return f"{prefix}-" + "".join(reversed(chars))
