/* Chapter 4: one query and eight keys, softmax with and without the scale tau = 1/sqrt(d),
 * side by side, and the largest weight of this draw against d. Each side also gives the spread
 * of its scores (their standard deviation over the eight keys): Var(q·k) = d, so about √d
 * unscaled and about 1 scaled.
 * Controls: the key width d (1 to 1024), "draw again".
 * Python twin: attnlib.book.live_figures.saturation_state (attnlib.book.widgets.saturation_summary).
 */
(function () {
  "use strict";
  const live = (window.attnlibLive = window.attnlibLive || { builders: {} });  // whichever script loads first
  const DIMS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
  const WIDEST = DIMS[DIMS.length - 1];
  const KEYS = 8;
  const MOST_DRAWS = 1000;  // a link may ask for a later draw; each is drawn in turn
  const BAND_DRAWS = 32;  // the shaded band: quartiles of the largest weight over draws 0 to 31

  /* NumPy's percentile (linear interpolation) of `values` at `q` (0 to 100) */
  function percentile(values, q) {
    const sorted = [...values].sort((a, b) => a - b);
    const at = (sorted.length - 1) * q / 100, below = Math.floor(at);
    return below + 1 < sorted.length ? sorted[below] + (at - below) * (sorted[below + 1] - sorted[below]) : sorted[below];
  }

  live.builders.saturation = function (root) {
    const seed = Number(root.dataset.seed || 0);
    let generator, draw, query, keys;
    function nextDraw() {  // a draw holds vectors of the widest d; a width d uses their first d coordinates
      query = generator.matrix(1, WIDEST)[0];
      keys = generator.matrix(KEYS, WIDEST);
      draw += 1;
    }
    function goToDraw(wanted) {
      generator = live.seededNormal(seed);
      draw = -1;
      while (draw < wanted) nextDraw();
    }

    const controls = live.element("div", { className: "live-controls" });
    const dim = live.slider(controls, {
      name: "d", label: "key width d", stops: DIMS, value: Number(root.dataset.d || 64),
    });
    const again = live.button(controls, { name: "draw", label: "draw again" });
    const drawn = live.element("p", { className: "live-note", "data-shown": "draw" });
    const panels = live.element("div", { className: "live-panels", "data-readout": "" });
    const sides = [
      { name: "scaled", title: "scaled: τ = 1/√d", scale: (d) => 1 / Math.sqrt(d), expect: () => "1" },
      { name: "unscaled", title: "unscaled: τ = 1", scale: () => 1, expect: (d) => `√d = ${Number.isInteger(Math.sqrt(d)) ? Math.sqrt(d) : Math.sqrt(d).toFixed(2)}` },
    ].map((side) => {
      const panel = live.element("section", { className: `live-panel live-${side.name}`, "data-panel": side.name });
      const bars = live.element("div", { className: "live-bars", role: "list", "aria-label": `${side.name}: the weight p_j of each key j` });
      const summary = live.element("p", { className: "live-summary" });
      const spread = live.element("p", { className: "live-summary live-spread" });
      panel.append(live.element("p", { className: "live-panel-title" }, side.title), spread, bars, summary);
      panels.append(panel);
      return Object.assign(side, { bars, summary, spread });
    });
    const status = live.element("p", { className: "live-visually-hidden", "aria-live": "polite" });
    const plot = live.svg("svg", { viewBox: "0 0 320 170", class: "live-plot", role: "img" });
    const plotKey = live.element("p", { className: "live-note" },
      `Dots: this draw. Shaded: the middle half of draws 1 to ${BAND_DRAWS}; dashed: their median.`);
    const bound = live.element("p", { className: "live-note" },
      `The entropy 𝓗 is at most ln ${KEYS} = ${Math.log(KEYS).toFixed(3)} nats, when every key gets 1/${KEYS}.`);
    root.append(controls, drawn, panels, bound, status, plot, plotKey);

    function weightsAt(d, scale, q = query, k = keys) {
      return live.softmax(k.map((key) => scale * live.dot(key, q, d))).weights;
    }
    function spreadAt(d, scale) {  // the sample standard deviation (n - 1) of the scores, as torch.std
      const scores = keys.map((key) => scale * live.dot(key, query, d));
      const mean = scores.reduce((a, b) => a + b, 0) / KEYS;
      return Math.sqrt(scores.reduce((sum, z) => sum + (z - mean) ** 2, 0) / (KEYS - 1));
    }
    const band = (() => {  // {scaled: [q25, q50, q75] each over DIMS}, from the seed's first BAND_DRAWS draws
      const stream = live.seededNormal(seed), largest = { scaled: [], unscaled: [] };
      for (let t = 0; t < BAND_DRAWS; t++) {
        const q = stream.matrix(1, WIDEST)[0], k = stream.matrix(KEYS, WIDEST);
        for (const side of sides) largest[side.name].push(DIMS.map((d) => Math.max(...weightsAt(d, side.scale(d), q, k))));
      }
      return Object.fromEntries(sides.map((side) => [side.name,
        [25, 50, 75].map((p) => DIMS.map((_, i) => percentile(largest[side.name].map((row) => row[i]), p)))]));
    })();

    function drawPlot(d) {  // the largest weight of this draw at every d, scaled and unscaled
      const left = 40, right = 300, top = 10, bottom = 128;
      const x = (at) => left + (right - left) * at / (DIMS.length - 1);
      const y = (w) => bottom - (bottom - top) * w;
      const parts = [];
      for (const w of [0, 0.5, 1]) {
        parts.push(live.svg("line", { x1: left, x2: right, y1: y(w), y2: y(w), class: "live-plot-grid" }),
                   live.svg("text", { x: left - 5, y: y(w) + 4, "text-anchor": "end" }, String(w)));
      }
      parts.push(live.svg("line", { x1: left, x2: right, y1: y(1 / KEYS), y2: y(1 / KEYS), class: "live-plot-uniform" }),
                 live.svg("text", { x: right, y: y(1 / KEYS) - 3, "text-anchor": "end", class: "live-plot-small" }, "1/8: all keys alike"));
      DIMS.forEach((width, at) => {
        if (at % 2 === 0) parts.push(live.svg("text", { x: x(at), y: bottom + 14, "text-anchor": "middle" }, String(width)));
      });
      parts.push(live.svg("text", { x: (left + right) / 2, y: bottom + 32, "text-anchor": "middle" }, "key width d (log scale)"),
                 live.svg("text", { x: 11, y: (top + bottom) / 2, "text-anchor": "middle", transform: `rotate(-90 11 ${(top + bottom) / 2})` }, "largest weight"));
      const at = DIMS.indexOf(d);
      parts.push(live.svg("line", { x1: x(at), x2: x(at), y1: top, y2: bottom, class: "live-plot-now" }));
      for (const side of sides) {  // the middle half of 32 draws, shaded, and their median, dashed
        const [low, middle, high] = band[side.name];
        const outline = [...low.map((w, i) => `${x(i)},${y(w)}`), ...high.map((w, i) => `${x(i)},${y(w)}`).reverse()];
        parts.push(live.svg("polygon", { points: outline.join(" "), class: `live-plot-band live-${side.name}`, "data-side": side.name,
                                    "data-quartiles": JSON.stringify([low, middle, high]) }),
                   live.svg("polyline", { points: middle.map((w, i) => `${x(i)},${y(w)}`).join(" "), class: `live-plot-median live-${side.name}` }));
      }
      for (const side of sides) {
        const largest = DIMS.map((width) => Math.max(...weightsAt(width, side.scale(width))));
        parts.push(live.svg("polyline", { points: largest.map((w, i) => `${x(i)},${y(w)}`).join(" "), class: `live-plot-line live-${side.name}` }));
        largest.forEach((w, i) => parts.push(live.svg("circle", {
          cx: x(i), cy: y(w), r: i === at ? 4.5 : 2.5, class: `live-plot-point live-${side.name}`,
          "data-d": DIMS[i], "data-side": side.name, "data-value": w,
        })));
      }
      parts.push(live.svg("text", { x: left + 6, y: top + 12, class: "live-plot-key live-unscaled" }, "● unscaled"),
                 live.svg("text", { x: left + 6, y: top + 26, class: "live-plot-key live-scaled" }, "● scaled"));
      plot.replaceChildren(...parts);
      plot.setAttribute("aria-label", `the largest weight of this draw against d, from 1 to ${WIDEST}, over the middle half of the first ${BAND_DRAWS} draws: unscaled it climbs towards 1, scaled it stays near the level of d = 1`);
    }

    function update() {
      const d = dim.value();
      drawn.textContent = `seed ${seed}, draw ${draw + 1}: one query and ${KEYS} keys of width ${WIDEST}, standard normal; d uses their first d coordinates`;
      drawn.dataset.draw = String(draw);
      const said = [];
      for (const side of sides) {
        const weights = weightsAt(d, side.scale(d));
        const largest = Math.max(...weights), entropy = live.entropy(weights);
        side.bars.replaceChildren(...weights.map((w, j) => {
          const row = live.element("div", { className: "live-bar-row", role: "listitem", "data-weight": String(w) });
          const bar = live.element("span", { className: "live-bar" });
          bar.style.width = `${(100 * w).toFixed(2)}%`;
          const track = live.element("span", { className: "live-bar-track" });
          track.append(bar);
          row.append(live.element("span", { className: "live-bar-label" }, `j = ${j}`), track,
                     live.element("span", { className: "live-bar-value" }, live.fixed(w, 3)));
          return row;
        }));
        side.summary.replaceChildren(
          "max p ", live.element("strong", { "data-shown": "max-weight", "data-value": String(largest) }, largest.toFixed(3)),
          " · 𝓗 ", live.element("strong", { "data-shown": "entropy", "data-value": String(entropy) }, `${live.fixed(entropy, 3)} nats`),
        );
        const sd = spreadAt(d, side.scale(d));
        side.spread.replaceChildren(
          "scores τ q·k_j: standard deviation ", live.element("strong", { "data-shown": "spread", "data-value": String(sd) }, sd.toFixed(2)),
          ` (expected about ${side.expect(d)})`,
        );
        said.push(`${side.name}: scores' standard deviation ${sd.toFixed(2)}, largest weight ${largest.toFixed(3)}, entropy ${live.fixed(entropy, 3)} nats`);
      }
      status.textContent = `d = ${d}. ${said.join("; ")}; at most ln 8 = ${Math.log(KEYS).toFixed(3)} nats.`;
      drawPlot(d);
      shared.changed();
    }
    const shared = live.share(root, {
      update,
      extra: {
        draw: {
          get: () => String(draw),
          set(text) { if (/^\d+$/.test(text) && Number(text) <= MOST_DRAWS) goToDraw(Number(text)); },
        },
      },
      code: () => {
        const d = dim.value();
        return ["import attnlib",
          "from attnlib.book.live_figures import saturation_draw",
          "",
          `q, k = saturation_draw(seed=${seed}, draw=${draw})  # (1024,), (8, 1024)`,
          `p_scaled = attnlib.attention_weights(q[None, :${d}], k[:, :${d}])`,
          `p_unscaled = attnlib.attention_weights(q[None, :${d}], k[:, :${d}], scale=1.0)`,
          "# the scores' spread over the 8 keys: about sqrt(d) unscaled, about 1 scaled",
          `sd_unscaled = (k[:, :${d}] @ q[:${d}]).std()`,
          `sd_scaled = sd_unscaled / ${d} ** 0.5`].join("\n");
      },
    });
    goToDraw(0);
    dim.input.addEventListener("input", update);
    again.addEventListener("click", () => { nextDraw(); update(); });
    update();
    shared.start();
  };
})();
