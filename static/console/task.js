/* The live task page.
 *
 * The socket says "event N of this task committed"; the page then asks the
 * server for the rendered rows after the last one it shows
 * (GET /tasks/<id>/live/?after=LAST) and for fresh panels (state, actions,
 * waiting card, budget, details, steps). Rows are appended by event id, each
 * once: an id the page already has is never added again, so a burst of
 * events, a replay after a reconnect or two overlapping refreshes cannot show
 * an event twice or skip one.
 *
 * While the model streams a decision, its tokens show under the timeline
 * (`#live-tokens`: the text, and each tool call as it forms), as text only;
 * the first event of that step (the recorded decision) replaces them.
 *
 * Panels are replaced only when their `data-key` changed, keeping what a
 * person is doing (an open form, an expanded step) when nothing they see moved.
 */
(function () {
  "use strict";
  var page = document.getElementById("task-page");
  if (!page) { return; }
  var taskId = Number(page.getAttribute("data-task-id"));
  var liveUrl = page.getAttribute("data-live-url");
  var timeline = document.getElementById("timeline");
  var last = Number(page.getAttribute("data-last-event-id")) || 0;
  var inflight = false;
  var again = false;

  function renderedIds() {
    return timeline.querySelectorAll("[data-event-id]").length;
  }

  // The oldest timeline row loaded (0: all of them are), so the summaries
  // card links only the events whose rows are on the page.
  function firstShown() {
    if (!document.getElementById("timeline-earlier")) { return 0; }
    var row = timeline.querySelector("[data-event-id]");
    return row ? Number(row.getAttribute("data-event-id")) : 0;
  }

  // Following a link to a step or a summary opens it.
  function openTarget() {
    var id = window.location.hash.slice(1);
    var el = id ? document.getElementById(id) : null;
    if (!el) { return; }
    var d = el.matches("details[data-anchor-open]") ? el : el.querySelector("details[data-anchor-open]");
    if (d) { d.open = true; }
  }

  function updateCount() {
    var el = document.getElementById("timeline-count");
    if (el) { var n = renderedIds(); el.textContent = n + " event" + (n === 1 ? "" : "s"); }
    page.setAttribute("data-last-event-id", String(last));
  }

  function openDetailsIds(root) {
    var ids = [];
    root.querySelectorAll("details[open][id]").forEach(function (d) { ids.push(d.id); });
    return ids;
  }

  function reopen(root, ids) {
    ids.forEach(function (id) {
      var d = root.querySelector("#" + CSS.escape(id));
      if (d) { d.setAttribute("open", ""); }
    });
  }

  function replacePanel(fresh) {
    var current = document.getElementById(fresh.id);
    if (!current) { return; }
    var key = fresh.getAttribute("data-key");
    if (key !== null && key === current.getAttribute("data-key")) { return; }
    var ids = openDetailsIds(current);
    var node = document.importNode(fresh, true);
    reopen(node, ids);
    current.replaceWith(node);
    if (window.htmx) { window.htmx.process(node); }
  }

  function mergeSteps(fresh) {
    var box = document.getElementById("steps");
    if (!fresh || !box) { return; }
    fresh.querySelectorAll("[data-step-no]").forEach(function (step) {
      var current = document.getElementById(step.id);
      if (!current) {
        var empty = document.getElementById("steps-empty");
        if (empty) { empty.remove(); }
        // a call of a multi-call reply goes into its reply's row (side by side)
        var row = step.parentElement;
        var target = box;
        if (row && row.classList.contains("reply-row")) {
          target = document.getElementById(row.id);
          if (!target) {
            target = document.importNode(row.cloneNode(false), true);
            box.appendChild(target);
          }
        }
        target.appendChild(document.importNode(step, true));
      } else if (current.getAttribute("data-rev") !== step.getAttribute("data-rev")) {
        var wasOpen = current.querySelector("details") && current.querySelector("details").open;
        var node = document.importNode(step, true);
        if (wasOpen) { node.querySelector("details").setAttribute("open", ""); }
        current.replaceWith(node);
      }
    });
  }

  function apply(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var atBottom = timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < 40;
    var added = 0;
    doc.querySelectorAll("#live-events > [data-event-id]").forEach(function (row) {
      var id = Number(row.getAttribute("data-event-id"));
      if (id <= last || document.getElementById("event-" + id)) { return; }
      var node = document.importNode(row, true);
      node.classList.add("is-new");
      timeline.appendChild(node);
      last = id;
      added += 1;
    });
    if (added) {
      var empty = document.getElementById("timeline-empty");
      if (empty) { empty.remove(); }
      if (atBottom) { timeline.scrollTop = timeline.scrollHeight; }
    }
    doc.querySelectorAll("[data-live-panel]").forEach(replacePanel);
    mergeSteps(doc.getElementById("steps"));
    var status = document.getElementById("task-status");
    if (status) {
      var v = status.getAttribute("data-version");
      var s = status.getAttribute("data-status");
      document.querySelectorAll("input[data-live-version]").forEach(function (i) { i.value = v; });
      document.querySelectorAll("input[data-live-status]").forEach(function (i) { i.value = s; });
      page.setAttribute("data-status", s);
    }
    updateCount();
    var more = doc.getElementById("live-events");
    return more && more.getAttribute("data-more") === "1";
  }

  function refresh() {
    if (inflight) { again = true; return; }
    inflight = true;
    var more = false;
    fetch(liveUrl + "?after=" + encodeURIComponent(last) + "&first=" + firstShown(), {
      credentials: "same-origin", headers: { "HX-Request": "true" }
    }).then(function (res) {
      if (!res.ok) { throw new Error("HTTP " + res.status); }
      return res.text();
    }).then(function (html) {
      more = apply(html);
    }).catch(function () {
      again = true;  // try again on the next event or tick
    }).then(function () {
      inflight = false;
      if (more) { refresh(); }
      else if (again) { again = false; window.setTimeout(refresh, 300); }
    });
  }

  // The decision being streamed: {step, attempt, text, calls: {index: {name, args}}}.
  var preview = null;
  var tokensBox = document.getElementById("live-tokens");

  function showPreview() {
    if (!tokensBox) { return; }
    tokensBox.hidden = !preview;
    if (!preview) { return; }
    tokensBox.querySelector("[data-tokens-label]").textContent =
      "Step " + preview.step + ": the model is answering…";
    tokensBox.querySelector("[data-tokens-text]").textContent = preview.text;
    var calls = Object.keys(preview.calls).sort().map(function (i) {
      var c = preview.calls[i];
      return c.name + "(" + c.args + ")";
    });
    tokensBox.querySelector("[data-tokens-calls]").textContent = calls.join("\n");
  }

  function onTokens(msg) {
    if (!preview || preview.step !== msg.step_no || preview.attempt !== msg.attempt) {
      if (preview && msg.step_no < preview.step) { return; }  // an older step's, late
      preview = { step: msg.step_no, attempt: msg.attempt, text: "", calls: {} };
    }
    msg.deltas.forEach(function (d) {
      if (d.kind === "text") { preview.text += d.text; }
      else if (d.kind === "tool_call") {
        var c = preview.calls[d.index] || (preview.calls[d.index] = { name: "", args: "" });
        c.name = d.name || c.name;
        c.args += d.args;
      }
    });
    showPreview();
  }

  function onEvent(ev) {
    var step = ev.payload && ev.payload.step_no;
    if (preview && typeof step === "number" && step >= preview.step) {
      preview = null;  // the recorded decision replaces its preview
      showPreview();
    }
    if (ev.id > last) { refresh(); }
  }

  updateCount();
  window.addEventListener("hashchange", openTarget);
  openTarget();
  if (window.TetherLive) {
    window.TetherLive.watchTask(taskId, function () { return last; }, onEvent, function () {},
                                onTokens);
  }
  document.body.addEventListener("tether:resync", refresh);
  // If the socket is down for long, still catch up now and then.
  window.setInterval(function () {
    if (!window.TetherLive || !window.TetherLive.isOpen()) { refresh(); }
  }, 15000);
  timeline.scrollTop = timeline.scrollHeight;
})();
