"""The `gc` and `audit` commands: run the plan or the audit, show progress, print a summary or JSON."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import msgspec

from ..config import Config, Gc
from ..errors import AttachstoreError, ConfigError
from ..maintenance import Audit, AuditReport, gc, migrate
from ..progress import Progress, human_bytes, rfc3339
from ..service import Store

EXIT_OK, EXIT_FINDINGS, EXIT_COULD_NOT_RUN = 0, 1, 2


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("gc", parents=[common], help="remove unheld objects past their grace period")
    s.add_argument("--grace", metavar="DURATION", help="e.g. 24h, 30m, 0s (default: [gc] grace)")
    s.add_argument("--roots", nargs="+", metavar="FILE", default=[], help="files naming refs to keep")
    s.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    s.add_argument("--json", action="store_true", help="print the plan and result as JSON")

    s = sub.add_parser(
        "audit", parents=[common], help="re-hash every object, check the index against the files"
    )
    s.add_argument("--repair", action="store_true", help="quarantine, re-index and mark what is found")
    s.add_argument("--sample", type=float, default=1.0, metavar="FRACTION", help="check this share (0-1]")
    s.add_argument("--max-rate", type=float, metavar="MIB_PER_S", help="read at most this fast")
    s.add_argument("--json", action="store_true", help="print the report as JSON")

    s = sub.add_parser(
        "migrate", parents=[common], help="copy this store into the backends of another configuration"
    )
    s.add_argument("--to", required=True, metavar="FILE", help="the target's configuration file")
    s.add_argument("--verify-only", action="store_true", help="compare the target with this store only")
    s.add_argument("--json", action="store_true", help="print the report as JSON")


def _require_store(config: Config) -> None:
    """A local index must exist already: gc or audit on a mistyped data dir would create an empty store.
    A shared index (PostgreSQL) is the fleet's, whatever this machine's data dir holds."""
    if config.index.backend == "sqlite" and not (Path(config.data_dir) / "index.sqlite3").exists():
        raise ConfigError(f"no attachstore store at {config.data_dir}")


def run_gc(args: argparse.Namespace, config: Config) -> int:
    grace = config.gc.grace_seconds
    if args.grace is not None:
        grace = _grace(args.grace)
    _require_store(config)

    async def go() -> tuple[gc.GcPlan, gc.GcResult | None]:
        store = await Store.open(config, workers=1, read_cache=False, policy="none")
        try:
            plan = await gc.plan(store, grace, [Path(r) for r in args.roots])
            if args.dry_run:
                return plan, None
            progress = Progress("gc", len(plan.garbage), plan.garbage_bytes)
            return plan, await gc.execute(store, plan, progress)
        finally:
            await store.close()

    plan, result = asyncio.run(go())
    if args.json:
        print(msgspec.json.encode(_gc_json(plan, result, args.dry_run)).decode())
        return EXIT_OK
    if args.dry_run:
        for row in plan.garbage:
            print(f"would collect {row.ref}  {row.bytes} bytes  lease {rfc3339(row.lease_at, 'seconds')}")
        for u in plan.unindexed:
            print(f"would remove unindexed {u.key}")
        for f in plan.staging:
            print(f"would remove staging {f.path}")
    print(
        f"gc plan (grace {args.grace or config.gc.grace}): {len(plan.garbage)} objects "
        f"({human_bytes(plan.garbage_bytes)}) to collect, {plan.rooted} kept by roots; "
        f"{len(plan.staging)} staging and {len(plan.unindexed)} unindexed files"
    )
    if result is not None:
        print(
            f"gc: collected {len(result.collected)} objects ({human_bytes(result.collected_bytes)}), "
            f"{result.skipped} skipped (renewed, held or collected meanwhile); "
            f"removed {result.staging_removed} staging files, {result.unindexed_removed} unindexed files, "
            f"{result.empty_dirs_removed} empty directories"
        )
    return EXIT_OK


def _grace(text: str) -> float:
    try:
        return msgspec.convert({"grace": text}, Gc).grace_seconds
    except msgspec.ValidationError:
        raise ConfigError(f"--grace: not a duration: {text!r} (e.g. 24h, 30m, 0s)") from None


def _gc_json(plan: gc.GcPlan, result: gc.GcResult | None, dry_run: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "dry_run": dry_run,
        "grace_seconds": plan.grace,
        "plan": {
            "garbage": [r.ref for r in plan.garbage],
            "garbage_bytes": plan.garbage_bytes,
            "kept_by_roots": plan.rooted,
            "staging": [str(f.path) for f in plan.staging],
            "unindexed": [u.key for u in plan.unindexed],
        },
    }
    if result is not None:
        out["result"] = asdict(result)
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def run_audit(args: argparse.Namespace, config: Config) -> int:
    if not 0 < args.sample <= 1:
        raise ConfigError("--sample: a fraction greater than 0 and at most 1")
    if args.max_rate is not None and args.max_rate <= 0:
        raise ConfigError("--max-rate: MiB per second, more than 0")
    _require_store(config)
    max_rate = args.max_rate * 1024 * 1024 if args.max_rate else None

    async def go() -> AuditReport:
        store = await Store.open(config, workers=1, read_cache=False, policy="none")
        try:
            audit = Audit(
                store,
                repair=args.repair,
                sample=args.sample,
                max_rate=max_rate,
                progress=lambda n, size: Progress("audit", n, size),
            )
            return await audit.run()
        finally:
            await store.close()

    try:
        report = asyncio.run(go())
    except (AttachstoreError, OSError) as e:
        print(f"attachstore: audit could not run: {e}", file=sys.stderr)
        return EXIT_COULD_NOT_RUN
    if args.json:
        print(msgspec.json.encode(report).decode())
    else:
        for f in report.findings:
            repair = f"  [{f.repair}]" if f.repair else ""
            print(f"{f.kind:<18} {f.ref or f.path}  {f.detail}{repair}")
        kinds = ", ".join(
            f"{sum(1 for f in report.findings if f.kind == k)} {k}"
            for k in dict.fromkeys(f.kind for f in report.findings)
        )
        sampled = f" (sample {report.sample:g})" if report.sample < 1 else ""
        print(
            f"audit{sampled}: {report.files} files ({human_bytes(report.bytes)}) re-hashed, "
            f"{report.rows} rows checked; "
            + (f"{_count(len(report.findings), 'finding')} ({kinds})" if report.findings else "clean")
        )
    return EXIT_OK if report.clean else EXIT_FINDINGS


def run_migrate(args: argparse.Namespace, config: Config) -> int:
    target = migrate.target_config(args.to)
    report = asyncio.run(migrate.run(config, target, verify_only=args.verify_only))
    if args.json:
        print(msgspec.json.encode(msgspec.to_builtins(report) | {"clean": report.clean}).decode())
        return EXIT_OK if report.clean else EXIT_FINDINGS
    for label, findings in (
        ("failed", report.failed),
        ("not copied", report.not_copied),
        ("differs", report.differences),
    ):
        for f in findings:
            print(f"{label:<10} {f.kind:<11} {f.what}  {f.detail}")
    if not args.verify_only:
        unreadable = sum(1 for f in report.not_copied if f.kind in ("quarantined", "missing"))
        print(
            f"migrate: {_count(report.objects, 'object')} ({human_bytes(report.bytes)}) copied, "
            f"{report.skipped} already in the target, {len(report.failed)} failed, {unreadable} not copied "
            f"(marked unreadable in the source); {_count(report.sessions, 'session')}, "
            f"{_count(report.holds, 'hold')}, {_count(report.variants, 'variant')}, "
            f"{_count(report.runs, 'run')} added"
        )
    healed = f", {report.healed} written again" if report.healed else ""
    differences = _count(len(report.differences), "difference") if report.differences else "no differences"
    print(
        f"verify: {_count(report.verified, 'object')} ({human_bytes(report.verified_bytes)}) read back "
        f"verified{healed}, every row compared: {differences}"
    )
    return EXIT_OK if report.clean else EXIT_FINDINGS
