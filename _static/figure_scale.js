// Gives each figure's image its own width (the width myst-nb writes inline, the size its text
// was drawn for) as --figure-own-width, which _static/layout.css uses to keep a figure's text
// legible on a phone.
document.addEventListener("DOMContentLoaded", () => {
  for (const img of document.querySelectorAll("figure a.image-reference > img")) {
    if (img.style.width.endsWith("px")) img.style.setProperty("--figure-own-width", img.style.width);
  }
});
