"""The one base class of every "bad input" error: config, data, path, checkpoint.

``train.py`` turns these into a one-line message and exit code 2, before any compute.
"""


class ConfigError(ValueError):
    """A user-supplied value cannot be used; the message names it and what is allowed."""
