"""Configuration: one TOML file, then environment variables, then flags (SPEC section 12)."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from .cores import cores
from .errors import ConfigError

Positive = Annotated[int, Meta(gt=0)]
Duration = Annotated[str, Meta(pattern=r"^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$")]
HashName = Literal["sha256", "blake3"]
Provider = Literal["openai-chat", "openai-responses", "anthropic", "gemini"]

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_seconds(text: str) -> float:
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))


def parse_duration(text: str) -> float:
    """Seconds of a duration written as the configuration writes them (30d, 24h, 1h30m); ValueError for
    anything else."""
    if not re.fullmatch(r"([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+", text):
        raise ValueError(f"not a duration: {text!r}")
    return duration_seconds(text)


class _Section(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    pass


class _Timed(_Section, frozen=True, dict=True):
    """Each duration's seconds are parsed once, then kept (a `cached_property` needs the `__dict__`)."""


class Limits(_Section, frozen=True):
    max_image_bytes: Positive = 3_670_016
    max_side: Positive = 2000
    max_pixels: Positive = 4_000_000
    max_frames: Positive = 64
    max_animation_pixels: Positive = 50_000_000
    max_batch_images: Annotated[int, Meta(gt=0, le=1024)] = 16  # at most api.wire.MAX_IMAGES
    max_batch_bytes: Positive = 33_554_432


