"""The one reader of user TOML: encoding, size and depth are checked before anything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierwise.errors import CatalogError, ScenarioError
from tierwise.tomlfile import MAX_DEPTH, MAX_FILE_BYTES, parse_toml, read_toml


def test_bom_is_dropped(tmp_path: Path) -> None:
    """A UTF-8 byte-order mark (as Windows editors write) is accepted."""
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbfa = 1\n")
    assert read_toml(path) == {"a": 1}


@pytest.mark.parametrize(
    ("data", "needles"),
    [
        (b'a = "caf\xe9"\n', ["not UTF-8", "0xe9 at offset 8", "line 1"]),
        (b"a = 1\n\xff\n", ["0xff at offset 6", "line 2"]),
        (b"\xef\xbb\xbfa = 1\n\x80", ["0x80 at offset 9"]),
    ],
)
def test_non_utf8_names_the_byte(tmp_path: Path, data: bytes, needles: list[str]) -> None:
    """Bytes that are not UTF-8 are one error naming the file, the byte and where it is."""
    path = tmp_path / "latin1.toml"
    path.write_bytes(data)
    with pytest.raises(ScenarioError) as err:
        read_toml(path)
    assert str(path) in str(err.value)
    for needle in needles:
        assert needle in str(err.value)


@pytest.mark.parametrize(
    "text",
    [
        "a = " + "[" * 5000 + "]" * 5000,
        "a = " + "{b = " * 2000 + "1" + "}" * 2000,
        "[" + ".".join(f"k{i}" for i in range(1000)) + "]\nx = 1\n",
        "a" + ".b" * (MAX_DEPTH + 1) + " = 1\n",
    ],
    ids=["arrays", "inline tables", "1000-part header", "dotted key"],
)
def test_deep_nesting_is_an_error_not_a_recursion_error(text: str) -> None:
    """Deep nesting in any TOML form is refused with a message, never RecursionError."""
    with pytest.raises(ScenarioError, match="nested deeper than"):
        parse_toml(text, "deep.toml")


def test_huge_integer_is_a_syntax_error() -> None:
    """An integer beyond Python's 4,300-digit limit is a syntax error, not ValueError."""
    with pytest.raises(ScenarioError, match="4,300 digits"):
        parse_toml("a = " + "9" * 5000, "big.toml")


def test_oversized_file_is_not_read(tmp_path: Path) -> None:
    """A file over the size cap is refused before it is parsed."""
    path = tmp_path / "big.toml"
    path.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(ScenarioError, match="larger than"):
        read_toml(path)


def test_error_type_is_the_callers() -> None:
    """The catalog gets CatalogError naming the file, with the same checks."""
    with pytest.raises(CatalogError, match=r"^cat\.toml: not UTF-8"):
        parse_toml(b"\xff", "cat.toml", error=lambda msg, src: CatalogError(f"{src}: {msg}"))


@pytest.mark.parametrize("reader", ["read_toml", "read_text", "read_json"])
def test_a_fifo_nothing_writes_to_is_an_error_in_bounded_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    """mkfifo f; tierwise plan f: every reader gives up after INPUT_WAIT_S, never hangs."""
    import os
    import time

    from tierwise import tomlfile

    monkeypatch.setattr(tomlfile, "INPUT_WAIT_S", 0.3)
    fifo = tmp_path / "in.toml"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(ScenarioError, match=r"did not finish within 0\.3 s"):
        getattr(tomlfile, reader)(fifo)
    assert time.monotonic() - started < 3.0


def test_a_fifo_whose_writer_finishes_is_read(tmp_path: Path) -> None:
    """--config <(make-config): the bytes a writer sends and closes are read whole."""
    import os
    import threading
    import time

    fifo = tmp_path / "in.toml"
    os.mkfifo(fifo)

    def write() -> None:
        time.sleep(0.1)  # the reader opens first, as with bash's <(…)
        with open(fifo, "w") as f:  # more than a pipe's 64 KiB: several reads
            f.write("".join(f"k{i} = {i}\n" for i in range(20_000)))

    writer = threading.Thread(target=write)
    writer.start()
    data = read_toml(fifo)
    writer.join()
    assert len(data) == 20_000 and data["k19999"] == 19_999


@pytest.mark.parametrize(
    ("path", "needle"),
    [("/dev/zero", "larger than 10 MB"), ("/dev/urandom", "larger than 10 MB"), ("/", "directory")],
)
def test_endless_devices_and_directories_are_one_error(path: str, needle: str) -> None:
    """/dev/zero is read to the size bound, not for ever; a directory is named one."""
    with pytest.raises(ScenarioError, match=needle):
        read_toml(path)
