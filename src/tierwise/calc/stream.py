"""calc entries (filled in by the model area)."""
