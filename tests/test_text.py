from attachstore.text import human_bytes


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1024, 5 * 1024**3)] == ["0 B", "1023 B", "1.0 KiB", "5.0 GiB"]
