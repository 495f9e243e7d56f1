"""Question tokens: sealed (unreadable) and signed (unforgeable), in the one format this server writes;
a token of any other (an earlier build's, never released) is refused as not this server's."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os

import pytest
from itsdangerous import URLSafeTimedSerializer

from webapp.errors import ApiError
from webapp.tokens import sign_question, verify_question

KEY = "a token test key"
PAYLOAD = {"study": "s1", "q": [3, 1, 4], "catch": True, "expect": 1}


def previous_format_token(secret_key: str, payload: dict) -> str:
    """A token as an earlier, unreleased build made it: HMAC-SHA256 counter-mode keystream, URL-safe JSON
    signer under the salt "proxima.question.v2"."""
    key = hmac.new(secret_key.encode(), b"proxima.question.encryption", hashlib.sha256).digest()
    nonce = os.urandom(16)
    plain = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    stream = b"".join(hmac.new(key, nonce + block.to_bytes(8, "big"), hashlib.sha256).digest()
                      for block in range((len(plain) + 31) // 32))
    body = bytes(p ^ s for p, s in zip(plain, stream, strict=False))
    signer = URLSafeTimedSerializer(secret_key, salt="proxima.question.v2")
    return signer.dumps(base64.urlsafe_b64encode(nonce + body).decode())


def error_of(token: object, key: str = KEY, max_age: int = 60) -> tuple[int, str]:
    with pytest.raises(ApiError) as info:
        verify_question(key, token, max_age)
    return info.value.status, info.value.code


def test_a_token_round_trips_and_hides_its_payload():
    token = sign_question(KEY, PAYLOAD)
    assert verify_question(KEY, token, 60) == PAYLOAD
    assert "catch" not in token and "expect" not in token
    assert sign_question(KEY, PAYLOAD) != token  # a fresh nonce each time


def test_a_token_of_an_earlier_format_is_refused_as_not_this_servers():
    old = previous_format_token(KEY, PAYLOAD)
    assert error_of(old) == (400, "invalid_token")
    assert error_of(old, key="another key") == (400, "invalid_token")


def test_an_expired_token_is_410(monkeypatch):
    import time as time_module
    token = sign_question(KEY, PAYLOAD)
    later = time_module.time() + 120
    monkeypatch.setattr(time_module, "time", lambda: later)
    assert error_of(token, max_age=60) == (410, "expired_token")


def test_tampered_malformed_and_foreign_tokens_are_400():
    token = sign_question(KEY, PAYLOAD)
    value, _, rest = token.partition(".")
    flipped = ("B" if value[0] != "B" else "C") + value[1:]
    for bad in (flipped + "." + rest, token + "x", "", "no dots", "a.b.c", 12, None, "x" * 5000):
        assert error_of(bad)[0] == 400, bad
    assert error_of(token, key="another key") == (400, "invalid_token")


def test_every_token_has_the_same_length_whatever_its_question_says():
    short = {"s": "s1", "q": {"qid": "1", "kind": "triplet"}, "r": "r", "t": 1.0}
    long = {"s": "s" * 64, "r": "r" * 128, "t": 1712345678.123456,
            "q": {"qid": "v" * 16, "kind": "triplet", "head": 99999, "candidates": [99998, 99997],
                  "algorithm": "a-long-algorithm-label", "fallback": False, "catch": True, "closer": 99998,
                  "repeat_of": 99998, "probe": 99997}}
    lengths = {len(sign_question(KEY, payload)) for payload in (short, long, PAYLOAD)}
    assert len(lengths) == 1
    assert verify_question(KEY, sign_question(KEY, long), 60) == long


def test_a_token_sealed_without_padding_is_refused():
    import webapp.tokens as tokens
    unpadded = tokens.pad
    try:
        tokens.pad = lambda plain: plain
        old = sign_question(KEY, PAYLOAD)
    finally:
        tokens.pad = unpadded
    assert len(old) < len(sign_question(KEY, PAYLOAD))
    assert error_of(old) == (400, "invalid_token")
