"""Output files written whole or not at all: a temporary beside the target, then a rename."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tierwise.outfile import staged, write_text


def _siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_finished_write_takes_the_name(tmp_path: Path) -> None:
    """What was written under the temporary name is the target afterwards, and only it."""
    write_text(tmp_path / "page.html", "<html>")
    assert (tmp_path / "page.html").read_text() == "<html>"
    assert _siblings(tmp_path) == ["page.html"]


@pytest.mark.parametrize("existing", [None, "the old page"])
def test_a_failed_write_leaves_the_old_file_and_no_partial(tmp_path: Path, existing) -> None:
    """An error half-way: no truncated file, the old one untouched, no temporary left."""
    target = tmp_path / "fig.png"
    if existing is not None:
        target.write_text(existing)
    with pytest.raises(OSError, match="disk full"), staged(target) as partial:
        partial.write_text("half a fig")
        raise OSError(28, "disk full")
    assert _siblings(tmp_path) == ([] if existing is None else ["fig.png"])
    if existing is not None:
        assert target.read_text() == existing


def test_the_temporary_keeps_the_suffix_for_savefig(tmp_path: Path) -> None:
    """matplotlib picks the format by suffix: the temporary must end .svg too."""
    with staged(tmp_path / "a.svg") as partial:
        assert partial.suffix == ".svg" and partial.parent == tmp_path
        partial.write_text("<svg/>")


def test_a_symlink_is_followed_and_stays_a_link(tmp_path: Path) -> None:
    """--html link.html: the file it points to is replaced; the link is not."""
    real = tmp_path / "sub" / "real.html"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    assert _siblings(real.parent) == ["real.html"]


def test_a_device_is_written_in_place() -> None:
    """/dev/null is written, never renamed over (that would replace the device)."""
    with staged("/dev/null") as partial:
        assert partial == Path("/dev/null")
    assert not Path("/dev/null").is_file()


def test_the_replaced_file_keeps_its_permissions(tmp_path: Path) -> None:
    """A 0640 record stays 0640 after it is rewritten."""
    target = tmp_path / "record.json"
    target.write_text("{}")
    target.chmod(0o640)
    write_text(target, '{"a": 1}')
    assert os.stat(target).st_mode & 0o777 == 0o640