class Admission(_Timed, frozen=True):
    decode_workers: Annotated[int, Meta(ge=0)] = 0  # 0: one per core
    decode_timeout: Duration = "10s"
    # The decoder time all images of one admission may take together; each also within decode_timeout.
    request_decode_timeout: Duration = "60s"
    # "reject": refuse bytes after the image's end marker (a polyglot's payload); "allow" keeps them.
    trailing_data: Literal["allow", "reject"] = "allow"
    # Admissions in progress at once (the rest get 503 SERVER_BUSY with Retry-After); reads are not counted.
    # An admission takes its place before its body is read.
    max_concurrent: Positive = 64
    # Of those places, how many one tenant may hold at once (and the same share of max_buffered_bytes), so
    # that one client cannot take them all from the others. 0: three quarters of max_concurrent when more
    # than one tenant is configured, else all of them.
    max_concurrent_per_tenant: Annotated[int, Meta(ge=0)] = 0
    # Bytes of body the admissions in progress hold at once (past it, 503 SERVER_BUSY; one admission alone
    # may always hold a whole body). Default: twice the admission body cap ([http] max_body_bytes).
    max_buffered_bytes: Positive | None = None
    # Per tenant and process: the derivations (previews, a render's request variants) one tenant may have
    # in progress or waiting for a decode worker at once; past it, 503 SERVER_BUSY. They wait in the
    # tenant's own turn, and read their source only once a worker is there for them.
    max_derivations_per_tenant: Positive = 32
    # "fit": an image over the side, pixel or byte limit is normalized to fit them (docs/normalization.md)
    # instead of being rejected; images within the limits are stored byte-identical. "reject" refuses it.
    oversize: Literal["reject", "fit"] = "fit"
    # What `fit` takes in at most (the source bounds): larger uploads are still rejected, with the limits'
    # codes. A decode worker's memory grows with fit_max_pixels (docs/operations.md#memory).
    fit_max_bytes: Positive = 20 * 1024 * 1024
    fit_max_pixels: Positive = 8192 * 8192
    fit_max_side: Positive = 8192
    # Remove EXIF (GPS included), XMP, IPTC and comments from every admitted image, losslessly.
    strip_metadata: bool = False

    def fit_limits(self, limits: Limits) -> Limits:
        return msgspec.structs.replace(
            limits,
            max_image_bytes=max(limits.max_image_bytes, self.fit_max_bytes),
            max_side=max(limits.max_side, self.fit_max_side),
            max_pixels=max(limits.max_pixels, self.fit_max_pixels),
            max_animation_pixels=max(limits.max_animation_pixels, self.fit_max_pixels),
        )

    def upload_limits(self, limits: Limits) -> Limits:
        return self.fit_limits(limits) if self.oversize == "fit" else limits

    def tenant_places(self, tenants: int) -> int:
        if self.max_concurrent_per_tenant:
            return min(self.max_concurrent_per_tenant, self.max_concurrent)
        return max(1, self.max_concurrent * 3 // 4) if tenants > 1 else self.max_concurrent

    def buffered_bytes(self, body_cap: int) -> int:
        return self.max_buffered_bytes if self.max_buffered_bytes is not None else 2 * body_cap

    @cached_property
    def decode_timeout_seconds(self) -> float:
        return duration_seconds(self.decode_timeout)

    @cached_property
    def request_decode_timeout_seconds(self) -> float:
        return duration_seconds(self.request_decode_timeout)

    @property
    def workers(self) -> int:
        return self.decode_workers or cores()


class Http(_Timed, frozen=True):
    max_body_bytes: Positive | None = None  # admissions; default: sized from the batch limits
    read_timeout: Duration = "30s"  # to receive a whole request body
    keepalive_timeout: Duration = "15s"  # an idle connection is closed after this
    max_header_bytes: Positive = 8190  # a request line or one header field
    # An answer whose client takes none of its waiting bytes for this long: the connection is aborted.
    write_timeout: Duration = "30s"
    # Per tenant and process: the bytes that answers (reads, renders) on their way to that tenant's clients
    # may hold at once; past it, 503 SERVER_BUSY (one answer alone may be larger).
    max_sending_bytes: Positive = 64 * 1024 * 1024
    # Plain GETs of an object's bytes answered without aiohttp's per-request machinery (api/lane.py).
    read_lane: bool = True
    # The lane hashes and sends an object in the page cache where it lies, under a read lease, instead of
    # a copy, and keeps the mapping for the next read of the same file (storage/mapped.py).
    mapped_reads: bool = True

    @cached_property
    def read_timeout_seconds(self) -> float:
        return duration_seconds(self.read_timeout)

    @cached_property
    def keepalive_timeout_seconds(self) -> float:
        return duration_seconds(self.keepalive_timeout)

    @cached_property
    def write_timeout_seconds(self) -> float:
        return duration_seconds(self.write_timeout)

    def body_cap(self, limits: Limits) -> int:
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        # base64 grows 4/3; leave room for the JSON or multipart framing around the images.
        return limits.max_batch_bytes * 4 // 3 + 1_048_576


class Gc(_Timed, frozen=True):
    grace: Duration = "24h"

    @cached_property
    def grace_seconds(self) -> float:
        return duration_seconds(self.grace)


class Mcp(_Timed, frozen=True):
    # The idle lifetime of the session `attachstore mcp` and `mcp wrap` make for each process
    # (docs/mcp.md, "Sessions"): renewed by every image it admits, released by gc once it has run out.
    # "0s": no lifetime, kept until deleted.
    session_ttl: Duration = "30d"

    @cached_property
    def session_ttl_seconds(self) -> int | None:
        return round(duration_seconds(self.session_ttl)) or None


class Placeholders(_Section, frozen=True):
    text_only: str = "[image omitted: this model does not accept images]"
    over_budget: str = (
        "[image omitted to keep the request within its image limits; to see it again, "
        "ask the user to attach it again]"
    )
    over_budget_path: str = (
        "[image omitted to keep the request within its image limits; to see it again, "
        "read the file again: {path}]"
    )
    unavailable: str = (
        "[image unavailable: its stored copy is missing or damaged; ask the user to attach it again]"
    )
    unavailable_path: str = (
        "[image unavailable: its stored copy is missing or damaged; read the file again: {path}]"
    )


class ManyImages(_Section, frozen=True):
    more_than: Positive
    max_side: Positive


class Route(_Section, frozen=True):
    input_modalities: list[Literal["text", "image"]] = msgspec.field(default_factory=lambda: ["text"])
    provider: Provider | None = None  # render's default for this route
    max_request_image_bytes: Positive | None = None  # render's base64 budget (default 20 MiB)
    max_request_images: Positive | None = None  # render's image count budget (default: no limit)
    # Per image: a stored image over one of these is sent as a derived, cached variant that fits them.
    max_request_side: Positive | None = None
    max_request_pixels: Positive | None = None
    max_request_bytes: Positive | None = None
    many_images: ManyImages | None = None
    placeholders: Placeholders = Placeholders()


class Storage(_Section, frozen=True):
    backend: Literal["local", "s3"] = "local"
    endpoint: str | None = None  # e.g. "http://127.0.0.1:7480"; none: AWS S3 itself
    bucket: str = ""
    prefix: str = ""  # keys start with it, e.g. "attachstore/"
    region: str | None = None
    # Credentials; none: $ATTACHSTORE_S3_ACCESS_KEY_ID / $ATTACHSTORE_S3_SECRET_ACCESS_KEY, else botocore's
    # chain (AWS_ACCESS_KEY_ID, a profile, an instance role).
    access_key_id: str | None = None
    secret_access_key: str | None = None
    max_connections: Positive = 64
    # The node-local read cache of the s3 backend: a directory (one per daemon process) and its bound.
    cache_dir: str | None = None
    cache_max_bytes: Positive = 1 << 30


class IndexConfig(_Section, frozen=True):
    backend: Literal["sqlite", "postgresql"] = "sqlite"
    dsn: str | None = None  # postgresql://user@host:5432/db; $ATTACHSTORE_INDEX_DSN
    max_connections: Annotated[int, Meta(ge=2)] = 10  # connection pool of each daemon process


class Integrity(_Section, frozen=True):
    """The key of the keyed check must not live with the objects or the index (docs/security.md, "The keyed
    check of reads")."""

    check_key: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}$")] | None = None  # 64 hex; $ATTACHSTORE_CHECK_KEY
    check_key_file: str | None = None  # a file holding the 64 hex


