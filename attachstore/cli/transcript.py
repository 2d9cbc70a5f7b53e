"""`attachstore transcript strip | restore | release`: parse, run the transcripts package file by file, show
progress, print a line per file and a total, or JSON (docs/transcripts.md)."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ..config import Config, Gc
from ..errors import ConfigError, InvalidRequest
from ..progress import Progress
from ..text import human_bytes
from . import repair

if TYPE_CHECKING:  # imported where used: the other commands, `mcp` first, start without the store
    from ..service import Store
    from ..transcripts import Candidate, Report, Restorer, RestoreReport, Stripper, Tally

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEFAULT_MIN_AGE = "10m"
# The names of transcripts.FORMATS, for --format: that package imports the store, which the parser must not
# (tests/cli/test_transcript.py holds the two the same).
FORMAT_NAMES = ("codex", "claude", "gemini", "openai", "mcp", "generic")
_WORKERS = 4  # decode workers at most
_ADMITTING = 16  # admissions at once: each one mostly waits for its fsyncs


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("transcript", help="move a transcript's inline images into the store and back")
    actions = s.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help: str) -> argparse.ArgumentParser:
        a: argparse.ArgumentParser = actions.add_parser(name, parents=[common], help=help)
        a.add_argument(
            "--tenant",
            default="",
            metavar="NAME",
            help="admit and read as this tenant (default: the open one, '')",
        )
        a.add_argument("--json", action="store_true", help="print the summary as JSON")
        return a

    a = action("strip", "replace inline images by refs, keeping everything else byte for byte")
    a.add_argument("paths", nargs="+", metavar="PATH", help="transcripts, or directories of them")
    _outputs(a)
    a.add_argument("--format", choices=FORMAT_NAMES, help="the transcript format (default: detected)")
    a.add_argument("--session", metavar="ID", help="the session that holds the refs (default: from the path)")
    a.add_argument(
        "--min-age",
        metavar="DURATION",
        help=f"skip files modified more recently (default {DEFAULT_MIN_AGE} in directories, 0 for files)",
    )
    a.add_argument("--dry-run", action="store_true", help="report what would be done, write nothing")

    a = action("restore", "put every image back from the store, verified, byte for byte")
    a.add_argument("paths", nargs="+", metavar="PATH", help="stripped transcripts, or directories of them")
    _outputs(a)
    a.add_argument(
        "--sha256",
        metavar="HEX",
        help="the sha256 the restored file must have, one file only (default: not checked)",
    )
    a.add_argument("--dry-run", action="store_true", help="read every image back verified, write nothing")

    repair.add_parser(action, FORMAT_NAMES)

    a = action("release", "drop a stripped transcript's session, so that gc may collect its images")
    a.add_argument("paths", nargs="*", metavar="FILE", help="transcripts whose sessions are dropped")
    a.add_argument("--session", metavar="ID", help="the session to drop (default: from each FILE)")
    a.add_argument("--force", action="store_true", help="drop it even while FILE still holds placeholders")


def _outputs(a: argparse.ArgumentParser) -> None:
    a.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="write here: a file, or for a directory a directory (default: none; see --in-place)",
    )
    a.add_argument("--in-place", action="store_true", help="replace each input")
    a.add_argument(
        "--assume-closed",
        action="store_true",
        help="do not look for processes that have the file open for writing",
    )


def run(args: argparse.Namespace, config: Config) -> int:
    if args.action == "release":
        return _release(args, config)
    if args.action == "repair":
        return asyncio.run(_with_store(config, not args.undo, repair.runner(args, config)))
    jobs = _jobs(args)
    return asyncio.run(_with_store(config, args.action == "strip", lambda store: _run(args, store, jobs)))


@dataclass(frozen=True, slots=True)
class _Job:
    source: Path
    output: Path | None  # None: a dry run
    named: bool  # named on the command line, not found in a directory
    size: int
    skip: Candidate | None = None


def _jobs(args: argparse.Namespace) -> list[_Job]:
    from ..transcripts import candidates  # the store and its gate: only for the command that runs

    output = Path(args.output) if args.output else None
    if not args.dry_run and (output is None) == (not args.in_place):
        raise InvalidRequest("give -o OUT or --in-place (or --dry-run)")
    if output is not None and len(args.paths) > 1:
        raise InvalidRequest("-o OUT takes one PATH")
    if getattr(args, "sha256", None) and len(args.paths) > 1:
        raise InvalidRequest("--sha256 takes one file")
    strip = args.action == "strip"
    jobs = []
    for text in args.paths:
        root = Path(text)
        if not root.exists():
            raise InvalidRequest(f"{root}: no such file or directory")
        is_dir = root.is_dir()
        min_age = _min_age(args.min_age if strip else "0s", is_dir)
        if output is not None and not is_dir and os.path.exists(output) and os.path.samefile(output, root):
            raise InvalidRequest(f"-o {output} is the input: use --in-place to replace it")
        for found in candidates(root, min_age, replacing=args.in_place):
            target: Path | None = found.path
            if args.dry_run:
                target = None
            elif output is not None:
                target = output / found.path.relative_to(root) if is_dir else output
            jobs.append(_Job(found.path, target, not is_dir, found.size, found if found.skip else None))
    return jobs


def _min_age(text: str | None, is_dir: bool) -> float:
    text = text if text is not None else (DEFAULT_MIN_AGE if is_dir else "0s")
    try:
        return msgspec.convert({"grace": text}, Gc).grace_seconds
    except msgspec.ValidationError:
        raise ConfigError(f"--min-age: not a duration: {text!r} (e.g. 10m, 1h, 0s)") from None


async def _with_store(config: Config, create: bool, action: Callable[[Store], Awaitable[int]]) -> int:
    from ..service import Store  # as in _jobs

    if not create:
        _require_store(config)
    store = await Store.open(config, workers=min(_WORKERS, os.cpu_count() or 1), read_cache=False)
    try:
        return await action(store)
    finally:
        await store.close()


def _require_store(config: Config) -> None:
    if config.index.backend == "sqlite" and not (config.data_path / "index.sqlite3").exists():
        raise ConfigError(f"no attachstore store at {config.data_dir}")


async def _run(args: argparse.Namespace, store: Store, jobs: Sequence[_Job]) -> int:
    from ..transcripts import Options, Restorer, Stripper  # as in _jobs

    strip = args.action == "strip"
    work = [j for j in jobs if j.skip is None]
    size = sum(j.size for j in work)
    passes = 2 if strip and not args.dry_run else 1  # strip reads the new version again to check it
    progress = Progress(args.action, len(work), size * passes, unit="files")
    reports: list[Report | RestoreReport] = []
    failed = False
    stripper = Stripper(
        store,
        Options(
            tenant=args.tenant,
            dry_run=args.dry_run,
            assume_closed=args.assume_closed,
            concurrency=_ADMITTING,
            on_bytes=lambda n: progress.advance(0, n),
        ),
    )
    restorer = Restorer(store, args.tenant)
    try:
        for job in jobs:
            if job.skip is not None:
                report: Report | RestoreReport = _skipped(job, strip)
            elif strip:
                report = await _strip_one(args, stripper, job)
            else:
                report = await _restore_one(args, restorer, job, progress)
            if job.skip is None:
                progress.advance(1, 0)
            failed = failed or report.status == "failed" or (report.status == "skipped" and job.named)
            reports.append(report)
            if not args.json:
                progress.finish()
                print(_line(report))
    finally:
        progress.finish()
        await stripper.close()
    if args.json:
        print(msgspec.json.encode(_total(args, reports, stripper.total)).decode())
    else:
        print(_total_line(args, reports, stripper.total))
    return EXIT_FAILED if failed else EXIT_OK


async def _strip_one(args: argparse.Namespace, stripper: Stripper, job: _Job) -> Report:
    from ..transcripts import named  # as in _jobs

    if job.output is not None:
        await asyncio.to_thread(job.output.parent.mkdir, parents=True, exist_ok=True)
    fmt = named(args.format) if args.format else None
    return await stripper.strip(job.source, job.output, fmt=fmt, session=args.session)


async def _restore_one(
    args: argparse.Namespace, restorer: Restorer, job: _Job, progress: Progress
) -> RestoreReport:
    from ..transcripts import restore_file  # as in _jobs

    if job.output is not None:
        await asyncio.to_thread(job.output.parent.mkdir, parents=True, exist_ok=True)
    return await restore_file(
        restorer,
        job.source,
        job.output,
        expect=args.sha256,
        assume_closed=args.assume_closed,
        on_bytes=lambda n: progress.advance(0, n),
    )


def _skipped(job: _Job, strip: bool) -> Report | RestoreReport:
    from ..transcripts import Report, RestoreReport  # as in _jobs

    assert job.skip is not None
    path = str(job.source)
    if strip:
        return Report(path, "skipped", reason=job.skip.skip, message=job.skip.detail)
    return RestoreReport(path, "skipped", reason=job.skip.skip, message=job.skip.detail)


def _line(report: Report | RestoreReport) -> str:
    from ..transcripts import RestoreReport  # as in _jobs

    where = f" -> {report.output}" if report.output and report.output != report.path else ""
    head = f"{report.status:<10} {report.path}{where}"
    if report.status in ("skipped", "failed"):
        return f"{head}  {report.reason}: {report.message}"
    sizes = f"{report.bytes_before:,} -> {report.bytes_after:,} bytes"
    note = f"; {report.message}" if report.message else ""
    if isinstance(report, RestoreReport):
        return (
            f"{head}  {report.placeholders} images from {report.refs} refs; {sizes}; sha256 {report.sha256}"
            f"{note}"
        )
    if report.formats:
        names = " or ".join(", ".join(report.formats).rsplit(", ", 1))
        n = report.tally.unclaimed
        note += f"; {n} image{'s' * (n != 1)} left inline under keys of --format {names}: run again with it"
    return f"{head}  [{report.format}] {_images(report.tally)}; {sizes}{note}"


def _images(tally: Tally) -> str:
    s = tally.summary()
    refused = sum(s["refused"].values())
    codes = ", ".join(f"{code} {n}" for code, n in s["refused"].items())
    kept = f" ({codes})" if codes else ""
    already = f", {s['already']} already refs" if s["already"] else ""
    unclaimed = f", {s['unclaimed']} unclaimed" if s["unclaimed"] else ""
    stored = f"{s['distinct']} distinct, {s['stored']} stored, {refused} refused{kept}{already}{unclaimed}"
    return f"images {s['found']} found, {stored}"


def _statuses(reports: Sequence[Report | RestoreReport]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in reports:
        out[r.status] = out.get(r.status, 0) + 1
    return out


def _total(
    args: argparse.Namespace, reports: Sequence[Report | RestoreReport], tally: Tally
) -> dict[str, Any]:
    from ..transcripts import RestoreReport  # as in _jobs

    total: dict[str, Any] = {"files": len(reports), "statuses": _statuses(reports)}
    if args.action == "strip":
        total["images"] = tally.summary()
    else:
        total["placeholders"] = sum(r.placeholders for r in reports if isinstance(r, RestoreReport))
    total["bytes"] = {
        "before": sum(r.bytes_before for r in reports),
        "after": sum(r.bytes_after for r in reports),
    }
    return {
        "action": args.action,
        "dry_run": args.dry_run,
        "files": [r.summary() for r in reports],
        "total": total,
    }


def _total_line(args: argparse.Namespace, reports: Sequence[Report | RestoreReport], tally: Tally) -> str:
    statuses = ", ".join(f"{n} {status}" for status, n in _statuses(reports).items())
    before = human_bytes(sum(r.bytes_before for r in reports))
    after = human_bytes(sum(r.bytes_after for r in reports))
    what = f"; {_images(tally)}" if args.action == "strip" else ""
    dry = " (dry run: nothing written)" if args.dry_run else ""
    return f"{args.action}: {len(reports)} files ({statuses or 'none'}){what}; {before} -> {after}{dry}"


def _release(args: argparse.Namespace, config: Config) -> int:
    from ..transcripts import release, session_for  # as in _jobs

    if not args.paths and not args.session:
        raise InvalidRequest("name the transcripts (FILE ...) or the session (--session ID)")
    targets: list[tuple[Path | None, str]] = [
        (Path(p), args.session or session_for(Path(p))) for p in args.paths
    ]
    if not targets:
        targets = [(None, args.session)]

    async def go(store: Store) -> int:
        released = []
        for path, session in targets:
            holds = await release(store, (args.tenant, session), path, force=args.force)
            released.append(
                {"file": None if path is None else str(path), "session": session, "released": holds}
            )
        if args.json:
            print(msgspec.json.encode({"released": released}).decode())
        for r in [] if args.json else released:
            print(f"released session {r['session']}: {r['released']} holds ({r['file'] or 'no file named'})")
        return EXIT_OK

    return asyncio.run(_with_store(config, False, go))
