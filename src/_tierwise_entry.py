"""The ``tierwise`` console script's first code: Ctrl-C or SIGTERM while it loads.

``tierwise --help`` spends ~0.3 s importing ``tierwise`` (its ``__init__``), typer and
rich before :func:`tierwise.cli.main` installs its handling of Ctrl-C (exit 130) and
SIGTERM (exit 143); a signal in that window used to end in a Python traceback. This
module sits outside the ``tierwise`` package so that importing it imports nothing of
ours: it installs :func:`_quit` for both signals as the console script imports it, before
the package loads, and hands over to :func:`tierwise.cli.main` once it has.

While loading, there is nothing to clean up (no command has started) and an exception
raised from a handler could land anywhere — in the launcher's own lines, in an import,
in a ``__del__`` that prints it as "Exception ignored" — so the handler writes one
word and leaves at once. The same holds on the way out, after the command has ended
(the interpreter's exit: atexit handlers, thread joins). What the interpreter does
before this module's first line (its start-up, ``site``, the launcher's ``import re``)
no code of ours can cover: a signal there is the interpreter's (docs/validation.md,
"Ctrl-C and SIGTERM while `tierwise` loads").

A signal the parent ignores (``nohup``, a background job's SIGINT) stays ignored.
"""

from __future__ import annotations

import os
import signal

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_WORDS = {signal.SIGINT: b"aborted\n", signal.SIGTERM: b"terminated\n"}


def _quit(signum: int, frame: object) -> None:
    """Say why we stop and exit 128 + the signal, now: nothing is running to unwind."""
    try:
        os.write(2, _WORDS.get(signum, b"stopped\n"))
    except OSError:  # stderr closed: the status still says it
        pass
    os._exit(128 + signum)


def _guard() -> None:
    """:func:`_quit` for every signal of ours that the parent does not ignore."""
    for signum in _SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _quit)


_guard()  # as the launcher imports this module: before its next line, and the package


def main() -> None:
    """The ``tierwise`` command: :func:`tierwise.cli.main`, guarded while it loads and
    after it returns."""
    from tierwise.cli import Terminated
    from tierwise.cli import main as run

    try:
        if signal.getsignal(signal.SIGINT) is _quit:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C unwinds again
        run()  # installs its SIGTERM handler first; until then SIGTERM is still _quit
    except KeyboardInterrupt as exc:  # one that landed outside run()'s own try
        _quit(signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT, None)
    finally:
        _guard()
