// Reloads a live page on the period the server gave (<body data-refresh="SECONDS">), unless the
// reader unticked "refresh" (remembered in localStorage for every page of the console).
"use strict";
(function () {
  const seconds = Number(document.body.dataset.refresh || "0");
  const toggle = document.getElementById("refresh-toggle");
  if (!seconds || !toggle) {
    return;
  }
  const key = "weir-console-refresh";
  let timer = null;
  function schedule() {
    clearTimeout(timer);
    if (toggle.checked) {
      timer = setTimeout(function () { location.reload(); }, seconds * 1000);
    }
  }
  toggle.checked = localStorage.getItem(key) !== "off";
  toggle.addEventListener("change", function () {
    localStorage.setItem(key, toggle.checked ? "on" : "off");
    schedule();
  });
  schedule();
})();
