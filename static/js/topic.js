// Live progress: on every (re)connect, tell the server the last event this page already shows,
// so it sends exactly what was missed — after a reload, a second tab or a dropped connection.
document.addEventListener("htmx:wsOpen", (event) => {
  const last = document.querySelector("#event-log > li:last-child");
  const since = last ? Number(last.dataset.seq) : 0;
  event.detail.socketWrapper.send(JSON.stringify({ since }), event.detail.elt);
});
