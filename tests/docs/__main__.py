"""`python -m tests.docs [--update] [DOCUMENT ...]`: run the documents' console blocks against a live daemon,
compare what they show (or, with --update, rewrite it from the run); exit 1 on a difference."""

from __future__ import annotations

import argparse
import sys

from .harness import DOCUMENTS, ROOT, check


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m tests.docs", description=__doc__)
    p.add_argument("documents", nargs="*", metavar="DOCUMENT", help=f"default: {', '.join(DOCUMENTS)}")
    p.add_argument("--update", action="store_true", help="rewrite the outputs the documents show")
    args = p.parse_args()
    failed = False
    for name in args.documents or DOCUMENTS:
        problems = check(ROOT / name, update=args.update)
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"{name}: {'FAILED' if problems else 'updated' if args.update else 'ok'}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
