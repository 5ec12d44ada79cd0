/* The console's one WebSocket (/ws/live/), shared by every part of a page.
 *
 * - Subscribes to the tenant's events (lists, inbox, dashboard) and to the
 *   tasks a page watches, each with `after` = the last event id the page shows,
 *   so a reconnect replays what was missed and nothing twice.
 * - Reconnects with capped exponential backoff; after a reconnect it fires
 *   `tether:resync` so pages refetch what tenant-wide events may have missed.
 * - Hands a watched task's live tokens (its model streaming a decision) to
 *   the page that watches it (`onTokens`).
 * - Turns events into DOM events on <body>: `tether:event` (every event),
 *   `tether:tasks` (a task's state or version moved), `tether:inbox` (a human
 *   request opened or closed). htmx elements listen with `hx-trigger=... from:body`.
 *
 * Nothing from an event is inserted as HTML here: pages fetch server-rendered,
 * escaped fragments, or set textContent.
 */
(function () {
  "use strict";
  var body = document.body;
  if (!body || body.getAttribute("data-live") !== "1" || !("WebSocket" in window)) { return; }

  var INBOX_TYPES = {
    need_approval: 1, need_input: 1, result_uncertain: 1, approval_granted: 1, approval_rejected: 1,
    input_received: 1, reconciled: 1, task_canceled: 1, fatal_error: 1, budget_exhausted: 1,
    deadline_exceeded: 1, escalated: 1,
    memory_proposed: 1, memory_accepted: 1, memory_rejected: 1
  };
  var statusEl = document.getElementById("live-status");
  var watched = {};      // task id -> {after: fn() -> last id, onEvent, onError, onTokens}
  var ws = null;
  var attempt = 0;
  var everOpened = false;
  var stopped = false;

  function setState(state, text) {
    if (!statusEl) { return; }
    statusEl.setAttribute("data-state", state);
    var label = statusEl.querySelector(".live-text");
    if (label) { label.textContent = text; }
    statusEl.title = text;
  }

  function fire(name, detail) {
    body.dispatchEvent(new CustomEvent(name, { detail: detail, bubbles: true }));
  }

  function send(msg) {
    if (ws && ws.readyState === 1) { ws.send(JSON.stringify(msg)); }
  }

  function subscribeTask(id) {
    var w = watched[id];
    send({ type: "subscribe", task: Number(id), after: w ? w.after() : 0 });
  }

  function connect() {
    if (stopped) { return; }
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    try {
      ws = new WebSocket(scheme + location.host + "/ws/live/");
    } catch (e) {
      schedule();
      return;
    }
    ws.onopen = function () {
      var reconnected = everOpened;
      everOpened = true;
      attempt = 0;
      setState("open", "Live");
      // Tasks first: the server then knows what this page has, and drops
      // tenant-wide copies of those tasks' events it already sent.
      Object.keys(watched).forEach(subscribeTask);
      send({ type: "subscribe", tenant: true });
      if (reconnected) { fire("tether:resync", {}); }
    };
    ws.onmessage = function (m) {
      var msg;
      try { msg = JSON.parse(m.data); } catch (e) { return; }
      if (msg.type === "event" && msg.event) {
        var ev = msg.event;
        var w = watched[ev.task_id];
        if (w) { w.onEvent(ev); }
        fire("tether:event", ev);
        if (ev.payload && ev.payload.to) { fire("tether:tasks", ev); }
        if (INBOX_TYPES[ev.type]) { fire("tether:inbox", ev); }
      } else if (msg.type === "tokens") {
        var t = watched[msg.task];
        if (t && t.onTokens) { t.onTokens(msg); }
      } else if (msg.type === "error") {
        var target = msg.task && watched[msg.task];
        if (target && target.onError) { target.onError(msg); }
        fire("tether:live-error", msg);
      } else if (msg.type === "subscribed") {
        fire("tether:subscribed", msg);
      }
    };
    ws.onclose = function (ev) {
      ws = null;
      if (ev.code === 4401 || ev.code === 4403) {
        setState("closed", "Signed out: reload to sign in");
        return;
      }
      schedule();
    };
  }

  function schedule() {
    if (stopped) { return; }
    setState("reconnecting", "Reconnecting…");
    var delay = Math.min(4000, 300 * Math.pow(2, attempt)) + Math.floor(Math.random() * 200);
    attempt += 1;
    window.setTimeout(connect, delay);
  }

  window.TetherLive = {
    /* Watch one task: `after()` gives the last event id the page shows. */
    watchTask: function (id, after, onEvent, onError, onTokens) {
      watched[id] = { after: after, onEvent: onEvent, onError: onError, onTokens: onTokens };
      subscribeTask(id);
    },
    isOpen: function () { return !!ws && ws.readyState === 1; }
  };

  setState("connecting", "Connecting…");
  connect();
  window.addEventListener("pagehide", function () { stopped = true; if (ws) { ws.close(1000); } });
})();
