/* Small behaviours shared by console pages:
 * - relative times ("3 min ago") kept fresh; the absolute time is in the title;
 * - the task list's status pills change live (set with textContent from a fixed
 *   table of states: nothing from the event is parsed as HTML);
 * - the inbox merges new requests in and marks ones handled elsewhere, without
 *   touching a card someone is working on;
 * - keyboard: "/" focuses search, Escape closes an open action form; focus goes
 *   to a card after it is replaced by an action's response.
 */
(function () {
  "use strict";

  var LABELS = {
    CREATED: "Queued", RUNNING: "Running", WAITING_FOR_INPUT: "Waiting for input",
    WAITING_FOR_APPROVAL: "Waiting for approval", WAITING_FOR_RECONCILIATION: "Waiting for reconciliation",
    WAITING_FOR_HUMAN: "Escalated", SUCCEEDED: "Succeeded", FAILED: "Failed", CANCELED: "Canceled"
  };
  var TONES = {
    CREATED: "neutral", RUNNING: "info", WAITING_FOR_INPUT: "warning", WAITING_FOR_APPROVAL: "warning",
    WAITING_FOR_RECONCILIATION: "warning", WAITING_FOR_HUMAN: "warning", SUCCEEDED: "success",
    FAILED: "danger", CANCELED: "muted"
  };

  // --- relative times -------------------------------------------------------------
  function relative(date) {
    var s = Math.round((Date.now() - date.getTime()) / 1000);
    var future = s < 0;
    var a = Math.abs(s);
    var text;
    if (a < 10) { return future ? "in a moment" : "just now"; }
    if (a < 60) { text = a + " s"; }
    else if (a < 3600) { text = Math.floor(a / 60) + " min"; }
    else if (a < 86400) { var h = Math.floor(a / 3600); text = h + " h"; }
    else if (a < 86400 * 30) { var d = Math.floor(a / 86400); text = d + " day" + (d === 1 ? "" : "s"); }
    else { return date.toISOString().slice(0, 10); }
    return future ? "in " + text : text + " ago";
  }
  function refreshTimes(root) {
    (root || document).querySelectorAll("time[data-relative]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (!isNaN(d.getTime())) { t.textContent = relative(d); }
    });
  }
  refreshTimes();
  window.setInterval(refreshTimes, 15000);
  document.body.addEventListener("htmx:afterSettle", function (e) { refreshTimes(e.target); });

  // --- task list: live status pills, and the first page kept current ---------------------
  function pill(status) {
    var span = document.createElement("span");
    span.className = "pill pill-" + (TONES[status] || "neutral");
    span.setAttribute("data-status", status);
    span.textContent = LABELS[status] || status;
    return span;
  }
  function flash(row) {
    row.classList.remove("flash-row");
    void row.offsetWidth;  // restart the highlight animation
    row.classList.add("flash-row");
  }
  function onFirstPage() {
    var page = new URLSearchParams(location.search).get("page");
    return !page || page === "1";
  }
  var listTimer = null;
  function refreshList() {
    var body = document.getElementById("task-list-body");
    if (!body || body.querySelector("details.bulk[open]")) { return; }  // don't pull a form from under someone
    var params = new URLSearchParams(location.search);
    params.set("fragment", "body");
    fetch(location.pathname + "?" + params.toString(), { credentials: "same-origin", headers: { "HX-Request": "true" } })
      .then(function (r) { if (!r.ok) { throw new Error(String(r.status)); } return r.text(); })
      .then(function (html) {
        var current = document.getElementById("task-list-body");
        if (!current || current.querySelector("details.bulk[open]")) { return; }
        var before = {};
        current.querySelectorAll("tr[data-task-id]").forEach(function (row) {
          var p = row.querySelector(".pill");
          before[row.getAttribute("data-task-id")] = p ? p.getAttribute("data-status") : "";
        });
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("task-list-body");
        if (!fresh) { return; }
        var node = document.importNode(fresh, true);
        current.replaceWith(node);
        if (window.htmx) { window.htmx.process(node); }
        refreshTimes(node);
        node.querySelectorAll("tr[data-task-id]").forEach(function (row) {
          var p = row.querySelector(".pill");
          var was = before[row.getAttribute("data-task-id")];
          if (was === undefined || (p && was !== p.getAttribute("data-status"))) { flash(row); }
        });
      })
      .catch(function () { /* the next event tries again */ });
  }
  function scheduleList() {
    window.clearTimeout(listTimer);
    listTimer = window.setTimeout(refreshList, 600);
  }
  document.body.addEventListener("tether:event", function (e) {
    var ev = e.detail || {};
    var p = ev.payload || {};
    var table = document.querySelector(".tasks-table");
    var body = document.getElementById("task-list-body");
    if (!body) { return; }
    var row = table && table.querySelector('tr[data-task-id="' + Number(ev.task_id) + '"]');
    if (row && p.to && LABELS[p.to]) {
      var cell = row.querySelector(".status-cell");
      var current = cell && cell.querySelector(".pill");
      if (cell && (!current || current.getAttribute("data-status") !== p.to)) {
        cell.replaceChildren(pill(p.to));
        flash(row);
      }
    }
    if (onFirstPage()) {
      if (row || ev.type === "task_created") { scheduleList(); }
    } else if (!row && ev.type === "task_created") {
      var btn = document.getElementById("new-tasks");
      if (btn) { btn.hidden = false; }
    }
  });
  document.body.addEventListener("tether:resync", function () {
    if (document.getElementById("task-list-body") && onFirstPage()) { scheduleList(); }
  });

  // --- inbox: merge new requests, mark ones handled elsewhere ---------------------------
  var inboxTimer = null;
  function mergeInbox() {
    var sections = document.getElementById("inbox-sections");
    if (!sections) { return; }
    var query = new URLSearchParams(location.search);  // keeps the inbox's filter (show=)
    query.set("fragment", "items");
    fetch(location.pathname + "?" + query.toString(), { credentials: "same-origin", headers: { "HX-Request": "true" } })
      .then(function (r) { if (!r.ok) { throw new Error(String(r.status)); } return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("inbox-sections");
        if (!fresh) { return; }
        var openKeys = {};
        fresh.querySelectorAll("[data-card-key]").forEach(function (c) { openKeys[c.getAttribute("data-card-key")] = c; });
        // requests that closed elsewhere: say so, keep the card for context
        sections.querySelectorAll('[data-card-key][data-open="1"]').forEach(function (card) {
          if (openKeys[card.getAttribute("data-card-key")]) { return; }
          card.setAttribute("data-open", "0");
          card.classList.add("is-gone");
          card.querySelectorAll(".req-actions, .answer-form").forEach(function (el) { el.remove(); });
          var note = document.createElement("p");
          note.className = "decided";
          note.textContent = "Handled elsewhere: this request is no longer open.";
          card.appendChild(note);
        });
        // new requests: append to their section
        fresh.querySelectorAll("[data-cards]").forEach(function (list) {
          var name = list.getAttribute("data-cards");
          var mine = sections.querySelector('[data-cards="' + name + '"]');
          if (!mine) { return; }
          list.querySelectorAll("[data-card-key]").forEach(function (card) {
            if (document.getElementById(card.id)) { return; }
            var emptyNote = mine.querySelector("[data-empty]");
            if (emptyNote) { emptyNote.remove(); }
            var node = document.importNode(card, true);
            node.classList.add("is-new");
            mine.appendChild(node);
            if (window.htmx) { window.htmx.process(node); }
            refreshTimes(node);
          });
        });
        fresh.querySelectorAll("[data-count]").forEach(function (c) {
          sections.querySelectorAll('[data-count="' + c.getAttribute("data-count") + '"]').forEach(function (mine) {
            mine.textContent = c.textContent;
          });
        });
        var total = Number(fresh.getAttribute("data-total"));
        var emptyAll = document.getElementById("inbox-empty");
        if (emptyAll && total > 0) { emptyAll.remove(); }
      })
      .catch(function () { /* the next event or resync tries again */ });
  }
  function scheduleInbox() {
    if (!document.getElementById("inbox-sections")) { return; }
    window.clearTimeout(inboxTimer);
    inboxTimer = window.setTimeout(mergeInbox, 250);
  }
  document.body.addEventListener("tether:inbox", scheduleInbox);
  document.body.addEventListener("tether:resync", scheduleInbox);

  // --- keyboard and focus ---------------------------------------------------------------
  document.addEventListener("keydown", function (e) {
    var tag = (document.activeElement && document.activeElement.tagName) || "";
    if (e.key === "/" && tag !== "INPUT" && tag !== "TEXTAREA" && tag !== "SELECT") {
      var search = document.querySelector('input[type="search"]');
      if (search) { e.preventDefault(); search.focus(); }
    }
    if (e.key === "Escape") {
      document.querySelectorAll("details.action-pop[open], details.bulk[open]").forEach(function (d) {
        d.removeAttribute("open");
        var s = d.querySelector("summary");
        if (s) { s.focus(); }
      });
    }
  });
  document.addEventListener("click", function (e) {
    document.querySelectorAll("details.action-pop[open], details.bulk[open]").forEach(function (d) {
      if (!d.contains(e.target)) { d.removeAttribute("open"); }
    });
  });
  document.addEventListener("toggle", function (e) {
    var d = e.target;
    if (d.tagName === "DETAILS" && d.open && (d.classList.contains("action-pop") || d.classList.contains("bulk"))) {
      var field = d.querySelector("textarea, input[type=text], input[type=number]");
      if (field) { field.focus(); }
    }
  }, true);
  document.body.addEventListener("htmx:afterSettle", function () {
    var target = document.querySelector("[data-focus-after-swap]");
    if (target) {
      target.removeAttribute("data-focus-after-swap");
      target.setAttribute("tabindex", "-1");
      target.focus({ preventScroll: false });
    }
  });
})();
