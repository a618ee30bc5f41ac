"""The live figures (_static/live/) in a real browser, against attnlib on the same inputs.

Headless Chromium opens each chapter that holds a live figure, as built, at 1400 and at 390 px
wide; a driver appended to a copy of the page moves every control of the figure in turn
(range inputs by their position, selects by value, checkboxes, buttons), and after each move
reads what the figure shows: the numbers as text and, in data attributes, at full precision.
The test recomputes every reading with attnlib (attnlib/book/live_figures.py) from the settings the
page reports, which must be the ones the step asked for.

Tolerance: shown full-precision values agree with attnlib's to 1e-9 (absolute, relative above 1);
the page and Python draw the same seeded numbers up to the last bit or two of Math.log and
Math.cos, and sum in other orders. Numbers shown as text agree with attnlib's rounded to the
same places, except where attnlib's value lies within 1e-9 of a rounding boundary. Tile kinds
and counts agree exactly.

Also: every control is a native, labelled, focusable element; nothing the page requests leaves
the page's host (file://); no console error; the figure fits its column. And from the keyboard
alone, in a 390-px viewport: Chromium driven over its DevTools protocol (on a pipe, no package
needed) tabs from each figure's first control to the next and presses a key on each (arrows,
space, enter), as trusted input; each press must move that control and the figure with it.
Under print media each page shows the static figure, not the live one, under the same caption.

Every reading also runs the lines the figure prints under itself ("this state in code": the attnlib
call that computes what it shows) and compares their result with the page's numbers; the tile
figure's kernel call is bound to the kernel's signature, and once run in Triton's interpreter.
Under touch emulation (a coarse pointer) at both widths: no "Tap the figure" hint under a live
figure, every control at least 44 px high, on a phone one control a row and the readout in view;
a link to a state ("#fig-mask-builder?L=8&sink-on=on") restores it, a move rewrites it without a
new history entry, and "reset" gives the page's own state and takes the fragment off the address;
the caption describes the figure (aria-describedby); chapter 8's "next block" keeps the focus at
the last block, "play" steps on by itself and pauses, and under reduced motion its bars change
with no transition; the figures' dark mode has no white tiles. Direct manipulation: a key's
header in the mask builder pads that key (Enter, Space or a click) and a cell names the rules that
hide it (a click, or the arrow keys inside the grid), checked against attnlib's masks one by one.
"""
import ast
import functools
import html as html_module
import inspect
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

import numpy as np
import pytest

from attnlib import checkpoints
from attnlib.book import live_figures, stored_results
from attnlib.fused import attention as fused_attention
from attnlib.book.seeded import SeededNormal
from devtools_pipe import Browser
from test_book import CHROMIUM, DESKTOP, ERROR_CATCHER, PHONE, PHONE_FRAME, PHONE_HEIGHT, needs_chromium

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import jupyter_edition  # noqa: E402

TOLERANCE = 1e-9

# (page, figure, steps); a step is (actions, settings the page must then report)
SCENARIOS = [
    ("chapters/04_softmax_saturation", "saturation", [
        ([], {"d": 64, "draw": 0}),
        ([("d", "index", 8)], {"d": 256, "draw": 0}),
        ([("draw", "click", None)], {"d": 256, "draw": 1}),
        ([("d", "index", 0)], {"d": 1, "draw": 1}),
        ([("d", "index", 10), ("draw", "click", None)], {"d": 1024, "draw": 2}),
        ([("reset", "click", None)], {"d": 64, "draw": 0}),
    ]),
    ("chapters/05_stability_and_masks", "mask-builder", [
        ([], {"L": 4, "S": 6, "causal": "bottom_right", "left": "2", "right": "none", "valid": 6,
              "sink-on": False, "pad": "none"}),
        ([("L", "index", 7)], {"L": 8}),
        ([("causal", "value", "top_left"), ("left", "value", "none"), ("right", "value", "1")],
         {"causal": "top_left", "left": "none", "right": "1"}),
        ([("valid", "index", 3)], {"valid": 3}),
        ([("sink-on", "checked", True)], {"sink-on": True, "sink": 0}),
        ([("sink", "index", 10), ("causal", "value", "none"), ("S", "index", 4)],
         {"sink": 2, "causal": "none", "S": 5, "valid": 3}),
        ([("L", "index", 1), ("causal", "value", "bottom_right"), ("left", "value", "0")],
         {"L": 2, "causal": "bottom_right", "left": "0"}),
        # a key's header pads that key alone: k1 (of the 3 before the padding), then k4 (after it)
        ([("key", "press", 1)], {"pad": "1", "valid": 3}),
        ([("key", "press", 4)], {"pad": "1,3", "valid": 5}),
        ([("cell", "press", "1,3"), ("S", "index", 7)], {"pad": "1,3", "valid": 5, "S": 8}),
        ([("key", "press", 1), ("cell", "press", "0,2")], {"pad": "3", "valid": 5}),
        ([("reset", "click", None)], {"L": 4, "S": 6, "causal": "bottom_right", "left": "2", "right": "none",
                                      "valid": 6, "sink-on": False, "sink": 0, "pad": "none"}),
    ]),
    ("chapters/08_online_softmax", "online-softmax", [
        ([], {"block": "4", "read": 4}),
        ([("previous", "click", None)], {"read": 3}),
        ([("block", "value", "2")], {"block": "2", "read": 3}),
        ([("next", "click", None)], {"read": 4}),
        ([("read", "index", 8)], {"read": 8}),
        ([("block", "value", "1"), ("read", "index", 16)], {"block": "1", "read": 16}),
        ([("block", "value", "16")], {"block": "16", "read": 1}),
        ([("block", "value", "8"), ("read", "index", 0)], {"block": "8", "read": 0}),
        ([("read", "index", 2)], {"read": 2}),
        # play at the end starts again from no key read; pause (in the same task: no step between)
        ([("play", "click", None), ("play", "click", None)], {"block": "8", "read": 0}),
        # reset while playing: the page's state, and no step after it
        # drags (a height: a share of the strip's, from its top): the axis runs from 3 down to -3, and a
        # drag past an end stops there; half way is the zero line
        ([("bar", "drag", [3, 0.0]), ("bar", "drag", [8, 1.0]), ("bar", "drag", [5, 0.5])], {"z": "3:3,5:0,8:-3"}),
        ([("block", "value", "1"), ("read", "index", 16)], {"block": "1", "read": 16, "z": "3:3,5:0,8:-3"}),
        ([("play", "click", None), ("reset", "click", None)], {"block": "4", "read": 4, "z": "none"}),
    ]),
    ("chapters/09_1_the_kernel", "kernel-tiles", [
        ([], {"n": 512, "block-m": "64", "block-n": "64", "causal": True, "left": "127"}),
        ([("n", "index", 7)], {"n": 1024}),
        ([("block-m", "value", "128"), ("block-n", "value", "32")], {"block-m": "128", "block-n": "32"}),
        ([("causal", "checked", False)], {"causal": False}),
        ([("left", "value", "none"), ("n", "index", 2)], {"left": "none", "n": 384}),
        ([("causal", "checked", True), ("left", "value", "31"), ("block-m", "value", "32")],
         {"causal": True, "left": "31", "block-m": "32"}),
        ([("reset", "click", None)], {"n": 512, "block-m": "64", "block-n": "64", "causal": True, "left": "127"}),
    ]),
    # λ's stops (live_figures.trained_factors): MiniLM's index 19 is sqrt(32), no scale; SmolLM2's
    # index 2 is sqrt(64 / 576), divided by sqrt(d_model); a mistake stays that mistake in the other model
    ("chapters/14_3_scale_and_saturation", "trained-head", [
        ([], {"model": "minilm", "sentence": "0", "layer": "3", "head": "0", "factor": 1}),
        ([("factor", "index", 19), ("head", "value", "7")], {"factor": math.sqrt(32), "head": "7"}),
        ([("model", "value", "smollm2"), ("sentence", "value", "1"), ("layer", "value", "29"),
          ("row", "index", 4)], {"model": "smollm2", "sentence": "1", "layer": "29", "head": "7", "row": 4,
                                 "factor": 8}),
        ([("factor", "index", 2)], {"factor": math.sqrt(64 / 576)}),
        ([("factor", "index", 0), ("layer", "value", "0")], {"factor": 0.25, "layer": "0"}),
        ([("reset", "click", None)], {"model": "minilm", "sentence": "0", "layer": "3", "head": "0", "factor": 1}),
    ]),
]

