// The operator's page: buttons call the same JSON API; the session page follows its SSE stream.
// Everything from the server is inserted as text (textContent), never as HTML.
(function () {
  "use strict";
  var info = JSON.parse(document.body.dataset.page || "{}");
  var flash = document.getElementById("flash");

  function say(text, bad) {
    flash.textContent = text;
    flash.className = bad ? "bad" : "good";
  }

  function api(method, path, body) {
    // JSON always (the API refuses anything else), and the page's CSRF token with the cookie.
    var headers = { "Content-Type": "application/json" };
    if (info.csrf) { headers["X-CSRF-Token"] = info.csrf; }
    return fetch(path, {
      method: method,
      credentials: "same-origin",
      headers: headers,
      body: JSON.stringify(body === undefined ? {} : body),
    }).then(function (r) {
      return r.json().then(function (data) {
        if (!r.ok) { throw new Error((data && data.code ? data.code + ": " : "") + (data && data.error ? data.error : r.status)); }
        return data;
      });
    });
  }

  function act(method, path, body, done) {
    say("working…", false);
    api(method, path, body).then(function (data) {
      say(done, false);
      setTimeout(function () { location.reload(); }, 300);
      return data;
    }).catch(function (err) { say(err.message, true); });
  }

  var form = document.getElementById("login");
  if (form) {
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      api("POST", "/ui/login", { key: document.getElementById("key").value })
        .then(function () { location.reload(); })
        .catch(function (err) { say(err.message, true); });
    });
  }
  var logout = document.getElementById("logout");
  if (logout) {
    logout.addEventListener("click", function () { api("POST", "/ui/logout").then(function () { location.href = "/ui"; }); });
  }

  var sid = info.session;
  if (!sid) { return; }
  var base = "/sessions/" + encodeURIComponent(sid);

  document.querySelectorAll("button.approve, button.deny").forEach(function (b) {
    b.addEventListener("click", function () {
      var id = b.dataset.dispatch;
      var reason = document.querySelector('input.reason[data-for="' + id + '"]').value || null;
      var approved = b.classList.contains("approve");
      act("POST", base + "/calls/" + encodeURIComponent(id) + "/approval?wait=30", { approved: approved, reason: reason }, approved ? "approved" : "denied");
    });
  });
  document.querySelectorAll("button.submit-result, button.submit-error").forEach(function (b) {
    b.addEventListener("click", function () {
      var id = b.dataset.dispatch;
      var text = document.querySelector('textarea.result[data-for="' + id + '"]').value;
      var body;
      if (b.classList.contains("submit-error")) { body = { error: text || "failed" }; } else {
        try { body = { result: JSON.parse(text) }; } catch (err) { say("the result must be JSON: " + err.message, true); return; }
      }
      act("POST", base + "/calls/" + encodeURIComponent(id) + "/result?wait=30", body, "answer recorded");
    });
  });
  var stop = document.getElementById("stop");
  if (stop) { stop.addEventListener("click", function () { act("POST", base + "/stop?wait=30", { kind: "interrupt" }, "stop recorded"); }); }
  var retry = document.getElementById("retry");
  if (retry) { retry.addEventListener("click", function () { act("POST", base + "/retry?wait=30", {}, "retried"); }); }

  // Live: append each new event; reload when one changes what the page renders.
  var live = document.getElementById("live");
  var tbody = document.querySelector("#events tbody");
  var reloadOn = info.reload_on || [];
  var pending = null;
  var source = new EventSource(base + "/events?follow=true&after=" + (info.after || 0));
  source.onopen = function () { live.textContent = "live"; live.className = "on"; };
  source.onerror = function () { live.textContent = "reconnecting…"; live.className = "off"; };
  source.onmessage = null;
  function onEvent(ev) {
    var data = JSON.parse(ev.data);
    var tr = document.createElement("tr");
    tr.className = "event fresh";
    tr.dataset.seq = data.seq;
    tr.dataset.type = data.type;
    [String(data.seq), String(data.created_at).slice(11, 23), data.type, JSON.stringify(data.data)].forEach(function (text) {
      var td = document.createElement("td");
      td.textContent = text;
      tr.appendChild(td);
    });
    tbody.appendChild(tr);
    if (reloadOn.indexOf(data.type) >= 0 && pending === null) {
      pending = setTimeout(function () { location.reload(); }, 700);
    }
  }
  ["run_status", "model_text", "call_saved", "checkpoint", "tool_start", "tool_end", "call_paired", "recovery", "approval_requested",
   "approval_decided", "client_call", "stop_requested", "rewind", "call_reopened", "subagent_start", "companion_incarnation", "companion_closed", "run_cancelled", "run_refused"].forEach(function (t) {
    source.addEventListener(t, onEvent);
  });
})();
