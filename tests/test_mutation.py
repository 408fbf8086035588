"""The fast subset of the mutation check that CI runs (``make mutation`` is the whole check; docs/testing/README.md).

Each case is one hand-made mutant of a module that carries the paper's equations or the platform's accounting —
the bug a headline claim must not survive — and the test that must kill it. The mutant is applied to a copy of
``hero/`` in a temporary folder, the test runs there in a fresh process, and it must FAIL; the same test on the
unmutated copy must pass. A test that stops catching its bug (loosened, skipped, made vacuous) fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# (module, code as written, the mutant, the test that must kill it)
MUTANTS = {
    "eq18_ignores_padding": (
        "hero/objectives.py",
        "weights = valid.to(depth_sum.dtype)",
        "weights = torch.ones_like(depth_sum)",
        "tests/test_core.py::test_skip_loss_sums_depth_before_squaring",
    ),
    "eq18_squares_before_the_depth_sum": (
        "hero/objectives.py",
        "depth_sum = torch.stack([g.float() for g in gates], dim=0).sum(dim=0)\n"
        "    weights = valid.to(depth_sum.dtype)\n"
        "    return (depth_sum.pow(2) * weights)",
        "depth_sum = torch.stack([g.float() for g in gates], dim=0).pow(2).sum(dim=0)\n"
        "    weights = valid.to(depth_sum.dtype)\n"
        "    return (depth_sum * weights)",
        "tests/test_core.py::test_skip_loss_sums_depth_before_squaring",
    ),
    "eq14_history_head_reads_no_nu": (
        "hero/model/router.py",
        "torch.cat([s, read, nu.unsqueeze(-1)], dim=-1)",
        "torch.cat([s, read, torch.zeros_like(nu).unsqueeze(-1)], dim=-1)",
        "tests/test_core.py::test_heads_read_their_inputs",
    ),
    "router_not_fp32_under_autocast": (
        "hero/model/router.py",
        "            if torch.is_autocast_enabled(device)\n",
        "            if False\n",
        "tests/test_core.py::test_router_computes_in_fp32_under_autocast",
    ),
    "retain_is_a_ratio_of_means": (
        "hero/statistics.py",
        "return total([ratios[task] for task in sorted(ratios)]) / len(ratios) * 100.0",
        "return total([ratios[task] for task in sorted(ratios)][:1]) * 100.0",
        "tests/test_evaluation.py::test_retain_is_mean_of_ratios_not_ratio_of_means",
    ),
    "net_compute_charges_no_router": (
        "hero/model/flops.py",
        '"net_compute_rate": (ffn_saved - router - adapter) / backbone["total"]',
        '"net_compute_rate": (ffn_saved - adapter) / backbone["total"]',
        "tests/test_flops.py::test_net_compute_by_hand",
    ),
    "resume_forgets_the_rng_state": (
        "hero/checkpoints.py",
        '    set_rng_state(payload["rng"])\n',
        "",
        "tests/test_checkpoints.py::test_a_checkpoint_restores_tensors_optimizer_schedule_rng_and_curve",
    ),
}


def _run(tmp_path: Path, case: str, mutate: bool) -> subprocess.CompletedProcess:
    module, original, mutant, test = MUTANTS[case]
    root = tmp_path / ("mutant" if mutate else "original")
    shutil.copytree(REPO / "hero", root / "hero", ignore=shutil.ignore_patterns("__pycache__"))
    for shared in ("conf", "analysis", "tests", "docs", "train.py", "pyproject.toml"):
        (root / shared).symlink_to(REPO / shared)
    source = root / module
    text = source.read_text()
    assert text.count(original) == 1, f"{module} no longer holds the code this mutant changes: update MUTANTS"
    if mutate:
        source.write_text(text.replace(original, mutant))
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--rootdir", str(root), test],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize("case", sorted(MUTANTS))
def test_each_named_bug_is_killed_by_its_test(tmp_path, case):
    clean = _run(tmp_path, case, mutate=False)
    assert clean.returncode == 0, clean.stdout[-2000:] + clean.stderr[-2000:]
    mutated = _run(tmp_path, case, mutate=True)
    assert mutated.returncode == 1, f"the mutant survived: {mutated.stdout[-2000:]}"
    assert "1 failed" in mutated.stdout