# What a test reads from a figure and how it moves a control, as window.__liveTest.
HELPERS = r"""
(function () {
  const read = {
    "saturation": (root) => ({
      panels: Object.fromEntries([...root.querySelectorAll("[data-panel]")].map((panel) => [panel.dataset.panel, {
        weights: [...panel.querySelectorAll(".live-bar-row")].map((r) => +r.dataset.weight),
        weightTexts: [...panel.querySelectorAll(".live-bar-value")].map((e) => e.textContent),
        spreadNote: panel.querySelector(".live-spread").textContent,
        ...Object.fromEntries([...panel.querySelectorAll("strong[data-shown]")].map((e) =>
          [e.dataset.shown, { value: +e.dataset.value, text: e.textContent }])),
      }])),
      curve: [...root.querySelectorAll(".live-plot-point")].map((e) => [+e.dataset.d, e.dataset.side, +e.dataset.value]),
      band: Object.fromEntries([...root.querySelectorAll(".live-plot-band")].map((e) => [e.dataset.side, JSON.parse(e.dataset.quartiles)])),
      plotText: [...root.querySelectorAll(".live-plot text")].map((e) => e.textContent),
      band: Object.fromEntries([...root.querySelectorAll(".live-plot-band")].map((e) => [e.dataset.side, JSON.parse(e.dataset.quartiles)])),
      plotText: [...root.querySelectorAll(".live-plot text")].map((e) => e.textContent),
      draw: +root.querySelector("[data-shown=draw]").dataset.draw,
      code: root.querySelector("[data-shown=code]").textContent,
    }),
    "mask-builder": (root) => ({
      rows: [...root.querySelectorAll("tr[data-query]")].map((row) => ({
        allowed: [...row.querySelectorAll("td[data-allowed]")].map((c) => c.dataset.allowed === "true"),
        weights: [...row.querySelectorAll("td[data-allowed]")].map((c) => +c.dataset.weight),
        texts: [...row.querySelectorAll("td[data-allowed]")].map((c) => c.textContent),
        sink: row.querySelector("td[data-sink]") ? +row.querySelector("td[data-sink]").dataset.sink : null,
      })),
      padding: [...root.querySelectorAll("[data-key]")].map((b) => b.getAttribute("aria-pressed") === "true"),
      why: { cell: root.querySelector("[data-shown=why]").dataset.cell || null,
             rules: root.querySelector("[data-shown=why]").dataset.rules, text: root.querySelector("[data-shown=why]").textContent },
      note: root.querySelector(".live-note[aria-live]").textContent,
      code: root.querySelector("[data-shown=code]").textContent,
    }),
    "online-softmax": (root) => ({
      history: [...root.querySelectorAll("tr[data-keys-read]")].map((row) => ({
        keys_read: +row.dataset.keysRead, m: +row.dataset.m, l: +row.dataset.l, acc: +row.dataset.acc,
        output: +row.dataset.output, texts: [...row.querySelectorAll("td")].map((c) => c.textContent),
      })),
      shown: Object.fromEntries([...root.querySelectorAll("dd[data-shown]")].map((e) =>
        [e.dataset.shown, { value: +e.dataset.value, text: e.textContent }])),
      scores: [...root.querySelectorAll(".live-strip rect")].map((e) => +e.dataset.score),
      scoreTexts: [...root.querySelectorAll(".live-score > span:last-child")].map((e) => e.textContent),
      code: root.querySelector("[data-shown=code]").textContent,
    }),
    "trained-head": (root) => ({
      map: [...root.querySelectorAll(".live-weight-map rect[data-weight]")].map((e) => +e.dataset.weight),
      row: [...root.querySelectorAll(".live-trained-row .live-bar-row")].map((e) => +e.dataset.weight),
      rowTexts: [...root.querySelectorAll(".live-trained-row .live-bar-value")].map((e) => e.textContent),
      ...Object.fromEntries([...root.querySelectorAll("strong[data-shown]")].map((e) =>
        [e.dataset.shown, { value: +e.dataset.value, text: e.textContent }])),
      factorText: root.querySelector("[data-control=factor]").getAttribute("aria-valuetext"),
      marks: [...root.querySelectorAll(".live-factor-strip text")].map((e) => e.textContent),
      curves: [...root.querySelectorAll(".live-curve-point")].map((e) => [+e.dataset.factor, e.dataset.measure, +e.dataset.value]),
      code: root.querySelector("[data-shown=code]").textContent,
    }),
    "kernel-tiles": (root) => ({
      kinds: [...root.querySelectorAll(".live-tile")].map((t) => [t.dataset.tile, +t.dataset.kind]),
      counts: Object.fromEntries([...root.querySelectorAll(".live-summary [data-shown]")].map((e) => [e.dataset.shown, +e.dataset.value])),
      axes: [...root.querySelectorAll("[data-axis]")].map((e) => e.textContent),
      code: root.querySelector("[data-shown=code]").textContent,
    }),
  };
  function settings(root) {
    const out = {};
    for (const c of root.querySelectorAll("[data-control]")) {
      const name = c.dataset.control;
      if (c.type === "range") out[name] = +c.dataset.value;
      else if (c.type === "checkbox") out[name] = c.checked;
      else if (c.tagName === "SELECT") out[name] = c.value;
    }
    // state the figure keeps besides its controls (a draw, padded keys, dragged scores): in its link
    const link = root.querySelector(".live-link");
    const fragment = link ? decodeURIComponent(new URL(link.href).hash) : "";
    for (const [name, value] of new URLSearchParams(fragment.slice(fragment.indexOf("?") + 1))) {
      if (!(name in out)) out[name] = value;
    }
    return out;
  }
  function controls(root) {
    return [...root.querySelectorAll("[data-control]")].map((c) => {
      const label = c.id ? document.querySelector(`label[for="${c.id}"]`) : null;
      return { name: c.dataset.control, tag: c.tagName.toLowerCase(), type: c.type || "",
               label: (label ? label.textContent : c.textContent).trim(), tabIndex: c.tabIndex };
    });
  }
  function act(root, [name, how, value]) {
    if (how === "drag") {  // 8.1's score bar: down half way up its column, moved to `height`, let go
      const [key, height] = value, strip = root.querySelector(".live-strip");
      const at = (share, box = strip.getBoundingClientRect()) => ({ clientX: box.left + (key + 0.5) / 16 * box.width, clientY: box.top + share * box.height,
                               pointerId: 1, bubbles: true });
      strip.querySelector(`[data-key="${key}"]`).dispatchEvent(new PointerEvent("pointerdown", at(0.5)));
      strip.dispatchEvent(new PointerEvent("pointermove", at(height)));
      strip.dispatchEvent(new PointerEvent("pointerup", at(height)));
      return;
    }
    if (how === "press") {  // direct manipulation: a key's header, a cell of the grid
      const target = root.querySelector(name === "key" ? `[data-key="${value}"]` : `td[data-cell="${value}"]`);
      target.focus();
      target.click();
      return;
    }
    const c = root.querySelector(`[data-control="${name}"]`);
    if (!c) throw new Error(`no control ${name}`);
    if (how === "index") { c.value = String(value); c.dispatchEvent(new Event("input", { bubbles: true })); }
    else if (how === "value") { c.value = value; c.dispatchEvent(new Event("change", { bubbles: true })); }
    else if (how === "checked") { c.checked = value; c.dispatchEvent(new Event("change", { bubbles: true })); }
    else if (how === "click") c.click();
  }
  window.__liveTest = { read, settings, controls, act };
})();
"""

