// Loaded blocking in <head>: the remembered theme is applied before anything is drawn, so a
// dark page never flashes light. "auto" (nothing stored) follows the system.
try {
  document.documentElement.dataset.theme = localStorage.getItem("theme") || "auto";
} catch {
  document.documentElement.dataset.theme = "auto";
}
