"""Runs looked up in the stored training sweeps (``results/training_*.json``) by their settings.

Chapter 10 reads the same sweep on several pages; each page looks its runs up with these.
"""
from __future__ import annotations

import dataclasses

from attnlib.book import training

# what a stored config that predates a field means by it: the field's default
_DEFAULTS = dataclasses.asdict(training.ModelConfig())


def find(runs: list[dict], rule: str, head_dim: int, init: str = "lecun", layernorm: bool = True,
         optimizer: str = "adam", seed: int = 0, **more) -> dict:
    """The one run in ``runs`` with these settings (unnamed config fields at their defaults)."""
    wanted = {"qk_norm": False, "post_ln": False, "value_dim": None, **more,
              "scale_rule": rule, "head_dim": head_dim, "init": init, "layernorm": layernorm}
    unknown = sorted(set(wanted) - set(_DEFAULTS))
    if unknown:
        raise ValueError(f"settings should be fields of training.ModelConfig, got {', '.join(unknown)}")
    found = [r for r in runs if r["optimizer"] == optimizer and r["seed"] == seed
             and all(r["config"].get(k, _DEFAULTS[k]) == v for k, v in wanted.items())]
    if len(found) != 1:
        raise ValueError(f"runs should hold exactly one run with {wanted}, optimizer {optimizer!r}, "
                         f"seed {seed}; got {len(found)}")
    return found[0]


def steps_to(run: dict, threshold: str) -> str:
    """The first logged step with copy loss below ``threshold`` ("1.0" or "0.1"), "-" if none."""
    step = run["first_step_copy_loss_below"][threshold]
    return "-" if step is None else str(step)


def outcome(run: dict) -> str:
    """Copy loss at the last step, its lowest stored value, first steps below 1.0 and 0.1."""
    copy = run["curves"]["copy_loss"]
    return f"{copy[-1]:5.3f} {min(copy):5.3f} {steps_to(run, '1.0'):>4} {steps_to(run, '0.1'):>4}"


def peak(curve: list) -> int:
    """The index of a stored curve's largest value (the first, if it recurs)."""
    return max(range(len(curve)), key=curve.__getitem__)