# Runs a scenario once the page has loaded and writes the report into the DOM (--dump-dom).
DRIVER = "<script>" + HELPERS + r"""
(function () {
  const SCENARIO = __SCENARIO__;
  const { read, settings, controls, act } = window.__liveTest;
  function run() {
    const root = document.querySelector(`.live-figure[data-figure="${SCENARIO.figure}"]`);
    if (!root || !root.classList.contains("live-figure-ready")) throw new Error("the figure was not built");
    const column = (document.querySelector("article.bd-article") || document.body).getBoundingClientRect();
    const box = root.getBoundingClientRect();
    const report = {
      window: window.innerWidth, controls: controls(root), readings: [],
      fits: { width: Math.round(box.width), column: Math.round(column.width),
              overflow: root.scrollWidth - root.clientWidth, right: Math.round(box.right - column.right) },
      inHost: !!root.closest(".live-figure-host figure, figure.live-figure-host"),
    };
    for (const [actions] of SCENARIO.steps) {
      actions.forEach((a) => act(root, a));
      report.readings.push({ settings: settings(root), shown: read[SCENARIO.figure](root) });
    }
    report.resources = [...performance.getEntriesByType("resource").map((e) => e.name),
                        ...[...document.querySelectorAll("script[src], link[href], img[src]")].map((e) => e.src || e.href)];
    report.errors = window.__scriptErrors || [];
    return report;
  }
  window.addEventListener("load", () => setTimeout(() => {
    let report;
    try { report = run(); } catch (e) { report = { error: String(e && e.stack || e), errors: window.__scriptErrors || [] }; }
    const pre = document.createElement("pre");
    pre.id = "layout-report";
    pre.hidden = true;
    pre.textContent = JSON.stringify(report);
    document.body.appendChild(pre);
    if (window.parent !== window) window.parent.postMessage(pre.textContent, "*");
  }, 50));
})();
</script>
"""


def drive(page: pathlib.Path, figure: str, steps, width: int) -> dict:
    """Open ``page`` at ``width`` px with the driver, run ``steps`` on ``figure``, return the report."""
    scenario = json.dumps({"figure": figure, "steps": steps})
    probe = page.with_name(f"{page.stem}.live-{width}.html")
    source = page.read_text()
    probe.write_text(source.replace("<head>", "<head>" + ERROR_CATCHER, 1)
                     .replace("</body>", DRIVER.replace("__SCENARIO__", scenario) + "</body>", 1))
    opened, window = probe, width
    if width < 500:  # Chromium's window is at least 500 px: a phone is a frame in it
        opened, window = page.with_name(f"{page.stem}.live-phone.html"), 600
        opened.write_text(PHONE_FRAME.format(src=probe.name, width=width, height=PHONE_HEIGHT))
    profile = tempfile.mkdtemp()
    try:
        result = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
             f"--user-data-dir={profile}", f"--window-size={window},1000", "--hide-scrollbars",
             "--virtual-time-budget=30000", "--dump-dom", opened.as_uri()],
            capture_output=True, text=True, timeout=180)
    finally:
        probe.unlink()
        opened.unlink(missing_ok=True)
        shutil.rmtree(profile, ignore_errors=True)
    found = re.search(r'<pre id="layout-report"[^>]*>(.*?)</pre>', result.stdout, flags=re.S)
    assert found, f"{page.name} at {width} px: no report; chromium said {result.stderr[-1500:]}"
    report = json.loads(html_module.unescape(found.group(1)))
    assert "error" not in report, f"{page.name} at {width} px: {report['error']} {report['errors']}"
    return report


def close(shown: float, expected: float) -> bool:
    return abs(shown - expected) <= TOLERANCE * max(1.0, abs(expected))


def same_text(text: str, expected: float, places: int) -> bool:
    """``text`` is ``expected`` to ``places`` decimals (either neighbour at a rounding boundary)."""
    return text in {f"{expected + delta:.{places}f}".replace("-0." + "0" * places, "0." + "0" * places)
                    for delta in (-TOLERANCE, 0.0, TOLERANCE)}


def run_printed(code: str, names: dict | None = None) -> dict:
    """Run the lines a figure prints under itself ("this state in code"), as a reader would paste them."""
    names = {} if names is None else names
    exec(compile(code, "<the figure's code>", "exec"), names)  # noqa: S102 - the page's own lines, under test
    return names


def kernel_call(code: str) -> tuple[inspect.BoundArguments, str]:
    """The tile figure's call of the fused kernel (``o = attention(...)``) bound to that function's
    signature, which fails on a keyword it does not take (it needs a GPU to run; one test runs it in
    Triton's interpreter), and the rest of the lines."""
    call = next(node for node in ast.parse(code).body
                if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "o")
    lines = code.splitlines()
    kernel = "\n".join(lines[call.lineno - 1:call.end_lineno])
    bound = run_printed(kernel, {"attention": inspect.signature(fused_attention).bind, "q": "q", "k": "k", "v": "v"})["o"]
    return bound, "\n".join(lines[:call.lineno - 1] + lines[call.end_lineno:])


@functools.lru_cache(maxsize=None)
def saturation_state(seed: int, draw: int, dim: int, scaled: bool):
    return live_figures.saturation_state(seed, draw, dim, scaled)


@functools.lru_cache(maxsize=None)
def saturation_band(seed: int) -> dict:
    return live_figures.saturation_band(seed)


@functools.lru_cache(maxsize=None)
def saturation_band(seed: int) -> dict:
    return live_figures.saturation_band(seed)


def check_saturation(settings: dict, shown: dict, seed: int = 0) -> None:
    assert shown["draw"] == settings["draw"]
    root = math.sqrt(settings["d"])
    sqrt_d = f"{root:.0f}" if root.is_integer() else f"{root:.2f}"
    printed = run_printed(shown["code"])
    for side in ("scaled", "unscaled"):
        summary = saturation_state(seed, settings["draw"], settings["d"], side == "scaled")
        panel = shown["panels"][side]
        assert all(map(close, panel["weights"], summary.weights)), (side, panel["weights"], summary.weights)
        assert all(same_text(t, w, 3) for t, w in zip(panel["weightTexts"], summary.weights))
        for name, expected in [("max-weight", summary.max_weight), ("entropy", summary.entropy)]:
            assert close(panel[name]["value"], expected), (side, name, panel[name], expected)
            assert same_text(panel[name]["text"].removesuffix(" nats"), expected, 3), (side, name, panel[name], expected)
        weights = printed[f"p_{side}"]
        assert weights.shape == (1, 8) and all(map(close, weights[0].tolist(), panel["weights"])), (side, shown["code"])
        # the scores' spread: attnlib's standard deviation, and the printed lines' own
        spread = live_figures.saturation_spread(seed, settings["draw"], settings["d"], side == "scaled")
        assert close(panel["spread"]["value"], spread) and same_text(panel["spread"]["text"], spread, 2), (side, panel)
        assert close(float(printed[f"sd_{side}"]), spread), (side, shown["code"])
        assert panel["spreadNote"].endswith(f"(expected about {'1' if side == 'scaled' else f'√d = {sqrt_d}'})"), panel
    # the largest weight of this draw at every d, for both sides, with the current d among them
    assert sorted((d, side) for d, side, _ in shown["curve"]) == sorted(
        (d, side) for d in live_figures.SATURATION_DIMS for side in ("scaled", "unscaled"))
    for d, side, value in shown["curve"]:
        assert close(value, saturation_state(seed, settings["draw"], d, side == "scaled").max_weight), (d, side, value)
    for side, quartiles in saturation_band(seed).items():  # the band and median over the first draws
        np.testing.assert_allclose(shown["band"]["scaled" if side else "unscaled"], quartiles, rtol=TOLERANCE, atol=TOLERANCE)
    assert {"key width d (log scale)", "largest weight"} <= set(shown["plotText"])  # the plot's axes
    for side, quartiles in saturation_band(seed).items():  # the band and median over the first draws
        np.testing.assert_allclose(shown["band"]["scaled" if side else "unscaled"], quartiles, rtol=TOLERANCE, atol=TOLERANCE)
    assert {"key width d (log scale)", "largest weight"} <= set(shown["plotText"])  # the plot's axes


