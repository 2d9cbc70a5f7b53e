// The operator page's one script (docs/ui.md): a Copy button beside a ref. Without it the ref is still
// there to select; the button shows only where this script runs.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("button[data-copy]")) {
    const field = document.getElementById(button.dataset.copy);
    if (!field) continue;
    button.hidden = false;
    button.addEventListener("click", async () => {
      field.select();
      try {
        await navigator.clipboard.writeText(field.value);
        button.textContent = "Copied";
      } catch {
        button.textContent = "Selected: press Ctrl+C";
      }
    });
  }
});
