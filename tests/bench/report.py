"""The table: one row per figure, the ratio as the result, the target next to it with a pass/fail mark."""

from __future__ import annotations

import math
from typing import Any

Row = dict[str, Any]

# Targets, as (kind, bound): "min" means ratio >= bound, "max" means ratio <= bound.
TARGETS = {
    "read_rps": ("min", 0.45),
    "read_ceiling": ("min", 0.80),
    "read_p99": ("max", 3.0),
    "admit": ("min", 0.80),
    "render": ("min", 0.80),
    "audit": ("min", 0.70),
    "scale_p99": ("max", 1.25),
    "memory_mb": ("max", 400.0),
    "mcp_startup": ("max", 1.2),
    "listings_scale": ("max", 2.0),
}


def _num(x: Any) -> float | None:
    if isinstance(x, int | float) and not (isinstance(x, float) and math.isnan(x)):
        return float(x)
    return None


def _verdict(target: str, value: Any) -> bool | None:
    v = _num(value)
    if v is None:
        return None
    kind, bound = TARGETS[target]
    return v >= bound if kind == "min" else v < bound if target == "memory_mb" else v <= bound


def _target_text(target: str) -> str:
    kind, bound = TARGETS[target]
    if target == "memory_mb":
        return f"< {bound:.0f} MB"
    if kind == "min":
        return f">= {bound:.0%}"
    return f"<= {bound:g}x"


def _row(
    scenario: str,
    metric: str,
    subject: Any,
    baseline: Any,
    ratio: Any = None,
    target: str | None = None,
    ratio_kind: str = "pct",
) -> Row:
    return {
        "scenario": scenario,
        "metric": metric,
        "attachstore": subject,
        "baseline": baseline,
        "ratio": ratio,
        "ratio_kind": ratio_kind,
        "target": _target_text(target) if target else "",
        "pass": _verdict(target, ratio) if target else None,
    }


