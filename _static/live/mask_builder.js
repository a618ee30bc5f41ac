/* Chapter 5: build a mask and see which keys each query sees, and their weights.
 * Controls: queries L and keys S (1 to 8), causal (none, top-left, bottom-right), the window's
 * left and right reach, the keys that are not padding, and a sink logit. A key's column
 * header is a button that makes that key padding, or not; a cell, clicked or reached with the
 * arrow keys, says which rules hide it (padding, causal, window).
 * Python twin: attnlib.book.live_figures.mask_builder_weights (attnlib.attention_weights).
 */
(function () {
  "use strict";
  const live = (window.attnlibLive = window.attnlibLive || { builders: {} });  // whichever script loads first
  const MAX = 8, WIDTH = 8;
  const counts = [1, 2, 3, 4, 5, 6, 7, 8];
  const reaches = [["none", "none (unbounded)"], ...[0, 1, 2, 3, 4, 5, 6, 7].map((r) => [String(r), String(r)])];
  const sinkLogits = [-4, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4];
  /* why a rule hides key j from the query at key position p */
  const reasons = {
    padding: (j) => `k${j} is padding`,
    causal: (j, p) => `causal: k${j} comes after position ${p}`,
    window: (j, p, back, ahead) => (back !== null && j < p - back ? `window: k${j} is more than ${back} back from position ${p}`
      : `window: k${j} is more than ${ahead} ahead of position ${p}`),
  };

  live.builders["mask-builder"] = function (root) {
    const seed = Number(root.dataset.seed || 0);
    const generator = live.seededNormal(seed);
    const queries = generator.matrix(MAX, WIDTH), keys = generator.matrix(MAX, WIDTH);

    const controls = live.element("div", { className: "live-controls" });
    const L = live.slider(controls, { name: "L", label: "queries L", stops: counts, value: Number(root.dataset.l || 4) });
    const S = live.slider(controls, { name: "S", label: "keys S", stops: counts, value: Number(root.dataset.s || 6) });
    const causal = live.select(controls, {
      name: "causal", label: "causal mask",
      options: [["none", "none"], ["top_left", "top-left (is_causal)"], ["bottom_right", "bottom-right (KV cache)"]],
      value: root.dataset.causal || "none",
    });
    const left = live.select(controls, { name: "left", label: "window: keys back", options: reaches, value: root.dataset.left || "none" });
    const right = live.select(controls, { name: "right", label: "window: keys ahead", options: reaches, value: root.dataset.right || "none" });
    const valid = live.slider(controls, { name: "valid", label: "keys before the padding", stops: [0, ...counts], value: Number(root.dataset.s || 6) });
    const sinkOn = live.checkbox(controls, { name: "sink-on", label: "a sink (a key of score ζ and value 0)", checked: false });
    const sink = live.slider(controls, { name: "sink", label: "sink logit ζ", stops: sinkLogits, value: 0 });
    const note = live.element("p", { className: "live-note", "aria-live": "polite" });
    const grid = live.element("table", { className: "live-grid", "data-readout": "" });
    grid.append(live.element("caption", { className: "live-visually-hidden" },
                             "the weight of each query (row) on each key (column); a key's header makes it padding"));
    const why = live.element("p", { className: "live-note live-why", "aria-live": "polite", "data-shown": "why" });
    root.append(controls, note, grid, why);
    const padded = new Set();  // keys made padding by their header, besides those after `valid`
    let chosen = null;  // the cell whose rules `why` spells out: [query, key]

    function update() {
      const l = L.value(), s = S.value();
      if (valid.value() > s) { valid.input.value = String(s); valid.refresh(); }
      const n = valid.value();
      const alignment = causal.value === "none" ? "top_left" : causal.value;
      const offset = alignment === "bottom_right" ? s - l : 0;
      const back = left.value === "none" ? null : Number(left.value);
      const ahead = right.value === "none" ? null : Number(right.value);
      const sinkLogit = sinkOn.checked ? sink.value() : null;
      sink.input.disabled = !sinkOn.checked;

      const isPadding = (j) => j >= n || padded.has(j);
      const head = live.element("tr");
      head.append(live.element("th", { scope: "col" }, ""));
      for (let j = 0; j < s; j++) {
        const th = live.element("th", { scope: "col", className: isPadding(j) ? "live-padding" : "" });
        th.append(live.element("button", {
          type: "button", className: "live-key-toggle", "data-key": String(j),
          "aria-pressed": String(isPadding(j)), "aria-label": `k${j} is padding`,
        }, `k${j}`));
        head.append(th);
      }
      if (sinkLogit !== null) head.append(live.element("th", { scope: "col" }, "sink"));
      const rows = [head];
      for (let i = 0; i < l; i++) {
        const p = i + offset;  // the query's position among the keys
        const hiddenBy = (j) => [
          ...(isPadding(j) ? ["padding"] : []), ...(causal.value !== "none" && j > p ? ["causal"] : []),
          ...((back !== null && j < p - back) || (ahead !== null && j > p + ahead) ? ["window"] : [])];
        const sees = (j) => hiddenBy(j).length === 0;
        const logits = keys.slice(0, s).map((key, j) => (sees(j) ? live.dot(queries[i], key, WIDTH) / Math.sqrt(WIDTH) : null));
        const { weights, sink: sinkWeight } = live.softmax(logits, sinkLogit);
        const row = live.element("tr", { "data-query": String(i) });
        row.append(live.element("th", { scope: "row" }, `q${i}`));
        weights.forEach((w, j) => {
          const seen = logits[j] !== null;
          const cell = live.element("td", {
            className: seen ? "live-seen" : "live-hidden", "data-weight": String(w), "data-allowed": String(seen),
            "data-cell": `${i},${j}`, tabindex: "-1",
            "aria-label": `q${i}, k${j}: ${seen ? `weight ${live.fixed(w, 2)}` : "hidden"}`,  // "·" names nothing
          }, seen ? live.fixed(w, 2) : "·");
          if (chosen && chosen[0] === i && chosen[1] === j) {
            const rules = hiddenBy(j);
            why.dataset.cell = `${i},${j}`;
            why.dataset.rules = rules.join(" ");
            why.textContent = seen ? `q${i} sees k${j}: weight ${w.toFixed(4)}.`
              : `q${i} does not see k${j}: ${rules.map((rule) => reasons[rule](j, p, back, ahead)).join("; ")}.`;
          }
          if (seen) cell.style.setProperty("--weight", w.toFixed(3));
          if (seen && w > 0.55) cell.classList.add("live-dark");  // light text on a dark cell
          cell.title = seen ? `query ${i} sees key ${j}: weight ${w.toFixed(4)}` : `query ${i} does not see key ${j}`;
          row.append(cell);
        });
        if (sinkWeight !== null) {
          const cell = live.element("td", { className: "live-seen live-sink", "data-sink": String(sinkWeight) }, live.fixed(sinkWeight, 2));
          cell.style.setProperty("--weight", sinkWeight.toFixed(3));
          if (sinkWeight > 0.55) cell.classList.add("live-dark");
          row.append(cell);
        }
        rows.push(row);
      }
      grid.replaceChildren(grid.querySelector("caption"), ...rows);
      if (!chosen || !grid.querySelector(`td[data-cell="${chosen}"]`)) {
        chosen = null;
        delete why.dataset.cell;
        delete why.dataset.rules;
        why.textContent = "Click a key's header to make it padding; click a cell (or reach it with the arrow keys) to see which rules hide it.";
      }
      // one Tab stop for the whole grid, the arrow keys inside it
      (grid.querySelector(`td[data-cell="${chosen}"]`) || grid.querySelector("td[data-cell]")).tabIndex = 0;
      const padding = [...Array(s).keys()].filter(isPadding);
      const blank = rows.slice(1).filter((row) => !row.querySelector("td.live-seen")).length;
      const position = offset === 0 ? "i" : offset > 0 ? `i + ${offset}` : `i − ${-offset}`;
      note.textContent = `Query i sits at key position ${position}. `
        + (padding.length ? `Padding: ${padding.map((j) => `k${j}`).join(", ")}. ` : "")
        + (blank ? `${blank} ${blank === 1 ? "row sees" : "rows see"} nothing: weights 0, output 0. ` : "")
        + "Any other row's weights, with the sink's share, sum to 1.";
      shared.changed();
    }
    const shared = live.share(root, {
      update,
      beforeReset: () => { chosen = null; },
      extra: {
        pad: {
          get: () => ([...padded].sort((a, b) => a - b).join(",") || "none"),
          set(text) {
            const keys = text === "none" ? [] : text.split(",").map(Number);
            if (!keys.every((j) => Number.isInteger(j) && j >= 0 && j < MAX)) return;
            padded.clear();
            keys.forEach((j) => padded.add(j));
          },
        },
      },
      code: () => {
        const l = L.value(), s = S.value(), n = valid.value();
        const args = [`q[None, :${l}]`, `k[None, :${s}]`];
        const window = left.value === "none" && right.value === "none" ? null
          : `(${left.value === "none" ? "None" : left.value}, ${right.value === "none" ? "None" : right.value})`;
        const alignment = causal.value === "none" ? "top_left" : causal.value;
        const clicked = [...padded].filter((j) => j < Math.min(n, s));
        const kept = [...Array(s).keys()].map((j) => (j < n && !padded.has(j) ? 1 : 0));
        // a run of padding at the end reads as a comparison; padding anywhere else as the keys' own list
        const padding = clicked.length ? `torch.tensor([${kept.join(", ")}], dtype=torch.bool)` : `torch.arange(${s}) < ${n}`;
        const anyPadding = kept.includes(0);
        // is_causal takes no attn_mask and no window reaching ahead: then the causal mask is an attn_mask
        const causalMask = `attnlib.causal_mask(${l}, ${s}, "${alignment}")`;
        const folded = causal.value !== "none" && (anyPadding || !(right.value === "none" || right.value === "0"));
        if (anyPadding) args.push(`attn_mask=${causal.value === "none" ? padding : `${causalMask} & (${padding})`}`);
        else if (folded) args.push(`attn_mask=${causalMask}`);
        else if (causal.value !== "none") args.push("is_causal=True");
        if (alignment === "bottom_right" && (window !== null || !folded)) args.push('causal_alignment="bottom_right"');
        if (window !== null) args.push(`window=${window}`);
        if (sinkOn.checked) {
          const logit = sink.value();
          args.push(`sinks=torch.tensor([${Number.isInteger(logit) ? logit.toFixed(1) : logit}], dtype=torch.float64)`);
        }
        return ["import attnlib",
          "import torch",
          "from attnlib.book.live_figures import mask_builder_inputs",
          "",
          `q, k = mask_builder_inputs(seed=${seed})  # 8 queries, 8 keys, width 8`,
          live.pythonCall("p = attnlib.attention_weights", args),
          ...(sinkOn.checked ? ["sink_share = 1 - p.sum(-1)  # the sink's weight in each row"] : [])].join("\n");
      },
    });
    /* a header's key becomes padding, or stops being it, and no other key changes: a key the
     * slider pads is freed by moving the slider past it and padding the keys between by hand */
    function toggle(j) {
      const n = valid.value();
      if (j >= n) {
        for (let k = n; k < j; k++) padded.add(k);
        padded.delete(j);
        valid.input.value = String(j + 1);
        valid.refresh();
      } else if (padded.has(j)) padded.delete(j);
      else padded.add(j);
      update();
      grid.querySelector(`[data-key="${j}"]`).focus();  // the header was redrawn under the focus
    }
    grid.addEventListener("click", (event) => {
      const key = event.target.closest("[data-key]");
      if (key) toggle(Number(key.dataset.key));
    });
    grid.addEventListener("focusin", (event) => {
      const cell = event.target.closest("td[data-cell]");
      if (!cell || String(chosen) === cell.dataset.cell) return;
      chosen = cell.dataset.cell.split(",").map(Number);
      update();
      grid.querySelector(`td[data-cell="${chosen}"]`).focus();
    });
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    grid.addEventListener("keydown", (event) => {
      const cell = event.target.closest("td[data-cell]");
      if (!cell || !moves[event.key]) return;
      const [i, j] = cell.dataset.cell.split(",").map(Number), [di, dj] = moves[event.key];
      const next = grid.querySelector(`td[data-cell="${i + di},${j + dj}"]`);
      event.preventDefault();  // the page does not scroll under the arrow keys
      if (next) next.focus();
    });
    for (const control of [L.input, S.input, valid.input, sink.input]) control.addEventListener("input", update);
    for (const control of [causal, left, right, sinkOn]) control.addEventListener("change", update);
    update();
    shared.start();
  };
})();
