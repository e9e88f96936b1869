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

// The report, written live: while the text grows (the server re-sends the card), and once the
// finished report replaces it — then the page leads with it, the tab title says so, the work
// panels fold away and a sticky "Report ready" link jumps to it.
const reportState = () => document.getElementById("report")?.dataset.state;
let lastReportState = reportState();
document.addEventListener("htmx:wsAfterMessage", () => {
  const state = reportState();
  if (state === "ready" && lastReportState !== "ready") reportReady();
  lastReportState = state;
});

function reportReady() {
  const live = document.getElementById("live");
  const report = document.getElementById("report");
  const status = document.getElementById("topic-status");
  if (!live || !report) return;
  // The follow-up dock and form go with it, so that the way to ask about it follows it.
  const followers = [report, document.getElementById("followup-dock"), document.getElementById("thread")];
  if (status && status.nextElementSibling !== report) status.after(...followers.filter(Boolean));
  if (live.dataset.readyTitle) document.title = live.dataset.readyTitle;
  for (const panel of document.querySelectorAll("details.work-panel")) panel.open = false;
  const jump = document.getElementById("report-ready");
  if (jump && report.getBoundingClientRect().top < 0) {
    jump.hidden = false;
    const hide = new IntersectionObserver((entries) => {
      if (entries.some((entry) => entry.isIntersecting)) {
        jump.hidden = true;
        hide.disconnect();
      }
    });
    hide.observe(report);
  }
}

// "Expand this section" beside each heading of a finished report: it asks the follow-up that
// the thread's expand form would ask for that heading (the form works without this script too).
function addExpandButtons() {
  const form = document.getElementById("expand-form");
  const select = document.getElementById("expand-section");
  if (!form || !select) return;
  const titles = new Set(Array.from(select.options, (option) => option.value));
  const label = form.querySelector("[data-expand-label]")?.dataset.expandLabel || "Expand";
  for (const heading of document.querySelectorAll("#report article.markdown:not(.report-draft) :is(h2, h3)")) {
    const title = heading.textContent.trim().replace(/\s+/g, " ");
    if (!titles.has(title) || heading.querySelector(".expand-section")) continue;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "expand-section";
    button.textContent = label;
    button.setAttribute("aria-label", `${label}: ${title}`);
    button.addEventListener("click", () => {
      select.value = title;
      form.requestSubmit();
    });
    heading.append(" ", button);
  }
}
addExpandButtons();
document.addEventListener("htmx:wsAfterMessage", addExpandButtons);

// Panels re-rendered over the websocket are the same HTML for every watcher, so their forms
// carry no CSRF token: each gets this page's own (the one htmx sends as X-CSRFToken).
function pageCsrfToken() {
  try {
    return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || "";
  } catch {
    return "";
  }
}
function giveFormsTheToken() {
  const token = pageCsrfToken();
  if (!token) return;
  for (const form of document.querySelectorAll('form[method="post"]')) {
    if (form.querySelector('input[name="csrfmiddlewaretoken"]')) continue;
    const input = document.createElement("input");
    input.type = "hidden";
    input.name = "csrfmiddlewaretoken";
    input.value = token;
    form.prepend(input);
  }
}
document.addEventListener("htmx:wsAfterMessage", giveFormsTheToken);

// The dock at the bottom of the window: its link scrolls to the follow-up form; the question
// field then has the focus, so that typing can start at once.
document.addEventListener("click", (event) => {
  if (!event.target.closest("#followup-dock a")) return;
  const field = document.getElementById("followup-question");
  if (!field) return;
  event.preventDefault();
  field.scrollIntoView({ block: "center" });
  field.focus({ preventScroll: true });
});
