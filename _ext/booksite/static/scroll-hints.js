// Tables, figures and (on a phone) formulas wider than the text column scroll sideways in their
// own box; a box that does scroll gets the class "scrolls", and booksite.css then says so: under
// a table or figure ("swipe for more columns", "swipe for the rest of the figure"), by a shadow
// at a formula's cut edge.
// Re-checked when the window changes size. About 0.5 kB, the book's own (no library).
(function () {
  function mark() {
    document.querySelectorAll(".pst-scrollable-table-container, .figure-scroll").forEach(function (box) {
      box.classList.toggle("scrolls", box.scrollWidth > box.clientWidth + 1);
    });
    // a formula: its typeset width against its box (scrollWidth counts a letter's overhang)
    document.querySelectorAll("span.math, div.math").forEach(function (box) {
      var formula = box.querySelector("mjx-math");
      box.classList.toggle("scrolls", formula !== null &&
                           formula.getBoundingClientRect().width > box.clientWidth + 2);
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", mark);
  } else {
    mark();
  }
  window.addEventListener("resize", mark);
  window.addEventListener("load", mark);   // a figure's width is known once its image has loaded
})();
