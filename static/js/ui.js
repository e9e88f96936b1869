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
