"""Signatures by the Standard Webhooks spec, checked against its published example."""

from __future__ import annotations

import base64
import datetime as dt
import time

from shared.webhooks.signing import new_secret, secret_problem, signed_headers
from tests.webhook_receiver import signature_valid

# The spec's example (standard-webhooks, libraries' shared test vector).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = 1614265330
SPEC_BODY = '{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_the_signature_is_the_specs_example() -> None:
    at = dt.datetime.fromtimestamp(SPEC_TIMESTAMP, dt.UTC)
    headers = signed_headers(secret=SPEC_SECRET, msg_id=SPEC_ID, body=SPEC_BODY, at=at)
    assert headers["webhook-id"] == SPEC_ID
    assert headers["webhook-timestamp"] == str(SPEC_TIMESTAMP)
    assert headers["webhook-signature"] == SPEC_SIGNATURE


def test_a_receiver_checking_by_the_spec_accepts_ours_and_nothing_else() -> None:
    secret = new_secret()
    body = '{"type":"memory.added","timestamp":"2026-11-27T00:00:00Z","data":{}}'
    headers = signed_headers(secret=secret, msg_id="evt_1", body=body, at=dt.datetime.now(dt.UTC))
    assert signature_valid(secret, headers, body.encode())
    assert not signature_valid(secret, headers, body.replace("added", "ended").encode())
    assert not signature_valid(new_secret(), headers, body.encode())
    stale = signed_headers(
        secret=secret, msg_id="evt_1", body=body,
        at=dt.datetime.fromtimestamp(time.time() - 600, dt.UTC),
    )  # fmt: skip
    assert not signature_valid(secret, stale, body.encode())


def test_secrets_are_whsec_base64_of_enough_bytes() -> None:
    made = new_secret()
    assert made.startswith("whsec_") and len(base64.b64decode(made[6:])) == 32
    assert secret_problem(made) is None
    assert secret_problem(SPEC_SECRET) is None
    assert "whsec_" in (secret_problem("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") or "")
    assert "base64" in (secret_problem("whsec_not base64!") or "")
    assert "bytes" in (secret_problem("whsec_" + base64.b64encode(b"short").decode()) or "")
