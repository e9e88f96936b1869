// Upload by drag and drop: dropped files become the file input's own selection, so the form
// sends them exactly as if they had been chosen with the picker (which keyboards use).
const form = document.getElementById("upload-form");
if (form) {
  const input = form.querySelector("input[type=file]");
  const zone = form.querySelector(".dropzone");
  const problem = document.getElementById("upload-problem");
  const progress = document.getElementById("upload-progress");

  // The server checks everything again; this only spares sending what it would refuse anyway.
  const withinLimits = () => {
    const files = [...input.files];
    const tooBig = files.filter((file) => file.size > Number(form.dataset.maxBytes));
    let text = "";
    if (files.length > Number(form.dataset.maxFiles)) text = form.dataset.tooMany;
    else if (tooBig.length) text = `${form.dataset.tooBig} ${tooBig.map((file) => file.name).join(", ")}`;
    problem.textContent = text;
    problem.hidden = !text;
    return !text;
  };

  input.addEventListener("change", withinLimits);
  for (const type of ["dragenter", "dragover"]) {
    zone.addEventListener(type, (event) => {
      event.preventDefault();
      zone.classList.add("dragging");
    });
  }
  zone.addEventListener("dragleave", (event) => {
    if (!zone.contains(event.relatedTarget)) zone.classList.remove("dragging");
  });
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("dragging");
    if (!event.dataTransfer.files.length) return;
    input.files = event.dataTransfer.files;
    if (withinLimits()) form.requestSubmit();
  });
  // A file dropped beside the zone must not make the browser leave the page to show it.
  for (const type of ["dragover", "drop"]) window.addEventListener(type, (event) => event.preventDefault());

  form.addEventListener("htmx:beforeRequest", (event) => {
    if (!withinLimits()) event.preventDefault();
  });
  form.addEventListener("htmx:xhr:progress", (event) => {
    if (!event.detail.lengthComputable) return;
    progress.hidden = false;
    progress.value = Math.round((100 * event.detail.loaded) / event.detail.total);
  });
  form.addEventListener("htmx:afterRequest", (event) => {
    progress.hidden = true;
    progress.value = 0;
    if (event.detail.successful) form.reset();
  });
}