class Tenant(_Section, frozen=True):
    name: Annotated[str, Meta(pattern=r"^[A-Za-z0-9._-]{1,64}$")]
    token_sha256: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}$")]


Listen = Annotated[str, Meta(pattern=r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$")]


class Config(_Section, frozen=True):
    data_dir: str = ""  # empty: the XDG default, filled in by load()
    listen: Listen = "127.0.0.1:8731"
    unix_socket: str | None = None
    hash: HashName = "sha256"
    limits: Limits = Limits()
    admission: Admission = Admission()
    http: Http = Http()
    gc: Gc = Gc()
    mcp: Mcp = Mcp()
    storage: Storage = Storage()
    index: IndexConfig = IndexConfig()
    integrity: Integrity = Integrity()
    routes: dict[str, Route] = msgspec.field(default_factory=dict)
    tenants: list[Tenant] = msgspec.field(default_factory=list)

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)

    @property
    def is_open(self) -> bool:
        return not self.tenants

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


ENV_KEYS = {
    "ATTACHSTORE_DATA_DIR": "data_dir",
    "ATTACHSTORE_LISTEN": "listen",
    "ATTACHSTORE_UNIX_SOCKET": "unix_socket",
    "ATTACHSTORE_HASH": "hash",
}


# Secrets and addresses that operators keep out of files.
SECTION_ENV_KEYS = {
    "ATTACHSTORE_INDEX_DSN": ("index", "dsn"),
    "ATTACHSTORE_S3_ACCESS_KEY_ID": ("storage", "access_key_id"),
    "ATTACHSTORE_S3_SECRET_ACCESS_KEY": ("storage", "secret_access_key"),
    "ATTACHSTORE_CHECK_KEY": ("integrity", "check_key"),
}


def default_data_dir(env: Mapping[str, str]) -> str:
    base = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".local" / "share")
    return str(Path(base) / "attachstore")


