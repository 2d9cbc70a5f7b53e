"""`make bench` = python -m tests.bench [--json PATH] [--quick] [--profile DIR] [--scale-objects N]."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from . import convert, listings, mcpstartup, report, scaleout, scenarios, tools, transcript, variants, wrap
from .drive import Driver
from .procs import CHECK_KEY, REPO, Daemon, Profiler
from .spy import render_text

SCENARIOS = [
    "read",
    "render",
    "admit",
    "scale",
    "variant",
    "scaleout",
    "transcript",
    "mcp",
    "convert",
    "wrap",
    "listings",
]
# The scenarios that need neither wrk nor nginx: run alone, they install nothing.
WITHOUT_TOOLS = {"variant", "transcript", "mcp", "convert", "wrap", "listings"}


def _clean(x: Any) -> Any:
    """JSON has no NaN: unknown figures are null."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    p.add_argument("--json", metavar="PATH", type=Path, help="also write the figures as JSON")
    p.add_argument(
        "--quick", action="store_true", help="tiny sizes and durations: a smoke run of every scenario"
    )
    p.add_argument(
        "--profile",
        metavar="DIR",
        type=Path,
        help="py-spy the daemon in one extra read, admit and render run each",
    )
    p.add_argument("--scale-objects", metavar="N", type=int, help="the scale scenario's large size")
    p.add_argument(
        "--rounds",
        type=int,
        help="alternating rounds per comparison (default 3, 5 for the short admit, render, scale runs)",
    )
    p.add_argument(
        "--cache",
        metavar="DIR",
        type=Path,
        default=REPO / ".bench" / "scale",
        help="where synthesized scale stores are kept between runs (default: .bench/scale, git-ignored)",
    )
    p.add_argument("--no-nginx", action="store_true", help="leave nginx out (its ratios: unavailable)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (stores, logs, bodies)")
    p.add_argument(
        "--only",
        nargs="+",
        choices=SCENARIOS,
        help="run only these scenarios (memory comes with admit)",
    )
    p.add_argument(
        "--no-services",
        action="store_true",
        help="leave out the scaleout scenario (it installs and starts Ceph RGW and PostgreSQL)",
    )
    args = p.parse_args(argv)
    os.environ["ATTACHSTORE_CHECK_KEY"] = CHECK_KEY  # every daemon and command of the run, and the synthesis
    started = time.monotonic()
    only = set(args.only or SCENARIOS) - ({"scaleout"} if args.no_services else set())

    # --quick never installs anything and always uses the bundled load generator; nginx if it is there.
    found = tools.find(install=not args.quick and not only <= WITHOUT_TOOLS)
    for note in found.notes:
        print(f"bench: {note}", file=sys.stderr)
    plan = scenarios.Plan.make(args.quick, args.scale_objects, args.rounds)
    work = Path(tempfile.mkdtemp(prefix="attachstore-bench-"))
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        if Profiler.available() is None:
            print("bench: --profile needs py-spy (pip install py-spy); profiles skipped", file=sys.stderr)
    bench = scenarios.Bench(
        plan=plan,
        work=work,
        driver=Driver(None if args.quick else found.wrk, work, at_least_one=args.quick),
        nginx=None if args.no_nginx else found.nginx,
        nginx_note=(
            "left out (--no-nginx)"
            if args.no_nginx
            else ""
            if found.nginx
            else ("; ".join(found.notes) or "nginx is not installed")
        ),
        profile_dir=args.profile,
        cache=args.cache,
    )
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}

    failed: list[str] = []

    def step(name: str, run: Any) -> None:
        """Run one scenario; a failure is reported (and makes the exit status 1) but the others still run."""
        t = time.monotonic()
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        try:
            run()
        except Exception as e:
            traceback.print_exc()
            failed.append(name)
            results[name] = {"error": f"{type(e).__name__}: {e}"}
            if name == "admit":
                results["memory"] = {"error": "the admit scenario failed"}
        timings[name] = time.monotonic() - t
        print(f"bench: {name} done in {timings[name]:.1f} s", file=sys.stderr, flush=True)

    try:
        if only & {"read", "render"}:
            with Daemon(work / "store-main", work / "daemon-main.log") as daemon:
                if "read" in only:
                    step("read", lambda: results.__setitem__("read", scenarios.read(bench, daemon)))
                if "render" in only:
                    step("render", lambda: results.__setitem__("render", scenarios.render(bench, daemon)))
        if "admit" in only:
            with Daemon(work / "store-admit", work / "daemon-admit.log") as daemon:

                def admit() -> None:
                    results["admit"], results["memory"] = scenarios.admit(bench, daemon)

                step("admit", admit)
        if "scale" in only:
            step("scale", lambda: results.__setitem__("scale", scenarios.scale(bench)))
        if "variant" in only:
            step("variant", lambda: results.__setitem__("variant", variants.variant(work, args.quick)))
        if "scaleout" in only:
            step("scaleout", lambda: results.__setitem__("scaleout", scaleout.scaleout(bench)))
        if "transcript" in only:

            def strip_restore() -> None:
                results["transcript"] = transcript.transcript(work, args.quick, plan.transcript_rounds)

            step("transcript", strip_restore)
        if "mcp" in only:
            step("mcp", lambda: results.__setitem__("mcp", mcpstartup.startup(work, plan.mcp_rounds)))
        if "wrap" in only:
            step(
                "wrap",
                lambda: results.__setitem__("wrap", wrap.wrap(work, plan.wrap_rounds, plan.wrap_calls)),
            )
        if "convert" in only:
            step(
                "convert", lambda: results.__setitem__("convert", convert.convert(work, plan.convert_rounds))
            )
        if "listings" in only:

            def listed() -> None:
                results["listings"] = listings.listings_scenario(work, args.quick, args.scale_objects)

            step("listings", listed)
    finally:
        if args.keep:
            print(f"bench: kept {work}", file=sys.stderr)
        else:
            t = time.monotonic()
            shutil.rmtree(work, ignore_errors=True)
            timings["cleanup"] = time.monotonic() - t

    table_rows = report.rows(results)
    elapsed = time.monotonic() - started
    meta = {
        "quick": args.quick,
        "seconds": elapsed,
        "scenario_seconds": timings,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_generator": bench.driver.name,
        "nginx": bench.nginx or f"unavailable: {bench.nginx_note}",
        "rounds": plan.rounds,
        "admit_render_rounds": plan.short_rounds,
        "mcp_rounds": plan.mcp_rounds,
        "convert_rounds": plan.convert_rounds,
        "wrap_rounds": plan.wrap_rounds,
        "notes": found.notes + bench.notes,
        "method": (
            "every comparison alternates attachstore and its baseline in pairs (A, B, B, A, A, B, ...) for "
            "`rounds` rounds; "
            "figures are medians over rounds, ratios the median of the per-round ratios"
        ),
    }
    print()
    print(
        f"attachstore bench{' (quick)' if args.quick else ''}: {elapsed:.0f} s, {os.cpu_count()} CPUs, "
        f"load generator {bench.driver.name}, {plan.rounds} alternating rounds "
        f"({plan.short_rounds} for admit, render, scale; {plan.mcp_rounds} for mcp start-up; "
        f"{plan.convert_rounds} for convert), medians"
    )
    print(report.table(table_rows))
    print(
        "baseline: nginx and the verified ceiling (read: read + keyed check, no HTTP), the physical floor "
        "(admit), the in-process floor (render, transcript), raw sha256 (audit), the MCP SDK's smallest "
        "server (mcp start-up), the same decode and encode in a bare process (convert); for scale and gc "
        "rows 'attachstore' is the large store and 'baseline' the 1k one, the ratio is large/small."
    )
    if "scale" in results and "note" in results["scale"]:
        print(f"scale: {results['scale']['note']}")
    for name in ("read", "admit", "render"):
        prof = results.get(name, {}).get("profile")
        if prof and "error" not in prof:
            print(f"\nprofile of the daemon during {name} (py-spy, {prof['raw']}):")
            print(render_text(prof))
            print(f"(more: python -m tests.bench.spy {prof['raw']} --seconds {prof['seconds']:.1f})")
        elif prof:
            print(f"\nprofile of {name}: {prof['error']}")
    if args.json:
        args.json.write_text(
            json.dumps(_clean({"meta": meta, "scenarios": results, "table": table_rows}), indent=2) + "\n"
        )
    if failed:
        print(f"bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
