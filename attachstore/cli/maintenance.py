"""The `gc`, `audit` and `migrate` commands: run the work, show progress, print a summary or JSON."""

from __future__ import annotations

import argparse
import asyncio
import functools
import shlex
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ..config import Config, Gc
from ..errors import AttachstoreError, ConfigError
from ..progress import Progress
from ..text import human_bytes, rfc3339

if TYPE_CHECKING:  # imported where used: the other commands, `mcp` first, start without the store
    from ..maintenance import AuditReport, Finding, gc

EXIT_OK, EXIT_FINDINGS, EXIT_COULD_NOT_RUN = 0, 1, 2


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("gc", parents=[common], help="remove unheld objects past their grace period")
    s.add_argument(
        "--grace",
        metavar="DURATION",
        help="keep unheld objects this long after their last admission or hold, e.g. 24h, 30m, 0s "
        "(default: the configuration's [gc] grace, else 24h)",
    )
    s.add_argument(
        "--roots",
        nargs="+",
        metavar="FILE",
        default=[],
        help="files, or directories walked recursively, whose text names refs to keep (default: none)",
    )
    s.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    s.add_argument("--json", action="store_true", help="print the plan and result as JSON")

    s = sub.add_parser(
        "audit", parents=[common], help="re-hash every object, check the index against the files"
    )
    s.add_argument(
        "--repair", action="store_true", help="quarantine, re-index and mark what is found (default: report)"
    )
    s.add_argument(
        "--sample",
        type=float,
        default=1.0,
        metavar="FRACTION",
        help="check this share of the objects, in (0, 1] (default: 1, every object)",
    )
    s.add_argument(
        "--max-rate",
        type=float,
        metavar="MIB_PER_S",
        help="read at most this many MiB per second, on one thread (default: as fast as the disk goes)",
    )
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
    from ..maintenance import gc  # the store and its gate: only for the command that runs (see main.py)
    from ..service import Store

    grace = config.gc.grace_seconds
    if args.grace is not None:
        grace = _grace(args.grace)
    _require_store(config)

    async def go() -> tuple[gc.GcPlan, gc.GcResult | None]:
        store = await Store.open(config, workers=1, read_cache=False, policy="none")
        try:
            planning = functools.partial(Progress, "gc plan")
            plan = await gc.plan(store, grace, [Path(r) for r in args.roots], progress=planning)
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
        for s in plan.expired:
            print(
                f"would release expired session {s.id} (tenant {s.tenant!r}, expired {_when(s.expires_at)})"
            )
    objects = plan.held + plan.young + plan.rooted + len(plan.garbage)
    print(
        f"gc plan (grace {args.grace or config.gc.grace}): "
        f"{_count(len(plan.expired), 'expired session')} to release; "
        f"{_count(objects, 'object')}: {plan.held} held, "
        f"{plan.young} within the grace period, {plan.rooted} kept by roots, {len(plan.garbage)} to collect "
        f"({human_bytes(plan.garbage_bytes)}); {_count(len(plan.staging), 'staging file')} and "
        f"{_count(len(plan.unindexed), 'unindexed file')} to remove"
    )
    if result is not None:
        print(
            f"gc: released {_count(result.sessions_released, 'expired session')}; "
            f"collected {_count(len(result.collected), 'object')} "
            f"({human_bytes(result.collected_bytes)}), "
            f"{result.skipped} skipped (renewed, held or collected meanwhile); "
            f"removed {_count(result.staging_removed, 'staging file')}, "
            f"{_count(result.unindexed_removed, 'unindexed file')}, "
            f"{_count(result.empty_dirs_removed, 'empty directory', 'empty directories')}"
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
            "held": plan.held,
            "within_grace": plan.young,
            "kept_by_roots": plan.rooted,
            "staging": [str(f.path) for f in plan.staging],
            "unindexed": [u.key for u in plan.unindexed],
            "expired_sessions": [
                {"tenant": s.tenant, "session": s.id, "expired": _when(s.expires_at)} for s in plan.expired
            ],
        },
    }
    if result is not None:
        out["result"] = asdict(result)
    return out


def _when(at: float | None) -> str:
    return rfc3339(at or 0.0, "seconds")