def load(
    path: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """The file (`path`, else $ATTACHSTORE_CONFIG, else none), then the environment, then `overrides`."""
    env = os.environ if env is None else env
    path = path or env.get("ATTACHSTORE_CONFIG") or None
    source = path or "configuration"  # what an error message starts with
    raw = _read_file(path) if path else {}
    _apply_env(raw, env, source)
    raw.update((key, value) for key, value in (overrides or {}).items() if value is not None)
    config = _convert(raw, source)
    if not config.data_dir:
        config = msgspec.structs.replace(config, data_dir=default_data_dir(env))
    _check(config, source)
    return config


def _read_file(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the configuration file: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None


def _apply_env(raw: dict[str, Any], env: Mapping[str, str], source: str) -> None:
    for var, key in ENV_KEYS.items():
        if env.get(var):
            raw[key] = env[var]
    for var, (section, key) in SECTION_ENV_KEYS.items():
        if env.get(var):
            if not isinstance(raw.get(section, {}), dict):
                raise ConfigError(f"{source}: bad value for {section!r}: Expected `object`")
            raw[section] = {**raw.get(section, {}), key: env[var]}


def _convert(raw: dict[str, Any], source: str) -> Config:
    routes = raw.get("routes")
    for name, route in routes.items() if isinstance(routes, dict) else ():
        try:  # one at a time, so that the message names the route (msgspec cannot name a dict key)
            msgspec.convert(route, Route)
        except msgspec.ValidationError as e:
            key = _name_the_key(str(e)).replace("'", "")
            raise ConfigError(f'{source}: routes."{name}": {key}') from None
    try:
        return msgspec.convert(raw, Config)
    except msgspec.ValidationError as e:
        raise ConfigError(f"{source}: {_name_the_key(str(e))}") from None


def _check(config: Config, source: str) -> None:
    for key, seconds in (
        ("admission.decode_timeout", config.admission.decode_timeout_seconds),
        ("admission.request_decode_timeout", config.admission.request_decode_timeout_seconds),
        ("http.read_timeout", config.http.read_timeout_seconds),
        ("http.keepalive_timeout", config.http.keepalive_timeout_seconds),
        ("http.write_timeout", config.http.write_timeout_seconds),
    ):
        if seconds <= 0:
            raise ConfigError(f"{source}: bad value for {key!r}: must be longer than 0")
    if not 0 <= (config.mcp.session_ttl_seconds or 0) <= 10 * 365 * 86400:
        raise ConfigError(f"{source}: bad value for 'mcp.session_ttl': at most 3650d (0s: none)")
    if config.storage.backend == "s3" and not config.storage.bucket:
        raise ConfigError(f"{source}: storage.bucket: the s3 backend needs a bucket")
    if config.index.backend == "postgresql" and not config.index.dsn:
        raise ConfigError(
            f"{source}: index.dsn: the postgresql backend needs a DSN (or $ATTACHSTORE_INDEX_DSN)"
        )
    hashes = [t.token_sha256 for t in config.tenants]
    if len(set(hashes)) != len(hashes):
        # A tenant may have several tokens (to rotate them); a token names exactly one tenant.
        raise ConfigError(f"{source}: tenants: the same token_sha256 is configured twice")


def _name_the_key(message: str) -> str:
    match = re.match(r"^(.*?)(?: - at `\$(.*)`)?$", message, re.S)
    if match is None:  # pragma: no cover - the pattern matches every string
        return message
    text, where = match.group(1), (match.group(2) or "").lstrip(".")
    unknown = re.match(r"Object contains unknown field `(.+)`", text)
    if unknown:
        key = f"{where}.{unknown.group(1)}" if where else unknown.group(1)
        return f"unknown key {key!r}"
    where = re.sub(r"\[(\d+)\]", r"[\1]", where)
    return f"bad value for {where or 'the top level'!r}: {text}"
