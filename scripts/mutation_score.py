"""The mutation score per module after ``mutmut run`` (``make mutation``; docs/testing/README.md).

    python scripts/mutation_score.py                    # one row per mutated module
    python scripts/mutation_score.py --survivors        # and every mutant no test killed, with its diff command

mutmut writes one ``mutants/<module>.py.meta`` per mutated file, the exit code of the tests per mutant. A mutant is
killed when a test failed on it (or timed out); it survived when every test that reaches it passed, and it has no
tests when none of the selected tests reaches its function. Mutants listed in ``tests/mutation_equivalent.txt`` (one
``<mutant name>  <why it cannot be told apart>`` per line) are equivalent: no test can kill them, so they leave the
score. score = killed / (mutants run − equivalent); a partial run (``make mutation MUTANTS=...``) scores what it ran
and says how many it did not. ``--min-score`` makes the command fail when a module scores below it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EQUIVALENT = REPO / "tests" / "mutation_equivalent.txt"
KILLED = {1, 3, 24, -24, 36, 152, 255}  # a failing test, pytest's internal error, a timeout (mutmut.stats)
NO_TESTS = {5, 33}


def equivalent() -> dict[str, str]:
    """Mutant name → why it is equivalent, from ``tests/mutation_equivalent.txt``."""
    out = {}
    for line in EQUIVALENT.read_text().splitlines() if EQUIVALENT.is_file() else []:
        if line.strip() and not line.startswith("#"):
            name, _, reason = line.strip().partition(" ")
            out[name] = reason.strip()
    return out


def tally(mutants: Path) -> dict[str, dict]:
    """Per mutated module: counts by outcome and the names of the mutants that survived or have no tests."""
    known = equivalent()
    out = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if not codes:
            continue
        module = str(meta.relative_to(mutants)).removesuffix(".meta")
        row = {"mutants": len(codes), "killed": 0, "equivalent": 0, "survived": [], "no_tests": [], "unchecked": 0}
        for name, code in sorted(codes.items()):
            if name in known:
                row["equivalent"] += 1
            elif code in KILLED:
                row["killed"] += 1
            elif code in NO_TESTS:
                row["no_tests"].append(name)
            elif code is None:
                row["unchecked"] += 1
            else:
                row["survived"].append(name)
        checked = row["mutants"] - row["equivalent"] - row["unchecked"]
        row["score"] = 100.0 * row["killed"] / checked if checked else float("nan")
        out[module] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python scripts/mutation_score.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mutants", type=Path, default=REPO / "mutants", help="mutmut's folder (default: ./mutants)")
    ap.add_argument("--survivors", action="store_true", help="list every mutant that survived or has no tests")
    ap.add_argument("--min-score", type=float, help="exit 1 when a module scores below this (percent)")
    args = ap.parse_args(argv)
    if not args.mutants.is_dir():
        print(f"error: --mutants {args.mutants}: no such folder; run `make mutation` first", file=sys.stderr)
        return 2
    rows = tally(args.mutants)
    print("| module | mutants | not run | killed | equivalent | survived | no tests | score |")
    print("|---|---|---|---|---|---|---|---|")
    for module, r in rows.items():
        score = "–" if math.isnan(r["score"]) else f"{r['score']:.1f} %"
        print(
            f"| {module} | {r['mutants']} | {r['unchecked']} | {r['killed']} | {r['equivalent']} | {len(r['survived'])} "
            f"| {len(r['no_tests'])} | {score} |"
        )
    if args.survivors:
        for r in rows.values():
            for kind in ("survived", "no_tests"):
                for name in r[kind]:
                    print(f"{kind:9s} {name}    (mutmut show {name})")
    low = [m for m, r in rows.items() if args.min_score is not None and not r["score"] >= args.min_score]
    for module in low:
        print(f"error: {module} scores {rows[module]['score']:.1f} %, below --min-score {args.min_score:g}")
    return 1 if low else 0


if __name__ == "__main__":
    sys.exit(main())
