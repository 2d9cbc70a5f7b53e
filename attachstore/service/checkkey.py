"""Where the key of the keyed check comes from (docs/security.md, "The keyed check of reads"). Never the data
dir: a key kept beside the objects and the index would not stop anyone who can write them from making checks
that fit."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from ..config import Config
from ..errors import ConfigError
from ..refs import KEY_BYTES, Checker

CREDENTIAL = "check-key"  # the name of the systemd credential (LoadCredential=check-key:/path)
_HEX = re.compile(rf"[0-9a-f]{{{2 * KEY_BYTES}}}")


def default_key_file(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "attachstore" / CREDENTIAL


def checker(config: Config, env: Mapping[str, str] | None = None) -> Checker:
    env = os.environ if env is None else env
    if config.integrity.check_key is not None:
        return Checker(bytes.fromhex(config.integrity.check_key))
    if config.integrity.check_key_file:
        return Checker(
            _read(_outside(config, Path(config.integrity.check_key_file)), "integrity.check_key_file")
        )
    credentials = env.get("CREDENTIALS_DIRECTORY")
    if credentials and _credential(Path(credentials)).exists():
        return Checker(_read(Path(credentials) / CREDENTIAL, f"the systemd credential {CREDENTIAL}"))
    path = _outside(config, default_key_file(env))
    return Checker(_read(path, "the check key") if path.exists() else _generate(path))


def _credential(directory: Path) -> Path:
    path = directory / CREDENTIAL
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as e:
        raise ConfigError(
            f"integrity: cannot read $CREDENTIALS_DIRECTORY ({directory}): {e.strerror}. It must be readable "
            f"by the user attachstore runs as (systemd's LoadCredential= makes it so), or unset"
        ) from None
    return path


def _outside(config: Config, path: Path) -> Path:
    data = config.data_path.resolve()
    where = path.resolve()
    if where == data or data in where.parents:
        raise ConfigError(
            f"integrity: the check key {path} is inside the data dir {config.data_dir}, where a key protects "
            "nothing: give it as [integrity] check_key_file, $ATTACHSTORE_CHECK_KEY or the systemd "
            f"credential {CREDENTIAL} (docs/security.md), kept outside the data dir"
        )
    return path


def _read(path: Path, what: str) -> bytes:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"integrity: cannot read {what} ({path}): {e}") from None
    if not _HEX.fullmatch(text):
        raise ConfigError(f"integrity: {what} ({path}) is not {2 * KEY_BYTES} lowercase hex digits")
    return bytes.fromhex(text)


def _generate(path: Path) -> bytes:
    """Written whole and linked into place, so that workers starting together end up with one key: the first
    link wins, the others read it."""
    key = os.urandom(KEY_BYTES)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        staging = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, key.hex().encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(staging, path)
        except FileExistsError:
            return _read(path, "the check key")
        finally:
            os.unlink(staging)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError as e:
        raise ConfigError(
            f"integrity: cannot make the check key {path}: {e.strerror}; set [integrity] check_key_file or "
            "$ATTACHSTORE_CHECK_KEY"
        ) from None
    return key
