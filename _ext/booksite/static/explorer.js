// The interactive twins of the live explorers (maxmargin.book.explore.interactive): each
// div.mm-explorer holds its frames (PNG data drawn by the library when the book was built) as JSON;
// this shows the div and maps its range inputs (mouse, touch, arrow keys) to the frame of the
// chosen values. No request leaves the page. Without JavaScript the div stays hidden and the
// static small multiples above it are the explorer.
(function () {
  "use strict";
  function setUp(root) {
    var spec = JSON.parse(root.querySelector("script.mm-data").textContent);
    var inputs = Array.prototype.slice.call(root.querySelectorAll("input[type=range]"));
    var img = root.querySelector("img.mm-frame");
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
      img.dataset.params = JSON.stringify(frame.params);
    }
    inputs.forEach(function (input) { input.addEventListener("input", show); });
    root.hidden = false;
    show();
  }
  function setUpAll() {
    document.querySelectorAll("div.mm-explorer").forEach(setUp);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setUpAll);
  else setUpAll();
})();
