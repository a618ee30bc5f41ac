// A reader whose system is set to dark gets the dark page from its first paint. The theme's head
// script sets the page's theme to "auto" (_config.yml's default_mode), which none of its styles
// match, or, on a later visit, to the one it stored last time (light, if the system was light then),
// and resolves "auto" mode only at DOMContentLoaded, after a page may have been drawn light.
if (document.documentElement.dataset.mode === "auto") {
  document.documentElement.dataset.theme = matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}