def check_mask_builder(settings: dict, shown: dict, seed: int = 0) -> None:
    def reach(value):
        return None if value == "none" else int(value)

    window = (reach(settings["left"]), reach(settings["right"]))
    padded = [] if settings["pad"] == "none" else [int(j) for j in settings["pad"].split(",")]
    figure = dict(causal=None if settings["causal"] == "none" else settings["causal"],
                  window=None if window == (None, None) else window,
                  valid_keys=settings["valid"] if settings["valid"] < settings["S"] else None, padded_keys=padded)
    built = live_figures.mask_builder_weights(seed, settings["L"], settings["S"],
                                              sink=settings["sink"] if settings["sink-on"] else None, **figure)
    rules = live_figures.mask_builder_rules(settings["L"], settings["S"], **figure)
    assert shown["padding"] == (~rules["padding"][0]).tolist(), (shown["padding"], settings)
    if shown["why"]["cell"] is not None:  # the rules that hide the chosen cell, in the figure's order
        i, j = map(int, shown["why"]["cell"].split(","))
        hidden = [name for name in ("padding", "causal", "window") if not rules[name][i, j]]
        assert shown["why"]["rules"].split() == hidden, (shown["why"], hidden)
        assert shown["why"]["text"].startswith(f"q{i} {'does not see' if hidden else 'sees'} k{j}"), shown["why"]
    rows = shown["rows"]
    assert [row["allowed"] for row in rows] == built.allowed.tolist()
    for row, weights, allowed in zip(rows, built.weights.tolist(), built.allowed.tolist()):
        assert all(map(close, row["weights"], weights)), (row["weights"], weights)
        assert all(same_text(t, w, 2) for t, w, a in zip(row["texts"], weights, allowed) if a), (row, weights)
    if built.sink is None:
        assert all(row["sink"] is None for row in rows)
    else:
        assert all(map(close, [row["sink"] for row in rows], built.sink.tolist()))
    printed = run_printed(shown["code"])
    assert printed["p"].shape == (1, settings["L"], settings["S"]), shown["code"]
    for row, weights in zip(rows, printed["p"][0].tolist()):
        assert all(map(close, row["weights"], weights)), (shown["code"], row["weights"], weights)
    if built.sink is not None:
        assert all(map(close, [row["sink"] for row in rows], printed["sink_share"][0].tolist())), shown["code"]
    offset = settings["S"] - settings["L"] if settings["causal"] == "bottom_right" else 0
    where = "i" if offset == 0 else f"i + {offset}" if offset > 0 else f"i \u2212 {-offset}"
    assert shown["note"].startswith(f"Query i sits at key position {where}."), shown["note"]


def check_online_softmax(settings: dict, shown: dict, seed: int = 0) -> None:
    moved = {} if settings["z"] == "none" else {
        int(j): float(z) for j, z in (pair.split(":") for pair in settings["z"].split(","))}
    states = live_figures.online_softmax_states(seed, int(settings["block"]), moved)[:settings["read"]]
    history = shown["history"]
    assert [row["keys_read"] for row in history] == [state.keys_read for state in states]
    for row, state in zip(history, states):
        for name in ("m", "l", "acc", "output"):
            assert close(row[name], getattr(state, name)), (name, row, state)
        assert same_text(row["texts"][1], state.m, 4) and same_text(row["texts"][4], state.output, 4), (row, state)
    if states:
        assert close(shown["shown"]["output"]["value"], states[-1].output)
        assert same_text(shown["shown"]["l"]["text"], states[-1].l, 4)
    if settings["read"] * int(settings["block"]) == live_figures.ONLINE_KEYS:
        lse = states[-1].m + math.log(states[-1].l)
        assert close(shown["shown"]["lse"]["value"], lse)
    # the scores drawn with their sign, and their values as text
    query, keys, _ = live_figures.online_softmax_inputs(seed, moved)
    scores = ((query @ keys.T)[0] / math.sqrt(live_figures.ONLINE_WIDTH)).tolist()
    assert all(map(close, shown["scores"], scores)) and min(scores) < 0 < max(scores)
    assert all(same_text(t.replace("\u2212", "-"), z, 2) for t, z in zip(shown["scoreTexts"], scores, strict=True))
    printed = run_printed(shown["code"])
    if not states:
        assert "no key read yet" in shown["code"] and "o" not in printed
        return
    for name, value in [("m", printed["m"]), ("l", printed["l"][0]), ("acc", printed["acc"][0, 0]),
                        ("output", printed["o"][0, 0])]:
        assert close(float(value), getattr(states[-1], name)) and close(float(value), shown["shown"][name]["value"]), (
            name, shown["code"])


def check_kernel_tiles(settings: dict, shown: dict) -> None:
    left = None if settings["left"] == "none" else int(settings["left"])
    kinds = live_figures.tile_kinds(settings["n"], int(settings["block-m"]), int(settings["block-n"]),
                                    settings["causal"], None if left is None else (left, None))
    page = np.zeros_like(kinds)
    for tile, kind in shown["kinds"]:
        a, b = map(int, tile.split(","))
        page[a, b] = kind
    assert len(shown["kinds"]) == kinds.size
    np.testing.assert_array_equal(page, kinds)
    assert shown["counts"] == {"visited": int((kinds > 0).sum()), "masked": int((kinds == live_figures.MASKED).sum()),
                               "whole": int((kinds == live_figures.WHOLE).sum()),
                               "without-window": int((live_figures.tile_kinds(
                                   settings["n"], int(settings["block-m"]), int(settings["block-n"]),
                                   settings["causal"]) > 0).sum())}
    n_blocks, n_tiles = kinds.shape
    assert shown["axes"] == [f"key tiles, {n_tiles} of b_k = {settings['block-n']} keys \u2192",
                             f"query blocks, {n_blocks} of b_q = {settings['block-m']} queries \u2193"]
    bound, without_kernel = kernel_call(shown["code"])
    np.testing.assert_array_equal(run_printed(without_kernel)["kinds"], kinds)
    call = bound.arguments
    assert call.get("is_causal", False) == settings["causal"] and call["blocks"] == (
        int(settings["block-m"]), int(settings["block-n"])), shown["code"]
    assert call.get("window") == (None if left is None else (left, 0 if settings["causal"] else None)), shown["code"]


@functools.lru_cache(maxsize=None)
def trained_head_readouts(model: str, sentence: int, layer: int, head: int, factor: float):
    return live_figures.trained_head_readouts(model, sentence, layer, head, factor)


