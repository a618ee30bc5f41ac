/* Chapter 4: one query and eight keys, softmax with and without the 1/sqrt(d) scale.
 * Controls: the key width d (1 to 1024), the scaling switch, "draw again".
 * Python twin: attnlib.book.live_figures.saturation_state (attnlib.book.widgets.saturation_summary).
 */
(function () {
  "use strict";
  const live = (window.attnlibLive = window.attnlibLive || { builders: {} });  // whichever script loads first
  const DIMS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
  const WIDEST = DIMS[DIMS.length - 1];
  const KEYS = 8;

  live.builders.saturation = function (root) {
    const seed = Number(root.dataset.seed || 0);
    const generator = live.seededNormal(seed);
    let draw = -1, query, keys;
    function nextDraw() {  // a draw holds vectors of the widest d; a width d uses their first d coordinates
      query = generator.matrix(1, WIDEST)[0];
      keys = generator.matrix(KEYS, WIDEST);
      draw += 1;
    }

    const controls = live.element("div", { className: "live-controls" });
    const dim = live.slider(controls, {
      name: "d", label: "key width d", stops: DIMS, value: Number(root.dataset.d || 64),
    });
    const scaled = live.checkbox(controls, { name: "scaled", label: "divide the scores by √d", checked: root.dataset.scaled !== "false" });
    const again = live.button(controls, { name: "draw", label: "draw again" });
    const drawn = live.element("p", { className: "live-note", "data-shown": "draw" });
    const bars = live.element("div", { className: "live-bars", role: "list", "aria-label": "attention weight of each key" });
    const summary = live.element("p", { className: "live-summary", "aria-live": "polite" });
    root.append(controls, drawn, bars, summary);

    function update() {
      const d = dim.value();
      const scale = scaled.checked ? 1 / Math.sqrt(d) : 1;
      const scores = keys.map((key) => scale * live.dot(key, query, d));
      const weights = live.softmax(scores).weights;
      const largest = Math.max(...weights);
      const entropy = live.entropy(weights);
      drawn.textContent = `seed ${seed}, draw ${draw + 1}: one query and ${KEYS} keys of width ${WIDEST}, standard normal; d uses their first d coordinates`;
      drawn.dataset.draw = String(draw);
      bars.replaceChildren(...weights.map((w, j) => {
        const row = live.element("div", { className: "live-bar-row", role: "listitem", "data-weight": String(w) });
        const bar = live.element("span", { className: "live-bar" });
        bar.style.width = `${(100 * w).toFixed(2)}%`;
        const track = live.element("span", { className: "live-bar-track" });
        track.append(bar);
        row.append(live.element("span", { className: "live-bar-label" }, `key ${j}`), track,
                   live.element("span", { className: "live-bar-value" }, live.fixed(w, 3)));
        return row;
      }));
      summary.replaceChildren(
        "maximum weight ", live.element("strong", { "data-shown": "max-weight", "data-value": String(largest) }, largest.toFixed(3)),
        " · entropy ", live.element("strong", { "data-shown": "entropy", "data-value": String(entropy) }, `${live.fixed(entropy, 3)} nats`),
        " · largest possible entropy ln 8 = ", live.element("strong", { "data-shown": "max-entropy", "data-value": String(Math.log(KEYS)) }, Math.log(KEYS).toFixed(3)),
      );
    }
    nextDraw();
    dim.input.addEventListener("input", update);
    scaled.addEventListener("change", update);
    again.addEventListener("click", () => { nextDraw(); update(); });
    update();
  };
})();
