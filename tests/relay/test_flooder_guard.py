"""The flood tests' flooder sends only to loopback, or to the lab's own paths from inside a
lab namespace: never to an address outside this host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FLOODER = Path(__file__).with_name("flooder.py")


@pytest.mark.parametrize("target", ["10.77.0.2:7443", "192.0.2.1:9", "8.8.8.8:53"])
def test_the_flooder_refuses_a_target_off_loopback_outside_a_lab_namespace(target: str) -> None:
    out = subprocess.run(
        [sys.executable, str(FLOODER), f"--to={target}", "--seconds", "0.1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode != 0
    assert "loopback" in out.stderr and not out.stdout


def test_the_flooder_sends_to_loopback() -> None:
    out = subprocess.run(
        [sys.executable, str(FLOODER), "--to=127.0.0.1:9", "--seconds", "0.1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    sent, seconds = out.stdout.split()
    assert int(sent) > 0 and float(seconds) > 0