def check_trained_head(settings: dict, shown: dict) -> None:
    """The map, the row and the three readouts against attnlib on the stored queries and keys;
    the printed call's weights, and the readouts of those, against the page's."""
    model, factor = settings["model"], settings["factor"]
    causal = live_figures.TRAINED_CAUSAL[model]
    assert factor in live_figures.trained_factors(model), factor  # the page's stops are Python's, exactly
    expected = trained_head_readouts(model, int(settings["sentence"]), int(settings["layer"]),
                                     int(settings["head"]), factor)
    n = expected.weights.shape[0]
    assert len(shown["map"]) == n * n and all(map(close, shown["map"], expected.weights.flatten().tolist()))
    row = expected.weights[settings["row"]].tolist()
    assert all(map(close, shown["row"], row)), (settings, shown["row"])
    assert all(same_text(t, w, 3) for t, w in zip(shown["rowTexts"], row) if t != "\u2013"), shown["rowTexts"]
    printed = run_printed(shown["code"])
    from_code = live_figures.weight_readouts(printed["p"], causal)
    assert printed["p"].shape == (n, n) and all(map(close, printed["p"].flatten().tolist(), shown["map"])), shown["code"]
    for name, value, text in [("entropy", expected.entropy, f"{expected.entropy:.3f}"),
                              ("sink", expected.sink, f"{expected.sink:.3f}"),
                              ("one-hot", expected.one_hot, f"{100 * expected.one_hot:.1f}%")]:
        assert close(shown[name]["value"], value), (name, shown[name], value)
        assert close(getattr(from_code, name.replace("-", "_")), value), (name, shown["code"])
        assert shown[name]["text"] == text, (name, shown[name], text)
    # the one-hot share counts rows: none of them within the tolerance of the threshold
    largest = expected.weights.amax(-1)
    assert ((largest - live_figures.ONE_HOT_THRESHOLD).abs() > TOLERANCE).all()
    mistakes = {math.sqrt(32): "no scale", math.sqrt(32 / 384): "\u00f7\u221ad_model",
                math.sqrt(64): "no scale", math.sqrt(64 / 576): "\u00f7\u221ad_model"}
    if factor in mistakes:
        assert shown["factorText"].endswith(mistakes[factor]), shown["factorText"]
    assert {"trained", "no scale", "\u00f7\u221ad_model"} <= set(shown["marks"]), shown["marks"]
    # the three readouts of this head at every stop of λ
    stops = live_figures.trained_factors(model)
    assert sorted((f, m) for f, m, _ in shown["curves"]) == sorted((f, m) for f in stops for m in ("entropy", "sink", "one-hot"))
    for f, measure, value in shown["curves"]:
        at = trained_head_readouts(model, int(settings["sentence"]), int(settings["layer"]), int(settings["head"]), f)
        assert close(value, getattr(at, measure.replace("-", "_"))), (f, measure, value)


CHECKS = {"saturation": check_saturation, "mask-builder": check_mask_builder,
          "online-softmax": check_online_softmax, "kernel-tiles": check_kernel_tiles,
          "trained-head": check_trained_head}


@pytest.mark.book
@needs_chromium
@pytest.mark.parametrize("width", [DESKTOP, PHONE])
@pytest.mark.parametrize("page, figure, steps", SCENARIOS, ids=[s[1] for s in SCENARIOS])
def test_every_control_moves_the_figure_as_attnlib_computes(own_book_html, page, figure, steps, width):
    report = drive(own_book_html / f"{page}.html", figure, steps, width)
    assert report["window"] == width
    assert report["inHost"], "the live figure did not take its static figure's place"
    assert not report["errors"], report["errors"]
    remote = [url for url in report["resources"] if not url.startswith("file://")]
    assert not remote, f"requests leaving the page's host: {remote}"
    fits = report["fits"]
    assert fits["overflow"] <= 1 and fits["right"] <= 1, f"the figure is wider than its column: {fits}"

    controls = report["controls"]
    moved = {name for actions, _ in steps for name, how, _ in actions if how not in {"press", "drag"}}
    assert moved == {c["name"] for c in controls}, f"controls never moved: {({c['name'] for c in controls}) - moved}"
    for control in controls:  # native elements: focusable, and the keyboard works them
        assert control["tag"] in {"input", "select", "button"} and control["tabIndex"] >= 0, control
        assert control["label"], f"control without a label: {control}"

    draw = 0  # the saturation figure's draw: "draw again" is a button, not a setting
    for (actions, expected), reading in zip(steps, report["readings"]):
        expected = dict(expected)
        draw = expected.pop("draw", draw)
        assert {k: reading["settings"][k] for k in expected} == expected, (actions, reading["settings"])
        CHECKS[figure](dict(reading["settings"], draw=draw), reading["shown"])


def data_file_stamp(text: str) -> tuple[dict, str, str]:
    """The data file's header comment as ``{field: value}``, its data line and the JSON after it."""
    header, first, rest = [], *text.split("\n", 1)
    while first.startswith("// "):
        header.append(first[3:])
        first, rest = rest.split("\n", 1)
    return dict(line.split(": ", 1) for line in header[1:]), first, rest


def test_the_trained_head_page_loads_the_stored_queries_and_keys():
    """The page's data file is the stored JSON behind one line, stamped with what made it (the
    command, the checkpoints, the versions, the commit and the date: benchmarks/live_trained_heads.py),
    and the Python twin refuses settings the figure does not have, naming them."""
    stamp, first, rest = data_file_stamp(live_figures.TRAINED_DATA.read_text())
    assert first == live_figures.TRAINED_DATA_LINE
    assert json.loads(rest) == stored_results.load(live_figures.TRAINED_RESULTS)
    assert stamp.get("made by") == "python benchmarks/live_trained_heads.py", stamp
    assert re.fullmatch(r"[0-9a-f]{7,}(\+changes)?", stamp.get("commit", "")), stamp
    assert re.fullmatch(r"20\d\d-\d\d-\d\d \d\d:\d\d UTC", stamp.get("date", "")), stamp
    for name in live_figures.TRAINED_CAUSAL:
        checkpoint = checkpoints.CHECKPOINTS[name]
        assert f"{checkpoint.package}=={checkpoint.version}" in stamp.get(f"checkpoint {name}", ""), stamp
        assert checkpoint.sha256 in stamp[f"checkpoint {name}"], stamp
    assert re.search(r"torch \d+\.\d+\S*, transformers \d+\.\d+", stamp.get("versions", "")), stamp
    assert live_figures.TRAINED_DATA.stat().st_size < 512 * 1024
    query, key = live_figures.trained_head_inputs("smollm2", 1, 29, 8)
    assert query.shape == key.shape == (len(live_figures.trained_head_tokens("smollm2", 1)), 64)
    for arguments, named in [(("gpt2", 0, 0, 0), "model"), (("minilm", 2, 0, 0), "sentence"),
                             (("minilm", 0, 1, 0), "layer"), (("smollm2", 0, 0, 9), "head")]:
        with pytest.raises(ValueError, match=f"^{named} must"):
            live_figures.trained_head_inputs(*arguments)


def loaded_bytes(html: pathlib.Path, requests: list[str]) -> int:
    """The bytes of the files under ``html`` that a page requested (file:// URLs)."""
    files = {pathlib.Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path)) for url in requests
             if url.startswith("file://")}
    return sum(f.stat().st_size for f in files if f.is_file() and html in f.parents)


@pytest.mark.book
@needs_chromium
def test_only_the_trained_heads_page_loads_their_stored_queries_and_keys(own_book_html):
    """The trained head's data (370 kB) is loaded, in Chromium, by Chapter 14.3's page, whose figure
    then builds from it, and by no other page (Jupyter Book gives every page each _static/ script;
    _ext/live_figure_data.py takes this one out); the copy the book serves carries its stamp."""
    data = live_figures.TRAINED_DATA.name
    served = own_book_html / "_static" / "live" / data
    stamp, _, _ = data_file_stamp(served.read_text())
    assert stamp.get("made by") == "python benchmarks/live_trained_heads.py", stamp
    pages = ["intro", "chapters/04_softmax_saturation", "chapters/14_2_queries_and_keys",
             "chapters/14_3_scale_and_saturation"]
    browser = Browser(CHROMIUM, DESKTOP)
    try:
        for page in pages:
            browser.events.clear()
            browser.open((own_book_html / f"{page}.html").as_uri())
            requested = browser.requests()
            shows_it = page == "chapters/14_3_scale_and_saturation"
            loads = any(urllib.parse.urlsplit(url).path.endswith(f"/_static/live/{data}") for url in requested)
            assert loads == shows_it, (page, requested)
            print(f"{page}: {loaded_bytes(own_book_html, requested) / 1024:.0f} KiB in {len(requested)} requests")
            if shows_it:
                built = browser.evaluate("""[!!(window.attnlibLive && window.attnlibLive.trainedHeads
                    && window.attnlibLive.trainedHeads.minilm), !!document.querySelector(
                    '.live-figure[data-figure="trained-head"].live-figure-ready')]""")
                assert built == [True, True], (page, built)
        assert not browser.errors(), browser.errors()
    finally:
        browser.close()


