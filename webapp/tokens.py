"""Server-sealed question tokens: (study, question, rater, issue time), encrypted and signed, with expiry.

The browser can neither read nor change a token: the question inside names the algorithm that
asked it, whether it is an attention check and what it expects, none of which a rater may see.
The payload is encrypted under a random nonce with a keystream of SHAKE-256 over (encryption key,
nonce), then itsdangerous' ``TimestampSigner`` signs the ciphertext with its time stamp
(encrypt-then-MAC): ``base64url(nonce + ciphertext).timestamp.signature``, the standard library only.
The JSON is padded with spaces to ``SEALED_BYTES`` before it is sealed, so every token has the same
length whatever question it carries (an attention check or a repeat says more than an ordinary
question); JSON ignores the trailing spaces, and a token that is not padded is not one of this server's.
Every question request seals a token and every answer opens one, so both are one hash call each
besides the signature.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Sequence
from functools import lru_cache

from itsdangerous import BadSignature, SignatureExpired, TimestampSigner

from .errors import ApiError

SALT = "proxima.question.v3"
NONCE_BYTES = 16
#: The size every payload is padded to before sealing (a longer one, which no question of valid study
#: and rater ids reaches, to a multiple of it), so a token's length says nothing about its question.
SEALED_BYTES = 1024
INVALID = "the question token is not one this server issued"


@lru_cache(maxsize=8)
def _signer(secret_key: str) -> TimestampSigner:
    # built once per key: every question and answer request seals or opens a token
    return TimestampSigner(secret_key, salt=SALT)


@lru_cache(maxsize=8)
def _cipher_key(secret_key: str) -> bytes:
    # a key of its own for encryption, so the signing key is never used for two purposes
    return hmac.new(secret_key.encode(), b"proxima.question.encryption.v3", hashlib.sha256).digest()


def _xor(data: bytes, keystream: bytes) -> bytes:
    # one XOR of two big integers: a byte-by-byte generator took a tenth of a question request's CPU
    n = len(data)
    return (int.from_bytes(data, "big") ^ int.from_bytes(keystream[:n], "big")).to_bytes(n, "big")


def _keystream(key: bytes, nonce: bytes, n: int) -> bytes:
    """``n`` bytes of SHAKE-256 over the key and the nonce: a keyed XOF (no length extension), one C call."""
    return hashlib.shake_256(key + nonce).digest(n)


def sign_question(secret_key: str, payload: dict) -> str:
    """An opaque token carrying ``payload``: unreadable and unforgeable without ``secret_key``."""
    nonce = os.urandom(NONCE_BYTES)
    plain = pad(json.dumps(payload, separators=(",", ":")).encode())
    sealed = nonce + _xor(plain, _keystream(_cipher_key(secret_key), nonce, len(plain)))
    return _signer(secret_key).sign(base64.urlsafe_b64encode(sealed).rstrip(b"=")).decode()


def pad(plain: bytes) -> bytes:
    """``plain`` with trailing spaces up to ``SEALED_BYTES`` (or the next multiple of it)."""
    size = max(1, -(-len(plain) // SEALED_BYTES)) * SEALED_BYTES
    return plain.ljust(size, b" ")


def verify_question(secret_key: str, token: object, max_age: int, previous_keys: Sequence[str] = ()) -> dict:
    """The token's payload; ApiError 400/410 when it is forged, malformed or expired. A token sealed
    under one of ``previous_keys`` (the secret key was changed while raters held questions) opens too."""
    if not isinstance(token, str) or not token or len(token) > 4096:
        raise ApiError(400, "invalid_token", "the answer must carry the question's token as a string")
    try:
        return _verify_one(secret_key, token, max_age)
    except ApiError as exc:
        if exc.code != "invalid_token" or not previous_keys:
            raise
        for key in previous_keys:
            try:
                return _verify_one(key, token, max_age)
            except ApiError as again:
                if again.code != "invalid_token":
                    raise
        raise


def _verify_one(secret_key: str, token: str, max_age: int) -> dict:
    """The payload of a token signed and sealed under ``secret_key``: 410 when expired, 400 when its
    signature does not verify or it is signed by this server yet not a sealed question."""
    try:
        sealed = _signer(secret_key).unsign(token, max_age=max_age)
    except SignatureExpired:
        raise ApiError(410, "expired_token",
                       "this question expired before it was answered; fetch a new question") from None
    except BadSignature:
        raise ApiError(400, "invalid_token", INVALID) from None
    try:
        payload = json.loads(_unseal(_cipher_key(secret_key), sealed))
    except (ValueError, TypeError, AttributeError):
        raise ApiError(400, "invalid_token", INVALID) from None
    if not isinstance(payload, dict):
        raise ApiError(400, "invalid_token", INVALID)
    return payload


def _unseal(key: bytes, sealed: bytes) -> bytes:
    raw = base64.urlsafe_b64decode(sealed + b"=" * (-len(sealed) % 4))
    nonce, body = raw[:NONCE_BYTES], raw[NONCE_BYTES:]
    if len(nonce) != NONCE_BYTES:
        raise ValueError("no nonce")
    if not body or len(body) % SEALED_BYTES:
        raise ValueError("not padded: no token this server sealed")
    return _xor(body, _keystream(key, nonce, len(body)))
