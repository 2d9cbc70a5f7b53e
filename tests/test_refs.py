import hashlib

import blake3
import pytest

from attachstore.errors import InvalidRef
from attachstore.refs import Ref

HEX = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def test_parse_round_trips() -> None:
    ref = Ref.parse(f"sha256:{HEX}")
    assert (ref.algorithm, ref.digest, str(ref)) == ("sha256", HEX, f"sha256:{HEX}")
    assert Ref.parse(f"blake3:{HEX}").algorithm == "blake3"


@pytest.mark.parametrize(
    "text",
    [
        "sha256:../../etc/passwd",
        f"sha256:{HEX[:-1]}",
        f"sha256:{HEX}0",
        f"sha256:{HEX.upper()}",
        f"md5:{HEX}",
        f"SHA256:{HEX}",
        f" sha256:{HEX}",
        f"sha256:{HEX}\n",
        f"sha256:{HEX[:-2]}/x",
        HEX,
        "",
        "sha256:" + "a" * 200,
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(InvalidRef) as e:
        Ref.parse(text)
    assert e.value.code == "INVALID_ATTACHMENT_REF"
    assert e.value.status == 400


def test_of_uses_the_named_algorithm() -> None:
    assert Ref.of("sha256", b"test").digest == hashlib.sha256(b"test").hexdigest()
    assert Ref.of("blake3", b"test").digest == blake3.blake3(b"test").hexdigest()
    assert Ref.of("sha256", b"test").matches(b"test")
    assert not Ref.of("sha256", b"test").matches(b"tesT")
