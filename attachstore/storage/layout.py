"""Where an object lives, as a pure function of its already validated reference, the same in every backend:
`<alg>/<hex[0:2]>/<hex[2:4]>/<hex>` below the objects area (SPEC section 3), and back."""

from __future__ import annotations

from ..errors import AttachstoreError
from ..refs import ALGORITHMS, Ref


def object_name(ref: Ref) -> str:
    d = ref.digest
    return f"{ref.algorithm}/{d[0:2]}/{d[2:4]}/{d}"


def ref_at(name: str) -> Ref | None:
    parts = name.split("/")
    if len(parts) != 4 or parts[0] not in ALGORITHMS:
        return None
    algorithm, first, second, digest = parts
    if (first, second) != (digest[0:2], digest[2:4]):
        return None
    try:
        return Ref.parse(f"{algorithm}:{digest}")
    except AttachstoreError:
        return None
