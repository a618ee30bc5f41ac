/* The book's live figures: what they share (a seeded generator, softmax, labelled controls).
 *
 * A page holds a placeholder <div class="live-figure" data-figure="NAME" data-static="ID">;
 * the script NAME.js beside this file registers a builder under NAME, and on load each
 * placeholder is built and moved into the static figure ID (a matplotlib image with its
 * numbered caption), whose image it replaces on screen. Print, and a browser without
 * scripts, show the image. Nothing is loaded from anywhere: the book reads offline.
 * The numbers are checked against attnlib (attnlib/book/live_figures.py) by
 * tests/test_interactive_figures.py, and so is the attnlib code each figure prints for its state
 * (live.share, which also keeps the state in the page's address).
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

  /* an SVG element (a plot's marks and labels) */
  live.svg = function (tag, attributes, text) {
    const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [name, value] of Object.entries(attributes)) el.setAttribute(name, String(value));
    if (text !== undefined) el.textContent = text;
    return el;
  };

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
      input.dataset.stops = JSON.stringify(stops);  // what a link may ask for (live.share)
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

  /* A button that stays in the Tab order when it has nothing to do (aria-disabled, not
   * disabled: a disabled button drops the keyboard's focus to the page's body) */
  live.button = function (parent, { name, label }) {
    const button = element("button", { type: "button", "data-control": name, className: "live-button" }, label);
    parent.append(button);
    return button;
  };
  live.setEnabled = function (button, enabled) {
    button.setAttribute("aria-disabled", String(!enabled));
  };

  /* The figure's state in the page's address and in code. The fragment
   * "#FIGURE-ID?name=value&..." (FIGURE-ID: the static figure's id) names the value of each
   * control, in the page's order, and of the `extra` state a builder keeps (the saturation
   * figure's draw); opening such an address restores that state, and moving a control writes
   * it (history.replaceState: no new history entry). `code()` returns the attnlib lines that
   * compute what the figure shows, printed under it. `update` redraws the figure; call the
   * returned `changed()` at the end of it. A "reset" button, last of the figure's controls,
   * brings back the state the page opened with (not a linked one) and takes the fragment off
   * the address; `beforeReset` stops what the builder runs by itself (8.1's play). */
  live.share = function (root, { code, extra = {}, update, beforeReset = () => {} }) {
    const id = root.dataset.static || root.dataset.figure;
    const controls = () => [...root.querySelectorAll("input[data-control], select[data-control]")];
    function read(control) {
      if (control.type === "range") return control.dataset.value;
      if (control.type === "checkbox") return control.checked ? "on" : "off";
      return control.value;
    }
    function write(control, text) {  // false: not a value this control can take
      if (control.type === "range") {
        const at = JSON.parse(control.dataset.stops).findIndex((stop) => String(stop) === text);
        if (at < 0) return false;
        control.value = String(at);
        control.dispatchEvent(new Event("input", { bubbles: true }));
      } else if (control.type === "checkbox") {
        if (text !== "on" && text !== "off") return false;
        control.checked = text === "on";
        control.dispatchEvent(new Event("change", { bubbles: true }));
      } else {
        if (![...control.options].some((option) => option.value === text)) return false;
        control.value = text;
        control.dispatchEvent(new Event("change", { bubbles: true }));
      }
      return true;
    }
    function fragment() {
      const params = new URLSearchParams();
      for (const [name, state] of Object.entries(extra)) params.set(name, state.get());
      for (const control of controls()) params.set(control.dataset.control, read(control));
      return `#${id}?${params.toString()}`;
    }
    const block = element("div", { className: "live-code" });
    const heading = element("p", { className: "live-note" }, "This state in code (attnlib):");
    const codeText = element("code", { "data-shown": "code" });
    const pre = element("pre", {});
    pre.append(codeText);
    const link = element("a", { className: "live-link", href: fragment() }, "link to this state");
    block.append(heading, pre, link);
    root.append(block);

    let restoring = true;  // no address written while the page opens, or while a link is read
    function apply(params) {
      restoring = true;
      for (const [name, state] of Object.entries(extra)) if (params.has(name)) state.set(params.get(name));
      for (const control of controls()) {
        const name = control.dataset.control;
        if (params.has(name)) write(control, params.get(name));
      }
      update();
      restoring = false;
    }
    function restore() {
      const hash = decodeURIComponent(location.hash);
      if (!hash.startsWith(`#${id}?`)) return false;
      apply(new URLSearchParams(hash.slice(id.length + 2)));
      return true;
    }
    let initial = null;  // the page's own state, taken before a link is read
    const reset = live.button(root.querySelector(".live-controls") || root, { name: "reset", label: "reset" });
    reset.setAttribute("aria-label", "reset the figure to its first state");
    reset.addEventListener("click", () => {
      beforeReset();
      clearTimeout(pending);
      apply(new URLSearchParams(initial.slice(id.length + 2)));
      try { history.replaceState(history.state, "", location.pathname + location.search); } catch (error) { /* nothing to undo */ }
    });
    /* the address follows a moving slider a quarter second behind: browsers limit how often a
     * page may replace it (Safari throws after 100 times in 30 s) */
    let pending = null;
    function changed() {
      codeText.textContent = code();
      link.href = fragment();
      if (restoring) return;
      clearTimeout(pending);
      pending = setTimeout(() => {
        try { history.replaceState(history.state, "", fragment()); } catch (error) { /* the link below still holds it */ }
      }, 250);
    }
    window.addEventListener("hashchange", restore);
    return {
      changed,
      start() {  // after the first update: read the page's address, and bring a linked figure into view
        initial = fragment();
        if (restore()) (root.closest("figure") || root).scrollIntoView({ block: "start" });
        restoring = false;
      },
    };
  };

  /* A call's arguments laid out as Python, one line while it fits in `width` characters */
  live.pythonCall = function (head, args, width = 72) {
    const line = `${head}(${args.join(", ")})`;
    if (line.length <= width) return line;
    const lines = [`${head}(`];
    let current = "   ";
    for (const arg of args) {
      if (current.length + arg.length + 2 > width && current.trim()) { lines.push(current); current = "   "; }
      current += ` ${arg},`;
    }
    lines.push(current, ")");
    return lines.join("\n");
  };

  /* build every placeholder and move it into its static figure, described by its caption */
  function build(root) {
    const builder = live.builders[root.dataset.figure];
    if (!builder) throw new Error(`no live figure named ${root.dataset.figure}`);
    const host = root.dataset.static && document.getElementById(root.dataset.static);
    if (host) {
      const caption = host.querySelector("figcaption");
      host.insertBefore(root, host.firstChild);
      host.classList.add("live-figure-host");
      if (caption) {
        if (!caption.id) caption.id = `${host.id}-caption`;
        root.setAttribute("aria-describedby", caption.id);
      }
    }
    root.setAttribute("role", "group");
    root.setAttribute("aria-label", "live figure");
    root.classList.add("live-figure-ready");
    root.append(element("p", { className: "live-badge" }, "Live figure: move the controls; the address keeps what you set."));
    builder(root);
  }
  function start() {
    document.querySelectorAll(".live-figure[data-figure]").forEach(build);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
