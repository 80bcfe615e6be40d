"""The test bench: two network namespaces joined through a user-space path emulator.

:mod:`.netns` makes and removes the namespaces, :mod:`.emulator` forwards their
packets with delay, rate and loss per direction, :mod:`.path` (:class:`EmulatedPath`)
brings both up as one context manager, :mod:`.holders` keeps a path alive for
``tierwise lab up``, :mod:`.budget` bounds a run's wall time, :mod:`.service` is the
small model service the experiments call, and :mod:`.capture` records what arrives
at one end. Nothing here imports the experiments, the route world, views or the CLI.
"""
