// What keeps a figure and an equation readable on a phone (_static/layout.css's phone rules).
//
// Figures: each figure's image gets its own width (the width myst-nb writes inline, the size its
// text was drawn for) as --figure-own-width, below which layout.css does not shrink it on a phone.
//
// Equations: MathJax sets display and inline math at one size (its font-size, 127.3 % where it
// matches the text's x-height). On a phone a display equation wider than the column is set just
// small enough to fit it, down to MIN_EQUATION_SCALE of that size (90 % of the text's size, what
// every display equation had on a phone before); one still wider scrolls in its box, with the
// edge shadow. Run after MathJax has typeset, and again when the window's width changes.
(function () {
  const MIN_EQUATION_SCALE = 0.7;
  const phone = window.matchMedia("(max-width: 500px)");

  function giveFiguresTheirOwnWidth() {
    for (const img of document.querySelectorAll("figure a.image-reference > img")) {
      if (img.style.width.endsWith("px")) img.style.setProperty("--figure-own-width", img.style.width);
    }
  }

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

  document.addEventListener("DOMContentLoaded", giveFiguresTheirOwnWidth);
  window.addEventListener("load", () => {
    const typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
    (typeset || Promise.resolve()).then(() => fitEquations(document));
  });
  // "toggle" does not bubble; a listener on the document still sees it while capturing
  document.addEventListener("toggle", event => { if (event.target.open) fitEquations(event.target); }, true);
  phone.addEventListener("change", () => fitEquations(document));
})();