def _count(n: int, noun: str, plural: str = "") -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def run_audit(args: argparse.Namespace, config: Config) -> int:
    from ..maintenance import Audit  # as in run_gc
    from ..service import Store

    if not 0 < args.sample <= 1:
        raise ConfigError("--sample: a fraction greater than 0 and at most 1")
    if args.max_rate is not None and args.max_rate <= 0:
        raise ConfigError("--max-rate: MiB per second, more than 0")
    _require_store(config)
    max_rate = args.max_rate * 1024 * 1024 if args.max_rate else None
    throttled = f"throttled to {human_bytes(max_rate)}/s" if max_rate else ""

    async def go() -> AuditReport:
        store = await Store.open(config, workers=1, read_cache=False, policy="none")
        try:
            audit = Audit(
                store,
                repair=args.repair,
                sample=args.sample,
                max_rate=max_rate,
                progress=lambda n, size: Progress("audit", n, size, note=throttled),
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
        print(msgspec.json.encode(msgspec.to_builtins(report) | {"clean": report.clean}).decode())
    else:
        for f in report.findings:
            repair = f"  [{f.repair}]" if f.repair else ""
            print(f"{f.kind:<18} {f.ref or f.path}  {f.detail}{repair}")
        kinds = ", ".join(
            f"{sum(1 for f in report.findings if f.kind == k)} {k}"
            for k in dict.fromkeys(f.kind for f in report.findings)
        )
        how = [f"sample {report.sample:g}"] if report.sample < 1 else []
        how += [throttled] if throttled else []
        print(
            f"audit{' (' + ', '.join(how) + ')' if how else ''}: {_count(report.files, 'file')} "
            f"({human_bytes(report.bytes)}) re-hashed, {_count(report.rows, 'row')} checked; "
            + (f"{_count(len(report.findings), 'finding')} ({kinds})" if report.findings else "clean")
            + (
                f"; {_count(report.checks_recorded, 'keyed check')} recorded"
                if report.checks_recorded
                else ""
            )
        )
        for step in _next_steps(report, args):
            print(f"next: {step}")
        if not report.clean:
            print("every finding and what to do about it: docs/operations.md#the-audit")
    return EXIT_OK if report.clean else EXIT_FINDINGS


def _next_steps(report: AuditReport, args: argparse.Namespace) -> list[str]:
    from ..maintenance import Kind  # imported already by the audit that ran

    if report.clean:
        return []
    # What --repair does to the kinds of finding that need it, for one and for n. Stray files are most often
    # crash leftovers, which gc removes: they get a line of their own.
    repairs = {
        Kind.CORRUPT: ("quarantines the corrupt object", "quarantines the {n} corrupt objects"),
        Kind.MISSING: ("marks the row whose file is gone", "marks the {n} rows whose files are gone"),
        Kind.METADATA_MISMATCH: (
            "rewrites the row that disagrees with its bytes",
            "rewrites the {n} rows that disagree with their bytes",
        ),
        Kind.LINK_MISMATCH: (
            "removes the variant link whose check does not hold",
            "removes the {n} variant links whose checks do not hold",
        ),
    }

    def unreadable(f: Finding) -> bool:
        return f.kind == Kind.CORRUPT and f.detail.startswith("cannot be read")

    again = "attachstore audit" + "".join(
        f" {flag} {shlex.quote(value)}"
        for flag, value in (("--config", args.config), ("--data-dir", args.data_dir))
        if value
    )
    steps = []
    repairable = []
    for kind, (one, many) in repairs.items():
        n = sum(1 for f in report.findings if f.kind == kind and not unreadable(f))
        if n:
            repairable.append(one if n == 1 else many.format(n=n))
    if repairable and not args.repair:
        steps.append(f"`{again} --repair` {'; '.join(repairable)}")
    if args.repair and any(f.repair for f in report.findings):
        steps.append(f"`{again}` again shows that the repairs took")
    strays = sum(1 for f in report.findings if f.kind == Kind.STRAY_FILE and not f.repair)
    if strays:
        steps.append(
            "the stray file is most often left by a crash: gc removes it once it is older than the grace "
            "period (`--repair` re-indexes it if its bytes verify as an image, else quarantines it)"
            if strays == 1
            else f"the {strays} stray files are most often left by a crash: gc removes them once they are "
            "older than the grace period (`--repair` re-indexes those whose bytes verify as images, and "
            "quarantines the others)"
        )
    if any(unreadable(f) for f in report.findings):
        steps.append("check the disk, and the owner and mode of the files that cannot be read")
    kinds = {f.kind for f in report.findings}
    if Kind.STRAY_ROW in kinds or (args.repair and kinds & {Kind.CORRUPT, Kind.MISSING}):
        steps.append(
            "a ref without bytes reads again once the same bytes are admitted again (`attachstore put "
            "FILE`, from a backup, say); gc removes its row once nothing holds it"
        )
    return steps


def run_migrate(args: argparse.Namespace, config: Config) -> int:
    from ..maintenance import migrate  # as in run_gc

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
