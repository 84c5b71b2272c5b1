"""Standard Webhooks signing: the spec's own test vector, rotation (two signatures), and the
official ``openai`` client's ``webhooks.unwrap`` verifying our headers unchanged."""

from __future__ import annotations

import time

import pytest
from openai import InvalidWebhookSignatureError, OpenAI

from service.webhooks.signing import new_secret, sign, signature_headers, verify

# From the Standard Webhooks specification's reference libraries.
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TS = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIG = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_standard_webhooks_vector() -> None:
    got = sign(secret=VECTOR_SECRET, msg_id=VECTOR_ID, timestamp=VECTOR_TS, body=VECTOR_BODY)
    assert got == VECTOR_SIG


def test_new_secret_shape_and_uniqueness() -> None:
    a, b = new_secret(), new_secret()
    assert a.startswith("whsec_") and b.startswith("whsec_") and a != b
    assert len(a) == len("whsec_") + 44  # base64 of 32 bytes


def _client() -> OpenAI:
    return OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")


def test_openai_unwrap_accepts_ours_and_rejects_tampering() -> None:
    secret = new_secret()
    body = b'{"id":"evt_1","type":"job.succeeded","created_at":1,"data":{"id":"job-1"}}'
    headers = signature_headers(
        secrets_=[secret], msg_id="msg_1", timestamp=int(time.time()), body=body
    )
    event = _client().webhooks.unwrap(body, headers, secret=secret)
    assert event.type == "job.succeeded"  # type: ignore[comparison-overlap]
    with pytest.raises(InvalidWebhookSignatureError):
        _client().webhooks.unwrap(body.replace(b"succeeded", b"failed"), headers, secret=secret)
    with pytest.raises(InvalidWebhookSignatureError):
        _client().webhooks.unwrap(body, headers, secret=new_secret())


def test_rotation_header_carries_both_signatures() -> None:
    old, new = new_secret(), new_secret()
    body = b'{"x":1}'
    now = int(time.time())
    headers = signature_headers(secrets_=[new, old], msg_id="msg_2", timestamp=now, body=body)
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        assert verify(secret=secret, headers=headers, body=body, now=now)
        _client().webhooks.verify_signature(body, headers, secret=secret)
    assert not verify(secret=new_secret(), headers=headers, body=body, now=now)


def test_stale_timestamp_is_refused() -> None:
    secret = new_secret()
    body = b"{}"
    headers = signature_headers(secrets_=[secret], msg_id="m", timestamp=1000, body=body)
    assert verify(secret=secret, headers=headers, body=body, now=1000)
    assert not verify(secret=secret, headers=headers, body=body, now=1000 + 301)
