"""α calibration: one Optuna study per (variant, target skip, backbone, layer set).

Table 1's methods are calibrated the same way by their own cost knob (``search_space.py``).

``python calibrate.py ablation=full,no_history target_skip=0.2687`` finds, per variant, the
skip-loss weight α whose realized parameter skip rate matches the target, and writes the
calibration file that ``train.py alpha=calibrated calibration.target_skip=0.2687`` reads.

    search_space.py  where each method's knob is searched: α (HeRo), target_ratio / k / p (hero.methods)
    sampler.py   MonotoneSampler: bracket in log α (or the knob), then secant / bisection (Optuna sampler)
    storage.py   SQLite / RDB URL / journal file; password from the environment, masked output
    compact.py   drop a journal file's superseded heartbeat lines (``python -m hero.calibration.compact``)
    study.py     the ask/tell loop: ``parallel`` trials in flight across all studies
    trials.py    one trial = a real (optionally shortened) training run, inline / local / SLURM

The calibration file these write and ``train.py alpha=calibrated`` reads is ``hero.calibration_file``
(a low module: the run's spec reads it). Monotone sampler vs TPE, trials to reach the tolerance:
``python -m hero.bench.calibration``.
"""
