// Tables wider than the text column scroll sideways in their own box; a box that does scroll
// gets the class "scrolls", and booksite.css then says so under it ("swipe for more columns").
// Re-checked when the window changes size. About 0.5 kB, the book's own (no library).
(function () {
  function mark() {
    document.querySelectorAll(".pst-scrollable-table-container").forEach(function (box) {
      box.classList.toggle("scrolls", box.scrollWidth > box.clientWidth + 1);
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", mark);
  } else {
    mark();
  }
  window.addEventListener("resize", mark);
})();
