"""Server-signed question tokens: (study, question, rater, items offered, issue time), with expiry."""
from __future__ import annotations

from functools import lru_cache

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from .errors import ApiError

SALT = "proxima.question.v1"


@lru_cache(maxsize=8)
def _serializer(secret_key: str) -> URLSafeTimedSerializer:
    # built once per key: every question and answer request signs or verifies a token
    return URLSafeTimedSerializer(secret_key, salt=SALT)


def sign_question(secret_key: str, payload: dict) -> str:
    return _serializer(secret_key).dumps(payload)


def verify_question(secret_key: str, token, max_age: int) -> dict:
    """The token's payload; ApiError 400/410 when it is forged, malformed or expired."""
    if not isinstance(token, str) or not token or len(token) > 4096:
        raise ApiError(400, "invalid_token", "the answer must carry the question's token as a string")
    try:
        return _serializer(secret_key).loads(token, max_age=max_age)
    except SignatureExpired:
        raise ApiError(410, "expired_token",
                       "this question expired before it was answered; fetch a new question") from None
    except BadSignature:
        raise ApiError(400, "invalid_token", "the question token is not one this server issued") from None