def test_the_generator_draws_standard_normals_and_refuses_a_bad_seed():
    draws = SeededNormal(0).standard_normal(20000)
    assert abs(draws.mean()) < 0.03 and abs(draws.var() - 1) < 0.04  # 4 standard errors
    assert not np.array_equal(SeededNormal(1).standard_normal(4), SeededNormal(2).standard_normal(4))
    np.testing.assert_array_equal(SeededNormal(7).standard_normal((2, 3)).ravel(), SeededNormal(7).standard_normal(6))
    for seed in (-1, 2**32, 1.5, True):
        with pytest.raises(ValueError, match="seed must be an int"):
            SeededNormal(seed)


@pytest.mark.book
def test_the_jupyter_edition_keeps_the_static_figures_and_drops_the_placeholders(own_book_html):
    converter = jupyter_edition.Converter(jupyter_edition.Book(own_book_html), "chapters/04_softmax_saturation",
                                          jupyter_edition.book_url())
    notebook = json.loads((ROOT / "chapters" / "04_softmax_saturation.ipynb").read_text())
    converted = jupyter_edition.convert_notebook(notebook, converter)
    sources = ["".join(cell["source"]) for cell in converted["cells"]]
    assert not any("live-figure" in source for source in sources)
    figure = [cell for cell in converted["cells"]
              if cell.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("name") == "fig-widget-first-draw"]
    assert len(figure) == 1 and any("image/png" in output.get("data", {}) for output in figure[0]["outputs"])
    assert any("SaturationDemo(seed=0)" in source for source in sources)


def score_step(key: int, by: float) -> float:
    """8.1's score of ``key`` after one arrow key (``by``: 0.1 or -0.1), on the figure's steps of 0.05."""
    query, keys, _ = live_figures.online_softmax_inputs(0)
    return math.floor((float(query[0] @ keys[key]) / 2 + by) * 20 + 0.5) / 20


# (page, figure, [(key, settings the page must then report)]); the first key goes to the
# figure's first control, focused; Tab moves on to the next control, in the page's order
KEYBOARD = [
    ("chapters/04_softmax_saturation", "saturation", [
        ("ArrowRight", {"d": 128}), ("Tab", {}), ("Enter", {"draw": 1}), (" ", {"draw": 2}),
        ("Tab", {}), ("Enter", {"d": 64, "draw": 0}),
    ]),
    ("chapters/05_stability_and_masks", "mask-builder", [
        ("ArrowRight", {"L": 5}), ("Tab", {}), ("ArrowRight", {"S": 7}), ("Tab", {}),
        ("ArrowUp", {"causal": "top_left"}), ("Tab", {}), ("ArrowDown", {"left": "3"}), ("Tab", {}),
        ("ArrowDown", {"right": "0"}), ("Tab", {}), ("ArrowLeft", {"valid": 5}), ("Tab", {}),
        (" ", {"sink-on": True}), ("Tab", {}), ("ArrowRight", {"sink": 0.5}),
        ("Tab", {}), (" ", {"L": 4, "S": 6, "causal": "bottom_right", "left": "2", "right": "none", "valid": 6,
                            "sink-on": False, "sink": 0}),
        # the keys' headers (k0 to k5), then the grid: one Tab stop, its cells under the arrow keys
        ("Tab", {"focus": "key 0"}), ("Enter", {"pad": "0", "focus": "key 0"}), ("Tab", {"focus": "key 1"}),
        (" ", {"pad": "0,1", "focus": "key 1"}), ("Enter", {"pad": "0"}), *[("Tab", {})] * 4,
        ("Tab", {"focus": "cell 0,0"}), ("ArrowRight", {"focus": "cell 0,1"}), ("ArrowDown", {"focus": "cell 1,1"}),
    ]),
    ("chapters/08_online_softmax", "online-softmax", [
        ("ArrowUp", {"block": "2", "read": 4}), ("Tab", {}), ("ArrowRight", {"read": 5}), ("Tab", {}),
        ("Enter", {"read": 4}), ("Tab", {}), ("Enter", {"read": 5}),
        ("Tab", {}), ("Tab", {}), ("Enter", {"block": "4", "read": 4}),
        # the strip: one Tab stop; up and down move a score by 0.1 (onto steps of 0.05), left and right the bar
        ("Tab", {"focus": "key 0"}), ("ArrowUp", {"z": f"0:{score_step(0, 0.1)}", "focus": "key 0"}),
        ("ArrowRight", {"focus": "key 1"}), ("ArrowDown", {"z": f"0:{score_step(0, 0.1)},1:{score_step(1, -0.1)}"}),
    ]),
    ("chapters/09_1_the_kernel", "kernel-tiles", [
        ("ArrowLeft", {"n": 384}), ("Tab", {}), ("ArrowDown", {"block-m": "128"}), ("Tab", {}),
        ("ArrowUp", {"block-n": "32"}), ("Tab", {}), (" ", {"causal": False}), ("Tab", {}),
        ("ArrowDown", {"left": "255"}),
        ("Tab", {}), ("Enter", {"n": 512, "block-m": "64", "block-n": "64", "causal": True, "left": "127"}),
    ]),
    # SmolLM2's first sentence has 13 tokens: the drawn row goes from MiniLM's last (14) to 12
    ("chapters/14_3_scale_and_saturation", "trained-head", [
        ("ArrowDown", {"model": "smollm2", "layer": "15", "row": 12}), ("Tab", {}), ("ArrowDown", {"sentence": "1"}),
        ("Tab", {}), ("ArrowDown", {"layer": "29"}), ("Tab", {}), ("ArrowDown", {"head": "1"}), ("Tab", {}),
        ("ArrowRight", {"factor": 1.19}), ("Tab", {}), ("ArrowLeft", {"row": 11}),
        ("Tab", {}), ("Enter", {"model": "minilm", "sentence": "0", "layer": "3", "head": "0", "factor": 1,
                                "row": 14}),
    ]),
]


# what has the keyboard's focus: a control by its name, a key's header or a cell of the mask builder
FOCUSED = """(e => e.dataset.control || (e.dataset.key ? `key ${e.dataset.key}`
                                     : e.dataset.cell ? `cell ${e.dataset.cell}` : null))(document.activeElement)"""


@pytest.mark.book
@needs_chromium
@pytest.mark.parametrize("page, figure, presses", KEYBOARD, ids=[k[1] for k in KEYBOARD])
def test_every_control_works_from_the_keyboard_on_a_phone(own_book_html, page, figure, presses):
    browser = Browser(CHROMIUM, PHONE)
    try:
        browser.open((own_book_html / f"{page}.html").as_uri())
        assert browser.evaluate("window.innerWidth") == PHONE
        browser.evaluate(HELPERS)
        root = f'document.querySelector(\'.live-figure[data-figure="{figure}"]\')'
        browser.evaluate(f"{root}.querySelector('[data-control]').focus()")
        focused, expected, draw = [], {}, 0
        for key, moved in presses:
            browser.press(key)
            focused.append(browser.evaluate(FOCUSED))
            moved = dict(moved)
            if "focus" in moved:
                assert focused[-1] == moved.pop("focus"), (key, focused)
            state = browser.evaluate(f"({{settings: __liveTest.settings({root}), shown: __liveTest.read['{figure}']({root})}})")
            draw = moved.get("draw", draw)
            expected.update({k: v for k, v in moved.items() if k != "draw"})
            assert {k: state["settings"][k] for k in expected} == expected, (key, focused[-1], state["settings"])
            CHECKS[figure](dict(state["settings"], draw=draw), state["shown"])
        names = browser.evaluate(f"[...{root}.querySelectorAll('[data-control]')].map(c => c.dataset.control)")
        # "play" runs on a timer: test_the_figures_on_a_phone_and_in_a_link presses it
        reached = {name for name in focused if name is None or not name.startswith(("key ", "cell "))}
        assert reached - {"play"} == set(names) - {"play"}, f"never reached from the keyboard: {set(names) - reached}"
        assert not browser.errors(), browser.errors()
        remote = [url for url in browser.requests() if not url.startswith("file://")]
        assert not remote, f"requests leaving the page's host: {remote}"
    finally:
        browser.close()



