"""Smoke run of the benchmark (`python -m tests.bench --quick`): every scenario runs and reports numbers.

No timing is asserted: this machine is shared and noisy, and `--quick` sizes say nothing about speed."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.bench import ceiling, convert, loadgen
from tests.bench.stats import alternate

REPO = Path(__file__).resolve().parents[1]


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _side(figures: Any, keys: tuple[str, ...] = ("rps", "p50_ms", "p99_ms")) -> None:
    assert isinstance(figures, dict), figures
    for key in keys:
        assert _number(figures[key]), (key, figures)


def _bench(tmp_path: Path, *args: str) -> tuple[str, Any]:
    """`python -m tests.bench --quick ARGS`: what it printed, and its JSON."""
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench", "--quick", *args, "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, json.loads(out.read_text())


def test_quick_bench_reports_every_scenario(tmp_path: Path) -> None:
    printed, result = _bench(tmp_path)
    assert "scenario" in printed  # the table was printed
    scenarios = result["scenarios"]
    assert set(scenarios) >= {
        "read",
        "admit",
        "render",
        "scale",
        "memory",
        "variant",
        "scaleout",
        "transcript",
        "mcp",
        "convert",
        "wrap",
        "listings",
    }

    read = scenarios["read"]
    assert [level["connections"] for level in read["levels"]] == [16, 64]
    for level in read["levels"]:
        _side(level["attachstore"])
        if level["nginx"] == "unavailable":  # never a made-up figure
            assert level["rps_ratio"] == level["p99_ratio"] == "unavailable"
        else:
            _side(level["nginx"])
            assert _number(level["rps_ratio"])
            assert _number(level["p99_ratio"])
            assert _number(level["nginx_ceiling_ratio"])
        # The verified ceiling (read + the keyed check, no HTTP) is measured in the same rounds.
        assert _number(level["ceiling"]["rps"])
        assert _number(level["ceiling_ratio"])
        # And the serving floor: the same over HTTP by the least code that does it.
        _side(level["serving_floor"])
        assert _number(level["floor_ratio"])
    assert _number(read["ceiling_sha256"]["rps"])

    for path in ("multipart", "json"):
        _side(scenarios["admit"][path]["attachstore"])
        _side(scenarios["admit"][path]["floor"])
        assert _number(scenarios["admit"][path]["ratio"])
    _side(scenarios["render"]["attachstore"])
    _side(scenarios["render"]["floor_in_process"])
    assert _number(scenarios["render"]["ratio"])

    scale = scenarios["scale"]
    small, large = (str(n) for n in scale["sizes"])
    assert (small, large) == ("1000", "2000")
    for what in ("read", "admit"):
        _side(scale[what][small])
        _side(scale[what][large])
        assert _number(scale[what]["p99_ratio"])
    for size in (small, large):
        _side(scale["gc_dry_run"][size], ("seconds", "objects_per_s"))
        _side(scale["audit"][size]["audit"], ("seconds", "mb_per_s"))
        _side(scale["audit"][size]["raw_sha256"], ("seconds", "mb_per_s"))
        assert _number(scale["audit"][size]["ratio"])
        assert scale["audit"][size]["audit"]["findings"] == 0  # the synthesized store is a valid one

    variant = scenarios["variant"]
    assert variant["variants_derived"] == variant["images"]  # derived once each, in the first render only
    assert _number(variant["first_ms"])
    assert _number(variant["cached_ms"])
    assert _number(variant["speedup"])

    scaleout = scenarios["scaleout"]
    for side in ("local", "s3", "s3_cache"):
        _side(scaleout["read"][side])
    for side in ("local", "s3"):
        _side(scaleout["admit"][side])
    for key in ("read", "read_cache", "admit"):
        assert _number(scaleout[f"{key}_ratio"])
        assert _number(scaleout[f"{key}_p99_ratio"])

    transcript = scenarios["transcript"]
    assert (transcript["images"], transcript["distinct"]) == (40, 8)
    assert 0 < transcript["bytes_after"] < transcript["bytes_before"]
    for what in ("strip", "restore"):
        _side(transcript[what], ("seconds", "peak_rss_mb"))
        assert _number(transcript[f"{what}_ratio"])
    assert _number(transcript["floor_seconds"])

    _mcp_startup(scenarios["mcp"])

    memory = scenarios["memory"]
    assert _number(memory["peak_rss_mb"])
    assert memory["peak_rss_mb"] > 0

    assert result["table"]
    assert all("ratio" in row for row in result["table"])
    assert _number(result["meta"]["seconds"])


def _mcp_startup(mcp: Any) -> None:
    for measured in (mcp, mcp["url"]):
        for side in ("attachstore", "floor_sdk"):
            _side(measured[side], ("ms", "min_ms"))
        assert _number(measured["ratio"])


def test_the_mcp_startup_runs_alone(tmp_path: Path) -> None:
    """`make bench ARGS="--only mcp"`: `attachstore mcp` against the MCP SDK's smallest server, nothing else
    started or installed."""
    _, result = _bench(tmp_path, "--only", "mcp")
    assert list(result["scenarios"]) == ["mcp"]
    _mcp_startup(result["scenarios"]["mcp"])
    rows = [r for r in result["table"] if r["metric"] == "initialize ms"]
    assert [r["scenario"].split()[1] for r in rows] == ["--config", "--url"]
    for row in rows:
        assert row["target"] == "<= 1.2x"
        assert row["pass"] in (True, False)  # a verdict, whichever it is: tests do not time things


def test_the_convert_scenario_runs_alone(tmp_path: Path) -> None:
    """`make bench ARGS="--only convert"`: each source format's admission against its bare decode and
    encode, one row a file."""
    _, result = _bench(tmp_path, "--only", "convert")
    files = result["scenarios"]["convert"]["files"]
    assert sorted(files) == sorted(convert.FILES)
    for measured in files.values():
        assert measured["stored"] in ("image/png", "image/jpeg")
        assert _number(measured["ms"])
        assert _number(measured["floor_ms"])
        assert _number(measured["ratio"])
    rows = [r for r in result["table"] if r["scenario"].startswith("convert ")]
    assert len(rows) == len(convert.FILES)


def test_the_wrap_scenario_runs_alone(tmp_path: Path) -> None:
    """`make bench ARGS="--only wrap"`: calls through `attachstore mcp wrap` against the bare server, and an
    image's added cost against its admission."""
    _, result = _bench(tmp_path, "--only", "wrap")
    wrapped = result["scenarios"]["wrap"]
    for key in ("text_calls_per_s", "bare_calls_per_s", "text_ratio", "admission_ms", "image_ratio"):
        assert _number(wrapped[key]), key
    assert [r["scenario"] for r in result["table"]] == [
        "mcp wrap vs the bare server",
        "mcp wrap: an image's added ms vs its admission",
    ]


