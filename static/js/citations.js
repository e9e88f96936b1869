// Citation previews: hovering or focusing a citation "[n]" of a finished report shows a card —
// the source's title and site, the passage the sentence rests on with its words marked, and the
// citation check's verdict — fetched from "citations/<k>/" beside the page (the topic page
// /topics/<id>/ and a shared report /s/<token>/ both end in "/"). k is the citation's place
// among the report's citations in reading order, as the server numbers them.
// Escape or leaving the link closes it. A click or a tap on "[n]" opens the card instead of
// jumping away (on a phone there is no hover): the card's ✕ brings the reader back to the link, and
// its own link leads to the sources list; a click on a link whose card is already open jumps there.
(function () {
  "use strict";
  // A follow-up's answer in the thread (#thread) numbers its citations among its own, and its
  // cards come from "followups/<id>/citations/<k>/" (the article's data-cite-base).
  var SELECTOR = "#report article.markdown:not(.report-draft) a[href^='#source-'], " +
    "#thread article.followup-answer a[href^='#source-']";
  var OPEN_DELAY = 150;
  var CLOSE_DELAY = 250;
  var cards = {};
  var card = null;
  var owner = null;
  var openTimer = null;
  var closeTimer = null;
  var returning = null;

  function isCitation(link) {
    return /^\[\d+\]$/.test(link.textContent.trim());
  }

  function indexOf(link) {
    var article = link.closest("article");
    var links = Array.prototype.filter.call(article.querySelectorAll("a[href^='#source-']"), isCitation);
    return links.indexOf(link);
  }

  function baseOf(link) {
    var article = link.closest("article");
    return (article && article.dataset.citeBase) || "";
  }

  function element() {
    if (!card) {
      card = document.createElement("div");
      card.id = "citation-card";
      card.className = "citation-card";
      card.setAttribute("role", "tooltip");
      card.hidden = true;
      card.addEventListener("mouseenter", function () { clearTimeout(closeTimer); });
      card.addEventListener("mouseleave", scheduleClose);
      document.body.appendChild(card);
    }
    return card;
  }

  function load(base, index) {
    var url = new URL(base + "citations/" + index + "/", window.location.href).toString();
    if (!cards[url]) {
      cards[url] = fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } }).then(function (response) {
        if (!response.ok) { delete cards[url]; throw new Error("HTTP " + response.status); }
        return response.text();
      });
    }
    return cards[url];
  }

  function place(link) {
    var box = link.getBoundingClientRect();
    var width = Math.min(420, document.documentElement.clientWidth - 16);
    var left = Math.max(8, Math.min(box.left + window.scrollX, window.scrollX + document.documentElement.clientWidth - width - 8));
    card.style.width = width + "px";
    card.style.left = left + "px";
    card.style.top = (box.bottom + window.scrollY + 6) + "px";
  }

  function open(link) {
    var index = indexOf(link);
    if (index < 0) { return; }
    owner = link;
    element();
    load(baseOf(link), index).then(function (html) {
      if (owner !== link) { return; }
      card.innerHTML = html;
      card.hidden = false;
      place(link);
      link.setAttribute("aria-describedby", "citation-card");
    }).catch(function () {
      if (owner === link) { close(); }
    });
  }

  function close() {
    clearTimeout(openTimer);
    if (owner) { owner.removeAttribute("aria-describedby"); }
    owner = null;
    if (card) { card.hidden = true; }
  }

  function scheduleClose() {
    clearTimeout(closeTimer);
    closeTimer = setTimeout(close, CLOSE_DELAY);
  }

  function target(event) {
    var link = event.target.closest && event.target.closest(SELECTOR);
    return link && isCitation(link) ? link : null;
  }

  function enter(event) {
    var link = target(event);
    if (!link || (event.type === "focusin" && link === returning)) { return; }
    clearTimeout(closeTimer);
    if (link === owner && card && !card.hidden) { return; }
    clearTimeout(openTimer);
    openTimer = setTimeout(function () { open(link); }, event.type === "focusin" ? 0 : OPEN_DELAY);
  }

  function leave(event) {
    var link = target(event);
    if (!link) { return; }
    clearTimeout(openTimer);
    // Moving onto the card keeps it open, so its links can be followed.
    if (event.relatedTarget && card && card.contains(event.relatedTarget)) { return; }
    scheduleClose();
  }

  document.addEventListener("mouseover", enter);
  document.addEventListener("focusin", enter);
  document.addEventListener("mouseout", leave);
  document.addEventListener("focusout", leave);
  document.addEventListener("click", function (event) {
    var closer = event.target.closest && event.target.closest("[data-close-card]");
    if (closer && card && card.contains(closer)) {
      var back = owner;
      close();
      // Back to the citation, without its focus opening the card again.
      if (closer.tagName === "BUTTON" && back) { returning = back; back.focus(); returning = null; }
      return;
    }
    var link = target(event);
    if (link) {
      if (link === owner && card && !card.hidden) { return; }
      event.preventDefault();
      clearTimeout(openTimer);
      clearTimeout(closeTimer);
      open(link);
      return;
    }
    // A tap anywhere else closes an open card.
    if (owner && card && !card.contains(event.target)) { close(); }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && owner) { var link = owner; close(); link.focus(); }
  });
  // The report card is replaced when the run finishes (htmx): a card of the old one goes.
  document.addEventListener("htmx:afterSwap", function () { if (owner && !document.contains(owner)) { close(); } });
})();
