"""tierwise: decide where an AI task runs by the time the whole task takes."""

__version__ = "0.1.0"