def rows(results: dict[str, Any]) -> list[Row]:
    out: list[Row] = [
        _row(name, "ERROR", str(r["error"])[:100], None)
        for name, r in results.items()
        if isinstance(r, dict) and "error" in r
    ]
    results = {k: v for k, v in results.items() if not (isinstance(v, dict) and "error" in v)}
    read = results.get("read")
    if read:
        for level in read["levels"]:
            name = f"read c={level['connections']} vs nginx"
            a, n = level["attachstore"], level["nginx"]
            have = isinstance(n, dict)
            out.append(
                _row(
                    name, "req/s", a["rps"], n["rps"] if have else "unavail.", level["rps_ratio"], "read_rps"
                )
            )
            out.append(_row(name, "p50 ms", a["p50_ms"], n["p50_ms"] if have else "unavail."))
            out.append(
                _row(
                    name,
                    "p99 ms",
                    a["p99_ms"],
                    n["p99_ms"] if have else "unavail.",
                    level["p99_ratio"],
                    "read_p99",
                    "times",
                )
            )
            if "ceiling" in level:  # read + keyed check, no HTTP: no verified store can pass it
                out.append(
                    _row(
                        f"read c={level['connections']} vs verified ceiling",
                        "req/s",
                        a["rps"],
                        level["ceiling"]["rps"],
                        level["ceiling_ratio"],
                        "read_ceiling",
                    )
                )
                out.append(
                    _row(
                        f"read c={level['connections']} vs verified serving floor",
                        "req/s",
                        a["rps"],
                        level["serving_floor"]["rps"],
                        level["floor_ratio"],
                    )
                )
                if have:  # sendfile and no hash: what the ceiling leaves to any HTTP server beside wrk
                    out.append(
                        _row(
                            f"nginx c={level['connections']} vs verified ceiling",
                            "req/s",
                            n["rps"],
                            level["ceiling"]["rps"],
                            level["nginx_ceiling_ratio"],
                        )
                    )
        if "ceiling_sha256" in read:
            out.append(
                _row("read ceiling with sha256 (before)", "reads/s", read["ceiling_sha256"]["rps"], None)
            )
    admit = results.get("admit")
    for path in ("multipart", "json") if admit else ():
        a, f = admit[path]["attachstore"], admit[path]["floor"]
        name = f"admit {'JSON' if path == 'json' else path} c=8 vs floor"
        out.append(_row(name, "images/s", a["rps"], f["rps"], admit[path]["ratio"], "admit"))
        out.append(_row(name, "p50 ms", a["p50_ms"], f["p50_ms"]))
        out.append(_row(name, "p99 ms", a["p99_ms"], f["p99_ms"]))
    render = results.get("render")
    if render:
        a, f = render["attachstore"], render["floor_in_process"]
        name = f"render {render['images']} img vs floor"
        out.append(_row(name, "renders/s", a["rps"], f["rps"], render["ratio"], "render"))
        out.append(_row(name, "p50 ms", a["p50_ms"], f["p50_ms"]))
        out.append(_row(name, "p99 ms", a["p99_ms"], f["p99_ms"]))
    scale = results.get("scale")
    if scale:
        small, large = (str(n) for n in scale["sizes"])
        label = f"{_size(large)} vs {_size(small)}"
        for what in ("read", "admit"):
            s, lg = scale[what][small], scale[what][large]
            name = f"scale {what} {label}"
            out.append(_row(name, "req/s", lg["rps"], s["rps"]))
            out.append(_row(name, "p50 ms", lg["p50_ms"], s["p50_ms"]))
            out.append(
                _row(
                    name, "p99 ms", lg["p99_ms"], s["p99_ms"], scale[what]["p99_ratio"], "scale_p99", "times"
                )
            )
        gc = scale["gc_dry_run"]
        out.append(
            _row(f"gc --dry-run {label}", "objects/s", gc[large]["objects_per_s"], gc[small]["objects_per_s"])
        )
        out.append(_row(f"gc --dry-run {label}", "seconds", gc[large]["seconds"], gc[small]["seconds"]))
        for n in (large, small):
            au = scale["audit"][n]
            name = f"audit {_size(n)} vs raw sha256"
            # The target is the large store's: on 1,000 small files both commands are mostly their start-up.
            target = "audit" if n == large else None
            out.append(
                _row(name, "MB/s", au["audit"]["mb_per_s"], au["raw_sha256"]["mb_per_s"], au["ratio"], target)
            )
    variant = results.get("variant")
    if variant:
        name = f"variant {variant['images']} img: first vs cached"
        out.append(
            _row(
                name,
                "render ms",
                variant["first_ms"],
                variant["cached_ms"],
                variant["speedup"],
                None,
                "times",
            )
        )
    out += _listings(results.get("listings"))
    scaleout = results.get("scaleout")
    if scaleout:
        read, admit = scaleout["read"], scaleout["admit"]
        for side, key in (("s3", "read"), ("s3_cache", "read_cache")):
            name = f"read S3+PG{' +cache' if side == 's3_cache' else ''} vs local"
            out.append(_row(name, "req/s", read[side]["rps"], read["local"]["rps"], scaleout[f"{key}_ratio"]))
            out.append(
                _row(
                    name,
                    "p99 ms",
                    read[side]["p99_ms"],
                    read["local"]["p99_ms"],
                    scaleout[f"{key}_p99_ratio"],
                    None,
                    "times",
                )
            )
        name = "admit S3+PG vs local"
        out.append(_row(name, "images/s", admit["s3"]["rps"], admit["local"]["rps"], scaleout["admit_ratio"]))
        out.append(
            _row(
                name,
                "p99 ms",
                admit["s3"]["p99_ms"],
                admit["local"]["p99_ms"],
                scaleout["admit_p99_ratio"],
                None,
                "times",
            )
        )
    transcript = results.get("transcript")
    if transcript:
        n = transcript["bytes_before"]
        size = f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"
        floor = transcript["floor_seconds"]
        for what in ("strip", "restore"):
            name = f"transcript {what} {size} vs floor"
            seconds = transcript[what]["seconds"]
            out.append(_row(name, "seconds", seconds, floor, transcript[f"{what}_ratio"], None, "times"))
            out.append(_row(name, "peak RSS MB", transcript[what]["peak_rss_mb"], ""))
        before, after = transcript["bytes_before"], transcript["bytes_after"]
        out.append(_row(f"transcript {size} stripped", "MB after", after / 1e6, before / 1e6, after / before))
    mcp = results.get("mcp")
    if mcp:
        for mode, measured in (("--config", mcp), ("--url", mcp["url"])):
            a, f = measured["attachstore"], measured["floor_sdk"]
            name = f"mcp {mode} start-up vs SDK {mcp['sdk']} floor"
            out.append(
                _row(name, "initialize ms", a["ms"], f["ms"], measured["ratio"], "mcp_startup", "times")
            )
            out.append(_row(name, "fastest ms", a["min_ms"], f["min_ms"]))
    wrapped = results.get("wrap")
    if wrapped:
        name = "mcp wrap vs the bare server"
        calls, bare = wrapped["text_calls_per_s"], wrapped["bare_calls_per_s"]
        out.append(_row(name, "calls/s, no image", calls, bare, wrapped["text_ratio"], None, "times"))
        added, admission = wrapped["image_added_ms"], wrapped["admission_ms"]
        name = "mcp wrap: an image's added ms vs its admission"
        out.append(_row(name, "ms", added, admission, wrapped["image_ratio"], None, "times"))
    converted = results.get("convert")
    if converted:
        for name, measured in converted["files"].items():
            scenario = f"convert {name} to {measured['stored'].partition('/')[2].upper()}"
            out.append(
                _row(
                    scenario,
                    "admit ms",
                    measured["ms"],
                    measured["floor_ms"],
                    measured["ratio"],
                    None,
                    "times",
                )
            )
    memory = results.get("memory")
    if memory:
        out.append(
            _row(
                "memory under admit",
                "peak RSS MB",
                memory["peak_rss_mb"],
                "",
                memory["peak_rss_mb"],
                "memory_mb",
                "mb",
            )
        )
    return out


