"""Standard Webhooks signatures: webhook-id, webhook-timestamp, webhook-signature
("v1,<base64 HMAC-SHA256 of '{id}.{timestamp}.{body}'>" keyed by the whsec_ secret's bytes).
The standardwebhooks package signs; this module chooses the headers and makes secrets."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import secrets

from standardwebhooks import Webhook

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_problem(secret: str) -> str | None:
    """Why `secret` cannot sign, or None."""
    if not secret.startswith(SECRET_PREFIX):
        return "a secret starts with whsec_ (then base64 of 24-64 random bytes)"
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        return "the part after whsec_ is not base64"
    if not 24 <= len(key) <= 64:
        return f"the secret is {len(key)} bytes; use 24-64 random bytes"
    return None


def signed_headers(*, secret: str, msg_id: str, body: str, at: dt.datetime) -> dict[str, str]:
    """The three headers of one attempt (the timestamp is the attempt's, the id the event's)."""
    signature = Webhook(secret).sign(msg_id=msg_id, timestamp=at, data=body)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
        "user-agent": "tiermem-webhooks/1",
    }
