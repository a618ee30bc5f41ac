/* Chapter 14.3: one head of a trained model on a stored sentence, its softmax weights at the
 * scale 𝜏 = λ/√d_k for a multiplier λ from 0.25 to 8, and what saturation does to its rows.
 * Controls: the model, the sentence, the layer, the head, λ (log scale, the two classic
 * mistakes among its stops), the query i whose row is drawn as bars.
 * Data: trained_heads_data.js (benchmarks/live_trained_heads.py), 16-bit steps per head.
 * Python twin: attnlib.book.live_figures.trained_head_readouts (trained_head_inputs).
 */
(function () {
  "use strict";
  const live = (window.attnlibLive = window.attnlibLive || { builders: {} });
  const THRESHOLD = 0.9;  // a row is one-hot when its largest weight exceeds this
  const MODELS = { minilm: "MiniLM", smollm2: "SmolLM2" };

  /* the stored 16-bit steps of (heads, n, d) vectors, times each head's step */
  function unpack(stored, heads, n, d) {
    const bytes = atob(stored.data), out = [];
    for (let h = 0; h < heads; h++) {
      const rows = [];
      for (let i = 0; i < n; i++) {
        const row = new Array(d);
        for (let c = 0; c < d; c++) {
          const at = 2 * ((h * n + i) * d + c);  // little-endian int16
          row[c] = stored.step[h] * (((bytes.charCodeAt(at + 1) << 24) >> 16) | bytes.charCodeAt(at));
        }
        rows.push(row);
      }
      out.push(rows);
    }
    return out;
  }

  /* λ's stops: quarter powers of 2 to three digits, and exactly the two mistakes (as in Python) */
  function factors(entry) {
    const mistakes = [Math.sqrt(entry.d_k), Math.sqrt(entry.d_k / entry.d_model)];
    const stops = [];
    for (let k = -8; k <= 12; k++) stops.push(Number((2 ** (k / 4)).toPrecision(3)));
    return stops.filter((s) => mistakes.every((m) => Math.abs(s / m - 1) > 0.02)).concat(mistakes).sort((a, b) => a - b);
  }
  const short = (x) => String(Number(x.toPrecision(3)));

  live.builders["trained-head"] = function (root) {
    const data = live.trainedHeads;
    if (!data) throw new Error("trained_heads_data.js did not load");
    const names = Object.keys(MODELS).filter((name) => name in data);
    const controls = live.element("div", { className: "live-controls" });
    const model = live.select(controls, {
      name: "model", label: "model", value: root.dataset.model || names[0],
      options: names.map((name) => [name, MODELS[name]]),
    });
    const sentence = live.select(controls, { name: "sentence", label: "sentence", value: "0", options: [] });
    const layer = live.select(controls, { name: "layer", label: "layer", value: "", options: [] });
    const head = live.select(controls, { name: "head", label: "head", value: "", options: [] });
    let entry = data[model.value], stops = factors(entry);
    const factor = live.slider(controls, {
      name: "factor", label: "scale × λ", stops, value: 1, show: (x) => describe(x),
    });
    const row = live.slider(controls, { name: "row", label: "query i", stops: [0], value: 0 });
    const scaleNote = live.element("p", { className: "live-note", "data-shown": "scale" });
    const strip = live.svg("svg", { viewBox: "0 0 320 160", class: "live-plot live-factor-strip", role: "img" });
    const readout = live.element("p", { className: "live-summary", "data-readout": "" });
    const map = live.svg("svg", { class: "live-plot live-weight-map", role: "img" });
    const bars = live.element("div", { className: "live-bars live-trained-row", role: "list" });
    const status = live.element("p", { className: "live-visually-hidden", "aria-live": "polite" });
    const key = live.element("p", { className: "live-note" }, "Above: ");
    key.append(live.element("span", { className: "live-key-entropy" }, "● entropy/ln S"), " · ",
               live.element("span", { className: "live-key-sink" }, "● sink's share"), " · ",
               live.element("span", { className: "live-key-one-hot" }, "● one-hot share"),
               " of this head at every stop of λ.");
    root.append(controls, scaleNote, readout, strip, key, map, bars, status);

    function describe(x) {
      if (x === Math.sqrt(entry.d_k)) return `${short(x)} = √d_k: no scale`;
      if (x === Math.sqrt(entry.d_k / entry.d_model)) return `${short(x)} = √(d_k/d_model): ÷√d_model`;
      return x === 1 ? "1: as trained" : short(x);
    }
    function fill(select, options, keep) {
      const wanted = keep !== undefined && options.some(([v]) => v === keep) ? keep : options[0][0];
      select.replaceChildren(...options.map(([v, text]) => live.element("option", { value: v }, text)));
      select.value = wanted;
    }
    function setModel() {  // the sentences, layers, heads and stops of this model; the layer keeps its place
      const place = layer.value ? Math.max(0, entry.layers.indexOf(+layer.value)) : null;
      const mistake = [Math.sqrt(entry.d_k), Math.sqrt(entry.d_k / entry.d_model)].indexOf(factor.value());
      entry = data[model.value];
      fill(sentence, entry.sentences.map((s, at) => [String(at), `${at + 1}: ${s.tokens.join("").trim().slice(0, 32)}…`]), sentence.value);
      fill(layer, entry.layers.map((l) => [String(l), `${l} (of 0 to ${entry.layers[entry.layers.length - 1]})`]),
           place === null ? root.dataset.layer : String(entry.layers[place]));
      fill(head, [...Array(entry.heads).keys()].map((h) => [String(h), String(h)]), head.value);
      const next = factors(entry);  // a mistake stays that mistake; another λ goes to the nearest stop
      const was = mistake >= 0 ? [Math.sqrt(entry.d_k), Math.sqrt(entry.d_k / entry.d_model)][mistake] : factor.value();
      factor.setStops(next);
      const nearest = next.reduce((best, s, at) => (Math.abs(Math.log(s / was)) < Math.abs(Math.log(next[best] / was)) ? at : best), 0);
      factor.input.value = String(nearest);
      factor.refresh();
      stops = next;
    }
    function setSentence() {
      const n = entry.sentences[+sentence.value].tokens.length;
      row.setStops([...Array(n).keys()]);
    }

    function weights(x) {  // (n, n) of this head at λ = x; 0 where the causal mask hides a key
      const stored = entry.sentences[+sentence.value];
      const n = stored.tokens.length, d = entry.d_k, h = +head.value;
      const at = stored.layers[entry.layers.indexOf(+layer.value)];
      const q = unpack(at.q, entry.heads, n, d)[h];
      const k = unpack(at.k, entry.key_heads, n, d)[Math.floor(h / (entry.heads / entry.key_heads))];
      const scale = x / Math.sqrt(d);
      return q.map((qi, i) => live.softmax(k.map((kj, j) => (entry.causal && j > i ? null : scale * live.dot(qi, kj, d)))).weights);
    }
    function readouts(w) {  // as attnlib.book.trained: rows with one key left out
      const n = w.length, seen = (i) => (entry.causal ? i + 1 : n);
      const rows = [...Array(n).keys()].filter((i) => seen(i) > 1);
      const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
      return {
        entropy: mean(rows.map((i) => live.entropy(w[i]) / Math.log(seen(i)))),
        sink: mean(w.slice(entry.causal ? 1 : 0).map((r) => r[0])),
        "one-hot": mean(rows.map((i) => (Math.max(...w[i]) > THRESHOLD ? 1 : 0))),
      };
    }

    /* the three readouts at every stop of λ (log axis, 0.25 to 8), the trained scale and the
     * two mistakes marked, the current λ a dot on the strip below */
    function drawStrip(x) {
      const left = 30, right = 306, low = Math.log(0.25), high = Math.log(8), top = 18, bottom = 118, axis = 138;
      const at = (v) => left + (right - left) * (Math.log(v) - low) / (high - low);
      const y = (v) => bottom - (bottom - top) * v;
      const parts = [live.svg("line", { x1: left, x2: right, y1: axis, y2: axis, class: "live-plot-grid" })];
      for (const v of [0, 0.5, 1]) {
        parts.push(live.svg("line", { x1: left, x2: right, y1: y(v), y2: y(v), class: "live-plot-grid" }),
                   live.svg("text", { x: left - 4, y: y(v) + 3, "text-anchor": "end", class: "live-plot-small" }, String(v)));
      }
      for (const v of [0.25, 0.5, 1, 2, 4, 8]) {
        parts.push(live.svg("text", { x: at(v), y: axis + 16, "text-anchor": "middle", class: "live-plot-small" }, String(v)));
      }
      const curves = stops.map((s) => [s, readouts(weights(s))]);
      for (const [name, kind] of [["entropy", "live-curve-entropy"], ["sink", "live-curve-sink"], ["one-hot", "live-curve-one-hot"]]) {
        parts.push(live.svg("polyline", { points: curves.map(([s, r]) => `${at(s)},${y(r[name])}`).join(" "), class: `live-curve ${kind}` }));
        curves.forEach(([s, r]) => parts.push(live.svg("circle", { cx: at(s), cy: y(r[name]), r: s === x ? 3.5 : 1.8,
          class: `live-curve-point ${kind}`, "data-factor": s, "data-measure": name, "data-value": r[name] })));
      }
      const marks = [[1, "trained", "live-mark-trained"], [Math.sqrt(entry.d_k), "no scale", "live-mark-mistake"],
                     [Math.sqrt(entry.d_k / entry.d_model), "÷√d_model", "live-mark-mistake"]];
      for (const [v, text, kind] of marks) {
        parts.push(live.svg("line", { x1: at(v), x2: at(v), y1: top - 4, y2: axis, class: kind }),
                   live.svg("text", { x: at(v), y: 10, "text-anchor": v > 6 ? "end" : v < 0.4 ? "start" : "middle",
                                      class: `live-plot-small ${kind}` }, text));
      }
      parts.push(live.svg("circle", { cx: at(x), cy: axis, r: 5, class: "live-factor-now", "data-value": x }));
      strip.replaceChildren(...parts);
      strip.setAttribute("aria-label", `the entropy over ln S, the sink's share and the one-hot share of this head ` +
        `against λ, and λ = ${short(x)}, on a log scale from 0.25 to 8; marked: 1 as trained, ` +
        `${short(Math.sqrt(entry.d_k))} with no scale, ${short(Math.sqrt(entry.d_k / entry.d_model))} divided by √d_model`);
    }

    function drawMap(w, tokens, chosen) {  // queries down, keys across; the drawn row outlined
      const n = w.length, cell = 14, left = 78, top = 4, bottom = 70;
      map.setAttribute("viewBox", `0 0 ${left + n * cell + 4} ${top + n * cell + bottom}`);
      const parts = [];
      w.forEach((r, i) => {
        parts.push(live.svg("text", { x: left - 4, y: top + i * cell + cell * 0.72, "text-anchor": "end", class: "live-plot-small" }, tokens[i].trim() || "␣"));
        r.forEach((p, j) => {
          const hidden = entry.causal && j > i;
          const rect = live.svg("rect", { x: left + j * cell, y: top + i * cell, width: cell - 1, height: cell - 1,
                                          class: hidden ? "live-map-hidden" : "live-map-cell", "data-weight": p });
          if (!hidden) rect.style.setProperty("--weight", p.toFixed(4));
          parts.push(rect);
        });
      });
      tokens.forEach((t, j) => {
        const x = left + j * cell + cell * 0.65, y = top + n * cell + 4;
        parts.push(live.svg("text", { x, y, "text-anchor": "end", transform: `rotate(-60 ${x} ${y})`, class: "live-plot-small" }, t.trim() || "␣"));
      });
      parts.push(live.svg("rect", { x: left - 1, y: top + chosen * cell - 1, width: n * cell + 1, height: cell + 1, class: "live-map-row" }));
      map.replaceChildren(...parts);
      map.setAttribute("aria-label", `the weights of ${n} queries (rows) on ${n} keys (columns)${entry.causal ? ", keys after the query hidden by the causal mask" : ""}; row ${chosen} outlined`);
    }

    function update() {
      const stored = entry.sentences[+sentence.value], tokens = stored.tokens, x = factor.value(), i = row.value();
      const w = weights(x), shown = readouts(w);
      scaleNote.textContent = `τ = λ/√d_k with d_k = ${entry.d_k} (d_model = ${entry.d_model}); ` +
        `${entry.causal ? "causal, queries and keys after RoPE" : "bidirectional"}; ` +
        `${tokens.length} tokens; the values are stored to 16 bits per head.`;
      drawStrip(x);
      readout.replaceChildren(
        "entropy/ln S ", live.element("strong", { "data-shown": "entropy", "data-value": String(shown.entropy) }, shown.entropy.toFixed(3)),
        " · sink's share ", live.element("strong", { "data-shown": "sink", "data-value": String(shown.sink) }, shown.sink.toFixed(3)),
        ` · one-hot rows (max p > ${THRESHOLD}) `,
        live.element("strong", { "data-shown": "one-hot", "data-value": String(shown["one-hot"]) }, `${(100 * shown["one-hot"]).toFixed(1)}%`),
      );
      drawMap(w, tokens, i);
      bars.setAttribute("aria-label", `the weight p_j of each key j for query ${i}`);
      bars.replaceChildren(...w[i].map((p, j) => {
        const visible = !(entry.causal && j > i);
        const line = live.element("div", { className: "live-bar-row", role: "listitem", "data-weight": String(p) });
        const bar = live.element("span", { className: "live-bar" });
        bar.style.width = `${(100 * p).toFixed(2)}%`;
        const track = live.element("span", { className: "live-bar-track" });
        track.append(bar);
        line.append(live.element("span", { className: "live-bar-label" }, `${j} ${tokens[j].trim() || "␣"}`), track,
                    live.element("span", { className: "live-bar-value" }, visible ? live.fixed(p, 3) : "–"));
        return line;
      }));
      status.textContent = `${MODELS[model.value]}, layer ${layer.value}, head ${head.value}, λ = ${short(x)}: ` +
        `entropy/ln S ${shown.entropy.toFixed(3)}, sink's share ${shown.sink.toFixed(3)}, one-hot rows ${(100 * shown["one-hot"]).toFixed(1)}%.`;
      shared.changed();
    }
    const shared = live.share(root, {
      update,
      code: () => {
        const x = factor.value(), d = entry.d_k;
        let scale = `${short(x)} / ${d}**0.5`, why = "";
        if (x === Math.sqrt(d)) [scale, why] = ["1.0", "  # no scale"];
        else if (x === Math.sqrt(d / entry.d_model)) [scale, why] = [`1 / ${entry.d_model}**0.5`, "  # / sqrt(d_model)"];
        else if (x === 1) why = "  # as trained";
        return ["import attnlib",
          "from attnlib.book.live_figures import trained_head_inputs",
          "",
          live.pythonCall("q, k = trained_head_inputs", [`"${model.value}"`, `sentence=${sentence.value}`,
                          `layer=${layer.value}`, `head=${head.value}`]),
          `p = attnlib.attention_weights(q, k, scale=${scale}${entry.causal ? ", is_causal=True" : ""})${why}`].join("\n");
      },
    });
    model.addEventListener("change", () => { setModel(); setSentence(); update(); });
    sentence.addEventListener("change", () => { setSentence(); update(); });
    for (const control of [layer, head]) control.addEventListener("change", update);
    for (const slider of [factor, row]) slider.input.addEventListener("input", update);
    setModel();
    setSentence();
    row.input.value = row.input.max;  // the last query: in SmolLM2 the one that sees every key
    row.refresh();
    update();
    shared.start();
  };
})();
