// ndd-stream view: refresh the page's live parts (elements with data-live) every 2 s
// with HTML fragments rendered by the server. No library, no build step.
(function () {
  "use strict";
  var areas = Array.prototype.slice.call(document.querySelectorAll("[data-live]"));
  var status = document.getElementById("live-status");
  var pause = document.getElementById("pause");
  var busy = false;
  var refreshed = 0;
  if (!areas.length) {
    status.textContent = "snapshot";
    status.className = "live still";
    if (pause) { pause.parentNode.style.display = "none"; }
    return;
  }
  function openDetails(el) {
    return Array.prototype.map.call(el.querySelectorAll("details[open]"), function (d) {
      return d.getAttribute("data-key");
    });
  }
  function reopen(el, keys) {
    keys.forEach(function (key) {
      var d = el.querySelector('details[data-key="' + CSS.escape(key || "") + '"]');
      if (d) { d.open = true; }
    });
  }
  function load(el) {
    return fetch(el.getAttribute("data-live"), {cache: "no-store"}).then(function (r) {
      if (!r.ok) { throw new Error("HTTP " + r.status); }
      return r.text();
    }).then(function (html) {
      var open = openDetails(el);
      el.innerHTML = html;
      reopen(el, open);
    });
  }
  function refresh() {
    if (busy || (pause && pause.checked)) { return; }
    busy = true;
    Promise.all(areas.map(load)).then(function () {
      refreshed += 1;
      document.body.setAttribute("data-refreshed", String(refreshed));
      status.textContent = "live · " + new Date().toLocaleTimeString();
      status.className = "live";
    }).catch(function (err) {
      status.textContent = "connection lost, retrying (" + err.message + ")";
      status.className = "live lost";
    }).then(function () { busy = false; });
  }
  if (pause) {
    pause.addEventListener("change", function () {
      status.textContent = pause.checked ? "paused" : "live";
    });
  }
  setInterval(refresh, 2000);
})();
