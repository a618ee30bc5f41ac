/* Chapter 5: build a mask and see which keys each query sees, and their weights.
 * Controls: queries L and keys S (1 to 8), causal (none, top-left, bottom-right), the window's
 * left and right reach, the keys that are not padding, and a sink logit.
 * Python twin: attnlib.book.live_figures.mask_builder_weights (attnlib.attention_weights).
 */
(function () {
  "use strict";
  const live = (window.attnlibLive = window.attnlibLive || { builders: {} });  // whichever script loads first
  const MAX = 8, WIDTH = 8;
  const counts = [1, 2, 3, 4, 5, 6, 7, 8];
  const reaches = [["none", "none (unbounded)"], ...[0, 1, 2, 3, 4, 5, 6, 7].map((r) => [String(r), String(r)])];
  const sinkLogits = [-4, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4];

  live.builders["mask-builder"] = function (root) {
    const generator = live.seededNormal(Number(root.dataset.seed || 0));
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
    const sinkOn = live.checkbox(controls, { name: "sink-on", label: "a sink (a key of score s and value 0)", checked: false });
    const sink = live.slider(controls, { name: "sink", label: "sink logit s", stops: sinkLogits, value: 0 });
    const note = live.element("p", { className: "live-note", "aria-live": "polite" });
    const grid = live.element("table", { className: "live-grid" });
    root.append(controls, note, grid);

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

      const head = live.element("tr");
      head.append(live.element("th", { scope: "col" }, ""));
      for (let j = 0; j < s; j++) head.append(live.element("th", { scope: "col", className: j >= n ? "live-padding" : "" }, `k${j}`));
      if (sinkLogit !== null) head.append(live.element("th", { scope: "col" }, "sink"));
      const rows = [head];
      for (let i = 0; i < l; i++) {
        const p = i + offset;  // the query's position among the keys
        const sees = (j) => j < n && (causal.value === "none" || j <= p)
          && (back === null || j >= p - back) && (ahead === null || j <= p + ahead);
        const logits = keys.slice(0, s).map((key, j) => (sees(j) ? live.dot(queries[i], key, WIDTH) / Math.sqrt(WIDTH) : null));
        const { weights, sink: sinkWeight } = live.softmax(logits, sinkLogit);
        const row = live.element("tr", { "data-query": String(i) });
        row.append(live.element("th", { scope: "row" }, `q${i}`));
        weights.forEach((w, j) => {
          const seen = logits[j] !== null;
          const cell = live.element("td", { className: seen ? "live-seen" : "live-hidden", "data-weight": String(w), "data-allowed": String(seen) },
                                    seen ? live.fixed(w, 2) : "·");
          if (seen) cell.style.setProperty("--weight", w.toFixed(3));
          cell.title = seen ? `query ${i} sees key ${j}: weight ${w.toFixed(4)}` : `query ${i} does not see key ${j}`;
          row.append(cell);
        });
        if (sinkWeight !== null) {
          const cell = live.element("td", { className: "live-seen live-sink", "data-sink": String(sinkWeight) }, live.fixed(sinkWeight, 2));
          cell.style.setProperty("--weight", sinkWeight.toFixed(3));
          row.append(cell);
        }
        rows.push(row);
      }
      grid.replaceChildren(...rows);
      const blank = rows.slice(1).filter((row) => !row.querySelector("td.live-seen")).length;
      note.textContent = `Query i sits at key position i + ${offset}. `
        + (n < s ? `Keys ${n} to ${s - 1} are padding. ` : "")
        + (blank ? `${blank} ${blank === 1 ? "row sees" : "rows see"} nothing: weights 0, output 0. ` : "")
        + "Any other row's weights, with the sink's share, sum to 1.";
    }
    for (const control of [L.input, S.input, valid.input, sink.input]) control.addEventListener("input", update);
    for (const control of [causal, left, right, sinkOn]) control.addEventListener("change", update);
    update();
  };
})();
