// edgeplane console: the traffic page's live view (server-sent events) and keyboard navigation.
// Loaded as a file (the Content-Security-Policy allows no inline script); text from the server is
// only ever set with textContent, never parsed as HTML.
(function () {
  "use strict";

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    if (text !== undefined) td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function span(parent, cls, text) {
    var s = document.createElement("span");
    s.className = cls;
    s.textContent = text;
    parent.appendChild(s);
    return s;
  }

  function size(n) {
    if (n < 1024) return n + " B";
    if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
    return (n / 1048576).toFixed(1) + " MiB";
  }

  function statusClass(s) {
    if (s >= 500) return "s5";
    if (s >= 400) return "s4";
    if (s >= 300) return "s3";
    if (s >= 200) return "s2";
    return "s0";
  }

  // row builds a traffic row the way the server renders one.
  function row(e) {
    var tr = document.createElement("tr");
    tr.className = "fresh";
    var t = document.createElement("time");
    t.textContent = e.time;
    cell(tr).appendChild(t);
    span(cell(tr), "tag", e.kind);
    var a = document.createElement("a");
    a.href = e.url;
    if (e.method) {
      var b = document.createElement("b");
      b.textContent = e.method;
      a.appendChild(b);
      a.appendChild(document.createTextNode(" " + e.path));
    } else {
      a.textContent = "connection from " + e.client;
    }
    cell(tr, undefined, "req").appendChild(a);
    cell(tr, e.host);
    var st = cell(tr);
    if (e.status) span(st, "status " + statusClass(e.status), String(e.status));
    else if (e.upgraded) span(st, "status s1", "101");
    else if (e.note) span(st, "status s4", "refused");
    else span(st, "status s2", "closed");
    if (e.error_code) {
      st.appendChild(document.createTextNode(" "));
      var c = document.createElement("code");
      c.className = "err";
      c.textContent = e.error_code;
      st.appendChild(c);
    }
    cell(tr, e.duration_ms.toFixed(1) + " ms", "num");
    cell(tr, size(e.bytes_in) + " / " + size(e.bytes_out), "num");
    cell(tr, e.target, "wide").title = e.target;
    return tr;
  }

  var MAX_ROWS = 500;

  function live() {
    var body = document.getElementById("entries");
    var status = document.getElementById("live");
    if (!body || !body.dataset.stream || !window.EventSource) return;
    var es = new EventSource(body.dataset.stream);
    es.addEventListener("ready", function () {
      status.textContent = "Live: new requests and connections appear at the top as they arrive.";
      status.classList.add("on");
    });
    es.addEventListener("entry", function (ev) {
      var e = JSON.parse(ev.data);
      var none = body.querySelector("tr.none");
      if (none) none.remove();
      body.insertBefore(row(e), body.firstChild);
      while (body.rows.length > MAX_ROWS) body.deleteRow(body.rows.length - 1);
    });
    es.addEventListener("lost", function () {
      status.textContent = "Traffic arrived faster than this page could show it; reload to see every entry.";
    });
    es.addEventListener("signedout", function () {
      es.close();
      window.location.assign("/console/signin");
    });
    es.onerror = function () {
      status.textContent = "Reconnecting to the live view…";
      status.classList.remove("on");
    };
  }

  // Keyboard: j and k (or the arrow keys on a focused row) move between the rows of a list,
  // Enter opens the focused row's link, / goes to the filter.
  function keys() {
    document.addEventListener("keydown", function (ev) {
      var el = document.activeElement;
      var typing = el && (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT" || el.isContentEditable);
      if (typing || ev.ctrlKey || ev.metaKey || ev.altKey) return;
      if (ev.key === "/") {
        var f = document.querySelector("[data-filter]");
        if (f) { ev.preventDefault(); f.focus(); f.select(); }
        return;
      }
      var down = ev.key === "j" || (ev.key === "ArrowDown" && el && el.closest("[data-rows]"));
      var up = ev.key === "k" || (ev.key === "ArrowUp" && el && el.closest("[data-rows]"));
      if (!down && !up) return;
      var links = Array.prototype.slice.call(document.querySelectorAll("[data-rows] tr"))
        .map(function (tr) { return tr.querySelector("a, button"); })
        .filter(function (x) { return x; });
      if (!links.length) return;
      var i = links.indexOf(el);
      i = i < 0 ? (down ? 0 : links.length - 1) : Math.max(0, Math.min(links.length - 1, i + (down ? 1 : -1)));
      ev.preventDefault();
      links[i].focus();
      links[i].scrollIntoView({ block: "nearest" });
    });
  }

  live();
  keys();
})();
