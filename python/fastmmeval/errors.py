"""User-facing errors: one line that names the file, field or item at fault."""


class FastmmevalError(Exception):
    """An error caused by input (a task file, a flag, a dataset row), shown as one line."""


class ConfigError(FastmmevalError):
    """A task file, flag or model argument is malformed or names something unknown."""


class DocError(FastmmevalError):
    """One document cannot be turned into a request (missing field, unreadable image)."""
