/* Chapter 9.1: the tiles the fused kernel visits for self-attention over n tokens.
 * Controls: n, BLOCK_M, BLOCK_N, causal, the window's left reach.
 * A tile is skipped when none of its (query, key) pairs is allowed, computed with no mask
 * when all are (and it is a full tile of keys), and masked otherwise.
 * Python twin: attnlib.book.live_figures.tile_kinds (attnlib.causal_mask, attnlib.window_mask).
 */
(function () {
  "use strict";
  const live = (window.attnlibLive = window.attnlibLive || { builders: {} });  // whichever script loads first
  const KINDS = ["skipped", "masked", "whole"];

  live.builders["kernel-tiles"] = function (root) {
    const controls = live.element("div", { className: "live-controls" });
    const n = live.slider(controls, {
      name: "n", label: "tokens n = L = S", stops: [128, 256, 384, 512, 640, 768, 896, 1024], value: Number(root.dataset.n || 512),
    });
    const blockOptions = [32, 64, 128].map((b) => [String(b), String(b)]);
    const blockM = live.select(controls, { name: "block-m", label: "BLOCK_M (queries per block)", options: blockOptions, value: root.dataset.blockM || "64" });
    const blockN = live.select(controls, { name: "block-n", label: "BLOCK_N (keys per tile)", options: blockOptions, value: root.dataset.blockN || "64" });
    const causal = live.checkbox(controls, { name: "causal", label: "causal", checked: root.dataset.causal !== "false" });
    const left = live.select(controls, {
      name: "left", label: "window: keys back",
      options: [["none", "none (no window)"], ...[31, 63, 127, 255, 511].map((r) => [String(r), `${r} (W = ${r + 1} with causal)`])],
      value: root.dataset.left || "127",
    });
    const grid = live.element("div", { className: "live-tiles", role: "img" });
    const legend = live.element("p", { className: "live-legend" });
    for (const kind of KINDS) {
      legend.append(live.element("span", { className: `live-swatch live-tile-${kind}` }), ` ${kind} `);
    }
    const counts = live.element("p", { className: "live-summary", "aria-live": "polite" });
    root.append(controls, grid, legend, counts);

    function kinds(size, bm, bn, isCausal, back) {
      const rows = [];
      for (let i0 = 0; i0 < size; i0 += bm) {
        const row = [];
        for (let j0 = 0; j0 < size; j0 += bn) {
          const j1 = Math.min(j0 + bn, size);
          let any = false, all = j1 - j0 === bn;
          for (let i = i0; i < Math.min(i0 + bm, size); i++) {
            const first = back === null ? 0 : Math.max(0, i - back), last = isCausal ? i : size - 1;
            if (first <= j1 - 1 && last >= j0 && first <= last) any = true;
            if (!(first <= j0 && last >= j1 - 1)) all = false;
          }
          row.push(any ? (all ? 2 : 1) : 0);
        }
        rows.push(row);
      }
      return rows;
    }

    function update() {
      const size = n.value(), bm = Number(blockM.value), bn = Number(blockN.value);
      const back = left.value === "none" ? null : Number(left.value);
      const tiles = kinds(size, bm, bn, causal.checked, back);
      const columns = tiles[0].length;
      grid.style.setProperty("--columns", String(columns));
      grid.style.setProperty("--tile-ratio", String(bn / bm));
      grid.replaceChildren(...tiles.flatMap((row, a) => row.map((kind, b) =>
        live.element("span", { className: `live-tile live-tile-${KINDS[kind]}`, "data-kind": String(kind), "data-tile": `${a},${b}` }))));
      const flat = tiles.flat();
      const count = (k) => flat.filter((x) => x === k).length;
      const visited = count(1) + count(2);
      const withoutWindow = kinds(size, bm, bn, causal.checked, null).flat().filter((x) => x > 0).length;
      grid.setAttribute("aria-label", `${tiles.length} query blocks by ${columns} key tiles: ${visited} visited, ${count(1)} of them masked`);
      counts.replaceChildren(
        "visited ", live.element("strong", { "data-shown": "visited", "data-value": String(visited) }, String(visited)),
        ` of ${flat.length} tiles (`, live.element("span", { "data-shown": "masked", "data-value": String(count(1)) }, String(count(1))),
        " masked, ", live.element("span", { "data-shown": "whole", "data-value": String(count(2)) }, String(count(2))),
        " whole); without the window: ", live.element("span", { "data-shown": "without-window", "data-value": String(withoutWindow) }, String(withoutWindow)),
        (back === null || !causal.checked ? "" : `; per query block about (W + BLOCK_M) / BLOCK_N = ${((back + 1 + bm) / bn).toFixed(1)}`),
      );
    }
    n.input.addEventListener("input", update);
    for (const control of [blockM, blockN, causal, left]) control.addEventListener("change", update);
    update();
  };
})();
