// The interactive twins of the live explorers (maxmargin.book.explore.interactive): shows each
// div.mm-explorer and maps its range inputs (mouse, touch, arrow keys) to the frame of the chosen
// values, a PNG the library drew at build time (in _static/explorers/). The first frame loads with
// the page, the others once the explorer is in view or touched (plain images: file:// works).
// Without JavaScript the div stays hidden; the static small multiples above it remain.
(function () {
  "use strict";
  function setUp(root) {
    var spec = JSON.parse(root.querySelector("script.mm-data").textContent);
    var inputs = Array.prototype.slice.call(root.querySelectorAll("input[type=range]"));
    var img = root.querySelector("img.mm-frame");
    var preloaded;
    function preload() {          // every frame once: a control then swaps at once
      preloaded = preloaded || spec.frames.map(function (f) {
        var image = new Image();
        image.src = f.src;
        return image;
      });
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
    ["pointerdown", "touchstart", "focusin"].forEach(function (type) {
      root.addEventListener(type, preload, {passive: true});
    });
    if (window.IntersectionObserver) {
      var seen = new IntersectionObserver(function (entries) {
        if (entries[0].isIntersecting) { seen.disconnect(); preload(); }
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
