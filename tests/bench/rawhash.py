"""The audit's floor: walk a store's objects/ and sha256 every file, in one process.

    python -m tests.bench.rawhash DATA_DIR     # prints {"files", "bytes", "seconds", "mb_per_s"} as JSON

It does what `attachstore audit` cannot avoid doing (list the files, read every byte, hash it) and nothing
else: no index, no header checks, no findings.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time


def hash_tree(root: str) -> tuple[int, int]:
    files = size = 0
    for directory, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(directory, name), "rb") as f:
                data = f.read()
            hashlib.sha256(data).hexdigest()
            files += 1
            size += len(data)
    return files, size


def main() -> None:
    start = time.perf_counter()
    files, size = hash_tree(os.path.join(sys.argv[1], "objects"))
    seconds = time.perf_counter() - start
    json.dump(
        {"files": files, "bytes": size, "seconds": seconds, "mb_per_s": size / seconds / 1e6}, sys.stdout
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
