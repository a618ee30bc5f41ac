"""Chapter 10's training sweep: does the scale on q . k matter once the model trains?

    python benchmarks/training_sweep.py              # the 72-run sweep, one worker per core
    python benchmarks/training_sweep.py controls     # the 66 control runs, one worker (~10-20 min)
    python benchmarks/training_sweep.py means        # 12 of them again, logging means (~5 min)

Trains :class:`attnlib.book.training.CopyTransformer` on the copy task
(``attnlib.book.training.CopyTask()``: 16 random tokens of 16, a separator, the
16 again) for every combination of

    scale rule  1/sqrt(d), 1, 1/d
    head_dim    16, 64, 256
    init        torch (nn.Linear's default), lecun (normal, 1/sqrt(fan_in))
    layernorm   before attention or not

with Adam (seed 0; a second seed at head_dim 256), with SGD + momentum
(LayerNorm runs), and, with Adam and QK-norm, the rules 1/sqrt(d) and 1 at
the three widths (LeCun init, LayerNorm): 72 runs.
Each run is 400 steps of batch 32 on fresh data, logged every 10 steps. The
runs are spread over one worker process per core, one thread each.

The controls (``controls_grid``) test two readings of the sweep, with Adam:
Post-LN blocks (the original transformer's, where the source's LayerNorm
claim was made) under the three rules; the values' width held at 64 while
``head_dim`` changes (is a wider head's advantage the scale or the
capacity?); and the sweep's Pre-LN and no-LayerNorm runs with LeCun init
again, now logging per-coordinate variances and weight norms.
They are written to ``attnlib/book/results/training_controls.json``.

The means study (``means_grid``) trains again, with the same seeds, the
controls' runs that Section 10.3's LayerNorm argument rests on (1/sqrt(d),
LeCun, seed 0: Pre-LN, no LayerNorm and Post-LN at the three widths) and the
sweep's three QK-norm runs under 1/sqrt(d), now logging what Chapter 14
measures on trained checkpoints: the within-row and between-row parts of
Var(q . k)/d, the independent model's within-row part and the coordinates'
squared means (``TrainingLog.SPLIT_CURVES``). Logging draws no random number,
so each run's other curves are those of the stored run it repeats. Written
to ``attnlib/book/results/training_means.json``.

Writes ``attnlib/book/results/training_sweep.json``: the machine and date, the
task, the training settings, and per run its configuration, the first
logged step at which the copy loss is below each threshold in
``THRESHOLDS`` (None if never), and every curve of its
:class:`attnlib.book.training.TrainingLog` every ``STORED_EVERY`` steps, to four
significant digits.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time

import torch

from attnlib.book import stored_results, training
from measure import machine

RESULTS = {"sweep": stored_results.RESULTS / "training_sweep.json",
           "controls": stored_results.RESULTS / "training_controls.json",
           "means": stored_results.RESULTS / "training_means.json"}
STEPS, BATCH, LOG_EVERY, STORED_EVERY = 400, 32, 10, 20
THRESHOLDS = (1.0, 0.1)
HEAD_DIMS = (16, 64, 256)
TASK = training.CopyTask()


def grid() -> list[dict]:
    """Every run of the sweep: ``config`` (a ModelConfig's fields), ``optimizer``, ``seed``.

    All 36 settings with Adam (seed 0); a second seed where the widest heads
    make the differences largest (head_dim 256); SGD with LayerNorm; QK-norm
    with LeCun init and LayerNorm under the rules 1/sqrt(d) and 1.
    """
    runs = []
    for rule, head_dim, init, layernorm in itertools.product(
            training.SCALE_RULES, HEAD_DIMS, training.INITS, (True, False)):
        config = dict(scale_rule=rule, head_dim=head_dim, init=init, layernorm=layernorm)
        runs.append(dict(config=config, optimizer="adam", seed=0))
        if head_dim == 256:
            runs.append(dict(config=config, optimizer="adam", seed=1))
        if layernorm:
            runs.append(dict(config=config, optimizer="sgd", seed=0))
    for rule, head_dim in itertools.product(("1/sqrt(d)", "1"), HEAD_DIMS):
        config = dict(scale_rule=rule, head_dim=head_dim, init="lecun", layernorm=True,
                      qk_norm=True)
        runs.append(dict(config=config, optimizer="adam", seed=0))
    return runs


def controls_grid() -> list[dict]:
    """The control runs, all with Adam.

    Post-LN under every rule, width and init, seeds 0 and 1; values held 64
    wide under every rule at head_dim 16 and 256, LeCun init, seeds 0 and 1;
    Pre-LN and no LayerNorm again (LeCun, seed 0), now logging per-coordinate
    variances and weight norms.
    """
    def run(rule, head_dim, init="lecun", seed=0, **changes):
        return dict(config=dict(scale_rule=rule, head_dim=head_dim, init=init, **changes),
                    optimizer="adam", seed=seed)

    rules_and_widths = list(itertools.product(training.SCALE_RULES, HEAD_DIMS))
    runs = [run(rule, head_dim, init, seed, post_ln=True)
            for (rule, head_dim), init, seed in itertools.product(rules_and_widths,
                                                                  training.INITS, (0, 1))]
    runs += [run(rule, head_dim, seed=seed, value_dim=64)
             for rule, head_dim, seed in itertools.product(training.SCALE_RULES, (16, 256), (0, 1))]
    runs += [run(rule, head_dim, layernorm=layernorm)
             for (rule, head_dim), layernorm in itertools.product(rules_and_widths, (True, False))]
    return runs


def means_grid() -> list[dict]:
    """The runs of the means study, all with Adam and seed 0, LeCun init, 1/sqrt(d).

    Pre-LN, no LayerNorm and Post-LN blocks at each width (as in
    ``controls_grid``), then QK-norm with Pre-LN at each width (as in ``grid``).
    """
    blocks = (dict(layernorm=True), dict(layernorm=False), dict(post_ln=True),
              dict(layernorm=True, qk_norm=True))
    return [dict(config=dict(scale_rule="1/sqrt(d)", head_dim=head_dim, init="lecun", **block),
                 optimizer="adam", seed=0)
            for block, head_dim in itertools.product(blocks, HEAD_DIMS)]


def commit() -> str:
    """The repository's commit, with ``+changes`` when the work tree differs from it."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()
    return git("rev-parse", "--short", "HEAD") + ("+changes" if git("status", "--porcelain") else "")


def _significant(x: float) -> float:
    return float(f"{x:.4g}") if math.isfinite(x) else str(x)


def run_one(run: dict) -> dict:
    torch.set_num_threads(1)
    start = time.perf_counter()
    config = training.ModelConfig(**run["config"])
    log = training.train(config, TASK, steps=STEPS, batch_size=BATCH,
                         optimizer=run["optimizer"], seed=run["seed"], log_every=LOG_EVERY)
    curves = log.as_dict()
    kept = [i for i, s in enumerate(log.step) if s % STORED_EVERY == 0]
    return {
        **run,
        "config": dataclasses.asdict(config),
        "scale": config.scale,
        "first_step_copy_loss_below": {str(t): log.first_step_below(t) for t in THRESHOLDS},
        "wall_seconds": round(time.perf_counter() - start, 2),
        "curves": {name: [_significant(curves[name][i]) if name != "step" else curves[name][i]
                          for i in kept] for name in ("step",) + training.TrainingLog.CURVES},
    }


def main(study: str = "sweep") -> None:
    at_start = {**machine(), "commit": commit()}
    runs = {"sweep": grid, "controls": controls_grid, "means": means_grid}[study]()
    # the controls and the means are small studies on a shared machine: one worker
    workers = (os.cpu_count() or 1) if study == "sweep" else 1
    wall = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        results = []
        for done, result in enumerate(pool.map(run_one, runs), 1):
            results.append(result)
            c = result["config"]
            print(f"[{done}/{len(runs)}] {result['optimizer']} seed {result['seed']} "
                  f"{c['scale_rule']:>9} d={c['head_dim']:<3} {c['init']:5} "
                  f"LN={c['layernorm']!s:5} QKnorm={c['qk_norm']!s:5} "
                  f"postLN={c['post_ln']!s:5} d_v={c['value_dim']} "
                  f"copy loss {result['curves']['copy_loss'][-1]:.3f} "
                  f"({result['wall_seconds']:.0f} s)", flush=True)
    wall = time.perf_counter() - wall
    summary = {
        "machine": at_start,
        "load_average_1min_after": round(os.getloadavg()[0], 2),
        "workers": workers,
        "wall_seconds": round(wall, 1),
        "task": {**dataclasses.asdict(TASK), "ln_vocab_size": math.log(TASK.vocab_size),
                 "optimal_loss": TASK.optimal_loss(),
                 "uniform_causal_entropy": training.uniform_causal_entropy(TASK.context)},
        "training": {"steps": STEPS, "batch_size": BATCH, "log_every": LOG_EVERY,
                     "stored_every": STORED_EVERY, "lr": training.DEFAULT_LR,
                     "sgd_momentum": 0.9, "thresholds": list(THRESHOLDS)},
        "runs": results,
    }
    results_file = RESULTS[study]
    results_file.parent.mkdir(exist_ok=True)
    results_file.write_text(json.dumps(summary, separators=(",", ":")) + "\n")
    print(f"{len(runs)} runs in {wall / 60:.1f} min on {workers} workers; wrote {results_file}")


if __name__ == "__main__":
    main(*sys.argv[1:])
