// Small behaviours the templates ask for with data attributes instead of inline handlers, which
// the Content-Security-Policy forbids. Listening on the document covers parts htmx swaps in later.

// <select data-autosubmit>: choosing an option sends its form (the language switch).
document.addEventListener("change", (event) => {
  const select = event.target.closest("select[data-autosubmit]");
  if (select && select.form) select.form.requestSubmit();
});

// <input data-select-on-click>: one click selects a one-time link or token for copying.
document.addEventListener("click", (event) => {
  const input = event.target.closest("input[data-select-on-click]");
  if (input) input.select();
});

// <form data-confirm="question">: sent only when the question is answered yes.
document.addEventListener("submit", (event) => {
  const form = event.target.closest("form[data-confirm]");
  if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
});

// <textarea data-grow>: as tall as its text (CSS field-sizing where the browser has it).
const grow = (area) => {
  area.style.height = "auto";
  area.style.height = `${area.scrollHeight + area.offsetHeight - area.clientHeight}px`;
};
if (!CSS.supports("field-sizing", "content")) {
  document.addEventListener("input", (event) => {
    if (event.target.matches("textarea[data-grow]")) grow(event.target);
  });
  const growAll = () => document.querySelectorAll("textarea[data-grow]").forEach(grow);
  document.addEventListener("DOMContentLoaded", growAll);
  document.addEventListener("htmx:afterSettle", growAll);
}

// Enter sends, Shift+Enter makes a new line: <textarea data-enter-submits> sends its form,
// <textarea data-enter-clicks="id"> clicks that button (the plan's Save and Add).
document.addEventListener("keydown", (event) => {
  if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
  const area = event.target.closest("textarea[data-enter-submits], textarea[data-enter-clicks]");
  if (!area) return;
  event.preventDefault();
  if (area.dataset.enterClicks) document.getElementById(area.dataset.enterClicks)?.click();
  else area.form?.requestSubmit();
});

// Inside [data-show-errors], a 4xx answer carries the form again with the errors beside its
// fields: swap it in like a success (htmx drops error answers by default, so nothing showed).
document.addEventListener("htmx:beforeSwap", (event) => {
  const status = event.detail.xhr.status;
  const source = event.detail.requestConfig?.elt;
  if ([400, 409, 413, 422, 429].includes(status) && source?.closest("[data-show-errors]")) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});
// The plan was approved (or the topic deleted) in another tab: show the page as it is now.
document.addEventListener("htmx:responseError", (event) => {
  const source = event.detail.requestConfig?.elt ?? event.detail.elt;
  if (event.detail.xhr.status === 404 && source?.closest("#plan")) window.location.reload();
});

// ↑/↓ in the plan: focus stays with the moved row (on the same arrow, or on the other one
// when the row reached the top or the bottom and that arrow is disabled).
let moved = null;
document.addEventListener("htmx:beforeRequest", (event) => {
  const button = event.detail.elt?.closest("button[data-move-row]");
  moved = button ? { row: button.dataset.moveRow, direction: button.value } : null;
});
document.addEventListener("htmx:afterSettle", () => {
  if (!moved) return;
  const { row, direction } = moved;
  moved = null;
  const same = document.getElementById(`sq-${row}-${direction}`);
  const other = document.getElementById(`sq-${row}-${direction === "up" ? "down" : "up"}`);
  const target = same && !same.disabled ? same : other && !other.disabled ? other : document.getElementById(`sq-${row}`);
  target?.focus();
});

// <button data-copy="id">: copies that input's value and says so on the button for a moment.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const input = document.getElementById(button.dataset.copy);
  if (!input) return;
  input.select();
  let copied = false;
  try {
    await navigator.clipboard.writeText(input.value);
    copied = true;
  } catch {
    copied = document.execCommand("copy"); // not a secure context (plain HTTP on another host)
  }
  if (!copied) return;
  const label = button.textContent;
  button.textContent = button.dataset.copied;
  setTimeout(() => {
    button.textContent = label;
  }, 2000);
});

// The theme switch: light, dark or the system's (remembered in this browser). theme.js has
// already applied the remembered choice before the page was drawn.
document.addEventListener("change", (event) => {
  const select = event.target.closest("select[data-theme-switch]");
  if (!select) return;
  if (select.value === "auto") localStorage.removeItem("theme");
  else localStorage.setItem("theme", select.value);
  document.documentElement.dataset.theme = select.value;
});
document.addEventListener("DOMContentLoaded", () => {
  const select = document.querySelector("select[data-theme-switch]");
  if (select) select.value = localStorage.getItem("theme") || "auto";
});

// A live update of the plan (the websocket re-renders it on plan events, and after a
// reconnect) keeps what was typed and not saved yet, and the focus and caret of the field.
// (Only the websocket's updates: the plan form's own answers are what the server saved.)
let refocus = null;
let liveUpdate = false;
document.addEventListener("htmx:wsBeforeMessage", () => {
  liveUpdate = true;
});
document.addEventListener("htmx:wsAfterMessage", () => {
  liveUpdate = false;
});
document.addEventListener("htmx:oobBeforeSwap", (event) => {
  const old = event.detail.target;
  if (!liveUpdate || !old || old.id !== "plan") return;
  for (const field of old.querySelectorAll("textarea[id]")) {
    if (field.value === field.defaultValue) continue;
    const incoming = event.detail.fragment.querySelector(`#${CSS.escape(field.id)}`);
    if (incoming) incoming.textContent = field.value;
  }
  const active = document.activeElement;
  refocus = active && active.id && old.contains(active)
    ? { id: active.id, start: active.selectionStart, end: active.selectionEnd }
    : null;
});
document.addEventListener("htmx:oobAfterSwap", () => {
  if (!refocus) return;
  const field = document.getElementById(refocus.id);
  if (field && document.activeElement !== field) {
    field.focus();
    if (typeof refocus.start === "number" && field.setSelectionRange) field.setSelectionRange(refocus.start, refocus.end);
  }
  refocus = null;
});

// <details data-fold-on-phone open>: the header's links fold into their Menu button on a narrow
// window (the stylesheet hides that button on a wide one, where the links stay in the bar).
const phone = window.matchMedia("(max-width: 40rem)");
const foldMenus = () => {
  for (const menu of document.querySelectorAll("details[data-fold-on-phone]")) menu.open = !phone.matches;
};
document.addEventListener("DOMContentLoaded", foldMenus);
phone.addEventListener("change", foldMenus);
