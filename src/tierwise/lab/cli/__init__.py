"""The lab's command line: ``tierwise lab …`` (:mod:`.app` holds the typer app)."""
