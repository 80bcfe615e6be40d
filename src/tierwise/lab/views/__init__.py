"""Figures of the lab's records, made and saved through :mod:`tierwise.figsave`.

:mod:`.timeline` draws one request's events, :mod:`.rounds` a cold upload's rounds
and :mod:`.via` the requests per transport. They read records (and use the
experiments' helpers); the CLI calls them.
"""
