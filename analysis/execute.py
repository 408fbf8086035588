"""Execute the analysis notebooks (``analysis/notebooks/*.py``, jupytext percent format) on given records.

The notebooks read the record directories from the environment variable
``HERO_RESULTS_DIRS`` (``os.pathsep``-separated; default: ``multirun`` and
``outputs`` of the repository) and write their figures to ``HERO_NOTEBOOK_OUT``
(default: a temporary directory). ``execute_notebook`` runs one in a fresh
``python3`` kernel with those variables set and raises on the first failing cell.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

NOTEBOOK_DIR = Path(__file__).resolve().parent / "notebooks"
REPO_ROOT = Path(__file__).resolve().parents[1]
DIRS_ENV = "HERO_RESULTS_DIRS"
OUT_ENV = "HERO_NOTEBOOK_OUT"


def results_dirs() -> list[str]:
    """The record directories a notebook analyses (``HERO_RESULTS_DIRS``, else the repository's Hydra outputs)."""
    value = os.environ.get(DIRS_ENV)
    if value:
        return value.split(os.pathsep)
    return [str(d) for d in (REPO_ROOT / "multirun", REPO_ROOT / "outputs") if d.exists()]


def figure_dir() -> Path:
    """Where a notebook writes its PNGs (``HERO_NOTEBOOK_OUT``, else a new temporary directory)."""
    out = Path(os.environ.get(OUT_ENV) or tempfile.mkdtemp(prefix="hero_nb_"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def notebooks() -> list[Path]:
    return sorted(NOTEBOOK_DIR.glob("*.py"))


def execute_notebook(source: str | os.PathLike, dirs, out: str | os.PathLike | None = None, timeout: int = 600):
    """Run ``source`` on the records under ``dirs``; write the executed ``.ipynb`` to ``out`` if given; return it."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    source = Path(source)
    nb = jupytext.read(source)
    env = dict(os.environ)
    env[DIRS_ENV] = os.pathsep.join(str(d) for d in dirs)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    if out is not None:
        env[OUT_ENV] = str(Path(out).parent / f"{source.stem}_figures")
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(source.parent)}}
    )
    client.execute(env=env)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out)
    return nb


def execute_all(dirs, out_dir: str | os.PathLike) -> list[Path]:
    """Execute every notebook into ``out_dir/<name>.ipynb``; return the paths."""
    paths = []
    for source in notebooks():
        target = Path(out_dir) / f"{source.stem}.ipynb"
        execute_notebook(source, dirs, target)
        paths.append(target)
    return paths