def _size(n: str | int) -> str:
    n = int(n)
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


def _fmt(x: Any) -> str:
    v = _num(x)
    if v is None:
        return "" if x is None else str(x)
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _fmt_ratio(r: Row) -> str:
    v = _num(r["ratio"])
    if v is None:
        return "" if r["ratio"] is None else str(r["ratio"])
    if r["ratio_kind"] == "times":
        return f"{v:.2f}x"
    if r["ratio_kind"] == "mb":
        return ""
    return f"{v:.0%}"


def table(table_rows: list[Row]) -> str:
    head = ("scenario", "metric", "attachstore", "baseline", "ratio", "target", "result")
    body = [
        (
            r["scenario"],
            r["metric"],
            _fmt(r["attachstore"]),
            _fmt(r["baseline"]),
            _fmt_ratio(r),
            r["target"],
            {True: "PASS", False: "FAIL", None: "n/a"}[r["pass"]] if r["target"] else "",
        )
        for r in table_rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]
    lines = []
    for i, cells in enumerate([head, *body]):
        lines.append(
            "  ".join(
                str(c).ljust(w) if j < 2 or j > 4 else str(c).rjust(w)
                for j, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
        )
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _listings(listed: dict[str, Any] | None) -> list[Row]:
    """Each request on the large store against the small one (the target: a page costs what it shows), and
    against the same statements run directly (the floor; no target: it has no HTTP, no JSON of the answer)."""
    if not listed or "error" in listed:
        return []
    out: list[Row] = []
    large, small = listed["large"], listed["small"]
    size = _size(large["objects"])
    for request, ratio in listed["scale_ratio"].items():
        # A prefix that half the sessions match sorts them all: its figure is shown, not held to the target.
        target = None if request == "sessions_prefix" else "listings_scale"
        out.append(
            _row(
                f"{request} {size} vs {_size(small['objects'])}",
                "ms",
                large[request]["ms"],
                small[request]["ms"],
                ratio,
                target,
                "times",
            )
        )
        out.append(
            _row(
                f"{request} {size} vs sqlite floor",
                "ms",
                large[request]["ms"],
                large[request]["floor_ms"],
                listed["floor_ratio"][request],
                None,
                "times",
            )
        )
    t = listed.get("triggers")
    if t:
        name = "publish 4 with totals vs without"
        out.append(_row(name, "ms", t["with_ms"], t["without_ms"], t["ratio"], None, "times"))
    return out