def test_each_side_of_a_comparison_goes_first_in_turn() -> None:
    ran: list[str] = []

    def side(name: str) -> Any:
        return lambda r: ran.append(f"{name}{r}") or {"round": r}

    a, b = alternate(4, side("A"), side("B"))
    assert ran == ["A0", "B0", "B1", "A1", "A2", "B2", "B3", "A3"]
    assert [s["round"] for s in a] == [s["round"] for s in b] == [0, 1, 2, 3]  # pairs stay paired
    ran.clear()
    alternate(3, side("A"), None)
    assert ran == ["A0", "A1", "A2"]


async def test_in_a_smoke_run_every_connection_makes_a_request_however_late_it_starts() -> None:
    """--quick's load windows are 0.3 s: a load generator that a loaded runner starts after its window is
    over still makes one request on each connection, so that the window has a latency to report."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
        over = 1e-9  # seconds: the window is over before any connection starts
        late = await loadgen.run(url, 4, over, at_least_one=True)
        assert (late["requests"], late["errors"]) == (4, 0)
        assert _number(late["p50_ms"])
        assert _number(late["p99_ms"])
        # Without it (the full bench), the window decides.
        assert (await loadgen.run(url, 4, over))["requests"] == 0


def test_in_a_smoke_run_the_ceiling_reads_the_files_once_however_late_it_starts(tmp_path: Path) -> None:
    """The same for the read scenario's ceiling: with no read its rate is 0 and its ratio NaN."""
    files = []
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(name.encode() * 1000)
        files.append(str(tmp_path / name))
    assert ceiling._loop(files, 1e-9, "check", at_least_one=True) == 2
    assert ceiling._loop(files, 1e-9, "check") == 0  # without it (the full bench), the window decides


AB_SMOKE = ("--rounds", "1", "--seconds", "1", "--connections", "2")


def test_the_ab_of_source_trees_reports_reads_and_their_cpu() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.ab", f"here={REPO}", *AB_SMOKE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    row = next(line for line in done.stdout.splitlines() if line.startswith("here "))
    _, connections, rps, cpu, ratio = row.split()
    assert (connections, ratio) == ("2", "1.00×"), row
    assert float(rps.replace(",", "")) > 0, row
    assert float(cpu.replace(",", "")) > 0, row


def test_quick_listings_bench_reports_each_request(tmp_path: Path) -> None:
    printed, result = _bench(tmp_path, "--only", "listings")
    listed = result["scenarios"]["listings"]
    assert (listed["small"]["objects"], listed["large"]["objects"]) == (200, 2000)
    for request in ("sessions", "sessions_deep", "sessions_prefix", "attachments", "stats"):
        for size in ("small", "large"):
            assert _number(listed[size][request]["ms"])
            assert _number(listed[size][request]["floor_ms"])
        assert _number(listed["scale_ratio"][request])
        assert _number(listed["floor_ratio"][request])
    assert _number(listed["triggers"]["ratio"])
    assert "publish 4 with totals vs without" in printed
