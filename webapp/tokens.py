"""Server-sealed question tokens: (study, question, rater, issue time), encrypted and signed, with expiry.

The browser can neither read nor change a token: the question inside names the algorithm that
asked it, whether it is an attention check and what it expects, none of which a rater may see.
Encryption is HMAC-SHA256 in counter mode under a random nonce (the standard library only),
then itsdangerous signs the ciphertext with its time stamp (encrypt-then-MAC).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from functools import lru_cache

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from .errors import ApiError

SALT = "proxima.question.v2"
NONCE_BYTES = 16


@lru_cache(maxsize=8)
def _serializer(secret_key: str) -> URLSafeTimedSerializer:
    # built once per key: every question and answer request seals or opens a token
    return URLSafeTimedSerializer(secret_key, salt=SALT)


@lru_cache(maxsize=8)
def _cipher_key(secret_key: str) -> bytes:
    # a key of its own for encryption, so the signing key is never used for two purposes
    return hmac.new(secret_key.encode(), b"proxima.question.encryption", hashlib.sha256).digest()


def _keystream_xor(key: bytes, nonce: bytes, data: bytes) -> bytes:
    out = bytearray()
    for block in range((len(data) + 31) // 32):
        out += hmac.new(key, nonce + block.to_bytes(8, "big"), hashlib.sha256).digest()
    # one XOR of two big integers: a byte-by-byte generator took a tenth of a question request's CPU
    n = len(data)
    return (int.from_bytes(data, "big") ^ int.from_bytes(out[:n], "big")).to_bytes(n, "big")


def sign_question(secret_key: str, payload: dict) -> str:
    """An opaque token carrying ``payload``: unreadable and unforgeable without ``secret_key``."""
    nonce = os.urandom(NONCE_BYTES)
    plain = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    sealed = base64.urlsafe_b64encode(nonce + _keystream_xor(_cipher_key(secret_key), nonce, plain)).decode()
    return _serializer(secret_key).dumps(sealed)


def verify_question(secret_key: str, token, max_age: int) -> dict:
    """The token's payload; ApiError 400/410 when it is forged, malformed or expired."""
    if not isinstance(token, str) or not token or len(token) > 4096:
        raise ApiError(400, "invalid_token", "the answer must carry the question's token as a string")
    try:
        sealed = _serializer(secret_key).loads(token, max_age=max_age)
    except SignatureExpired:
        raise ApiError(410, "expired_token",
                       "this question expired before it was answered; fetch a new question") from None
    except BadSignature:
        raise ApiError(400, "invalid_token", "the question token is not one this server issued") from None
    try:
        raw = base64.urlsafe_b64decode(sealed.encode())
        nonce, body = raw[:NONCE_BYTES], raw[NONCE_BYTES:]
        payload = json.loads(_keystream_xor(_cipher_key(secret_key), nonce, body))
    except (ValueError, TypeError, AttributeError):
        # signed by this server's key yet not a sealed question (e.g. an older token format)
        raise ApiError(400, "invalid_token", "the question token is not one this server issued") from None
    if not isinstance(payload, dict):
        raise ApiError(400, "invalid_token", "the question token is not one this server issued")
    return payload
