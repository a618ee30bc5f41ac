/* Chapter 8: online softmax, one key block at a time, for one query and 16 keys.
 * Controls: the block size, the number of blocks read (a slider, and previous/next buttons).
 * A score bar can be dragged (or focused and moved with the arrow keys, up and down; left and
 * right go to the next bar): its key turns along q until q·k_j / 2 is the new score.
 * Shows the running maximum m, the sum l, the correction exp(m_old - m_new), acc and acc / l.
 * Python twin: attnlib.book.live_figures.online_softmax_states (attnlib.tiled.attention).
 */
(function () {
  "use strict";
  const live = (window.attnlibLive = window.attnlibLive || { builders: {} });  // whichever script loads first
  const KEYS = 16, WIDTH = 4, BLOCKS = [1, 2, 4, 8, 16];

  live.builders["online-softmax"] = function (root) {
    const seed = Number(root.dataset.seed || 0);
    const generator = live.seededNormal(seed);
    const query = generator.matrix(1, WIDTH)[0];
    const keys = generator.matrix(KEYS, WIDTH);
    const values = generator.matrix(KEYS, 1).map((row) => row[0]);
    const drawn = keys.map((key) => live.dot(query, key, WIDTH) / Math.sqrt(WIDTH));
    const moved = new Map();  // key -> the score the reader gave it
    let scores = drawn.slice();
    const setScores = () => { scores = drawn.map((z, j) => (moved.has(j) ? moved.get(j) : z)); };
    // a fixed axis, so that a bar under the pointer stays under it while the others keep still
    const TOP = 3, BOTTOM = -3;
    const onGrid = (z) => Math.min(TOP, Math.max(BOTTOM, Math.round(z * 20) / 20));  // steps of 0.05
    let active = 0;  // the bar that takes the Tab stop (one for the strip, the arrows inside it)

    const controls = live.element("div", { className: "live-controls" });
    const block = live.select(controls, {
      name: "block", label: "keys per block b_k", options: BLOCKS.map((b) => [String(b), String(b)]), value: root.dataset.block || "4",
    });
    const blocksOf = () => KEYS / Number(block.value);
    const read = live.slider(controls, {
      name: "read", label: "blocks read t", stops: Array.from({ length: blocksOf() + 1 }, (_, t) => t), value: Number(root.dataset.read || 0),
      show: (t) => `${t} of ${blocksOf()}`,
    });
    const buttons = live.element("div", { className: "live-field live-buttons" });
    const previous = live.button(buttons, { name: "previous", label: "previous block" });
    const next = live.button(buttons, { name: "next", label: "next block" });
    const play = live.button(buttons, { name: "play", label: "play" });
    play.setAttribute("aria-pressed", "false");
    controls.append(buttons);
    const strip = live.svg("svg", { class: "live-strip", role: "group", viewBox: `0 0 ${KEYS * 10} 60`, preserveAspectRatio: "none" });
    const legend = live.element("p", { className: "live-legend" });
    for (const [kind, text] of [["read", "read"], ["current", "this block"], ["unread", "not read yet"], ["max", "its largest score so far: m"]]) {
      legend.append(live.element("span", { className: `live-swatch live-swatch-${kind}` }), ` ${text} `);
    }
    const dragNote = live.element("p", { className: "live-note" },
      "Drag a bar up or down to change its score (or Tab to the bars: ↑ ↓ move one, ← → pick another); the steps follow.");
    const scoreList = live.element("div", { className: "live-score-values", role: "list", "aria-label": `the score z_j of each key j` });
    const blockScores = live.element("p", { className: "live-note" });
    const state = live.element("dl", { className: "live-state", "aria-live": "polite", "data-readout": "" });
    const history = live.element("table", { className: "live-history" });
    root.append(controls, state, strip, legend, dragNote, scoreList, blockScores, history);

    const reducedMotion = window.matchMedia("(prefers-reduced-motion: reduce)");
    let timer = null;
    function stop() {
      if (timer !== null) clearInterval(timer);
      timer = null;
      play.textContent = "play";
      play.setAttribute("aria-pressed", "false");
    }
    function step(by) {
      const t = read.value() + by;
      if (t < 0 || t > blocksOf()) return false;
      read.input.value = String(t);
      read.refresh();
      update();
      return true;
    }
    function start() {  // one block a second; twice as slow, and with no transitions, under reduced motion
      if (read.value() === blocksOf()) step(-read.value());
      const pace = reducedMotion.matches ? 2000 : 1000;
      play.dataset.pace = String(pace);
      timer = setInterval(() => { if (!step(1) || read.value() === blocksOf()) stop(); }, pace);
      play.textContent = "pause";
      play.setAttribute("aria-pressed", "true");
    }

    function steps(size) {  // the state after each block, from the recurrence of eqs. 8.2 to 8.4
      let m = -Infinity, l = 0, acc = 0;
      const out = [];
      for (let start = 0; start < KEYS; start += size) {
        const block = scores.slice(start, start + size);
        const blockMax = Math.max(...block);
        const mNew = Math.max(m, blockMax);
        const correction = Math.exp(m - mNew);  // exp(-inf) = 0 before the first block
        let sum = 0, weighted = 0;
        block.forEach((s, k) => { const e = Math.exp(s - mNew); sum += e; weighted += e * values[start + k]; });
        l = l * correction + sum;
        acc = acc * correction + weighted;
        m = mNew;
        out.push({ start, end: start + size, blockMax, correction, m, l, acc, output: acc / l });
      }
      return out;
    }

    function term(name, shown, value, text) {
      const attributes = value === null ? { "data-shown": shown } : { "data-shown": shown, "data-value": String(value) };
      state.append(live.element("dt", {}, name), live.element("dd", attributes, text));
    }

    function update() {
      const size = Number(block.value);
      const t = read.value();
      live.setEnabled(previous, t > 0);
      live.setEnabled(next, t < KEYS / size);
      const all = steps(size), done = all.slice(0, t), now = done[done.length - 1];
      const seen = scores.slice(0, t * size);
      const largest = seen.length ? seen.indexOf(Math.max(...seen)) : -1;
      const kindOf = (j) => (j < (t - 1) * size ? "read" : j < t * size ? "current" : "unread");

      const y = (z) => 4 + 52 * (TOP - z) / (TOP - BOTTOM);  // signed: bars rise and fall from the zero line
      strip.replaceChildren(...scores.map((z, j) => {
        const bar = live.svg("rect", {
          x: j * 10 + (j % size === 0 && j > 0 ? 1.5 : 1), width: 7.5, y: Math.min(y(z), y(0)), height: Math.max(0.5, Math.abs(y(z) - y(0))),
          class: `live-key live-${kindOf(j)}${j === largest ? " live-max" : ""}`, "data-score": String(z),
        });
        return bar;
      }), ...scores.map((z, j) => {  // the whole column takes the pointer and the keyboard
        const handle = live.svg("rect", {
          x: j * 10, width: 10, y: 0, height: 60, class: "live-key-hit", "data-key": j, tabindex: j === active ? 0 : -1,
          role: "slider", "aria-label": `score z_${j} of key ${j}`, "aria-valuemin": BOTTOM, "aria-valuemax": TOP,
          "aria-valuenow": z.toFixed(2), "aria-valuetext": `${z.toFixed(2)}${moved.has(j) ? " (moved)" : ""}`,
        });
        handle.append(live.svg("title", {}, `key ${j}: score ${z.toFixed(3)}, value ${values[j].toFixed(3)}; drag to change`));
        return handle;
      }), live.svg("line", { x1: 0, x2: KEYS * 10, y1: y(0), y2: y(0), class: "live-zero" }),
      ...Array.from({ length: KEYS / size - 1 }, (_, b) => live.svg("line", {
        x1: (b + 1) * size * 10, x2: (b + 1) * size * 10, y1: 0, y2: 60, class: "live-block-edge" })));
      strip.setAttribute("aria-label", `the scores of ${KEYS} keys as bars above and below zero, in blocks of ${size}; ${t * size} read`);
      scoreList.replaceChildren(...scores.map((z, j) => {
        const cell = live.element("span", { className: `live-score live-${kindOf(j)}${j === largest ? " live-max" : ""}`, role: "listitem" });
        cell.append(live.element("span", { className: "live-score-key" }, `j = ${j}`), live.element("span", {}, live.fixed(z, 2).replace("-", "−")));
        return cell;
      }));

      state.replaceChildren();
      blockScores.textContent = now
        ? `block ${t} (keys ${now.start} to ${now.end - 1}), scores: ${scores.slice(now.start, now.end).map((s) => s.toFixed(3).replace("-", "−")).join(", ")}`
        : "no key read yet";
      if (now && t > 1 && now.correction < 1) blockScores.textContent += `; m grew, so ℓ and acc were multiplied by ${now.correction.toFixed(4)} before this block was added`;
      if (!now) {
        state.append(live.element("dt", {}, "before any key"), live.element("dd", {}, "m = −∞, ℓ = 0, acc = 0"));
      } else {

        term("running maximum m", "m", now.m, now.m.toFixed(4));
        term("correction e^(m_old − m)", "correction", now.correction, now.correction.toFixed(4));
        term("sum ℓ", "l", now.l, now.l.toFixed(4));
        term("acc", "acc", now.acc, now.acc.toFixed(4));
        term("output acc / ℓ", "output", now.output, now.output.toFixed(4));
        if (t === KEYS / size) {
          term("all keys read: lse = m + ln ℓ", "lse", now.m + Math.log(now.l), (now.m + Math.log(now.l)).toFixed(4));
        }
      }
      const head = live.element("tr");
      for (const name of ["keys read", "m", "correction", "ℓ", "acc / ℓ"]) head.append(live.element("th", { scope: "col" }, name));
      history.replaceChildren(head, ...done.map((step) => {
        const row = live.element("tr", { "data-keys-read": String(step.end), "data-m": String(step.m), "data-l": String(step.l), "data-acc": String(step.acc), "data-output": String(step.output) });
        for (const text of [String(step.end), step.m.toFixed(4), step.correction.toFixed(4), step.l.toFixed(4), step.output.toFixed(4)]) {
          row.append(live.element("td", {}, text));
        }
        return row;
      }));
      shared.changed();
    }
    function setScore(j, z) {
      moved.set(j, onGrid(z));
      setScores();
      update();
    }
    function scoreAt(event) {  // the key under the pointer and the score at its height
      const box = strip.getBoundingClientRect();
      const j = Math.min(KEYS - 1, Math.max(0, Math.floor((event.clientX - box.left) / box.width * KEYS)));
      const at = (event.clientY - box.top) / box.height * 60;
      return [j, TOP - (at - 4) * (TOP - BOTTOM) / 52];
    }
    let dragging = null;
    strip.addEventListener("pointerdown", (event) => {
      const [j, z] = scoreAt(event);
      dragging = j;
      active = j;
      try { strip.setPointerCapture(event.pointerId); } catch (error) { /* a pointer already gone */ }
      event.preventDefault();  // no text selection, no scroll
      setScore(j, z);
      strip.querySelector(`[data-key="${j}"]`).focus({ preventScroll: true });  // the page keeps still under the pointer
    });
    strip.addEventListener("pointermove", (event) => {
      if (dragging !== null) setScore(dragging, scoreAt(event)[1]);
    });
    for (const end of ["pointerup", "pointercancel"]) strip.addEventListener(end, () => { dragging = null; });
    strip.addEventListener("keydown", (event) => {
      const j = Number(event.target.dataset.key);
      const by = { ArrowUp: 0.1, ArrowDown: -0.1 }[event.key], to = { ArrowLeft: j - 1, ArrowRight: j + 1 }[event.key];
      if (by !== undefined) setScore(j, scores[j] + by);
      else if (to !== undefined) active = Math.min(KEYS - 1, Math.max(0, to));
      else return;
      event.preventDefault();
      if (by === undefined) update();
      strip.querySelector(`[data-key="${active}"]`).focus();  // the strip was redrawn under the focus
    });
    block.addEventListener("change", () => {
      read.setStops(Array.from({ length: blocksOf() + 1 }, (_, t) => t));
      update();
    });
    read.input.addEventListener("input", update);
    previous.addEventListener("click", () => { stop(); step(-1); });
    next.addEventListener("click", () => { stop(); step(1); });
    play.addEventListener("click", () => (timer === null ? start() : stop()));
    const shared = live.share(root, {
      update,
      beforeReset: () => { stop(); active = 0; },
      extra: {
        z: {
          get: () => ([...moved].sort(([a], [b]) => a - b).map(([j, z]) => `${j}:${z}`).join(",") || "none"),
          set(text) {
            const pairs = text === "none" ? [] : text.split(",").map((pair) => pair.split(":").map(Number));
            if (!pairs.every(([j, z]) => Number.isInteger(j) && j >= 0 && j < KEYS && Number.isFinite(z))) return;
            moved.clear();
            pairs.forEach(([j, z]) => moved.set(j, onGrid(z)));
            setScores();
          },
        },
      },
      code: () => {
        const size = Number(block.value), end = read.value() * size;
        const head = ["import torch",
          "from attnlib import tiled",
          "from attnlib.book.live_figures import online_softmax_inputs",
          "",
          moved.size
            ? `q, k, v = online_softmax_inputs(seed=${seed}, scores={${[...moved].sort(([a], [b]) => a - b).map(([j, z]) => `${j}: ${z}`).join(", ")}})`
            : `q, k, v = online_softmax_inputs(seed=${seed})  # (1, 4), (16, 4), (16, 1)`];
        if (end === 0) return [...head, "# no key read yet: m = -inf, l = 0, acc = 0"].join("\n");
        return [...head,
          live.pythonCall("o, lse = tiled.attention", [`q`, `k[:${end}]`, `v[:${end}]`, `block_k=${size}`, "return_lse=True"]),
          `m = (q @ k[:${end}].T).max() / 2  # the largest score z_j so far (tau = 1/2)`,
          "l = torch.exp(lse - m)",
          "acc = o * l"].join("\n");
      },
    });
    update();
    shared.start();
  };
})();
