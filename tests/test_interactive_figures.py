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
"""
import html as html_module
import json
import math
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from attnlib.book import live_figures
from attnlib.book.seeded import SeededNormal
from devtools_pipe import Browser
from test_book import CHROMIUM, DESKTOP, ERROR_CATCHER, PHONE, PHONE_FRAME, needs_chromium

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import jupyter_edition  # noqa: E402

TOLERANCE = 1e-9

# (page, figure, steps); a step is (actions, settings the page must then report)
SCENARIOS = [
    ("chapters/04_softmax_saturation", "saturation", [
        ([], {"d": 64, "scaled": True, "draw": 0}),
        ([("d", "index", 8), ("scaled", "checked", False)], {"d": 256, "scaled": False, "draw": 0}),
        ([("scaled", "checked", True)], {"d": 256, "scaled": True, "draw": 0}),
        ([("draw", "click", None)], {"d": 256, "scaled": True, "draw": 1}),
        ([("d", "index", 0)], {"d": 1, "scaled": True, "draw": 1}),
        ([("d", "index", 10), ("scaled", "checked", False), ("draw", "click", None)],
         {"d": 1024, "scaled": False, "draw": 2}),
    ]),
    ("chapters/05_stability_and_masks", "mask-builder", [
        ([], {"L": 4, "S": 6, "causal": "bottom_right", "left": "2", "right": "none", "valid": 6,
              "sink-on": False}),
        ([("L", "index", 7)], {"L": 8}),
        ([("causal", "value", "top_left"), ("left", "value", "none"), ("right", "value", "1")],
         {"causal": "top_left", "left": "none", "right": "1"}),
        ([("valid", "index", 3)], {"valid": 3}),
        ([("sink-on", "checked", True)], {"sink-on": True, "sink": 0}),
        ([("sink", "index", 10), ("causal", "value", "none"), ("S", "index", 4)],
         {"sink": 2, "causal": "none", "S": 5, "valid": 3}),
        ([("L", "index", 1), ("causal", "value", "bottom_right"), ("left", "value", "0")],
         {"L": 2, "causal": "bottom_right", "left": "0"}),
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
    ]),
    ("chapters/09_1_the_kernel", "kernel-tiles", [
        ([], {"n": 512, "block-m": "64", "block-n": "64", "causal": True, "left": "127"}),
        ([("n", "index", 7)], {"n": 1024}),
        ([("block-m", "value", "128"), ("block-n", "value", "32")], {"block-m": "128", "block-n": "32"}),
        ([("causal", "checked", False)], {"causal": False}),
        ([("left", "value", "none"), ("n", "index", 2)], {"left": "none", "n": 384}),
        ([("causal", "checked", True), ("left", "value", "31"), ("block-m", "value", "32")],
         {"causal": True, "left": "31", "block-m": "32"}),
    ]),
]

# What a test reads from a figure and how it moves a control, as window.__liveTest.
HELPERS = r"""
(function () {
  const read = {
    "saturation": (root) => ({
      weights: [...root.querySelectorAll(".live-bar-row")].map((r) => +r.dataset.weight),
      weightTexts: [...root.querySelectorAll(".live-bar-value")].map((e) => e.textContent),
      draw: +root.querySelector("[data-shown=draw]").dataset.draw,
      ...Object.fromEntries([...root.querySelectorAll("strong[data-shown]")].map((e) =>
        [e.dataset.shown, { value: +e.dataset.value, text: e.textContent }])),
    }),
    "mask-builder": (root) => ({
      rows: [...root.querySelectorAll("tr[data-query]")].map((row) => ({
        allowed: [...row.querySelectorAll("td[data-allowed]")].map((c) => c.dataset.allowed === "true"),
        weights: [...row.querySelectorAll("td[data-allowed]")].map((c) => +c.dataset.weight),
        texts: [...row.querySelectorAll("td[data-allowed]")].map((c) => c.textContent),
        sink: row.querySelector("td[data-sink]") ? +row.querySelector("td[data-sink]").dataset.sink : null,
      })),
    }),
    "online-softmax": (root) => ({
      history: [...root.querySelectorAll("tr[data-keys-read]")].map((row) => ({
        keys_read: +row.dataset.keysRead, m: +row.dataset.m, l: +row.dataset.l, acc: +row.dataset.acc,
        output: +row.dataset.output, texts: [...row.querySelectorAll("td")].map((c) => c.textContent),
      })),
      shown: Object.fromEntries([...root.querySelectorAll("dd[data-shown]")].map((e) =>
        [e.dataset.shown, { value: +e.dataset.value, text: e.textContent }])),
    }),
    "kernel-tiles": (root) => ({
      kinds: [...root.querySelectorAll(".live-tile")].map((t) => [t.dataset.tile, +t.dataset.kind]),
      counts: Object.fromEntries([...root.querySelectorAll("[data-shown]")].map((e) => [e.dataset.shown, +e.dataset.value])),
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
        opened.write_text(PHONE_FRAME.format(src=probe.name, width=width))
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


def check_saturation(settings: dict, shown: dict, seed: int = 0) -> None:
    summary = live_figures.saturation_state(seed, settings["draw"], settings["d"], settings["scaled"])
    assert shown["draw"] == settings["draw"]
    assert all(map(close, shown["weights"], summary.weights)), (shown["weights"], summary.weights)
    assert all(same_text(t, w, 3) for t, w in zip(shown["weightTexts"], summary.weights))
    for name, expected in [("max-weight", summary.max_weight), ("entropy", summary.entropy),
                           ("max-entropy", summary.max_entropy)]:
        assert close(shown[name]["value"], expected), (name, shown[name], expected)
        assert same_text(shown[name]["text"].removesuffix(" nats"), expected, 3), (name, shown[name], expected)


def check_mask_builder(settings: dict, shown: dict, seed: int = 0) -> None:
    def reach(value):
        return None if value == "none" else int(value)

    window = (reach(settings["left"]), reach(settings["right"]))
    built = live_figures.mask_builder_weights(
        seed, settings["L"], settings["S"], causal=None if settings["causal"] == "none" else settings["causal"],
        window=None if window == (None, None) else window,
        valid_keys=settings["valid"] if settings["valid"] < settings["S"] else None,
        sink=settings["sink"] if settings["sink-on"] else None)
    rows = shown["rows"]
    assert [row["allowed"] for row in rows] == built.allowed.tolist()
    for row, weights, allowed in zip(rows, built.weights.tolist(), built.allowed.tolist()):
        assert all(map(close, row["weights"], weights)), (row["weights"], weights)
        assert all(same_text(t, w, 2) for t, w, a in zip(row["texts"], weights, allowed) if a), (row, weights)
    if built.sink is None:
        assert all(row["sink"] is None for row in rows)
    else:
        assert all(map(close, [row["sink"] for row in rows], built.sink.tolist()))


def check_online_softmax(settings: dict, shown: dict, seed: int = 0) -> None:
    states = live_figures.online_softmax_states(seed, int(settings["block"]))[:settings["read"]]
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


CHECKS = {"saturation": check_saturation, "mask-builder": check_mask_builder,
          "online-softmax": check_online_softmax, "kernel-tiles": check_kernel_tiles}


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
    moved = {name for actions, _ in steps for name, _, _ in actions}
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


# (page, figure, [(key, settings the page must then report)]); the first key goes to the
# figure's first control, focused; Tab moves on to the next control, in the page's order
KEYBOARD = [
    ("chapters/04_softmax_saturation", "saturation", [
        ("ArrowRight", {"d": 128}), ("Tab", {}), (" ", {"scaled": False}), ("Tab", {}),
        ("Enter", {"draw": 1}), ("Enter", {"draw": 2}),
    ]),
    ("chapters/05_stability_and_masks", "mask-builder", [
        ("ArrowRight", {"L": 5}), ("Tab", {}), ("ArrowRight", {"S": 7}), ("Tab", {}),
        ("ArrowUp", {"causal": "top_left"}), ("Tab", {}), ("ArrowDown", {"left": "3"}), ("Tab", {}),
        ("ArrowDown", {"right": "0"}), ("Tab", {}), ("ArrowLeft", {"valid": 5}), ("Tab", {}),
        (" ", {"sink-on": True}), ("Tab", {}), ("ArrowRight", {"sink": 0.5}),
    ]),
    ("chapters/08_online_softmax", "online-softmax", [
        ("ArrowUp", {"block": "2", "read": 4}), ("Tab", {}), ("ArrowRight", {"read": 5}), ("Tab", {}),
        ("Enter", {"read": 4}), ("Tab", {}), ("Enter", {"read": 5}),
    ]),
    ("chapters/09_1_the_kernel", "kernel-tiles", [
        ("ArrowLeft", {"n": 384}), ("Tab", {}), ("ArrowDown", {"block-m": "128"}), ("Tab", {}),
        ("ArrowUp", {"block-n": "32"}), ("Tab", {}), (" ", {"causal": False}), ("Tab", {}),
        ("ArrowDown", {"left": "255"}),
    ]),
]


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
            focused.append(browser.evaluate("document.activeElement.dataset.control"))
            state = browser.evaluate(f"({{settings: __liveTest.settings({root}), shown: __liveTest.read['{figure}']({root})}})")
            draw = moved.get("draw", draw)
            expected.update({k: v for k, v in moved.items() if k != "draw"})
            assert {k: state["settings"][k] for k in expected} == expected, (key, focused[-1], state["settings"])
            CHECKS[figure](dict(state["settings"], draw=draw), state["shown"])
        names = browser.evaluate(f"[...{root}.querySelectorAll('[data-control]')].map(c => c.dataset.control)")
        assert set(focused) == set(names), f"never reached from the keyboard: {set(names) - set(focused)}"
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
