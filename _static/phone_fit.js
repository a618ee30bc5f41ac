// What keeps an equation readable on a phone and shows where a figure scrolls (_static/layout.css's
// phone rules; a figure's own width, below which it does not shrink, is written into the page by
// _ext/figure_own_width.py, so that it holds without JavaScript).
//
// Equations: MathJax sets display and inline math at one size (its font-size, 127.3 % where it
// matches the text's x-height). On a phone a display equation wider than the column is set just
// small enough to fit it, down to MIN_EQUATION_SCALE of that size (90 % of the text's size, what
// every display equation had on a phone before); one still wider scrolls in its box, with the
// edge shadow.
//
// Inline formulas: a formula is text and never scrolls, except one measured wider than its line
// (the block it sits in: a paragraph, a list item, a table cell), as a long sum can be on a phone.
// That one gets the class math-wide, which layout.css lets scroll with the edge shadow, and is
// made one deliberate Tab stop, labelled, so that a keyboard reader can scroll it; no other
// formula is focusable.
//
// Run after MathJax has typeset, and again when the window's width changes or a toggle opens.
(function () {
  const MIN_EQUATION_SCALE = 0.7;
  const phone = window.matchMedia("(max-width: 500px)");

  function fitEquations(root) {
    for (const equation of root.querySelectorAll('mjx-container[jax="CHTML"][display="true"]')) {
      if (!equation.dataset.mathjaxSize) equation.dataset.mathjaxSize = equation.style.fontSize || "100%";
      const own = parseFloat(equation.dataset.mathjaxSize);
      equation.style.fontSize = equation.dataset.mathjaxSize;
      // an equation in a closed <details> has no width yet: it is fitted when that opens
      if (!phone.matches || equation.clientWidth === 0 || equation.scrollWidth <= equation.clientWidth + 1) continue;
      const fit = Math.max(MIN_EQUATION_SCALE, (equation.clientWidth - 2) / equation.scrollWidth);
      equation.style.fontSize = (own * fit).toFixed(1) + "%";
    }
  }

  // a formula's line: the nearest ancestor that is not inline, and the width of its content box
  function lineOf(element) {
    for (let box = element.parentElement; box; box = box.parentElement) {
      const style = getComputedStyle(box);
      if (!style.display.startsWith("inline") && style.display !== "contents") return box;
    }
    return document.body;
  }
  function lineWidth(element) {
    const box = lineOf(element), style = getComputedStyle(box);
    return box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  }

  function markWideFormulas(root) {
    for (const formula of root.querySelectorAll("span.math")) {
      const typeset = formula.querySelector(':scope > mjx-container[jax="CHTML"]');
      if (!typeset) continue;
      const width = typeset.getBoundingClientRect().width;
      if (width === 0) continue;  // in a closed <details>: measured when it opens
      const wide = width > lineWidth(formula) + 1;
      if (wide === formula.classList.contains("math-wide")) continue;
      formula.classList.toggle("math-wide", wide);
      if (wide) {
        formula.tabIndex = 0;
        formula.setAttribute("role", "group");
        formula.setAttribute("aria-label", "Formula wider than the line: scroll sideways to read it");
      } else {
        formula.removeAttribute("tabindex");
        formula.removeAttribute("role");
        formula.removeAttribute("aria-label");
      }
    }
  }

  function fit(root) {
    fitEquations(root);
    markWideFormulas(root);
  }

  // A figure wider than its box on a phone scrolls in it; its edge shadow is painted under the
  // opaque image and never shows, so the image itself fades at the edge where more of it is
  // (layout.css), until it is scrolled to its end.
  function markScrollingFigure(box) {
    const scrolls = box.scrollWidth > box.clientWidth + 1;
    box.classList.toggle("scrolls", scrolls);
    box.classList.toggle("scrolled-to-end", scrolls && box.scrollLeft + box.clientWidth >= box.scrollWidth - 1);
  }
  // measured again when its box changes size: the window's width, its image loaded, a toggle opened
  const figureBoxes = new ResizeObserver(entries => {
    const boxes = entries.map(entry => entry.target);
    setTimeout(() => boxes.forEach(markScrollingFigure));
  });
  function markScrollingFigures() {
    document.querySelectorAll("figure a.image-reference").forEach(box => figureBoxes.observe(box));
  }
  document.addEventListener("scroll", event => {
    if (event.target instanceof Element && event.target.matches("figure a.image-reference")) markScrollingFigure(event.target);
  }, true);

  // A line that changes width (the window's width changes, a folded solution opens and its lines
  // get one) has its formulas measured again, after the observer's turn, so that a formula
  // turned into a scroll box (taller by its scrollbar) does not resize what is being observed.
  const changed = new Set();
  const lines = new ResizeObserver(entries => {
    for (const entry of entries) {
      if (entry.target.__lineWidth === entry.contentRect.width) continue;
      entry.target.__lineWidth = entry.contentRect.width;
      changed.add(entry.target);
    }
    if (changed.size) setTimeout(() => {
      for (const line of changed) markWideFormulas(line);
      changed.clear();
    });
  });
  function watchLines() {
    for (const line of new Set([...document.querySelectorAll("span.math")].map(lineOf))) lines.observe(line);
  }

  window.addEventListener("load", () => {
    const typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
    markScrollingFigures();  // observed from now on
    (typeset || Promise.resolve()).then(() => { fit(document); watchLines(); });
  });
  // "toggle" does not bubble; a listener on the document still sees it while capturing
  document.addEventListener("toggle", event => { if (event.target.open) fit(event.target); }, true);
  phone.addEventListener("change", () => fit(document));
})();
