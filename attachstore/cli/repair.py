"""`attachstore transcript repair PATH... --for MODEL (-o OUT | --in-place | --dry-run)` and `--undo PATH...`:
parse, run the transcripts package file by file, print a report per file and a total, or JSON
(docs/transcripts.md, "Repairing a session")."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ..config import Config
from ..errors import InvalidRequest
from ..text import human_bytes

if TYPE_CHECKING:
    from ..service import Store
    from ..transcripts import RepairReport

EXIT_OK, EXIT_FAILED = 0, 1


def add_parser(action: Callable[[str, str], argparse.ArgumentParser], format_names: tuple[str, ...]) -> None:
    a = action("repair", "make a session a provider refuses resumable: fit its images, or turn them to text")
    a.add_argument("paths", nargs="+", metavar="PATH", help="transcripts (files)")
    a.add_argument(
        "--for",
        dest="model",
        metavar="MODEL",
        help="the model the session resumes with (required, but for --undo; default: none)",
    )
    a.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="write the repaired transcript here, one PATH (default: none; see --in-place)",
    )
    a.add_argument("--in-place", action="store_true", help="replace each input, keeping its original")
    a.add_argument("--dry-run", action="store_true", help="report what would be done, write nothing")
    a.add_argument("--undo", action="store_true", help="put back the original a repair kept")
    a.add_argument("--backup-dir", metavar="DIR", help="keep the originals here (default: beside each file)")
    a.add_argument("--format", choices=format_names, help="the transcript format (default: detected)")
    a.add_argument("--session", metavar="ID", help="the session that holds the refs (default: from the path)")
    a.add_argument(
        "--assume-closed",
        action="store_true",
        help="do not look for processes that have the file open for writing",
    )


def check(args: argparse.Namespace) -> None:
    if args.undo:
        if args.model or args.output or args.dry_run:
            raise InvalidRequest("--undo takes only PATH..., --backup-dir and --assume-closed")
        return
    if not args.model:
        raise InvalidRequest("give --for MODEL: the model the session resumes with")
    if sum(map(bool, (args.output, args.in_place, args.dry_run))) != 1:
        raise InvalidRequest("give one of -o OUT, --in-place, --dry-run")
    if args.output and len(args.paths) > 1:
        raise InvalidRequest("-o OUT takes one PATH")
    for text in args.paths:
        path = Path(text)
        if not path.is_file():
            raise InvalidRequest(f"{path}: not a file")
        if args.output and Path(args.output).exists() and Path(args.output).samefile(path):
            raise InvalidRequest(f"-o {args.output} is the input: use --in-place to replace it")


async def run(args: argparse.Namespace, store: Store) -> int:
    from ..transcripts import Repairer, RepairOptions, limits_for, named, undo

    backup_dir = Path(args.backup_dir) if args.backup_dir else None
    reports: list[RepairReport] = []
    if args.undo:
        for text in args.paths:
            reports.append(await undo(Path(text), backup_dir=backup_dir, assume_closed=args.assume_closed))
    else:
        limits_for(store.routes, args.model, "generic")  # an unknown model ends the run before any file
        options = RepairOptions(args.tenant, args.dry_run, args.assume_closed, backup_dir)
        repairer = Repairer(store, lambda host: limits_for(store.routes, args.model, host), options)
        fmt = named(args.format) if args.format else None
        for text in args.paths:
            path = Path(text)
            output = None if args.dry_run else (Path(args.output) if args.output else path)
            if output is not None:
                await asyncio.to_thread(output.parent.mkdir, parents=True, exist_ok=True)
            reports.append(await repairer.repair(path, output, fmt=fmt, session=args.session))
    if args.json:
        total = {"files": len(reports), "statuses": _statuses(reports)}
        files = [r.summary() for r in reports]
        out = {"action": "undo" if args.undo else "repair", "dry_run": args.dry_run, "files": files}
        print(msgspec.json.encode(out | {"total": total}).decode())
    else:
        for r in reports:
            print("\n".join(lines(r)))
        statuses = ", ".join(f"{n} {s}" for s, n in _statuses(reports).items())
        dry = " (dry run: nothing written)" if args.dry_run else ""
        print(f"{'undo' if args.undo else 'repair'}: {len(reports)} files ({statuses}){dry}")
    return EXIT_FAILED if any(r.status in ("failed", "skipped") for r in reports) else EXIT_OK


def _statuses(reports: list[RepairReport]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in reports:
        out[r.status] = out.get(r.status, 0) + 1
    return out


def lines(r: RepairReport) -> list[str]:
    where = f" -> {r.output}" if r.output and r.output != r.path else ""
    head = f"{r.status:<10} {r.path}{where}"
    if r.status in ("skipped", "failed"):
        return [f"{head}  {r.reason}: {r.message}"]
    sizes = f"{human_bytes(r.bytes_before)} -> {human_bytes(r.bytes_after)}"
    if r.status == "undone":
        return [f"{head}  the original put back from {r.backup}; {sizes}"]
    what = f"[{r.format}] for {r.model}: images {r.kept} kept, {len(r.fitted)} fitted, {len(r.text)} to text"
    left = f", {r.left} left (nested or cut)" if r.left else ""
    out = [f"{head}  {what}{left}; {sizes}"]
    out += [
        f"  fitted   line {f.line}: {f.before or 'not an image the provider takes'} -> {f.after} ({f.why})"
        for f in r.fitted
    ]
    out += [
        f"  to text  line {t.line}: {t.code}: {t.message}" + (f" (stored as {t.ref})" if t.ref else "")
        for t in r.text
    ]
    q = r.request
    limits: dict[str, Any] = q.limits
    out.append(
        f"  largest request: {q.images} images (limit {limits.get('images')}), "
        f"{human_bytes(q.image_base64)} of image base64 "
        f"(limit {human_bytes(limits.get('image_base64', 0))}), "
        f"about {human_bytes(q.body)} of body (limit {human_bytes(limits.get('body', 0))})"
    )
    if r.backup:
        out.append(f"  original kept at {r.backup} (attachstore transcript repair --undo {r.path})")
    if r.message:
        out.append(f"  {r.message}")
    return out


def runner(args: argparse.Namespace, config: Config) -> Callable[[Store], Any]:
    check(args)
    return lambda store: run(args, store)
