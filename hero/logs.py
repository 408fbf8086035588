"""The terminal shows the project's own lines; what libraries log goes to the run's log file.

lm-eval, transformers, datasets and the like log warnings a user of this project cannot act on
("Custom kwargs can be passed to ``--metadata``", "Passed an already-initialized model", ...).
``train.py`` (``conf/hydra/job_logging/hero.yaml``) and a calibration trial (``logged_to``)
send every record to the run's log file (``<run dir>/train.log``) and let only the project's own
loggers (``hero.*``, ``analysis.*``, ``__main__``) reach the terminal, plus any record at ERROR or
above. Python ``warnings`` (``FutureWarning`` from transformers, ...) are logged (``py.warnings``),
so they land in the file too. The project's printed lines and an error that stops a run (Hydra and
the entry points write those to stderr themselves) are not logging and reach the terminal as before.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PROJECT_LOGGERS = ("hero", "analysis", "__main__")
FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


class OwnLines(logging.Filter):
    """Passes records of the project's own loggers, and anything at ERROR or above."""

    def filter(self, record: logging.LogRecord) -> bool:
        top = record.name.split(".")[0]
        return top in PROJECT_LOGGERS or record.levelno >= logging.ERROR


def capture_warnings() -> None:
    """Route Python ``warnings`` through logging (``py.warnings``), where ``OwnLines`` keeps them off the terminal."""
    logging.captureWarnings(True)


@contextmanager
def logged_to(path: Path, stream=None) -> Iterator[None]:
    """Outside Hydra's job logging (a calibration trial): every record to ``path``, own lines to ``stream``.

    The handlers go again on exit, and Python ``warnings`` are shown as before.
    """
    root = logging.getLogger()
    level = root.level
    path.parent.mkdir(parents=True, exist_ok=True)
    to_file = logging.FileHandler(path)
    console = logging.StreamHandler(stream or sys.stdout)
    console.addFilter(OwnLines())
    for handler in (to_file, console):
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        for handler in (to_file, console):
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
