// recall ui: small conveniences; every page works without this file.
"use strict";
document.addEventListener("keydown", (event) => {
  // "/" focuses the page's search box (the quick one when the page has no other).
  if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
  const active = document.activeElement;
  if (active && (active.tagName === "INPUT" || active.tagName === "TEXTAREA")) return;
  const box = document.getElementById("search-q") || document.getElementById("in-session")
    || document.getElementById("quick-q");
  if (box) { event.preventDefault(); box.focus(); box.select(); }
});

function openTarget() {
  // A link to an event in context opens its collapsed tool output and brings it into view.
  const id = decodeURIComponent(location.hash.slice(1));
  const target = id && document.getElementById(id);
  if (!target) return;
  target.querySelectorAll("details").forEach((d) => { d.open = true; });
  target.scrollIntoView({ block: "center" });
}
window.addEventListener("hashchange", openTarget);
document.addEventListener("DOMContentLoaded", () => {
  openTarget();
  document.querySelectorAll("button.copy").forEach((button) => {
    button.addEventListener("click", async () => {
      const source = document.getElementById(button.dataset.copy);
      const status = button.parentElement.querySelector(".copied");
      try {
        await navigator.clipboard.writeText(source.value);
        if (status) status.textContent = "Copied.";
      } catch (error) {
        // No clipboard permission (plain http on another host): select it for Ctrl-C.
        source.focus();
        source.select();
        if (status) status.textContent = "Selected: press Ctrl-C to copy.";
      }
    });
  });
});
