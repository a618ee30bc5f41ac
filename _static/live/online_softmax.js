/* Chapter 8: online softmax, one key block at a time, for one query and 16 keys.
 * Controls: the block size, the number of blocks read (a slider, and previous/next buttons).
 * Shows the running maximum m, the sum l, the correction exp(m_old - m_new), acc and acc / l.
 * Python twin: attnlib.book.live_figures.online_softmax_states (attnlib.tiled.attention).
 */
(function () {
  "use strict";
  const live = (window.attnlibLive = window.attnlibLive || { builders: {} });  // whichever script loads first
  const KEYS = 16, WIDTH = 4, BLOCKS = [1, 2, 4, 8, 16];

  live.builders["online-softmax"] = function (root) {
    const generator = live.seededNormal(Number(root.dataset.seed || 0));
    const query = generator.matrix(1, WIDTH)[0];
    const keys = generator.matrix(KEYS, WIDTH);
    const values = generator.matrix(KEYS, 1).map((row) => row[0]);
    const scores = keys.map((key) => live.dot(query, key, WIDTH) / Math.sqrt(WIDTH));
    const lowest = Math.min(...scores), highest = Math.max(...scores);

    const controls = live.element("div", { className: "live-controls" });
    const block = live.select(controls, {
      name: "block", label: "keys per block", options: BLOCKS.map((b) => [String(b), String(b)]), value: root.dataset.block || "4",
    });
    const blocksOf = () => KEYS / Number(block.value);
    const read = live.slider(controls, {
      name: "read", label: "blocks read", stops: Array.from({ length: blocksOf() + 1 }, (_, t) => t), value: Number(root.dataset.read || 0),
      show: (t) => `${t} of ${blocksOf()}`,
    });
    const buttons = live.element("div", { className: "live-field" });
    const previous = live.button(buttons, { name: "previous", label: "previous block" });
    const next = live.button(buttons, { name: "next", label: "next block" });
    controls.append(buttons);
    const strip = live.element("div", { className: "live-strip", role: "img" });
    const blockScores = live.element("p", { className: "live-note" });
    const state = live.element("dl", { className: "live-state", "aria-live": "polite" });
    const history = live.element("table", { className: "live-history" });
    root.append(controls, strip, blockScores, state, history);

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
      previous.disabled = t === 0;
      next.disabled = t === KEYS / size;
      const all = steps(size), done = all.slice(0, t), now = done[done.length - 1];

      strip.replaceChildren(...scores.map((s, j) => {
        const kind = j < (t - 1) * size ? "read" : j < t * size ? "current" : "unread";
        const cell = live.element("span", { className: `live-key live-${kind}`, "data-score": String(s), title: `key ${j}: score ${s.toFixed(3)}, value ${values[j].toFixed(3)}` });
        cell.style.setProperty("--height", ((s - lowest) / (highest - lowest)).toFixed(3));  // bar height: the score
        if (j % size === 0) cell.classList.add("live-block-start");
        return cell;
      }));
      strip.setAttribute("aria-label", `the scores of ${KEYS} keys as bars, in blocks of ${size}; ${t * size} read`);

      state.replaceChildren();
      blockScores.textContent = now
        ? `block ${t} (keys ${now.start} to ${now.end - 1}), scores: ${scores.slice(now.start, now.end).map((s) => s.toFixed(3)).join(", ")}`
        : "no key read yet";
      if (!now) {
        state.append(live.element("dt", {}, "before any key"), live.element("dd", {}, "m = −∞, ℓ = 0, acc = 0"));
      } else {

        term("running maximum m", "m", now.m, now.m.toFixed(4));
        term("correction exp(m_old − m)", "correction", now.correction, now.correction.toFixed(4));
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
    }
    block.addEventListener("change", () => {
      read.setStops(Array.from({ length: blocksOf() + 1 }, (_, t) => t));
      update();
    });
    read.input.addEventListener("input", update);
    previous.addEventListener("click", () => { read.input.value = String(read.value() - 1); read.refresh(); update(); });
    next.addEventListener("click", () => { read.input.value = String(read.value() + 1); read.refresh(); update(); });
    update();
  };
})();
