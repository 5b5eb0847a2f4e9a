// The interactive twins of the live explorers (maxmargin.book.explore.interactive): each
// div.mm-explorer holds its frames' settings as JSON, and each frame's PNG (drawn by the library
// when the book was built) as a file in _static/explorers/ that the booksite extension wrote; this
// shows the div and maps its range inputs (mouse, touch, arrow keys) to the frame of the chosen
// values. The first frame loads with the page; the others once the explorer comes into view or a
// control is touched, as plain images (no fetch, so the page works from file:// too). No request
// leaves the site. Without JavaScript the div stays hidden, nothing of it loads, and the static
// small multiples above it are the explorer.
(function () {
  "use strict";
  function setUp(root) {
    var spec = JSON.parse(root.querySelector("script.mm-data").textContent);
    var inputs = Array.prototype.slice.call(root.querySelectorAll("input[type=range]"));
    var img = root.querySelector("img.mm-frame");
    var preloaded = null;
    function preload() {          // every frame once, so that moving a control swaps at once
      if (preloaded) return;
      preloaded = spec.frames.map(function (frame) {
        var image = new Image();
        image.src = frame.src;
        return image;
      });
      root.dataset.preloaded = "true";
    }
    function show() {
      var index = 0, parts = [];
      spec.controls.forEach(function (control, k) {
        var position = Number(inputs[k].value);
        index = index * control.values.length + position;
        var text = control.shown[position];
        inputs[k].setAttribute("aria-valuetext", text);
        inputs[k].parentNode.querySelector("output").value = text;
        parts.push(control.label + " = " + text);
      });
      var frame = spec.frames[index];
      img.src = frame.src;
      img.alt = spec.alt + " Setting: " + parts.join(", ") + ".";
      img.dataset.frame = String(index);
      img.dataset.hash = frame.hash;
      img.dataset.font = String(frame.font);
      img.dataset.params = JSON.stringify(frame.params);
    }
    inputs.forEach(function (input) {
      input.addEventListener("input", function () { preload(); show(); });
    });
    ["pointerdown", "touchstart", "focusin", "keydown"].forEach(function (type) {
      root.addEventListener(type, preload, {passive: true});
    });
    if ("IntersectionObserver" in window) {
      var seen = new IntersectionObserver(function (entries) {
        if (entries.some(function (e) { return e.isIntersecting; })) {
          seen.disconnect();
          preload();
        }
      }, {rootMargin: "200px"});
      seen.observe(root);
    }
    root.hidden = false;
    show();
  }
  function setUpAll() {
    document.querySelectorAll("div.mm-explorer").forEach(setUp);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setUpAll);
  else setUpAll();
})();
