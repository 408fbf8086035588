"""Moved: the baseline selection and ``with_retain`` are ``analysis.reference``; Retain itself is ``hero.statistics``.

Kept only for ``analysis/report.py`` (being refactored elsewhere), which still imports from here; once it imports
``analysis.reference``, delete this module.
"""

from analysis.reference import BaselineError, parse_selector, resolve_baselines, with_retain

__all__ = ["BaselineError", "parse_selector", "resolve_baselines", "with_retain"]
