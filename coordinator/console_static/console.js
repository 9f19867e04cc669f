// dpfed console: re-fetch the live part of the page from the coordinator every few seconds (no other site).
(function () {
  "use strict";
  var main = document.getElementById("live");
  var stamp = document.getElementById("updated");
  if (!main) { return; }
  var every = Math.max(parseFloat(main.getAttribute("data-refresh") || "2"), 0.2) * 1000;
  function tick() {
    fetch(main.getAttribute("data-src"), {credentials: "same-origin", cache: "no-store"})
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.text();
      })
      .then(function (text) {
        main.innerHTML = text;  // rendered and escaped by the coordinator
        if (stamp) { stamp.textContent = new Date().toISOString().slice(11, 19) + " UTC"; stamp.className = ""; }
      })
      .catch(function (e) {
        if (stamp) { stamp.textContent = "update failed (" + e.message + ")"; stamp.className = "bad"; }
      })
      .then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
}());
