// Search results quote each page's text around the words found. Sphinx takes that text from
// the page as built, where math is still TeX source ("\(1/\sqrt{d_k}\)") and the article's
// header holds the download and launch buttons and the "Contents" toggle, and a copy of the
// title and contents for print precedes the text (".ipynb .pdf ... Contents" in the quotes). The page text is cleaned before Sphinx reads it: those
// buttons, cell sources and display equations are dropped, inline math is spelled plainly.
(function () {
  const SYMBOLS = {sqrt: "√", cdot: "·", times: "×", le: "≤", leq: "≤", ge: "≥", geq: "≥", infty: "∞",
                   approx: "≈", ne: "≠", to: "→", sum: "Σ", tau: "τ", ell: "ℓ", rho: "ρ", sigma: "σ",
                   mu: "μ", alpha: "α", top: "ᵀ", log: "log", exp: "exp", ln: "ln", circ: "∘", mid: "|"};
  function plain(tex) {
    return tex
      .replace(/^\\\(|\\\)$|^\\\[|\\\]$/g, "")
      .replace(/\\(?:operatorname|mathrm|text|mathbf|mathit)\{([^{}]*)\}/g, "$1")
      .replace(/\\frac\{([^{}]*)\}\{([^{}]*)\}/g, "$1/$2")
      .replace(/\\([A-Za-z]+)/g, (whole, name) => SYMBOLS[name] ?? name)
      .replace(/\\[,;:! ]/g, " ")
      .replace(/[{}]/g, "")
      .replace(/\s+/g, " ")
      .trim();
  }
  function patch() {
    if (typeof Search === "undefined" || !Search.htmlToText) return;
    const htmlToText = Search.htmlToText;
    Search.htmlToText = (htmlString, anchor) => {
      const page = new DOMParser().parseFromString(htmlString, "text/html");
      // #jb-print-docs-body: the title and "Contents" again, for print only
      const drop = ".bd-header-article, #jb-print-docs-body, .bd-sidebar-secondary, .prev-next-area, .cell_input, div.math";
      page.querySelectorAll(drop).forEach(el => el.remove());
      page.querySelectorAll("span.math").forEach(el => { el.textContent = plain(el.textContent); });
      return htmlToText(page.documentElement.outerHTML, anchor);
    };
  }
  // before searchtools.js, loaded after this file, starts the search on the same event
  document.addEventListener("DOMContentLoaded", patch);
})();