# (page, the static figure's id, the start of its caption)
PRINTED = [
    ("chapters/04_softmax_saturation", "fig-widget-first-draw", "One query and eight keys (seed 0, first draw)"),
    ("chapters/05_stability_and_masks", "fig-mask-builder", "Weights of 4 queries over 6 keys"),
    ("chapters/08_online_softmax", "fig-online-steps", "Online softmax over the 16 keys"),
    ("chapters/09_1_the_kernel", "fig-kernel-tiles", "tiles the fused kernel visits for causal"),
    ("chapters/14_3_scale_and_saturation", "fig-trained-head-live", "One head of MiniLM"),
]

SHOWN = """(() => {
  const host = document.getElementById("%s");
  const live = host.querySelector(".live-figure"), image = host.querySelector("img");
  return {live: !!live && live.getBoundingClientRect().height > 0,
          image: !!image && image.naturalWidth > 0 && image.getBoundingClientRect().width > 0,
          caption: host.querySelector("figcaption").textContent.replace(/\\s+/g, " ")};
})()"""


@pytest.mark.book
@needs_chromium
def test_on_screen_the_live_figure_and_in_print_the_static_one_under_the_same_caption(own_book_html):
    browser = Browser(CHROMIUM, DESKTOP)
    try:
        for page, figure, caption in PRINTED:
            browser.open((own_book_html / f"{page}.html").as_uri())
            for media, live, image in (("screen", True, False), ("print", False, True)):
                browser.call("Emulation.setEmulatedMedia", page=True, media=media)
                shown = browser.evaluate(SHOWN % figure)
                assert (shown["live"], shown["image"]) == (live, image), (page, media, shown)
                assert caption in shown["caption"], (page, media, shown["caption"])
            browser.call("Emulation.setEmulatedMedia", page=True, media="")
    finally:
        browser.close()


# (page, figure, a link to a state, the settings it must restore, a control to move next and the
# settings that move gives)
LINKS = [
    ("chapters/04_softmax_saturation", "saturation", "#fig-widget-first-draw?d=256&draw=2",
     {"d": 256, "draw": 2}, ("d", "index", 3), {"d": 8}),
    ("chapters/05_stability_and_masks", "mask-builder", "#fig-mask-builder?L=8&sink-on=on&sink=0",
     {"L": 8, "S": 6, "causal": "bottom_right", "left": "2", "sink-on": True, "sink": 0}, ("right", "value", "1"),
     {"right": "1"}),
    ("chapters/08_online_softmax", "online-softmax", "#fig-online-steps?block=2&read=5",
     {"block": "2", "read": 5}, ("block", "value", "8"), {"block": "8", "read": 2}),
    ("chapters/09_1_the_kernel", "kernel-tiles", "#fig-kernel-tiles?n=1024&block-m=128&block-n=32&causal=off&left=255",
     {"n": 1024, "block-m": "128", "block-n": "32", "causal": False, "left": "255"}, ("causal", "checked", True),
     {"causal": True}),
    ("chapters/14_3_scale_and_saturation", "trained-head", "#fig-trained-head-live?model=smollm2&layer=15&head=2&factor=8",
     {"model": "smollm2", "layer": "15", "head": "2", "factor": 8}, ("factor", "index", 0), {"factor": 0.25}),
]

TOUCH_TARGET = 44  # px: the 2.75rem the figures give a control under a coarse pointer

# The figure's controls as a finger meets them: for a checkbox, its label (tapping it ticks the box)
TARGETS = """(() => {
  const root = %s;
  return [...root.querySelectorAll("[data-control], .live-link, [data-key]")].map((c) => {
    const target = c.type === "checkbox" ? document.querySelector(`label[for="${c.id}"]`) : c;
    const box = target.getBoundingClientRect();
    return [c.dataset.control || (c.dataset.key ? `k${c.dataset.key}` : "link"), c.type || c.tagName.toLowerCase(), Math.round(box.width), Math.round(box.height)];
  });
})()"""

LAYOUT = """(() => {
  const root = %s;
  window.scrollBy(0, root.getBoundingClientRect().top);
  const box = (e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const caption = document.getElementById(root.getAttribute("aria-describedby"));
  return {fields: [...root.querySelectorAll(".live-controls > .live-field")].map(box),
          readout: box(root.querySelector("[data-readout]")), height: window.innerHeight,
          caption: caption ? caption.tagName + " " + caption.textContent.trim().slice(0, 40) : null,
          captionOfHost: !!caption && caption === root.closest("figure").querySelector("figcaption"),
          hint: getComputedStyle(root.closest("figure").querySelector("figcaption"), "::before").content};
})()"""


@pytest.mark.book
@needs_chromium
@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_the_figures_on_a_phone_and_in_a_link(own_book_html, width):
    """Under a coarse pointer (a phone, a tablet): no tap hint under a live figure, every control at
    least 44 px high, on a phone one control a row with the readout in view; a link restores a state
    and moving a control rewrites the link; the caption describes the figure; 8.1 plays and keeps the
    focus on its last "next block"; the printed code computes what is shown (CHECKS)."""
    browser = Browser(CHROMIUM, width, 844)
    sizes = {}
    try:
        browser.call("Emulation.setTouchEmulationEnabled", page=True, enabled=True, maxTouchPoints=5)
        assert browser.evaluate("matchMedia('(pointer: coarse)').matches")
        for page, figure, link, restored, move, moved in LINKS:
            url = (own_book_html / f"{page}.html").as_uri()
            browser.open(url + link)
            browser.evaluate(HELPERS)
            root = f'document.querySelector(\'.live-figure[data-figure="{figure}"]\')'
            state = browser.evaluate(f"({{settings: __liveTest.settings({root}), shown: __liveTest.read['{figure}']({root})}})")
            assert {k: state["settings"][k] for k in restored if k != "draw"} == {
                k: v for k, v in restored.items() if k != "draw"}, (link, state["settings"])
            CHECKS[figure](dict(state["settings"], draw=restored.get("draw", 0)), state["shown"])
            top = browser.evaluate(f"{root}.closest('figure').getBoundingClientRect().top")
            assert 0 <= top < 844, f"{link}: the linked figure is not in view ({top})"

            layout = browser.evaluate(LAYOUT % root)
            assert layout["captionOfHost"], (page, layout["caption"])  # aria-describedby: the caption
            assert layout["hint"] in {"none", "normal"}, (page, layout["hint"])  # no "Tap the figure"
            sizes[figure] = browser.evaluate(TARGETS % root)
            small = [target for target in sizes[figure] if target[3] < TOUCH_TARGET]
            assert not small, f"{page} at {width} px: targets under {TOUCH_TARGET} px: {small}"
            if width == PHONE:  # one control a row, each under the one before, then the readout in view
                fields = layout["fields"]
                assert len({round(f[0]) for f in fields}) == 1, fields
                assert all(b[1] >= a[3] - 1 for a, b in zip(fields, fields[1:])), fields
                assert 0 <= layout["readout"][1] and layout["readout"][3] <= layout["height"], (page, layout)

            # a move rewrites the address (no new history entry); that address restores the move
            length = browser.evaluate("history.length")
            before = browser.evaluate("location.hash")
            browser.evaluate(f"__liveTest.act({root}, {json.dumps(list(move))})")
            deadline = time.monotonic() + 10  # the address follows a quarter second behind
            while browser.evaluate("location.hash") == before:
                assert time.monotonic() < deadline, f"{page}: moving {move} left the address at {before}"
                time.sleep(0.1)
            after = browser.evaluate(f"({{hash: location.hash, settings: __liveTest.settings({root}),"
                                     f" code: {root}.querySelector('[data-shown=code]').textContent}})")
            assert {k: after["settings"][k] for k in moved} == moved, after
            assert browser.evaluate("history.length") == length
            assert after["hash"].startswith(link.split("?")[0] + "?"), after["hash"]
            browser.open("about:blank")
            browser.open(url + after["hash"])
            browser.evaluate(HELPERS)
            again = browser.evaluate(f"({{settings: __liveTest.settings({root}),"
                                     f" code: {root}.querySelector('[data-shown=code]').textContent}})")
            assert again == {"settings": after["settings"], "code": after["code"]}, (after, again)

            if figure == "online-softmax":
                check_online_softmax_keyboard(browser, root)
            if figure == "kernel-tiles":  # the theme's dark mode: no white tiles on the dark page
                skipped = f"getComputedStyle({root}.querySelector('.live-tile-skipped')).backgroundColor"
                assert browser.evaluate(skipped) == "rgb(255, 255, 255)"
                browser.evaluate("document.documentElement.dataset.theme = 'dark'")
                assert browser.evaluate(skipped) == "rgba(0, 0, 0, 0)"

            # reset: the state the page opens with, and no fragment left in the address
            browser.evaluate(f"__liveTest.act({root}, ['reset', 'click', null])")
            time.sleep(0.4)  # past the quarter second a move's address waits
            reset = browser.evaluate(f"({{hash: location.hash, settings: __liveTest.settings({root}),"
                                     f" code: {root}.querySelector('[data-shown=code]').textContent}})")
            browser.open("about:blank")
            browser.open(url)
            browser.evaluate(HELPERS)
            opened = browser.evaluate(f"({{hash: location.hash, settings: __liveTest.settings({root}),"
                                      f" code: {root}.querySelector('[data-shown=code]').textContent}})")
            assert reset == opened and opened["hash"] == "", (link, reset, opened)
        if width == DESKTOP:  # the tile figure's kernel call, run in Triton's interpreter (n = 128: seconds)
            browser.open((own_book_html / "chapters/09_1_the_kernel.html").as_uri()
                         + "#fig-kernel-tiles?n=128&block-m=32&block-n=64&causal=on&left=31")
            run_kernel_call(browser.evaluate("document.querySelector('.live-figure [data-shown=code]').textContent"),
                            seq_len=128, is_causal=True, window=(31, 0))
        assert not browser.errors(), browser.errors()
    finally:
        browser.close()
    print(f"touch targets at {width} px, coarse pointer (control, type, width, height):", json.dumps(sizes))


