/* The book's live figures: what they share (a seeded generator, softmax, labelled controls).
 *
 * A page holds a placeholder <div class="live-figure" data-figure="NAME" data-static="ID">;
 * the script NAME.js beside this file registers a builder under NAME, and on load each
 * placeholder is built and moved into the static figure ID (a matplotlib image with its
 * numbered caption), whose image it replaces on screen. Print, and a browser without
 * scripts, show the image. Nothing is loaded from anywhere: the book reads offline.
 * The numbers are checked against attnlib (attnlib/book/live_figures.py) by
 * tests/test_interactive_figures.py.
 */
(function () {
  "use strict";
  const live = (window.attnlibLive = window.attnlibLive || { builders: {} });

  /* mulberry32 and Box-Muller; the Python twin is attnlib/book/seeded.py (SeededNormal). */
  live.seededNormal = function (seed) {
    let state = seed >>> 0;
    function nextUint32() {
      state = (state + 0x6d2b79f5) >>> 0;
      let t = Math.imul(state ^ (state >>> 15), state | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return (t ^ (t >>> 14)) >>> 0;
    }
    const uniform = () => (nextUint32() + 0.5) / 4294967296;
    function normal() {
      const radius = Math.sqrt(-2 * Math.log(uniform()));
      return radius * Math.cos(2 * Math.PI * uniform());
    }
    /* rows x cols normals, row-major, as arrays of rows */
    function matrix(rows, cols) {
      const out = [];
      for (let r = 0; r < rows; r++) {
        const row = new Array(cols);
        for (let c = 0; c < cols; c++) row[c] = normal();
        out.push(row);
      }
      return out;
    }
    return { normal, matrix };
  };

  live.dot = function (a, b, width) {
    let sum = 0;
    for (let i = 0; i < width; i++) sum += a[i] * b[i];
    return sum;
  };

  /* softmax over the allowed logits (null: not allowed), with an optional sink logit that
   * joins the denominator; returns {weights, sink} (a row with nothing to see gets zeros) */
  live.softmax = function (logits, sink) {
    const hasSink = sink !== null && sink !== undefined;
    let m = hasSink ? sink : -Infinity;
    for (const z of logits) if (z !== null && z > m) m = z;
    if (m === -Infinity) return { weights: logits.map(() => 0), sink: null };
    const exps = logits.map((z) => (z === null ? 0 : Math.exp(z - m)));
    const sinkExp = hasSink ? Math.exp(sink - m) : 0;
    const total = exps.reduce((a, b) => a + b, 0) + sinkExp;
    return { weights: exps.map((e) => e / total), sink: hasSink ? sinkExp / total : null };
  };

  live.entropy = function (weights) {
    return -weights.reduce((h, a) => (a > 0 ? h + a * Math.log(a) : h), 0);
  };

  live.fixed = (x, digits) => (Math.abs(x) < 0.5 * 10 ** -digits ? 0 : x).toFixed(digits);

  let counter = 0;
  function element(tag, attributes, text) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (name === "className") el.className = value;
      else el.setAttribute(name, value);
    }
    if (text !== undefined) el.textContent = text;
    return el;
  }
  live.element = element;

  function field(parent, labelText, control) {
    const wrap = element("div", { className: "live-field" });
    const label = element("label", { for: control.id }, labelText);
    wrap.append(label, control);
    parent.append(wrap);
    return wrap;
  }

  /* a labelled range input over `stops` (its positions), with the value shown beside it */
  live.slider = function (parent, { name, label, stops, value, show }) {
    const input = element("input", {
      type: "range", id: `live-${++counter}`, min: 0, max: stops.length - 1, step: 1,
      "data-control": name,
    });
    input.value = String(Math.max(0, stops.indexOf(value)));
    const shown = element("output", { for: input.id, className: "live-value" });
    const text = () => (show ? show(stops[+input.value]) : String(stops[+input.value]));
    const refresh = () => {
      input.dataset.value = String(stops[+input.value]);
      shown.textContent = text();
      input.setAttribute("aria-valuetext", text());
    };
    refresh();
    input.addEventListener("input", refresh);
    field(parent, label, input).append(shown);
    /* new stops (the same value kept where it still exists, else the last stop) */
    function setStops(newStops) {
      const current = stops[+input.value];
      stops = newStops;
      input.max = String(stops.length - 1);
      input.value = String(stops.includes(current) ? stops.indexOf(current) : stops.length - 1);
      refresh();
    }
    return { input, value: () => stops[+input.value], refresh, setStops };
  };

  live.select = function (parent, { name, label, options, value }) {
    const select = element("select", { id: `live-${++counter}`, "data-control": name });
    for (const [optionValue, text] of options) {
      const option = element("option", { value: String(optionValue) }, text);
      if (optionValue === value) option.selected = true;
      select.append(option);
    }
    field(parent, label, select);
    return select;
  };

  live.checkbox = function (parent, { name, label, checked }) {
    const box = element("input", { type: "checkbox", id: `live-${++counter}`, "data-control": name });
    box.checked = !!checked;
    const wrap = element("div", { className: "live-field live-check" });
    wrap.append(box, element("label", { for: box.id }, label));
    parent.append(wrap);
    return box;
  };

  live.button = function (parent, { name, label }) {
    const button = element("button", { type: "button", "data-control": name, className: "live-button" }, label);
    parent.append(button);
    return button;
  };

  /* build every placeholder and move it into its static figure */
  function build(root) {
    const builder = live.builders[root.dataset.figure];
    if (!builder) throw new Error(`no live figure named ${root.dataset.figure}`);
    const host = root.dataset.static && document.getElementById(root.dataset.static);
    if (host) {
      const caption = host.querySelector("figcaption");
      host.insertBefore(root, host.firstChild);
      host.classList.add("live-figure-host");
      if (caption && caption.id) root.setAttribute("aria-describedby", caption.id);
    }
    root.classList.add("live-figure-ready");
    builder(root);
  }
  function start() {
    document.querySelectorAll(".live-figure[data-figure]").forEach(build);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
