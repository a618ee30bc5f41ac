// Search results quote each page's text around the words found. Sphinx takes that text from
// the page as built, where math is still TeX source ("\(1/\sqrt{d_k}\)") and the article's
// header holds the download and launch buttons and the "Contents" toggle, and a copy of the
// title and contents for print precedes the text (".ipynb .pdf ... Contents" in the quotes). The page text is cleaned before Sphinx reads it: those
// buttons, cell sources, display equations and the titles of folded cells ("Show code cell
// source") are dropped, inline math is spelled plainly.
//
// Ranking: Sphinx scores a word in a page's title as high as in any of its section titles, so the
// chapter about a subject came fourth ("softmax": chapter 4) or below the first five ("online
// softmax": chapter 8). A result whose page title holds every word searched for is raised, the
// more the shorter that title; one whose section title holds them all, a little.
var Scorer;  // searchtools.js keeps its defaults unless Scorer is defined: they are set below
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
      const drop = ".bd-header-article, #jb-print-docs-body, .bd-sidebar-secondary, .prev-next-area, .cell_input, div.math, " +
                   "details > summary";
      page.querySelectorAll(drop).forEach(el => el.remove());
      page.querySelectorAll("span.math").forEach(el => { el.textContent = plain(el.textContent); });
      return htmlToText(page.documentElement.outerHTML, anchor);
    };
  }
  const searched = () => (new URLSearchParams(location.search).get("q") || "").toLowerCase().split(/\s+/).filter(w => w.length > 1);
  Scorer = {
    // Sphinx's defaults (searchtools.js)
    objNameMatch: 11, objPartialMatch: 6, objPrio: {0: 15, 1: 5, 2: -5}, objPrioDefault: 0,
    title: 15, partialTitle: 7, term: 5, partialTerm: 2,
    score: result => {
      const [docname, title, , , score] = result;
      const words = searched();
      if (!words.length) return score;
      const page = title.split(" > ")[0].toLowerCase();
      let raised = score;
      if (words.every(w => page.includes(w))) raised += 10 + Math.round(20 * words.join(" ").length / page.length);
      // the share of the words that the page's title or one of its sections' titles holds
      const titles = sectionTitles().get(docname) || [];
      raised += Math.round(6 * words.filter(w => page.includes(w) || titles.some(t => t.includes(w))).length / words.length);
      return raised;
    },
  };
  let sections = null;
  function sectionTitles() {  // docname -> its sections' titles, lower case, from the search index
    if (sections) return sections;
    sections = new Map();
    const index = Search._index;
    for (const [title, places] of Object.entries(index.alltitles || {}))
      for (const [file] of places) {
        const name = index.docnames[file];
        if (!sections.has(name)) sections.set(name, []);
        sections.get(name).push(title.toLowerCase());
      }
    return sections;
  }
  // before searchtools.js, loaded after this file, starts the search on the same event
  document.addEventListener("DOMContentLoaded", patch);
})();