def check_online_softmax_keyboard(browser: Browser, root: str) -> None:
    """Enter on "next block" up to the last block keeps the focus there; "play" steps on by itself,
    "pause" stops it, both from the keyboard; under reduced motion the bars change with no transition."""
    browser.evaluate(f"{root}.querySelector('[data-control=read]').value = '0';"
                     f"{root}.querySelector('[data-control=read]').dispatchEvent(new Event('input'))")
    browser.evaluate(f"{root}.querySelector('[data-control=next]').focus()")
    for _ in range(5):  # 4 blocks of 2 ... the settings above: blocks of 8, two of them; one press too many
        browser.press("Enter")
    focus = browser.evaluate("document.activeElement.dataset.control")
    assert focus == "next", f"focus fell to {browser.evaluate('document.activeElement.tagName')}"
    assert browser.evaluate(f"__liveTest.settings({root}).read") == 2
    assert browser.evaluate(f"{root}.querySelector('[data-control=next]').getAttribute('aria-disabled')") == "true"
    browser.press("Tab")
    assert browser.evaluate("document.activeElement.dataset.control") == "play"
    browser.press("Enter")  # at the end: play starts again from no key read
    assert browser.evaluate(f"__liveTest.settings({root}).read") == 0
    deadline = time.monotonic() + 10
    while browser.evaluate(f"__liveTest.settings({root}).read") < 1:
        assert time.monotonic() < deadline, "play did not step"
        time.sleep(0.1)
    browser.press(" ")  # pause
    paused = browser.evaluate(f"__liveTest.settings({root}).read")
    assert browser.evaluate(f"{root}.querySelector('[data-control=play]').getAttribute('aria-pressed')") == "false"
    time.sleep(1.3)
    assert browser.evaluate(f"__liveTest.settings({root}).read") == paused
    transition = f"getComputedStyle({root}.querySelector('.live-strip rect')).transitionDuration"
    assert browser.evaluate(transition) != "0s"
    browser.call("Emulation.setEmulatedMedia", page=True, media="",
                 features=[{"name": "prefers-reduced-motion", "value": "reduce"}])
    assert browser.evaluate(transition) == "0s"
    browser.call("Emulation.setEmulatedMedia", page=True, media="", features=[])


KERNEL_RUN = """
import torch, attnlib
torch.manual_seed(0)
q, k, v = (torch.randn(1, {seq_len}, 16) for _ in range(3))
{code}
reference = attnlib.scaled_dot_product_attention(q, k, v, is_causal={is_causal}, window={window}, backend="naive")
print("largest difference", float((o - reference).abs().max()))
"""


def run_kernel_call(code: str, seq_len: int, is_causal: bool, window) -> None:
    """Run the tile figure's printed code with its kernel call in Triton's interpreter (a process of
    its own: TRITON_INTERPRET is read when Triton is imported) against the naive path."""
    script = KERNEL_RUN.format(seq_len=seq_len, code=code, is_causal=is_causal, window=window)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert float(result.stdout.split("largest difference")[1]) < 1e-5, result.stdout


def test_the_saturation_figures_spread_is_about_root_d_unscaled_and_1_scaled():
    """What the figure's spread line says ("expected about √d", "about 1"), over its first 32 draws:
    the mean standard deviation of 8 scores is within 15 % of sqrt(d) unscaled and of 1 scaled
    (one draw's is 8 scores' estimate, and it wanders more)."""
    for dim in (16, 1024):
        for scaled, expected in ((False, math.sqrt(dim)), (True, 1.0)):
            spreads = [live_figures.saturation_spread(0, draw, dim, scaled) for draw in range(32)]
            assert abs(np.mean(spreads) / expected - 1) < 0.15, (dim, scaled, np.mean(spreads))


# Everything in a live figure that takes the keyboard's focus (the theme's tabindex="-1" on a code
# block's <pre> lets a script scroll it: no control)
FOCUSABLE = ".live-figure :is(button, input, select, a[href], [tabindex]:not(pre))"


@pytest.mark.book
@needs_chromium
def test_everything_a_live_figure_focuses_has_an_accessible_name(own_book_html):
    """Chromium's accessibility tree names every control, link, key header, grid cell and score bar
    of each live figure with words (a cell shown as "·" is named "q0, k5: hidden", not "·")."""
    browser = Browser(CHROMIUM, DESKTOP)
    unnamed, seen = [], set()
    try:
        for page, _, _ in PRINTED:
            browser.open((own_book_html / f"{page}.html").as_uri())
            root = browser.call("DOM.getDocument", page=True)["root"]["nodeId"]
            for node in browser.call("DOM.querySelectorAll", page=True, nodeId=root, selector=FOCUSABLE)["nodeIds"]:
                ax = browser.call("Accessibility.getPartialAXTree", page=True, nodeId=node, fetchRelatives=False)
                found = next(n for n in ax["nodes"] if not n.get("ignored"))
                role, name = found["role"]["value"], found.get("name", {}).get("value", "")
                seen.add(role)
                if not re.search(r"[^\W\d_]", name):
                    unnamed.append((page, role, name))
    finally:
        browser.close()
    assert not unnamed, unnamed
    assert {"button", "slider", "combobox", "cell", "checkbox", "link"} <= seen, seen
