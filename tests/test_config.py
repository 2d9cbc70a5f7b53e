import re
from pathlib import Path

import pytest

from attachstore.config import duration_seconds, load, parse_duration
from attachstore.errors import ConfigError


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "attachstore.toml"
    path.write_text(text)
    return str(path)


def test_defaults_need_no_file() -> None:
    config = load(env={"HOME": "/home/u"})
    assert config.data_dir == "/home/u/.local/share/attachstore"
    assert config.listen == "127.0.0.1:8731"
    assert config.hash == "sha256"
    assert config.limits.max_image_bytes == 3_670_016
    assert (config.limits.max_side, config.limits.max_pixels) == (2000, 4_000_000)
    assert (config.limits.max_frames, config.limits.max_animation_pixels) == (64, 50_000_000)
    assert (config.limits.max_batch_images, config.limits.max_batch_bytes) == (16, 33_554_432)
    assert config.gc.grace_seconds == 86400


def test_xdg_data_home() -> None:
    assert load(env={"XDG_DATA_HOME": "/x"}).data_dir == "/x/attachstore"


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'data_dir = "/from/file"\nhash = "blake3"\nlisten = "127.0.0.1:1"\n[limits]\nmax_side = 100\n'
        '[routes."gpt-4o"]\ninput_modalities = ["text", "image"]\nprovider = "openai-chat"\n',
    )
    config = load(path, env={"ATTACHSTORE_DATA_DIR": "/from/env", "ATTACHSTORE_LISTEN": "127.0.0.1:2"})
    assert (config.data_dir, config.listen, config.hash, config.limits.max_side) == (
        "/from/env",
        "127.0.0.1:2",
        "blake3",
        100,
    )
    assert config.routes["gpt-4o"].input_modalities == ["text", "image"]
    flagged = load(path, env={"ATTACHSTORE_DATA_DIR": "/from/env"}, overrides={"data_dir": "/from/flag"})
    assert flagged.data_dir == "/from/flag"


def test_config_file_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "[limits]\nmax_frames = 3\n")
    assert load(env={"ATTACHSTORE_CONFIG": path}).limits.max_frames == 3


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("[limits]\nmax_sidee = 3\n", "limits.max_sidee"),
        ("bogus = 1\n", "bogus"),
        ('[limits]\nmax_side = "big"\n', "limits.max_side"),
        ("[limits]\nmax_side = 0\n", "limits.max_side"),
        ('hash = "md5"\n', "hash"),
        ('listen = "nowhere"\n', "listen"),
        ('[gc]\ngrace = "soon"\n', "gc.grace"),
        ('[routes."m"]\ninput_modalities = ["video"]\n', 'routes."m": bad value for input_modalities[0]'),
        (
            '[routes."gpt-4o".placeholders]\ntext_onyl = "x"\n',
            'routes."gpt-4o": unknown key placeholders.text_onyl',
        ),
        ("[admission]\ndecode_workers = -1\n", "admission.decode_workers"),
        ('[http]\nwrite_timeout = "0s"\n', "http.write_timeout"),
        ("[http]\nmax_sending_bytes = 0\n", "http.max_sending_bytes"),
    ],
)
def test_bad_key_or_value_names_the_key(tmp_path: Path, text: str, names: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(names)):
        load(write(tmp_path, text), env={})


def test_not_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(write(tmp_path, "this is = = not toml"), env={})


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(str(tmp_path / "nope.toml"), env={})


def test_durations() -> None:
    assert duration_seconds("24h") == 86400
    assert duration_seconds("1h30m") == 5400
    assert duration_seconds("250ms") == 0.25
    assert duration_seconds("7d") == 7 * 86400


def test_parse_duration_takes_only_durations() -> None:
    assert parse_duration("30d") == 30 * 86400
    assert parse_duration("1d12h") == 129600
    for text in ("", "30", "d", "30 d", "-1d", "forever"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_duration(text)


def test_mcp_sessions_live_thirty_days_idle_unless_configured(tmp_path: Path) -> None:
    assert load(env={}).mcp.session_ttl_seconds == 30 * 86400
    assert load(write(tmp_path, '[mcp]\nsession_ttl = "12h"\n'), env={}).mcp.session_ttl_seconds == 43200
    assert load(write(tmp_path, '[mcp]\nsession_ttl = "0s"\n'), env={}).mcp.session_ttl_seconds is None
    with pytest.raises(ConfigError, match=r"mcp\.session_ttl"):
        load(write(tmp_path, '[mcp]\nsession_ttl = "3651d"\n'), env={})
    with pytest.raises(ConfigError, match=r"mcp\.session_ttl"):
        load(write(tmp_path, '[mcp]\nsession_ttl = "a month"\n'), env={})
