/* pacore view: the page of a run folder. Plain JavaScript, no library, nothing fetched from elsewhere.
 *
 * Data comes from the folder's index (loaded once) and one problem at a time (loaded as it is opened): from the
 * `pacore view` server (api/index, api/problem) or, in a self-contained report, from JSON blocks in the page.
 * Every text that comes from a run (a model's conclusion, a repository's output) is put in the page as text
 * (textContent, createTextNode): never as HTML.
 */
(function () {
  "use strict";

  // ------------------------------------------------------------------------------------------------ data
  var embeddedIndex = document.getElementById("pacore-index");

  function fetchJson(url) {
    return fetch(url, { credentials: "same-origin", cache: "no-store" }).then(function (response) {
      if (!response.ok) {
        return response.text().then(function (text) { throw new Error(text || response.status + " " + response.statusText); });
      }
      return response.json();
    });
  }

  /* The report's problems follow its script in the file: wait until the browser has read them all. */
  function parsed() {
    if (document.readyState !== "loading") { return Promise.resolve(); }
    return new Promise(function (resolve) { document.addEventListener("DOMContentLoaded", resolve); });
  }

  var source = embeddedIndex ? {
    served: false,
    index: function () { return Promise.resolve(JSON.parse(embeddedIndex.textContent)); },
    problem: function (entry) {
      return parsed().then(function () {
        var block = document.getElementById("pacore-problem-" + entry.n);
        if (!block) { throw new Error("this report holds no data for " + entry.key); }
        return JSON.parse(block.textContent);
      });
    },
    part: function () { return Promise.reject(new Error("only `pacore view` serves this (it was left out of the report)")); },
    fileUrl: function () { return null; }
  } : {
    served: true,
    index: function () { return fetchJson("api/index"); },
    problem: function (entry) { return fetchJson("api/problem?key=" + encodeURIComponent(entry.key)); },
    part: function (key, name) {
      return fetch("api/part?key=" + encodeURIComponent(key) + "&name=" + encodeURIComponent(name), { cache: "no-store" })
        .then(function (r) { if (!r.ok) { throw new Error(r.status + " " + r.statusText); } return r.text(); });
    },
    fileUrl: function (path) { return "files/" + path.split("/").map(encodeURIComponent).join("/"); }
  };

  var state = { index: null, byKey: {}, problems: {}, sort: null, filter: "", view: null };

  // ------------------------------------------------------------------------------------------------ DOM helpers
  function el(tag, props) {
    var node = document.createElement(tag);
    if (props) {
      Object.keys(props).forEach(function (name) {
        var value = props[name];
        if (value === undefined || value === null || value === false) { return; }
        if (name === "className") { node.className = value; }
        else if (name === "text") { node.textContent = String(value); }
        else if (name === "onclick") { node.addEventListener("click", value); }
        else if (name === "dataset") { Object.keys(value).forEach(function (k) { node.dataset[k] = value[k]; }); }
        else { node.setAttribute(name, String(value)); }
      });
    }
    for (var i = 2; i < arguments.length; i++) { append(node, arguments[i]); }
    return node;
  }

  function append(node, child) {
    if (child === undefined || child === null || child === false) { return; }
    if (Array.isArray(child)) { child.forEach(function (c) { append(node, c); }); return; }
    node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }

  function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } return node; }
  function pre(text, className) { return el("pre", { className: className || "box", text: text == null ? "" : text }); }
  function plural(n, word) { return n.toLocaleString("en-US") + " " + word + (n === 1 ? "" : "s"); }
  function fmt(n) { return n == null || n === "" ? "" : (typeof n === "number" ? n.toLocaleString("en-US") : String(n)); }
  function short(text, width) {
    var line = String(text == null ? "" : text).replace(/\s+/g, " ").trim();
    return line.length <= width ? line : line.slice(0, width - 1) + "…";
  }

  var PALETTE = ["#2f7ed8", "#e8743b", "#19a979", "#945ecf", "#ed4a7b", "#13a4b4", "#bf8b00", "#6c8893", "#8c564b", "#4b6cc1"];
  function groupColour(group) { return group == null ? null : PALETTE[group % PALETTE.length]; }
  function scoreColour(v) {
    if (v == null) { return "#aab"; }
    var r = Math.round(200 - 170 * v), g = Math.round(60 + 100 * v), b = 60;
    return "rgb(" + r + "," + g + "," + b + ")";
  }

  // ------------------------------------------------------------------------------------------------ routes
  function route() {
    var parts = location.hash.replace(/^#\/?/, "").split("/").filter(function (p) { return p !== ""; });
    var r = { page: "list" };
    if (parts[0] === "summary") { r.page = "summary"; }
    else if (parts[0] === "p" && parts.length > 1) {
      r.page = "problem"; r.key = decodeURIComponent(parts[1]);
      for (var i = 2; i + 1 < parts.length; i += 2) {
        var name = parts[i], value = decodeURIComponent(parts[i + 1]);
        if (name === "u") { r.unit = value; }
        else if (name === "r") { r.round = value === "pool" ? "pool" : parseInt(value, 10); }
        else if (name === "t") { r.trajectory = parseInt(value, 10); }
      }
    }
    return r;
  }

  function href(r) {
    if (r.page === "summary") { return "#/summary"; }
    if (r.page !== "problem") { return "#/"; }
    var h = "#/p/" + encodeURIComponent(r.key);
    if (r.unit != null) { h += "/u/" + encodeURIComponent(r.unit); }
    if (r.round != null) { h += "/r/" + r.round; }
    if (r.trajectory != null) { h += "/t/" + r.trajectory; }
    return h;
  }

  function go(r) { location.hash = href(r); }

  // ------------------------------------------------------------------------------------------------ the page
  var app = document.getElementById("app");

  function showError(where, error) {
    clear(where).appendChild(el("div", { className: "error-banner", text: String(error && error.message || error) }));
  }

  function loadIndex() {
    return source.index().then(function (index) {
      state.index = index;
      state.byKey = {};
      index.problems.forEach(function (entry) { state.byKey[entry.key] = entry; });
      state.view = null;
      render();
    }).catch(function (error) { showError(app, error); });
  }

  function start() {
    window.addEventListener("hashchange", function () { if (state.index) { render(); } });
    document.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && state.view && state.view.route.trajectory != null) {
        var r = state.view.route; go({ page: "problem", key: r.key, unit: r.unit, round: r.round === "pool" ? null : r.round });
      }
    });
    loadIndex();
  }

  function frame(r) {
    var index = state.index;
    var top = el("header", { className: "top" },
      el("h1", { text: "pacore view · " + index.folder }),
      el("span", { className: "kind", text: index.title }),
      el("span", { className: "muted", text: plural(index.problems.length, "problem") }));
    var settings = el("div", { className: "settings" },
      (index.settings || []).map(function (pair) { return el("span", { title: pair[0] + ": " + pair[1], text: pair[0] + ": " + pair[1] }); }));
    var tabs = el("nav", { className: "tabs" },
      el("a", { href: "#/", className: r.page !== "summary" ? "active" : "", text: "Problems" }),
      index.summary ? el("a", { href: "#/summary", className: r.page === "summary" ? "active" : "", text: "Summary" }) : null);
    var notes = (index.notes || []).map(function (n) { return el("div", { className: "note", text: n }); });
    var main = el("main", { id: "main" });
    clear(app);
    append(app, [top, settings, tabs, notes, main]);
    return main;
  }

  function render() {
    var r = route();
    if (r.page === "problem" && state.view && state.view.route.key === r.key && state.view.route.unit === r.unit) {
      state.view.update(r);
      return;
    }
    closeDrawer();
    state.view = null;
    var main = frame(r);
    if (r.page === "summary") { renderSummary(main); }
    else if (r.page === "problem") { renderProblem(main, r); }
    else { renderList(main); }
  }

  // ------------------------------------------------------------------------------------------------ problems table
  function cellText(column, value) {
    if (value == null) { return ""; }
    if (column.type === "score") { return (100 * value).toFixed(value === 1 || value === 0 ? 0 : 1) + " %"; }
    if (column.type === "flag") { return value ? "yes" : "no"; }
    return column.type === "number" ? fmt(value) : String(value);
  }

  function matches(entry, columns, terms) {
    return terms.every(function (term) {
      var m = /^([\w@\[\],.+-]+)\s*(>=|<=|=|>|<|:)\s*(.+)$/.exec(term);
      if (m) {
        var column = columns.filter(function (c) { return c.key === m[1] || c.title.toLowerCase() === m[1].toLowerCase(); })[0];
        if (column) {
          var raw = entry[column.key], want = m[3];
          if (m[2] === ":") { return String(raw == null ? "" : cellText(column, raw)).toLowerCase().indexOf(want.toLowerCase()) >= 0; }
          var a = typeof raw === "number" ? raw : parseFloat(raw), b = parseFloat(want);
          if (column.type === "score" && b > 1) { b = b / 100; }
          if (m[2] === "=") { return isNaN(b) ? cellText(column, raw).toLowerCase() === want.toLowerCase() : a === b; }
          if (isNaN(a) || isNaN(b)) { return false; }
          return m[2] === ">" ? a > b : m[2] === "<" ? a < b : m[2] === ">=" ? a >= b : a <= b;
        }
      }
      var needle = term.toLowerCase();
      return columns.some(function (c) { return String(cellText(c, entry[c.key])).toLowerCase().indexOf(needle) >= 0; });
    });
  }

  var PAGE = 200;  // rows of the problems table added at a time

  function renderList(main) {
    var index = state.index, columns = index.columns;
    var input = el("input", { type: "search", placeholder: "filter: text, or column>value (failures>0, tokens<5000, status=resolved)", value: state.filter });
    var count = el("span", { className: "muted" });
    var reload = source.served ? el("a", { text: "reload", title: "read the rows appended since", onclick: function () { loadIndex(); } }) : null;
    var table = el("table", { className: "grid", id: "problems" });
    var head = el("tr");
    var headers = columns.map(function (column) {
      var th = el("th", { text: column.title, dataset: { key: column.key } });
      th.addEventListener("click", function () {
        state.sort = { key: column.key, desc: state.sort && state.sort.key === column.key ? !state.sort.desc : column.type !== "text" };
        markSorted();
        fill();
      });
      head.appendChild(th);
      return th;
    });
    function markSorted() {
      headers.forEach(function (th, n) {
        var sorted = state.sort && state.sort.key === columns[n].key;
        th.className = sorted ? (state.sort.desc ? "sorted-desc" : "sorted-asc") : "";
      });
    }
    markSorted();
    table.appendChild(el("thead", null, head));
    var body = el("tbody");
    table.appendChild(body);

    function fill() {
      var terms = state.filter.split(/\s+/).filter(function (t) { return t; });
      var rows = index.problems.filter(function (entry) { return matches(entry, columns, terms); });
      if (state.sort) {
        var key = state.sort.key, sign = state.sort.desc ? -1 : 1;
        rows = rows.slice().sort(function (a, b) {
          var x = a[key], y = b[key];
          if (x == null && y == null) { return 0; }
          if (x == null) { return 1; }
          if (y == null) { return -1; }
          if (typeof x === "number" && typeof y === "number") { return sign * (x - y); }
          return sign * String(x).localeCompare(String(y), undefined, { numeric: true });
        });
      }
      clear(body);
      shown = 0;
      pending = rows;
      more();
      count.textContent = rows.length === index.problems.length ? plural(rows.length, "problem")
        : rows.length.toLocaleString("en-US") + " of " + plural(index.problems.length, "problem");
    }

    /* The next PAGE rows of the filtered, sorted list: a big folder's table grows as it is scrolled, so that
     * sorting or filtering 1,000 problems lays out one screenful, not a thousand rows. */
    var shown = 0, pending = [];
    function more() {
      var fragment = document.createDocumentFragment();
      pending.slice(shown, shown + PAGE).forEach(function (entry) {  // plain DOM calls: one listener on the body
        var tr = document.createElement("tr");
        tr.className = "row";
        tr.dataset.key = entry.key;
        columns.forEach(function (column) {
          var value = entry[column.key];
          var td = document.createElement("td");
          td.className = column.type === "text" ? "text" : "num";
          if ((column.type === "score" || column.type === "flag") && value != null) {
            var badge = document.createElement("span");
            badge.className = "score";
            badge.textContent = cellText(column, value);
            badge.style.background = scoreColour(value);
            td.appendChild(badge);
          } else {
            td.textContent = cellText(column, value);
            if (column.type === "text") { td.title = td.textContent; }
          }
          tr.appendChild(td);
        });
        fragment.appendChild(tr);
      });
      body.appendChild(fragment);
      shown = Math.min(shown + PAGE, pending.length);
      sentinel.style.display = shown < pending.length ? "" : "none";
      sentinel.textContent = shown < pending.length ? "… " + plural(pending.length - shown, "more problem") + " (scroll)" : "";
    }
    var sentinel = el("p", { className: "muted", id: "more-rows" });
    if (window.IntersectionObserver) {
      new IntersectionObserver(function (seen) { if (seen[0].isIntersecting && shown < pending.length) { more(); } }).observe(sentinel);
    }
    sentinel.addEventListener("click", more);

    body.addEventListener("click", function (event) {
      var tr = event.target.closest("tr.row");
      if (tr) { go({ page: "problem", key: tr.dataset.key }); }
    });
    input.addEventListener("input", function () { state.filter = input.value; fill(); });
    append(main, [el("div", { className: "toolbar" }, input, count, reload), table, sentinel]);
    fill();
    if (!index.problems.length) { main.appendChild(el("p", { className: "muted", text: "No problem has finished yet: reload once the run has written rows." })); }
    document.body.dataset.ready = "index";
    if (window.performance && performance.mark) { performance.mark("pacore-index-rendered"); }
  }

  // ------------------------------------------------------------------------------------------------ summary
  function renderSummary(main) {
    var summary = state.index.summary;
    if (!summary) { main.appendChild(el("p", { className: "muted", text: "This folder has no summary yet." })); return; }
    (summary.notes || []).forEach(function (n) { main.appendChild(el("p", { className: "muted", text: n })); });
    if (summary.chart) { main.appendChild(chart(summary.chart)); }
    (summary.tables || []).forEach(function (t) { main.appendChild(el("h2", { text: t.title })); main.appendChild(simpleTable(t.columns, t.rows)); });
    document.body.dataset.ready = "summary";
  }

  function simpleTable(columns, rows) {
    return el("table", { className: "grid" },
      el("thead", null, el("tr", null, columns.map(function (c) { return el("th", { text: c }); }))),
      el("tbody", null, rows.map(function (row) {
        return el("tr", null, row.map(function (v) { return el("td", { className: typeof v === "number" ? "num" : "", text: v == null ? "" : (typeof v === "number" ? fmt(v) : v) }); }));
      })));
  }

  var SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
    return node;
  }

  /* An SVG chart of points per series: hover a point for its values, click a series to hide it, log/linear x. */
  function chart(spec) {
    var box = el("div", { className: "chart", id: "chart" });
    var tip = el("div", { className: "tip" }); tip.style.display = "none";
    var hidden = {}, logX = !!(spec.x && spec.x.log);
    var W = 820, H = 420, L = 70, R = 20, T = 30, B = 50;
    var controls = el("div");
    var plotArea = el("div");
    function draw() {
      var series = spec.series.filter(function (s) { return s.points.length; });
      var all = [];
      series.forEach(function (s) { if (!hidden[s.name]) { all = all.concat(s.points); } });
      var xs = all.map(function (p) { return p.x; }), ys = all.map(function (p) { return p.y; });
      var canLog = xs.every(function (x) { return x > 0; });
      var useLog = logX && canLog && xs.length;
      var x0 = xs.length ? Math.min.apply(null, xs) : 0, x1 = xs.length ? Math.max.apply(null, xs) : 1;
      if (useLog) { x0 = Math.log10(x0) - 0.1; x1 = Math.log10(x1) + 0.1; } else { var pad = (x1 - x0) * 0.08 || Math.max(1, x1 * 0.1); x0 = Math.max(0, x0 - pad); x1 = x1 + pad; }
      var y0 = 0, y1 = spec.y && spec.y.percent ? 1 : (ys.length ? Math.max.apply(null, ys) * 1.1 || 1 : 1);
      function px(x) { var v = useLog ? Math.log10(x) : x; return L + (W - L - R) * (v - x0) / ((x1 - x0) || 1); }
      function py(y) { return H - B - (H - T - B) * (y - y0) / ((y1 - y0) || 1); }
      var root = svg("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", role: "img" });
      root.appendChild(svg("rect", { x: L, y: T, width: W - L - R, height: H - T - B, fill: "#fff", stroke: "#ccc" }));
      for (var i = 0; i <= 5; i++) {
        var yv = y0 + (y1 - y0) * i / 5, yy = py(yv);
        root.appendChild(svg("line", { x1: L, x2: W - R, y1: yy, y2: yy, stroke: "#eee" }));
        var yl = svg("text", { x: L - 6, y: yy + 4, "text-anchor": "end" }); yl.textContent = spec.y && spec.y.percent ? Math.round(yv * 100) + " %" : fmt(Math.round(yv * 100) / 100); root.appendChild(yl);
        var xv = x0 + (x1 - x0) * i / 5, xx = L + (W - L - R) * i / 5;
        var xl = svg("text", { x: xx, y: H - B + 16, "text-anchor": "middle" }); xl.textContent = fmt(Math.round(useLog ? Math.pow(10, xv) : xv)); root.appendChild(xl);
      }
      var xt = svg("text", { x: (L + W - R) / 2, y: H - 10, "text-anchor": "middle" }); xt.textContent = (spec.x && spec.x.title || "") + (useLog ? " (log scale)" : ""); root.appendChild(xt);
      var yt = svg("text", { x: 14, y: (T + H - B) / 2, transform: "rotate(-90 14 " + (T + H - B) / 2 + ")", "text-anchor": "middle" }); yt.textContent = spec.y && spec.y.title || ""; root.appendChild(yt);
      series.forEach(function (s, n) {
        if (hidden[s.name]) { return; }
        var colour = PALETTE[n % PALETTE.length];
        if (!s.scatter && s.points.length > 1) {
          root.appendChild(svg("polyline", { points: s.points.map(function (p) { return px(p.x) + "," + py(p.y); }).join(" "), fill: "none", stroke: colour, "stroke-width": 2 }));
        }
        s.points.forEach(function (p) {
          var dot = svg("circle", { cx: px(p.x), cy: py(p.y), r: 6, fill: colour, stroke: "#fff", "stroke-width": 1.5, "class": "point" });
          dot.addEventListener("mouseenter", function () {
            tip.textContent = (p.label || s.name) + "\n" + (spec.y.percent ? (100 * p.y).toFixed(1) + " %" : fmt(p.y)) + "  at " + fmt(Math.round(p.x)) + " tokens";
            tip.style.display = "block"; tip.style.left = (px(p.x) / W * plotArea.clientWidth + 14) + "px"; tip.style.top = (py(p.y) / H * plotArea.clientHeight + 20) + "px";
          });
          dot.addEventListener("mouseleave", function () { tip.style.display = "none"; });
          root.appendChild(dot);
          var label = svg("text", { x: px(p.x) + 8, y: py(p.y) - 8 }); label.textContent = p.label || ""; root.appendChild(label);
        });
      });
      clear(plotArea).appendChild(root);
      clear(controls);
      controls.appendChild(el("strong", { text: spec.title + "  " }));
      spec.series.forEach(function (s, n) {
        var toggle = el("span", { className: "series-toggle" + (hidden[s.name] ? " off" : ""), title: "show or hide this series" });
        var swatch = el("span", { className: "swatch" }); swatch.style.display = "inline-block"; swatch.style.width = "10px"; swatch.style.height = "10px"; swatch.style.background = PALETTE[n % PALETTE.length];
        append(toggle, [swatch, " " + s.name]);
        toggle.addEventListener("click", function () { hidden[s.name] = !hidden[s.name]; draw(); });
        controls.appendChild(toggle);
      });
      if (canLog) {
        var log = el("label", null, el("input", { type: "checkbox", checked: logX ? "checked" : null }), " log x");
        log.firstChild.addEventListener("change", function (e) { logX = e.target.checked; draw(); });
        controls.appendChild(log);
      }
    }
    append(box, [controls, plotArea, tip]);
    draw();
    return box;
  }

  // ------------------------------------------------------------------------------------------------ one problem
  function renderProblem(main, r) {
    var entry = state.byKey[r.key];
    var back = el("p", null, el("a", { href: "#/", text: "← all problems" }));
    main.appendChild(back);
    if (!entry) { main.appendChild(el("div", { className: "error-banner", text: "No problem " + r.key + " in this folder." })); return; }
    var body = el("div", null, el("p", { className: "loading", text: "Loading " + r.key + "…" }));
    main.appendChild(body);
    var cached = state.problems[r.key] || (state.problems[r.key] = source.problem(entry));
    cached.then(function (data) {
      if (route().key !== r.key) { return; }
      drawProblem(clear(body), data, route());
    }).catch(function (error) { delete state.problems[r.key]; showError(body, error); });
  }

  function facts(pairs) {
    return el("table", { className: "facts" }, (pairs || []).map(function (pair) {
      var value = String(pair[1] == null ? "" : pair[1]);
      return el("tr", null, el("th", { text: pair[0] }), el("td", null, value.indexOf("\n") >= 0 || value.length > 200 ? pre(value) : value));
    }));
  }

  function messageView(message) {
    var role = message.role || "";
    var node = el("div", { className: "message " + role }, el("div", { className: "role", text: role + (message.tokens ? " · " + fmt(message.tokens) + " tokens" : "") }));
    if (message.reasoning) { node.appendChild(el("details", null, el("summary", { text: "reasoning (" + fmt(message.reasoning.length) + " characters)" }), pre(message.reasoning))); }
    if (role === "tool") {
      var lines = (message.content || "").split("\n").length;
      node.appendChild(el("details", null, el("summary", { text: "output, " + lines + " line" + (lines === 1 ? "" : "s") }), pre(message.content)));
    } else if (message.content) {
      node.appendChild(pre(message.content, "pre"));
    }
    (message.tool_calls || []).forEach(function (call) {
      var args = call.args || call.arguments || (call["function"] && call["function"].arguments) || {};
      var name = call.name || (call["function"] && call["function"].name) || "tool";
      var command = typeof args === "object" && args && typeof args.command === "string" ? args.command : (typeof args === "string" ? args : JSON.stringify(args, null, 1));
      node.appendChild(el("div", { className: "toolcall" }, el("strong", { text: name + " " }), pre(command, "pre")));
    });
    if (message.pacore) {
      node.appendChild(el("div", { className: "muted", text: "PaCoRe: " + message.pacore.map(function (r) { return "K=" + r.k + ", " + fmt(r.completion_tokens) + " tokens"; }).join(" → ") }));
    }
    return node;
  }

  function conversation(title, messages, open) {
    var box = el("details", { open: open ? "open" : null }, el("summary", { text: title + " (" + messages.length + " message" + (messages.length === 1 ? "" : "s") + ")" }));
    messages.forEach(function (m) { box.appendChild(messageView(m)); });
    return box;
  }

  function diff(text) {
    var box = el("pre", { className: "box diff" });
    String(text || "").split("\n").forEach(function (line) {
      var kind = /^(\+\+\+|---|diff |index )/.test(line) ? "meta" : line[0] === "+" ? "add" : line[0] === "-" ? "del" : line.indexOf("@@") === 0 ? "hunk" : "ctx";
      box.appendChild(el("span", { className: kind, text: line || " " }));
    });
    return box;
  }

  function drawProblem(body, data, r) {
    body.appendChild(el("h2", { id: "problem-title", text: data.title }));
    body.appendChild(facts(data.facts));
    if (data.messages) { body.appendChild(conversation("Conversation", data.messages, data.messages.length <= 6)); }
    if (data.judge) { body.appendChild(judgeView(data.judge)); }
    var runBox = el("div", { id: "run" });
    var view = { route: r, data: data, runBox: runBox, run: null, update: null };
    if (data.units) {
      body.appendChild(unitsView(data, r));
      if (data.pool) { body.appendChild(poolView(data, view)); }
    }
    body.appendChild(runBox);
    if (data.swe) { body.appendChild(sweView(data.swe)); }
    if (data.eval) { body.appendChild(evalView(data.eval)); }
    view.update = function (next) { updateProblem(view, next); };
    state.view = view;
    updateProblem(view, r, true);
  }

  function updateProblem(view, r, first) {
    var data = view.data, previous = view.route;
    view.route = r;
    var run = data.run;
    if (data.units) {
      var unit = data.units.filter(function (u) { return u.key === r.unit; })[0];
      run = unit && unit.run;
      document.querySelectorAll("tr.unit").forEach(function (tr) { tr.classList.toggle("selected", tr.dataset.key === r.unit); });
      if (first || previous.unit !== r.unit) {
        clear(view.runBox);
        if (unit && !unit.run && unit.round_tokens) {
          view.runBox.appendChild(el("p", { className: "muted", text: "This row keeps only its round tokens (" + unit.round_tokens.join(" → ") + "); its rounds were not recorded." }));
          view.runBox.appendChild(pre(unit.conclusion));
        }
      }
    }
    if (run && (first || !view.run || view.run.source !== run)) {
      clear(view.runBox);
      view.run = runView(run, r);
      view.runBox.appendChild(view.run.node);
    }
    if (view.run) { view.run.select(r); }
    if (view.pool) { view.pool.select(r); }
    var trajectory = null;
    if (r.trajectory != null && r.round === "pool" && data.pool) {
      trajectory = { cell: data.pool.trajectories.filter(function (t) { return t.index === r.trajectory; })[0], round: null, pool: true };
    } else if (r.trajectory != null && run && r.round != null) {
      var round = run.rounds[r.round];
      trajectory = round && { cell: round.trajectories.filter(function (t) { return t.index === r.trajectory; })[0], round: round };
    }
    if (trajectory && trajectory.cell) { openDrawer(trajectory, data, r); } else { closeDrawer(); }
    document.body.dataset.ready = "problem";
    document.body.dataset.problem = r.key;
  }

  function unitsView(data, r) {
    var box = el("div", null, el("h3", { text: "Rows of this problem (click a PaCoRe row for its rounds)" }));
    var rows = data.units.map(function (u) {
      var tr = el("tr", { className: "row unit", dataset: { key: u.key } },
        el("td", { text: u.label }), el("td", { className: "num", text: u.sample }),
        el("td", { className: "text", text: u.answer == null ? "" : u.answer, title: u.answer == null ? "" : u.answer }),
        el("td", null, el("span", { className: "flag " + (u.correct ? "good" : "bad"), text: u.correct ? "correct" : "wrong" }), u.flag ? el("span", { className: "flag warn", text: u.flag }) : null),
        el("td", { className: "num", text: fmt(u.tokens) }),
        el("td", { className: "text", text: u.votes ? "votes " + JSON.stringify(u.votes) : (u.pool_indices.length ? "pool " + u.pool_indices.join(",") : "") }));
      tr.addEventListener("click", function () { go({ page: "problem", key: r.key, unit: u.key }); });
      return tr;
    });
    box.appendChild(el("table", { className: "grid", id: "units" },
      el("thead", null, el("tr", null, ["setting", "sample", "answer", "graded", "tokens", "drawn from"].map(function (t) { return el("th", { text: t }); }))),
      el("tbody", null, rows)));
    return box;
  }

  function judgeView(judge) {
    var box = el("div", { id: "judge" }, el("h3", { text: "Judge" }));
    box.appendChild(facts([
      ["verdict", judge.verdict == null ? "(none)" : judge.verdict],
      ["pass criteria", judge.pass_criteria],
      ["passed", judge.passed ? "yes" : "no"],
      ["target question", judge.target_question],
      ["judge error", judge.error]
    ].filter(function (p) { return p[1] != null && p[1] !== ""; })));
    if (judge.reasoning) { box.appendChild(el("div", null, el("strong", { text: "Reason" }), pre(judge.reasoning))); }
    if (judge.raw) { box.appendChild(el("details", null, el("summary", { text: "the judge's raw reply" }), pre(judge.raw))); }
    return box;
  }

  function sweView(swe) {
    var box = el("div", { id: "swe" }, el("h3", { text: "The patch the synthesis kept" }));
    box.appendChild(swe.patch ? diff(swe.patch) : el("p", { className: "muted", text: "No patch." }));
    if (swe.note) { box.appendChild(facts([["note", swe.note]])); }
    if (swe.moves && swe.moves.length) {
      box.appendChild(el("h3", { text: "Episodes moved off a lost host" }));
      var names = [];
      swe.moves.forEach(function (m) { Object.keys(m).forEach(function (k) { if (names.indexOf(k) < 0) { names.push(k); } }); });
      box.appendChild(simpleTable(names, swe.moves.map(function (m) { return names.map(function (k) { var v = m[k]; return v == null ? "" : typeof v === "object" ? JSON.stringify(v) : String(v); }); })));
    }
    if (swe.unplaced && swe.unplaced.length) {
      box.appendChild(el("details", null, el("summary", { text: swe.unplaced.length + " episode(s) of no recorded round" }),
        swe.unplaced.map(function (e) { return episodeView(e, "round " + (e.round_index + 1) + " · episode " + e.index); })));
    }
    return box;
  }

  function evalView(ev) {
    var box = el("div", { id: "eval" }, el("h3", { text: "Evaluation (" + ev.run_id + "): " + ev.status }));
    if (ev.error) { box.appendChild(pre(ev.error)); }
    if (ev.applied != null) { box.appendChild(el("p", { text: ev.applied ? "The patch applied." : "The patch did not apply." })); }
    if (ev.tests && ev.tests.length) {
      box.appendChild(el("table", { className: "grid", id: "tests" },
        el("thead", null, el("tr", null, el("th", { text: "test" }), el("th", { text: "kind" }), el("th", { text: "result" }))),
        el("tbody", null, ev.tests.map(function (t) {
          return el("tr", null, el("td", { className: "text", text: t.name, title: t.name }), el("td", { text: t.category }),
            el("td", { className: t.passed ? "test-pass" : "test-fail", text: t.passed ? "passed" : "failed" }));
        }))));
    }
    (ev.files || []).forEach(function (f) {
      var url = source.fileUrl(f.path);
      var title = f.name + " (" + fmt(f.size) + " bytes" + (f.cut ? ", its end" : "") + ")";
      box.appendChild(el("details", null, el("summary", { text: title }),
        url ? el("p", null, el("a", { href: url, target: "_blank", rel: "noopener noreferrer", text: "the whole file" })) : null,
        f.name === "patch.diff" ? diff(f.text) : pre(f.text)));
    });
    return box;
  }

  // ------------------------------------------------------------------------------------------------ rounds
  function legend(groups) {
    if (!groups || !groups.length) { return null; }
    return el("div", { className: "legend" }, el("span", { className: "muted", text: "answers shared: " }), groups.map(function (answer, n) {
      var swatch = el("span", { className: "swatch" }); swatch.style.background = groupColour(n);
      return el("span", { className: "chip", title: answer }, swatch, short(answer, 40));
    }));
  }

  /* One trajectory as a cell: its index, tokens (and a bar of them against the run's largest), its answer in its
   * agreement group's colour, and what went wrong. */
  function tile(cell, onclick, maxTokens) {
    var classes = ["tile"];
    if (cell.error) { classes.push("failed"); }
    if (cell.cut) { classes.push("cut"); }
    if (cell.truncated) { classes.push("truncated"); }
    if (!cell.usable) { classes.push("unusable"); }
    var node = el("button", { type: "button", className: classes.join(" "), dataset: { index: cell.index }, title: cell.answer || cell.error || "" },
      el("span", { className: "t-index", text: "#" + cell.index }),
      el("span", { className: "t-tokens", text: fmt(cell.tokens) + (cell.tokens_approximate ? "≈" : "") }),
      el("span", { className: "t-answer", text: cell.error ? "failed" : cell.answer == null ? "(no answer)" : short(cell.answer, 24) }));
    var colour = groupColour(cell.group);
    if (colour && !cell.error) { node.style.background = colour; node.style.color = "#fff"; }
    var flags = el("span", { className: "t-flags" });
    if (cell.finish && cell.finish !== "stop") { flags.appendChild(el("span", { className: "flag warn", text: cell.finish })); }
    if (cell.cut) { flags.appendChild(el("span", { className: "flag", text: "cut: " + cell.cut })); }
    if (cell.truncated) { flags.appendChild(el("span", { className: "flag warn", text: "truncated" })); }
    if (cell.model) { flags.appendChild(el("span", { className: "flag", text: cell.model })); }
    if (cell.reused) { flags.appendChild(el("span", { className: "flag", text: "reused" })); }
    if (cell.correct === true) { flags.appendChild(el("span", { className: "flag good", text: "correct" })); }
    if (cell.episode && cell.episode.stop_reason) { flags.appendChild(el("span", { className: "flag" + (cell.episode.stop_reason === "error" ? " bad" : ""), text: cell.episode.stop_reason })); }
    if (flags.firstChild) { node.appendChild(flags); }
    var bar = el("span", { className: "t-bar" });
    bar.style.width = Math.max(2, Math.round(100 * (cell.tokens || 0) / (maxTokens || 1))) + "%";
    node.appendChild(bar);
    node.addEventListener("click", function (event) { event.stopPropagation(); onclick(); });
    return node;
  }

  function largest(cells) { return cells.reduce(function (m, c) { return Math.max(m, c.tokens || 0); }, 1); }

  function runView(run, r) {
    var maxTokens = largest([].concat.apply([], run.rounds.map(function (round) { return round.trajectories; })));
    var node = el("div", { className: "rounds" }, el("h3", { text: "Rounds (click a round for its references and synthesis, a cell for its trajectory)" }));
    var cards = run.rounds.map(function (round, n) {
      var last = n === run.rounds.length - 1;
      var head = el("div", { className: "round-head" },
        el("span", { className: "title", text: "Round " + (n + 1) + (last && run.rounds.length > 1 ? " (synthesis)" : "") }),
        el("span", { text: "K=" + round.k }),
        el("span", { text: fmt(round.tokens) + " tokens" }),
        el("span", { text: round.agreement }),
        round.failed ? el("span", { className: "flag bad", text: round.failed + " failed" }) : null,
        round.truncated ? el("span", { className: "flag warn", text: round.truncated + " truncated" }) : null,
        round.cut ? el("span", { className: "flag", text: round.cut + " cut" }) : null);
      var tiles = el("div", { className: "tiles" }, round.trajectories.map(function (cell) {
        return tile(cell, function () { var c = state.view.route; go({ page: "problem", key: c.key, unit: c.unit, round: n, trajectory: cell.index }); }, maxTokens);
      }));
      var card = el("div", { className: "round", dataset: { round: n } }, head, legend(round.groups), tiles);
      head.addEventListener("click", function () {
        var c = state.view.route;
        go({ page: "problem", key: c.key, unit: c.unit, round: c.round === n && c.trajectory == null ? null : n });
      });
      return { card: card, round: round, panel: null, tiles: tiles };
    });
    cards.forEach(function (c) { node.appendChild(c.card); });
    node.appendChild(el("h3", { text: "Answer" }));
    node.appendChild(pre(run.answer));
    return {
      node: node, source: run,
      select: function (r) {
        cards.forEach(function (c, n) {
          var open = r.round === n;
          c.card.classList.toggle("open", open);
          if (open && !c.panel) { c.panel = roundPanel(run, n); c.card.appendChild(c.panel); }
          if (!open && c.panel) { c.card.removeChild(c.panel); c.panel = null; }
          Array.prototype.forEach.call(c.tiles.children, function (t) { t.classList.toggle("selected", open && String(r.trajectory) === t.dataset.index); });
        });
      }
    };
  }

  function roundPanel(run, n) {
    var round = run.rounds[n], last = n === run.rounds.length - 1;
    var given = el("div", { className: "col" }, el("h3", { text: n ? "References given (" + round.given.length + ", in the order sent)" : "References given" }));
    if (!n) { given.appendChild(el("p", { className: "muted", text: "None: the first round answers the conversation itself." })); }
    round.given.forEach(function (ref, i) {
      given.appendChild(el("div", { className: "reference" },
        el("div", { className: "ref-head", text: "Reference " + (i + 1) + (ref.from != null ? " · from round " + n + " #" + ref.from : "") }), pre(ref.text, "pre")));
    });
    var made = el("div", { className: "col" }, el("h3", { text: last && run.rounds.length > 1 ? "Synthesis" : "What this round concluded" }));
    round.trajectories.forEach(function (cell) {
      made.appendChild(el("div", { className: "reference" },
        el("div", { className: "ref-head", text: "#" + cell.index + " · " + fmt(cell.tokens) + " tokens" + (cell.error ? " · failed" : "") + (cell.cut ? " · cut" : "") }),
        cell.error ? pre(cell.error, "pre") : pre(cell.conclusion, "pre")));
    });
    return el("div", { className: "round-panel", id: "round-panel" }, given, made);
  }

  function poolView(data, view) {
    var pool = data.pool;
    var box = el("div", { className: "round", id: "pool" },
      el("div", { className: "round-head" }, el("span", { className: "title", text: "Pool: first-round trajectories (" + pool.trajectories.length + ")" }),
        el("span", { className: "muted", text: "every setting draws its first round from these" })),
      legend(pool.groups));
    var tiles = el("div", { className: "tiles" }, pool.trajectories.map(function (cell) {
      return tile(cell, function () { var c = state.view.route; go({ page: "problem", key: c.key, unit: c.unit, round: "pool", trajectory: cell.index }); }, largest(pool.trajectories));
    }));
    box.appendChild(tiles);
    view.pool = { select: function (r) { Array.prototype.forEach.call(tiles.children, function (t) { t.classList.toggle("selected", r.round === "pool" && String(r.trajectory) === t.dataset.index); }); } };
    return box;
  }

  // ------------------------------------------------------------------------------------------------ one trajectory
  function closeDrawer() { var d = document.getElementById("drawer"); if (d) { d.parentNode.removeChild(d); } }

  function openDrawer(found, data, r) {
    closeDrawer();
    var cell = found.cell, round = found.round;
    var drawer = el("aside", { id: "drawer", role: "dialog" });
    var close = el("button", { className: "close", type: "button", title: "close (Esc)", text: "×" });
    close.addEventListener("click", function () { go({ page: "problem", key: r.key, unit: r.unit, round: found.pool ? null : r.round }); });
    var where = found.pool ? "Pool trajectory #" + cell.index : "Round " + (r.round + 1) + " · trajectory #" + cell.index;
    append(drawer, [close, el("h2", { id: "trajectory-title", text: where })]);
    var pairs = cell.episode ? [["patch", cell.answer == null ? "(none usable)" : cell.answer]]  // the episode says the rest
      : [["completion tokens", fmt(cell.tokens) + (cell.tokens_approximate ? " (approximate)" : "")], ["prompt tokens", fmt(cell.prompt_tokens)],
        ["finish reason", cell.finish || ""], ["answer", cell.answer == null ? "(none usable)" : cell.answer]];
    if (cell.correct != null) { pairs.push(["graded", cell.correct ? "correct" : "wrong" + (cell.flag ? " (" + cell.flag + ")" : "")]); }
    if (cell.error) { pairs.push(["error", (cell.error_type ? cell.error_type + ": " : "") + cell.error]); }
    if (cell.attempts) { pairs.push(["attempts", cell.attempts]); }
    if (cell.cut) { pairs.push(["cut", cell.cut]); }
    if (cell.truncated) { pairs.push(["truncated", "yes: cut off by the length limit"]); }
    if (cell.model) { pairs.push(["panel member", cell.model]); }
    if (cell.model_name) { pairs.push(["model", cell.model_name]); }
    if (cell.reused) { pairs.push(["reused", "yes: drawn by an earlier run of this problem, not sent again"]); }
    if (cell.reference_indices) { pairs.push(["references seen", cell.reference_indices.map(function (i) { return "#" + i; }).join(", ")]); }
    drawer.appendChild(facts(pairs.filter(function (p) { return p[1] != null && p[1] !== ""; })));
    if (cell.episode) {
      drawer.appendChild(episodeView(cell.episode, null));
    } else {
      var prompt = cell.prompt || (round && round.prompt) || (found.pool ? data.messages : null);
      if (prompt) {
        drawer.appendChild(el("h3", { text: "Messages sent" }));
        drawer.appendChild(el("p", { className: "muted", text: (round && round.prompt_note) || "The conversation the problem asked." }));
        prompt.forEach(function (m) { drawer.appendChild(messageView(m)); });
      } else {
        drawer.appendChild(el("p", { className: "muted", text: "The folder does not keep the messages of this problem." }));
      }
      if (cell.reasoning_chars) { drawer.appendChild(reasoningLoader(r.key, cell)); }
      drawer.appendChild(el("h3", { text: found.pool ? "Content" : "Conclusion" }));
      drawer.appendChild(pre(cell.conclusion, "box conclusion"));
      (cell.tool_calls || []).forEach(function (call) { drawer.appendChild(el("div", { className: "toolcall" }, el("strong", { text: call.name + " " }), pre(JSON.stringify(call.args, null, 1), "pre"))); });
    }
    document.body.appendChild(drawer);
    document.body.dataset.trajectory = (found.pool ? "pool" : r.round) + "/" + cell.index;
  }

  function reasoningLoader(key, cell) {
    var box = el("details", null, el("summary", { text: "reasoning (" + fmt(cell.reasoning_chars) + " characters)" }));
    var loaded = false;
    box.addEventListener("toggle", function () {
      if (!box.open || loaded) { return; }
      loaded = true;
      source.part(key, "pool-reasoning-" + cell.index).then(function (text) { box.appendChild(pre(text)); })
        .catch(function (error) { box.appendChild(el("p", { className: "muted", text: String(error.message || error) })); });
    });
    return box;
  }

  function episodeView(episode, title) {
    var box = el("div", { className: "episode" });
    if (title) { box.appendChild(el("h3", { text: title })); }
    var sandbox = episode.sandbox || {};
    var pairs = [["ended", episode.stop_reason || ""], ["steps", episode.steps], ["seconds", episode.seconds],
      ["tokens", fmt(episode.completion_tokens) + " completion, " + fmt(episode.prompt_tokens) + " prompt"],
      ["sandbox", [sandbox.runtime, sandbox.id, sandbox.workdir].filter(function (x) { return x; }).join(" · ")]];
    if (episode.host != null) { pairs.push(["host", typeof episode.host === "object" ? JSON.stringify(episode.host) : episode.host]); }
    if (episode.error) { pairs.push(["error", episode.error]); }
    if (episode.note) { pairs.push(["note", episode.note]); }
    box.appendChild(facts(pairs.filter(function (p) { return p[1] != null && p[1] !== ""; })));
    if (episode.sandbox_notes && episode.sandbox_notes.length) {
      box.appendChild(el("div", { className: "note" }, el("strong", { text: "Sandbox notes: " }), episode.sandbox_notes.map(function (n) { return el("div", { text: typeof n === "string" ? n : JSON.stringify(n) }); })));
    }
    box.appendChild(el("h3", { text: "Patch" }));
    box.appendChild(episode.patch ? diff(episode.patch) : el("p", { className: "muted", text: "No patch." }));
    var messages = episode.messages || [];
    box.appendChild(el("h3", { text: "Steps (" + messages.filter(function (m) { return m.role === "ai" || m.role === "assistant"; }).length + " model turns)" }));
    messages.forEach(function (m, i) {
      if (i < 2 && (m.role === "system" || m.role === "human" || m.role === "user")) {
        box.appendChild(el("details", null, el("summary", { text: m.role + " message (" + fmt(m.content.length) + " characters)" }), pre(m.content)));
      } else {
        box.appendChild(messageView(m));
      }
    });
    return box;
  }

  start();
})();
