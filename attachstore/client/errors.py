"""The client's errors: the daemon's error envelope (docs/errors.md) as an exception, and no answer at all."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from multidict import CIMultiDict, CIMultiDictProxy

from ..errors import AttachstoreError
from .models import ErrorAnswer

_error_decoder = msgspec.json.Decoder(ErrorAnswer)


class AttachstoreClientError(AttachstoreError):
    """An error answer of the daemon, or no usable answer. Branch on `code`: the daemon's stable code, or
    `HTTP_<status>` for an error answer that is not attachstore's envelope (a proxy's 502 page, say),
    `BAD_RESPONSE` for a success answer the client cannot use, and the codes of `ConnectionFailed`.

    `status` is the HTTP status (0 when there was no answer), `request_id` the daemon's X-Request-Id (the key
    to its log line), `response_headers` the answer's headers, case-insensitive (`Allow`, `Retry-After`,
    `WWW-Authenticate`)."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int,
        index: int | None = None,
        hint: str | None = None,
        request_id: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, code=code, index=index, hint=hint)
        self.status = status
        self.request_id = request_id
        self.response_headers = CIMultiDictProxy(CIMultiDict(headers or {}))

    def __str__(self) -> str:
        where = f" (image {self.index})" if self.index is not None else ""
        return f"{self.code}{where}: {self.message}"


class ConnectionFailed(AttachstoreClientError):
    """No answer: the daemon could not be reached, or the connection broke before the answer was complete.
    The request may or may not have been carried out."""

    def __init__(self, message: str, *, code: str = "CONNECTION_FAILED") -> None:
        super().__init__(message, code=code, status=0)


class TimedOut(ConnectionFailed):
    """No complete answer within the client's timeout."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="TIMEOUT")


def error_of(
    status: int, reason: str | None, headers: Mapping[str, str], body: bytes
) -> AttachstoreClientError:
    """The exception for an error answer: from the envelope, else `HTTP_<status>` with the body's start."""
    request_id = headers.get("X-Request-Id")
    try:
        e = _error_decoder.decode(body).error
    except msgspec.DecodeError:
        text = body[:200].decode("utf-8", "replace").strip()
        message = f"HTTP {status} {reason or ''}".rstrip() + (f": {text}" if text else "")
        return AttachstoreClientError(
            message, code=f"HTTP_{status}", status=status, request_id=request_id, headers=headers
        )
    return AttachstoreClientError(
        e.message,
        code=e.code,
        status=status,
        index=e.index,
        hint=e.hint,
        request_id=request_id,
        headers=headers,
    )


def bad_response(status: int, headers: Mapping[str, str], what: str) -> AttachstoreClientError:
    return AttachstoreClientError(
        f"unusable answer (HTTP {status}): {what}",
        code="BAD_RESPONSE",
        status=status,
        request_id=headers.get("X-Request-Id"),
        headers=headers,
    )
