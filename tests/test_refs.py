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
    assert e.value.hint  # every refusal says how a reference looks, or how to make this one one
    assert "\n" not in e.value.message


@pytest.mark.parametrize(
    ("text", "problem", "hint"),
    [
        ("", "it is empty", None),
        (HEX, "it has no algorithm", f"add the algorithm: sha256:{HEX}"),
        (HEX.upper(), "it has no algorithm", f"add the algorithm: sha256:{HEX}"),
        (
            f"SHA256:{HEX}",
            "it is in upper case; a reference is lower case",
            f"write it in lower case: sha256:{HEX}",
        ),
        (f"blake3:{HEX}.JPG", "it ends in a file extension ('.JPG')", f"drop it: blake3:{HEX}"),
        ("x" * 129, "it is 129 characters; a reference has at most 128", None),
        (f"sha1:{HEX[:40]}", "the algorithm 'sha1' is unknown; it is sha256 or blake3", None),
        (f"../sha256:{HEX}", "it does not start with sha256: or blake3:", None),
        ("sha256:", "it has no digest after the colon", None),
        (f"sha256:{HEX}\n", "the digest holds '\\n' at offset 71, not a hex digit", None),
        ("hello", "it is not an algorithm, a colon and a digest", None),
    ],
)
def test_a_refusal_says_what_is_wrong(text: str, problem: str, hint: str | None) -> None:
    with pytest.raises(InvalidRef) as e:
        Ref.parse(text)
    assert e.value.message.endswith(f": {problem}")
    assert e.value.hint == (hint or "a reference is sha256: (or blake3:) and 64 lowercase hex digits")


def test_of_uses_the_named_algorithm() -> None:
    assert Ref.of("sha256", b"test").digest == hashlib.sha256(b"test").hexdigest()
    assert Ref.of("blake3", b"test").digest == blake3.blake3(b"test").hexdigest()
    assert Ref.of("sha256", b"test").matches(b"test")
    assert not Ref.of("sha256", b"test").matches(b"tesT")
