// Live progress: on every (re)connect, tell the server the last event this page already shows,
// so it sends exactly what was missed — after a reload, a second tab or a dropped connection.
document.addEventListener("htmx:wsOpen", (event) => {
  const last = document.querySelector("#event-log > li:last-child");
  const since = last ? Number(last.dataset.seq) : 0;
  event.detail.socketWrapper.send(JSON.stringify({ since }), event.detail.elt);
});

// The log is a scroll box: keep its newest line in view as lines arrive, unless the reader has
// scrolled up to older ones.
const eventLog = () => document.getElementById("event-log");
let followLog = true;
document.addEventListener("htmx:wsBeforeMessage", () => {
  const log = eventLog();
  if (log) followLog = log.scrollHeight - log.scrollTop - log.clientHeight < 24;
});
document.addEventListener("htmx:wsAfterMessage", () => {
  const log = eventLog();
  if (log && followLog) log.scrollTop = log.scrollHeight;
});
eventLog()?.scrollTo(0, eventLog().scrollHeight);
