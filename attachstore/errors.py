"""Errors are data: a stable code, an HTTP status, a one-line message, and where it helps a hint."""

from __future__ import annotations


class AttachstoreError(Exception):
    """Base of every error a client or operator can see. `code` is stable API."""

    code = "INTERNAL"
    status = 500
    headers: dict[str, str] = {}  # noqa: RUF012 - read-only, replaced (never mutated) by subclasses
    default_hint: str | None = None  # the hint when the raiser gives none

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        index: int | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.index = index
        self.hint = hint if hint is not None else self.default_hint

    def at(self, index: int) -> AttachstoreError:
        self.index = index
        return self


class InvalidRequest(AttachstoreError):
    code = "INVALID_REQUEST"
    status = 400


class Unauthorized(AttachstoreError):
    code = "UNAUTHORIZED"
    status = 401
    headers = {"WWW-Authenticate": 'Bearer realm="attachstore"'}  # noqa: RUF012


class RequestTimeout(AttachstoreError):
    code = "REQUEST_TIMEOUT"
    status = 408


class ServerBusy(AttachstoreError):
    code = "SERVER_BUSY"
    status = 503
    headers = {"Retry-After": "1"}  # noqa: RUF012


class InvalidRef(AttachstoreError):
    code = "INVALID_ATTACHMENT_REF"
    status = 400


class NotFound(AttachstoreError):
    code = "ATTACHMENT_NOT_FOUND"
    status = 404


class PayloadTooLarge(AttachstoreError):
    code = "PAYLOAD_TOO_LARGE"
    status = 413


class UnsupportedMediaType(AttachstoreError):
    code = "UNSUPPORTED_MEDIA_TYPE"
    status = 415


class Rejected(AttachstoreError):
    status = 422

    def __init__(self, code: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, code=code, hint=hint)
        if code == "INVALID_IMAGE_BASE64":
            self.status = 400


# Both are healed by the bytes themselves: an admission verifies the stored copy and rewrites it.
_HEAL = "admitting the same image again heals it (the same bytes give the same ref)"


class Corrupt(AttachstoreError):
    code = "ATTACHMENT_CORRUPT"
    status = 500
    default_hint = f"{_HEAL}; `attachstore audit --repair` quarantines every damaged object of the store"


class Missing(AttachstoreError):
    code = "ATTACHMENT_MISSING"
    status = 500
    default_hint = _HEAL


class StorageFull(AttachstoreError):
    code = "STORAGE_FULL"
    status = 507


class StorageUnavailable(AttachstoreError):
    code = "STORAGE_UNAVAILABLE"
    status = 503


class SessionNotFound(AttachstoreError):
    code = "SESSION_NOT_FOUND"
    status = 404


class SessionConflict(AttachstoreError):
    code = "SESSION_CONFLICT"
    status = 409


class RouteSwitchRejected(AttachstoreError):
    code = "ROUTE_SWITCH_REJECTED"
    status = 409


class UnsupportedContent(AttachstoreError):
    code = "UNSUPPORTED_CONTENT"
    status = 422


class ConfigError(Exception): ...


class IndexUnusable(Exception):
    """The index cannot be used as it is (a schema newer than this version knows, say). Raised by the index;
    here, beside ConfigError, so that the command line catches it without importing the index."""
