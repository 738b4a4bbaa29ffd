/* osmosis-run HTML report: draws the JSON embedded in #osmosis-data (osmosis_run/reports/html_report.py).
 *
 * One rule keeps it safe: text from a dataset or a model reaches the DOM only as text
 * (textContent, text nodes, attribute values), never as markup: nothing here parses HTML.
 * Nothing here decides what an outcome means either: whether a rollout passed ("p"), its
 * outcome ("o": pass, fail, error or none), the statuses, the groups of samples, the first
 * differing message of a pair ("fd") and the comparison's numbers all come computed in the data.
 */
(function () {
  "use strict";

  // The page's data. In `osmosis-run view` (kind "view") it holds only the constants, and the
  // view's own script (view.js) draws with the functions this one hands it (see the end).
  let DATA = JSON.parse(document.getElementById("osmosis-data").textContent);
  const SVG_NS = "http://www.w3.org/2000/svg";
  const STATUSES = DATA.statuses;

  // -- DOM helpers ---------------------------------------------------------------------------

  function build(node, attrs, kids) {
    if (attrs) {
      for (const [key, value] of Object.entries(attrs)) {
        if (value === null || value === undefined || value === false) continue;
        if (key === "text") node.textContent = String(value);
        else if (key.startsWith("on")) {
          if (typeof value !== "function") throw new TypeError("handler must be a function");
          node.addEventListener(key.slice(2), value);
        } else node.setAttribute(key, value === true ? "" : String(value));
      }
    }
    append(node, kids);
    return node;
  }

  function append(node, kids) {
    for (const kid of kids) {
      if (kid === null || kid === undefined || kid === false) continue;
      if (Array.isArray(kid)) append(node, kid);
      else if (kid instanceof Node) node.appendChild(kid);
      else node.appendChild(document.createTextNode(String(kid)));
    }
    return node;
  }

  const el = (tag, attrs, ...kids) => build(document.createElement(tag), attrs, kids);
  const sv = (tag, attrs, ...kids) => build(document.createElementNS(SVG_NS, tag), attrs, kids);
  // Charts are drawn for the width they get (a viewBox scales them), so text stays legible on phones.
  const WIDE = Math.round(Math.max(300, Math.min(560, window.innerWidth - 72)));
  const NARROW = Math.min(400, WIDE);
  const clear = (node) => { while (node.firstChild) node.removeChild(node.firstChild); return node; };

  // -- formatting ----------------------------------------------------------------------------

  const isNum = (x) => typeof x === "number" && Number.isFinite(x);
  const int = (x) => (isNum(x) ? Math.round(x).toLocaleString("en-US") : "—");
  const fix = (x, d = 3) => (isNum(x) ? x.toFixed(d) : "—");
  const pct = (x, d = 1) => (isNum(x) ? (x * 100).toFixed(d) + "%" : "—");
  const signed = (x, d = 3) => (isNum(x) ? (x > 0 ? "+" : x < 0 ? "−" : "±") + Math.abs(x).toFixed(d) : "—");
  function ms(x) {
    if (!isNum(x)) return "—";
    if (x < 1) return x.toFixed(2) + " ms";
    if (x < 100) return x.toFixed(1) + " ms";
    if (x < 1000) return x.toFixed(0) + " ms";
    if (x < 60000) return (x / 1000).toFixed(2) + " s";
    return (x / 60000).toFixed(1) + " min";
  }
  function seconds(s) {
    if (!isNum(s)) return "—";
    if (s < 60) return s.toFixed(2) + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
    return (s / 3600).toFixed(1) + " h";
  }
  function money(x) {
    if (!isNum(x)) return "—";
    return "$" + (x >= 100 ? x.toFixed(0) : x >= 1 ? x.toFixed(2) : x.toPrecision(2));
  }
  function bytes(n) {
    if (!isNum(n)) return "";
    if (n < 1024) return n + " B";
    if (n < 1048576) return (n / 1024).toFixed(1) + " KB";
    return (n / 1048576).toFixed(1) + " MB";
  }
  function short(x) {
    if (!isNum(x)) return "—";
    if (x === 0) return "0";
    const a = Math.abs(x);
    if (a >= 100 || Number.isInteger(x)) return String(Math.round(x * 100) / 100);
    return String(Number(x.toPrecision(2)));
  }
  function niceMax(x) {
    if (x <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(x)));
    for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= x - 1e-9) return m * p;
    return 10 * p;
  }
  const basename = (path) => String(path).split(/[\\/]/).pop();

  // -- small pieces --------------------------------------------------------------------------

  function pill(status) {
    if (!status) return el("span", { class: "pill missing", text: "absent" });
    const known = STATUSES.includes(status) ? status : "ungraded";
    return el("span", { class: "pill " + known, text: status });
  }

  /* What a rollout came to: "passed" or "failed" for a graded one (a success whose reward is
   * below the pass threshold is failed, never a green "success"), else its status. */
  function outcomePill(row) {
    if (!row) return pill(null);
    const why = `status ${row.st}` + (isNum(row.rw) ? `, reward ${fix(row.rw, 3)}` : "");
    if (row.o === "pass") return el("span", { class: "pill passed", "data-outcome": "pass", title: why, text: "passed" });
    if (row.o === "fail") return el("span", { class: "pill failed", "data-outcome": "fail", title: why + ", below the pass threshold", text: "failed" });
    const node = pill(row.st);
    node.setAttribute("data-outcome", row.o || "none");
    return node;
  }
  const OUTCOME_ORDER = ["pass", "none", "fail", "error"];

  function rewardText(row) {
    if (!row || !isNum(row.rw)) return el("span", { class: "muted", text: "—" });
    const cls = row.p === true ? "pass" : row.p === false ? "fail" : "";
    return el("span", { class: "reward " + cls, text: fix(row.rw, 3) });
  }

  function deltaChip(delta, digits, { percent = false, lowerIsBetter = false, format = null } = {}) {
    if (!isNum(delta)) return el("span", { class: "delta", text: "—" });
    const good = lowerIsBetter ? delta < 0 : delta > 0;
    const cls = Math.abs(delta) < 1e-12 ? "" : good ? "up" : "down";
    const text = format ? (delta < 0 ? "−" : "+") + format(Math.abs(delta))
      : percent ? signed(delta * 100, 1) + " pp" : signed(delta, digits);
    return el("span", { class: "delta " + cls, text });
  }

  function card(title, sub, ...body) {
    return el("section", { class: "card chart" },
      el("div", { class: "card-head" }, el("h2", { text: title })),
      sub ? el("p", { class: "sub", text: sub }) : null, body);
  }

  function kpi(label, value, detail, extra) {
    return el("div", { class: "card kpi" + (extra ? " " + extra : "") },
      el("div", { class: "label", text: label }),
      el("div", { class: "value" }, value),
      detail ? el("div", { class: "detail", text: detail }) : null);
  }

  // -- charts --------------------------------------------------------------------------------

  /* Chart text is 11-12 px: about this many px per character, for keeping labels apart. */
  const CHAR_W = 6.6;
  const textWidth = (text) => String(text).length * CHAR_W;

  /* Of labels at ascending x (centred), the ones that fit side by side, always the first and,
   * if it fits, the last: [x, text] pairs. */
  function spaced(labels, gap = 6) {
    const kept = [];
    const fits = (a, b) => Math.abs(a[0] - b[0]) >= (textWidth(a[1]) + textWidth(b[1])) / 2 + gap;
    labels.forEach((label, i) => {
      const last = kept[kept.length - 1];
      if (!last || fits(last, label)) kept.push(label);
      else if (i === labels.length - 1 && kept.length > 1 && fits(kept[kept.length - 2], label)) kept[kept.length - 1] = label;
    });
    return kept;
  }

  /* A vertical histogram: one rect.bar per bin (empty bins too), so bins can be counted. */
  function histogram(spec) {
    const W = WIDE, H = 230, L = 44, R = 10, T = 16, B = 38;
    const counts = spec.counts, n = counts.length;
    const top = niceMax(Math.max(...counts, 1));
    const bw = (W - L - R) / n;
    const y = (v) => T + (H - T - B) * (1 - v / top);
    const svg = sv("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": spec.label, class: spec.cls || "" });
    for (const f of [0, 0.5, 1]) {
      svg.appendChild(sv("line", { class: f ? "grid" : "axis", x1: L, x2: W - R, y1: y(top * f), y2: y(top * f) }));
      svg.appendChild(sv("text", { x: L - 6, y: y(top * f) + 4, "text-anchor": "end", text: short(top * f) }));
    }
    const total = counts.reduce((a, b) => a + b, 0) || 1;
    counts.forEach((count, i) => {
      const x = L + i * bw, h = count ? Math.max((H - T - B) * (count / top), 2) : 0;
      const title = `${spec.edgeText(i)}: ${int(count)} (${pct(count / total)})`;
      const rect = sv("rect", {
        class: "bar" + (spec.onBar ? " clickable" : "") + (spec.barClass ? " " + spec.barClass(i) : ""),
        x: x + 1.5, y: H - B - h, width: Math.max(bw - 3, 1), height: h, rx: 2,
        "data-count": count, "data-bin": i,
      }, sv("title", { text: title }));
      if (spec.onBar) rect.addEventListener("click", () => spec.onBar(i));
      svg.appendChild(rect);
      if (spec.onBar) {
        const hit = sv("rect", { class: "hit", x, y: T, width: bw, height: H - T - B }, sv("title", { text: title }));
        hit.addEventListener("click", () => spec.onBar(i));
        svg.insertBefore(hit, svg.firstChild);
      }
      if (n <= 24 && count > 0) {
        svg.appendChild(sv("text", { class: "bar-label", x: x + bw / 2, y: H - B - h - 4, "text-anchor": "middle", text: int(count) }));
      }
    });
    const every = Math.ceil((n + 1) / 11);
    const ticks = spec.ticks || spec.edges.map((edge, i) => [i, spec.edgeLabel(edge, i)]).filter(([i]) => i % every === 0 || i === n);
    for (const [at, text] of ticks) {
      svg.appendChild(sv("text", { x: L + at * bw, y: H - B + 15, "text-anchor": "middle", text }));
    }
    svg.appendChild(sv("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", text: spec.xTitle }));
    return svg;
  }

  /* Horizontal bars: a labelled row per item, clickable to filter. */
  function hbars(items, { label, onPick, fill }) {
    const W = NARROW, rowH = 30, L = 112, R = 104, T = 4;
    const H = T * 2 + rowH * items.length;
    const max = Math.max(...items.map((it) => it[1]), 1);
    const total = items.reduce((a, it) => a + it[1], 0) || 1;
    const svg = sv("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label });
    items.forEach(([name, count], i) => {
      const y = T + i * rowH;
      const w = Math.max(((W - L - R) * count) / max, 2);
      const shown = name.length > 16 ? name.slice(0, 15) + "…" : name;
      const g = sv("g", { class: "hrow", "data-name": name },
        sv("rect", { class: "hit", x: 0, y, width: W, height: rowH }),
        sv("text", { class: "name", x: L - 10, y: y + rowH / 2 + 4, "text-anchor": "end", text: shown }),
        sv("rect", { class: "bar clickable " + fill(name), x: L, y: y + 6, width: w, height: rowH - 12, rx: 3, "data-count": count }),
        sv("text", { class: "count", x: L + w + 8, y: y + rowH / 2 + 4, text: int(count) }),
        sv("text", { class: "pct", x: W - 2, y: y + rowH / 2 + 4, "text-anchor": "end", text: pct(count / total) }),
        sv("title", { text: `${name}: ${int(count)} (${pct(count / total)}); click to filter` }));
      g.addEventListener("click", () => onPick(name));
      svg.appendChild(g);
    });
    return svg;
  }

  /* Workflow and grader latency on one log-scale axis: two stacked histograms. */
  function latencyChart(spec, summary) {
    const W = WIDE, L = 76, R = 12, T = 6, PH = 92, GAP = 18, B = 34, LABELS = 24;
    const series = [["workflow", spec.workflow, summary.workflow_ms], ["grader", spec.grader, summary.grader_ms]]
      .filter((s) => s[1].some((c) => c > 0));
    const H = T + series.length * PH + (series.length - 1) * GAP + B;
    const n = spec.edges.length - 1, bw = (W - L - R) / n;
    const lo = Math.log10(spec.edges[0]), hi = Math.log10(spec.edges[n]);
    const xOf = (v) => L + ((Math.log10(v) - lo) / (hi - lo)) * (W - L - R);
    const svg = sv("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "latency distribution" });
    series.forEach(([name, counts, dist], s) => {
      const top = T + s * (PH + GAP), max = Math.max(...counts, 1);
      svg.appendChild(sv("text", { class: "series-label", x: 0, y: top + 14, text: name }));
      svg.appendChild(sv("text", { x: 0, y: top + 30, text: "p50 " + ms(dist.p50) }));
      svg.appendChild(sv("line", { class: "axis", x1: L, x2: W - R, y1: top + PH, y2: top + PH }));
      counts.forEach((count, i) => {
        const h = (PH - LABELS) * (count / max);
        svg.appendChild(sv("rect", {
          class: "bar lat-" + name, x: L + i * bw + 1, y: top + PH - h, width: Math.max(bw - 2, 1), height: h, rx: 1.5, "data-count": count,
        }, sv("title", { text: `${name} ${ms(spec.edges[i])}–${ms(spec.edges[i + 1])}: ${int(count)}` })));
      });
      const rowsEnd = [-Infinity, -Infinity, -Infinity]; // where each line of labels ends
      for (const [q, v] of [["p50", dist.p50], ["p90", dist.p90], ["p99", dist.p99]]) {
        if (!isNum(v) || v <= 0) continue;
        const x = Math.min(Math.max(xOf(v), L + 10), W - R - 10);
        const half = textWidth(q) / 2;
        // Labels too close for one line go on the next free one, so none overlap.
        let row = rowsEnd.findIndex((end) => x - half >= end + 3);
        if (row < 0) row = rowsEnd.length - 1;
        rowsEnd[row] = x + half;
        svg.appendChild(sv("line", { class: "marker", x1: x, x2: x, y1: top + 4 + row * 11, y2: top + PH },
          sv("title", { text: `${name} ${q}: ${ms(v)}` })));
        svg.appendChild(sv("text", { class: "marker-label", x, y: top + 9 + row * 11, "text-anchor": "middle", text: q }));
      }
    });
    const axisY = H - B + 16;
    const steps = hi - lo < 2 ? [1, 2, 5] : [1]; // short ranges get 2x and 5x ticks too
    const ticks = [];
    for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
      for (const m of steps) {
        const v = m * Math.pow(10, e), at = Math.log10(v);
        if (at < lo - 1e-9 || at > hi + 1e-9) continue;
        const text = v >= 1000 ? `${Number((v / 1000).toPrecision(3))} s` : `${Number(v.toPrecision(3))} ms`;
        ticks.push([xOf(v), text]);
      }
    }
    for (const [x, text] of spaced(ticks)) { // a wide range or a narrow chart: fewer ticks, none overlapping
      svg.appendChild(sv("text", { x: Math.min(Math.max(x, textWidth(text) / 2), W - textWidth(text) / 2), y: axisY, "text-anchor": "middle", text }));
    }
    svg.appendChild(sv("text", { x: (L + W - R) / 2, y: H - 2, "text-anchor": "middle", text: "milliseconds (log scale)" }));
    return svg;
  }

  /* pass@k and pass^k against k (1, 2, 4, ...), one circle.pt per point. */
  function passAtK(summary) {
    const W = NARROW, H = 220, L = 40, R = 18, T = 16, B = 46; // B: k labels clear of the y axis's 0.00
    const ks = summary.pass_at_k.map((p) => p.k);
    const xs = (i) => L + (ks.length === 1 ? (W - L - R) / 2 : (i * (W - L - R)) / (ks.length - 1));
    const y = (v) => T + (H - T - B) * (1 - v);
    const svg = sv("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "pass@k curve" });
    for (const f of [0, 0.25, 0.5, 0.75, 1]) {
      svg.appendChild(sv("line", { class: f ? "grid" : "axis", x1: L, x2: W - R, y1: y(f), y2: y(f) }));
      svg.appendChild(sv("text", { x: L - 6, y: y(f) + 4, "text-anchor": "end", text: f.toFixed(2) }));
    }
    const kLabels = ks.map((k, i) => [xs(i), "k=" + k]);
    for (const [x, text] of spaced(kLabels)) svg.appendChild(sv("text", { x, y: H - B + 22, "text-anchor": "middle", text }));
    const values = [];
    for (const [key, cls, name] of [["pass_hat_k", "pass-hat-k", "pass^k"], ["pass_at_k", "pass-at-k", "pass@k"]]) {
      const points = summary[key];
      const d = points.map((p, i) => (i ? "L" : "M") + xs(i).toFixed(1) + " " + y(p.value).toFixed(1)).join(" ");
      svg.appendChild(sv("path", { class: "line " + cls, d }));
      points.forEach((p, i) => {
        svg.appendChild(sv("circle", { class: "pt " + cls, cx: xs(i), cy: y(p.value), r: 4.5 }, sv("title", { text: `${name} k=${p.k}: ${fix(p.value)}` })));
        if (cls === "pass-at-k") values.push([xs(i), fix(p.value, 3), y(p.value)]);
      });
    }
    // Values over their points, as many as fit side by side (every point has its tooltip).
    for (const [x, text, at] of spaced(values)) {
      svg.appendChild(sv("text", { class: "bar-label", x, y: Math.max(at - 9, 10), "text-anchor": "middle", text }));
    }
    svg.appendChild(sv("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", text: "samples per row drawn (k)" }));
    return svg;
  }

  /* The outcome transition matrix of a comparison: rows are A, columns are B. */
  function matrixChart(allOutcomes, allMatrix) {
    const keep = allOutcomes.map((name, i) => name === "pass" || name === "fail" || allMatrix[i].some(Boolean) || allMatrix.some((r) => r[i]));
    const outcomes = allOutcomes.filter((_, i) => keep[i]);
    const matrix = allMatrix.filter((_, i) => keep[i]).map((r) => r.filter((_, j) => keep[j]));
    const n = outcomes.length, C = 62, L = 92, T = 40, W = L + n * C + 8, H = T + n * C + 8;
    const max = Math.max(...matrix.flat(), 1);
    const svg = sv("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "outcome transitions", style: `max-width:${Math.round(W * 1.3)}px;margin:0 auto` });
    svg.appendChild(sv("text", { class: "series-label", x: L + (n * C) / 2, y: 12, "text-anchor": "middle", text: "B (after)" }));
    outcomes.forEach((name, j) => svg.appendChild(sv("text", { x: L + j * C + C / 2, y: T - 8, "text-anchor": "middle", text: name })));
    outcomes.forEach((name, i) => {
      svg.appendChild(sv("text", { x: L - 8, y: T + i * C + C / 2 + 4, "text-anchor": "end", text: "A " + name }));
      outcomes.forEach((_, j) => {
        const v = matrix[i][j], t = v / max;
        const flip = (outcomes[i] === "pass") !== (outcomes[j] === "pass") && (outcomes[i] === "pass" || outcomes[j] === "pass");
        const hue = !flip ? "79,70,229" : outcomes[j] === "pass" ? "22,163,74" : "220,38,38";
        svg.appendChild(sv("rect", { class: "cell", x: L + j * C + 2, y: T + i * C + 2, width: C - 4, height: C - 4, rx: 6,
          fill: `rgba(${hue},${v ? 0.08 + 0.82 * t : 0.03})`, "data-count": v }, sv("title", { text: `A ${outcomes[i]} → B ${outcomes[j]}: ${int(v)}` })));
        if (i === j) svg.appendChild(sv("rect", { class: "cell-diag", x: L + j * C + 2, y: T + i * C + 2, width: C - 4, height: C - 4, rx: 6 }));
        svg.appendChild(sv("text", { class: "cell-label" + (t > 0.55 ? " light" : ""), x: L + j * C + C / 2, y: T + i * C + C / 2 + 5, "text-anchor": "middle", text: int(v) }));
      });
    });
    return svg;
  }

  // -- tables --------------------------------------------------------------------------------

  /* A sortable, paged table over a filtered list of rows; only one page is ever in the DOM. */
  class Table {
    constructor({ columns, rows, pageSize = 50, sizes = [25, 50, 100, 250], onOpen, empty, name, group }) {
      Object.assign(this, { columns, rows, pageSize, sizes, onOpen, empty, name });
      // group: { key(row), head(row) -> node, on: bool }: rows of one key, drawn together under
      // a head row, while the table is in its own order (or sorted by a column that keeps them).
      this.group = group || null;
      this.filter = () => true;
      this.sort = null;
      this.page = 0;
      this.view = rows.map((_, i) => i);
      this.current = null;
      this.tbody = el("tbody");
      this.head = el("tr");
      this.info = el("span", { class: "info" });
      this.pageText = el("span", { class: "num" });
      this.prev = el("button", { class: "btn", type: "button", "aria-label": "previous page", text: "‹ Prev", onclick: () => this.go(this.page - 1) });
      this.next = el("button", { class: "btn", type: "button", "aria-label": "next page", text: "Next ›", onclick: () => this.go(this.page + 1) });
      const size = el("select", { "aria-label": "rows per page", onchange: (e) => { this.pageSize = Number(e.target.value); this.go(0); } },
        sizes.map((s) => el("option", { value: s, selected: s === pageSize, text: s + " / page" })));
      this.pager = el("div", { class: "pager" }, this.info, el("div", { class: "controls" }, size, this.prev, this.pageText, this.next));
      this.table = el("table", { class: "rollouts", "data-table": name || "" }, el("thead", null, this.head), this.tbody);
      this.drawHead();
    }
    drawHead() {
      clear(this.head);
      for (const col of this.columns) {
        const sorted = this.sort && this.sort.key === col.key;
        const th = el("th", { class: (col.sort ? "sortable " : "") + (col.cls || ""), scope: "col", "aria-sort": sorted ? (this.sort.dir > 0 ? "ascending" : "descending") : null },
          col.label, sorted ? el("span", { class: "arrow", text: this.sort.dir > 0 ? "▲" : "▼" }) : null);
        if (col.sort) th.addEventListener("click", () => this.sortBy(col));
        this.head.appendChild(th);
      }
    }
    sortBy(col) {
      const dir = this.sort && this.sort.key === col.key ? -this.sort.dir : col.firstDir || 1;
      this.sort = { key: col.key, dir, get: col.sort };
      this.drawHead();
      this.refresh(true);
    }
    setFilter(fn) { this.filter = fn; this.refresh(false); }
    refresh(keepPage) {
      const rows = this.rows;
      let view = [];
      for (let i = 0; i < rows.length; i++) if (this.filter(rows[i])) view.push(i);
      if (this.sort) {
        const { get, dir } = this.sort;
        const keyed = view.map((i) => [get(rows[i]), i]);
        keyed.sort((a, b) => {
          const x = a[0], y = b[0];
          const xn = x === null || x === undefined, yn = y === null || y === undefined;
          if (xn || yn) return xn && yn ? a[1] - b[1] : xn ? 1 : -1; // blanks last, either way
          if (x < y) return -dir;
          if (x > y) return dir;
          return a[1] - b[1];
        });
        view = keyed.map((k) => k[1]);
      }
      this.view = view;
      this.go(keepPage ? this.page : 0);
    }
    pages() { return Math.max(1, Math.ceil(this.view.length / this.pageSize)); }
    go(page) {
      this.page = Math.min(Math.max(page, 0), this.pages() - 1);
      this.draw();
    }
    grouping() {
      const g = this.group;
      return Boolean(g && g.on && (!this.sort || (g.keeps || []).includes(this.sort.key)));
    }
    draw() {
      clear(this.tbody);
      const start = this.page * this.pageSize, end = Math.min(start + this.pageSize, this.view.length);
      const grouping = this.grouping();
      let previous;
      for (let p = start; p < end; p++) {
        const row = this.rows[this.view[p]];
        const key = grouping ? this.group.key(row) : undefined;
        if (grouping && key !== null && key !== previous) {
          this.tbody.appendChild(el("tr", { class: "group-row", "data-group": key },
            el("td", { colspan: this.columns.length }, this.group.head(row, p === start && p > 0 && this.group.key(this.rows[this.view[p - 1]]) === key))));
        }
        previous = key;
        const grouped = grouping && key !== null;
        const tr = el("tr", { tabindex: 0, "data-id": row.i, class: [this.current === row ? "current" : "", grouped ? "in-group" : ""].join(" ").trim() || null,
          onclick: () => this.onOpen(this, p), onkeydown: (e) => { if (e.key === "Enter") this.onOpen(this, p); } },
        this.columns.map((col) => el("td", { class: col.cls || null }, col.cell(row))));
        this.tbody.appendChild(tr);
      }
      if (start === end) {
        this.tbody.appendChild(el("tr", { class: "empty-row" }, el("td", { colspan: this.columns.length, text: this.empty || "No rollouts match." })));
      }
      const total = this.rows.length, shown = this.view.length;
      this.info.textContent = shown ? `${int(start + 1)}–${int(end)} of ${int(shown)}` + (shown < total ? ` (filtered from ${int(total)})` : "") : `0 of ${int(total)}`;
      this.pageText.textContent = `${int(this.page + 1)} / ${int(this.pages())}`;
      this.prev.disabled = this.page === 0;
      this.next.disabled = this.page >= this.pages() - 1;
    }
    element(toolbar) {
      return el("div", { class: "card table-card" }, toolbar, el("div", { class: "scroller" }, this.table), this.pager);
    }
  }

  // -- search --------------------------------------------------------------------------------

  function transcriptText(messages) {
    const parts = [];
    for (const m of messages || []) {
      parts.push(m.c, m.ct, m.rs, m.rst, m.n, m.x);
      for (const call of m.tc || []) parts.push(call.n, call.a, call.at);
    }
    return parts.filter(Boolean).join("\n");
  }

  function haystack(row) {
    if (row._hay === undefined) {
      const md = row.md === undefined ? "" : typeof row.md === "string" ? row.md : JSON.stringify(row.md);
      row._hay = [row.i, row.rid, row.st, row.ec, row.em, row.lb, md, transcriptText(row.t)]
        .filter((x) => x !== undefined && x !== null).join("\n").toLowerCase();
    }
    return row._hay;
  }

  function debounce(fn, wait) {
    let timer = null;
    return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), wait); };
  }

  // -- the drawer ----------------------------------------------------------------------------

  const drawer = {
    root: null, body: null, title: null, extra: null, backdrop: null, table: null, pos: 0, render: null,
    init() {
      this.backdrop = el("div", { class: "backdrop", onclick: () => this.close() });
      this.title = el("div", { class: "title" });
      this.extra = el("div", { class: "badges" });
      this.prevBtn = el("button", { class: "btn", type: "button", title: "previous (k)", text: "↑", "aria-label": "previous rollout", onclick: () => this.step(-1) });
      this.nextBtn = el("button", { class: "btn", type: "button", title: "next (j)", text: "↓", "aria-label": "next rollout", onclick: () => this.step(1) });
      this.body = el("div", { class: "drawer-body" });
      this.root = el("aside", { class: "drawer", role: "dialog", "aria-modal": "true", "aria-label": "rollout detail", "aria-hidden": "true" },
        el("div", { class: "drawer-head" }, this.title, this.extra,
          el("div", { class: "nav" }, this.prevBtn, this.nextBtn,
            el("button", { class: "btn", type: "button", text: "✕ Close", "aria-label": "close", onclick: () => this.close() }))),
        this.body);
      document.body.append(this.backdrop, this.root);
      document.addEventListener("keydown", (e) => {
        if (!this.isOpen()) return;
        if (e.key === "Escape") this.close();
        else if (e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement) return;
        else if (e.key === "j" || e.key === "ArrowDown") { e.preventDefault(); this.step(1); }
        else if (e.key === "k" || e.key === "ArrowUp") { e.preventDefault(); this.step(-1); }
      });
    },
    isOpen() { return this.root.classList.contains("open"); },
    open(table, pos, render, wide) {
      this.table = table; this.pos = pos; this.render = render;
      const row = table.rows[table.view[pos]];
      table.current = row;
      if (pos < table.page * table.pageSize || pos >= (table.page + 1) * table.pageSize) table.go(Math.floor(pos / table.pageSize));
      else table.draw();
      clear(this.title).textContent = row.i;
      clear(this.extra);
      clear(this.body);
      render(row, this.body, this.extra);
      this.body.scrollTop = 0;
      this.root.classList.toggle("wide", Boolean(wide));
      this.root.classList.add("open");
      this.root.setAttribute("aria-hidden", "false");
      this.backdrop.classList.add("open");
      document.body.classList.add("drawer-open");
      this.prevBtn.disabled = pos <= 0;
      this.nextBtn.disabled = pos >= table.view.length - 1;
      history.replaceState(null, "", "#rollout=" + encodeURIComponent(row.i));
    },
    step(delta) {
      const pos = this.pos + delta;
      if (this.table && pos >= 0 && pos < this.table.view.length) this.open(this.table, pos, this.render, this.root.classList.contains("wide"));
    },
    close() {
      this.root.classList.remove("open");
      this.root.setAttribute("aria-hidden", "true");
      this.backdrop.classList.remove("open");
      document.body.classList.remove("drawer-open");
      if (this.table) { this.table.current = null; this.table.draw(); }
      history.replaceState(null, "", location.pathname + location.search);
    },
  };

  function followHash(table, render, wide) {
    openFromHash(table, render, wide);
    window.addEventListener("hashchange", () => {
      if (/^#rollout=/.test(location.hash)) openFromHash(table, render, wide);
      else if (drawer.isOpen()) drawer.close();
    });
  }

  function openFromHash(table, render, wide) {
    const match = /^#rollout=(.*)$/.exec(location.hash);
    if (!match) return;
    let id;
    try { id = decodeURIComponent(match[1]); } catch (_) { return; }
    const at = table.rows.findIndex((r) => r.i === id);
    if (at < 0) return;
    let pos = table.view.indexOf(at);
    if (pos < 0) { table.setFilter(() => true); pos = table.view.indexOf(at); }
    drawer.open(table, pos, render, wide);
  }

  // -- one rollout's detail ------------------------------------------------------------------

  function fileHref(base, id, path) {
    return base + "rollouts/" + encodeURIComponent(id) + "/" + path.split("/").map(encodeURIComponent).join("/");
  }

  function usageText(u) {
    const parts = [`${int(u.tt)} (${int(u.pt)} prompt + ${int(u.ct)} completion)`, `${int(u.rq)} request${u.rq === 1 ? "" : "s"}`];
    if (u.rt) parts.push(`${int(u.rt)} retr${u.rt === 1 ? "y" : "ies"}`);
    if (u.rl) parts.push(`${int(u.rl)} rate-limited`);
    if (u.er) parts.push(`${int(u.er)} failed`);
    if (isNum(u.w) && u.w > 0) parts.push(`waited ${ms(u.w)}`);
    return parts.join(" · ");
  }

  /* Links to a rollout's files are relative to where the page was written: say so. */
  function linksNote(run) {
    if (/^\//.test(run.base)) return "Files are served by osmosis-run view from the run directory.";
    if (/^file:/.test(run.base)) return "File links are absolute paths on the machine that wrote this report.";
    if (!run.base) return "File links are relative to this page: they open while it stays in the run directory.";
    const where = decodeURIComponent(run.base.replace(/\/$/, ""));
    return `File links are relative to this page (the run directory is ${where} from here): they open while the page and the run directory stay where they are.`;
  }

  function fact(k, v) { return el("div", { class: "fact" }, el("div", { class: "k", text: k }), el("div", { class: "v" }, v)); }

  function cutText(cls, head, omitted, tail) {
    return el("div", { class: cls }, head || "",
      omitted ? el("span", { class: "cut", text: `… ${int(omitted)} characters not shown …` }) : null,
      omitted ? tail || "" : null);
  }

  function jsonBlock(value) {
    const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
    return el("pre", { class: "code wrap-lines", text });
  }

  function messageNode(m, names) {
    if (m.r === "gap") return el("div", { class: "gap", text: `… ${int(m.om)} messages not shown (the report keeps the first ${DATA.limits.keep_first_messages} and the last ${DATA.limits.max_messages - DATA.limits.keep_first_messages}) …` });
    const role = ["system", "user", "assistant", "tool"].includes(m.r) ? m.r : "other";
    const aside = [];
    if (m.r === "tool") {
      const fn = m.n || (m.tid && names.get(m.tid));
      aside.push("tool result" + (fn ? " · " + fn : "") + (m.tid ? " · " + m.tid : ""));
    } else if (m.n) aside.push(m.n);
    const node = el("div", { class: "msg " + role, "data-role": m.r },
      el("div", { class: "role" }, el("span", { text: m.r }), aside.length ? el("span", { class: "aside", text: aside.join(" ") }) : null));
    if (m.rs !== undefined) {
      node.appendChild(el("details", { class: "reasoning" }, el("summary", { text: "reasoning" }), cutText("content", m.rs, m.rsx, m.rst)));
    }
    if (m.c !== undefined) node.appendChild(cutText("content", m.c, m.cx, m.ct));
    else if (!m.tc) node.appendChild(el("div", { class: "empty-content", text: "(no content)" }));
    for (const call of m.tc || []) {
      let args = call.a || "";
      if (!call.ax) { try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (_) { /* shown as it is */ } }
      node.appendChild(el("div", { class: "toolcall", "data-tool": call.n || "" },
        el("div", { class: "tc-head" }, el("span", { class: "tc-kind", text: "tool call" }), el("span", { class: "tc-name", text: call.n || "(unnamed)" }), call.id ? el("span", { class: "tc-id", text: call.id }) : null),
        el("pre", null, args, call.ax ? el("span", { class: "cut", text: `… ${int(call.ax)} characters not shown …` }) : null, call.ax ? call.at : null)));
    }
    if (m.x) node.appendChild(el("div", { class: "extra", text: m.x }));
    return node;
  }

  function transcriptBlock(row, run) {
    const block = el("div", { class: "block" }, el("h3", { text: "Transcript" + (row.t ? ` · ${int(row.t.length)} message${row.t.length === 1 ? "" : "s"}` : "") }));
    if (row.t) {
      if (row.tp) block.appendChild(el("p", { class: "note", text: "The workflow failed before it produced a transcript: this is the prompt it was given (from result.json)." }));
      const names = new Map();
      for (const m of row.t) for (const call of m.tc || []) if (call.id) names.set(call.id, call.n);
      block.appendChild(el("div", { class: "transcript" }, row.t.map((m) => messageNode(m, names))));
    } else if (row.tz) {
      block.appendChild(el("p", { class: "note" }, `Not embedded: this run's transcripts are over the report's ${int(DATA.limits.budget_chars)}-character budget, so only failing rollouts' transcripts are in the page. `,
        row.f && row.f.includes("t") ? el("a", { href: fileHref(run.base, row.i, "trajectory.json"), target: "_blank", rel: "noopener", text: "Open trajectory.json" }) : null));
    } else {
      block.appendChild(el("p", { class: "note", text: run.no_messages ? "The run was made with --no-messages: results.jsonl holds no transcripts." : "No transcript: this rollout produced no sample." }));
    }
    return block;
  }

  function filesBlock(row, run) {
    const items = [];
    if (row.f && row.f.includes("r")) items.push(["result.json", null]);
    if (row.f && row.f.includes("t")) items.push(["trajectory.json", null]);
    if (row.f && row.f.includes("c")) items.push(["model_calls.jsonl", null]);
    for (const [path, size] of row.af || []) items.push(["artifacts/" + path, size]);
    if (!items.length) return null;
    return el("div", { class: "block" }, el("h3", { text: "Files" }),
      el("ul", { class: "files" }, items.map(([path, size]) => el("li", null,
        el("a", { class: "mono", href: fileHref(run.base, row.i, path), target: "_blank", rel: "noopener", text: path }),
        el("span", { class: "size", text: bytes(size) })))),
      row.afn ? el("p", { class: "muted", text: `${int(row.afn)} artifact files; the first ${row.af.length} are listed.` }) : null,
      el("p", { class: "muted links-note", text: linksNote(run) }));
  }

  // What the model saw: each call the rollout made through the gateway (model_calls.jsonl).
  function modelCallsBlock(row) {
    if (!row.mc && !row.u) return null;
    const block = el("div", { class: "block model-calls" }, el("h3", { text: "What the model saw" + (row.mc ? ` · ${int(row.mcn || row.mc.length)} call${(row.mcn || row.mc.length) === 1 ? "" : "s"}` : "") }));
    if (row.u) block.appendChild(el("p", { class: "sub usage", text: usageText(row.u) }));
    for (const call of row.mc || []) {
      const head = [`call ${call.n}`, call.st === 200 ? "200" : `status ${call.st}`, ms(call.ms)];
      if (call.a > 1) head.push(`${int(call.a)} attempts`);
      if (call.ca) head.push("from the cache");
      if (call.sm) head.push("streamed");
      if (call.md) head.push(call.md);
      if (call.u && isNum(call.u.total_tokens)) head.push(`${int(call.u.total_tokens)} tokens`);
      const body = el("div", { class: "transcript" });
      if (call.qn > call.q.length) body.appendChild(el("div", { class: "gap", text: `… the request's first ${int(call.qn - call.q.length)} messages not shown …` }));
      if (call.qx) body.appendChild(el("div", { class: "gap", text: `the request was ${int(call.qx)} bytes: recorded cut` }));
      for (const m of call.q) body.appendChild(messageNode(m, new Map()));
      if (call.o) body.appendChild(messageNode(call.o, new Map()));
      if (call.e) body.appendChild(el("div", { class: "error-box" }, el("div", { class: "msg-text", text: call.e })));
      for (const line of call.pa || []) body.appendChild(el("div", { class: "extra", text: line }));
      block.appendChild(el("details", { class: "model-call", "data-call": String(call.n) }, el("summary", { text: head.join(" · ") }), body));
    }
    if (row.mcn) block.appendChild(el("p", { class: "muted", text: `${int(row.mcn)} calls; the first ${row.mc.length} are shown (all are in model_calls.jsonl).` }));
    return block;
  }

  function keyValues(value) {
    const flat = value && typeof value === "object" && !Array.isArray(value) &&
      Object.values(value).every((v) => v === null || ["string", "number", "boolean"].includes(typeof v));
    if (!flat) return jsonBlock(value);
    const entries = Object.entries(value);
    if (!entries.length) return el("span", { class: "muted", text: "(empty)" });
    return el("dl", { class: "kv" }, entries.map(([k, v]) => [el("dt", { text: k }), el("dd", { text: typeof v === "string" ? v : JSON.stringify(v) })]));
  }

  function detail(row, run, into) {
    if (!row) {
      into.appendChild(el("p", { class: "note", text: "This rollout is not in this run." }));
      return;
    }
    const shortLabel = row.lb !== undefined && row.lb.length <= 60 && !row.lb.includes("\n");
    const u = row.u;
    into.appendChild(el("div", { class: "facts" },
      fact("result", outcomePill(row)),
      fact("status", el("span", { class: "mono", "data-status": row.st, text: row.st })),
      fact("reward", rewardText(row)),
      fact("passed", row.p === undefined ? "—" : el("span", { class: "outcome " + (row.p ? "pass" : "fail"), text: row.p ? "yes" : "no" })),
      shortLabel ? fact("label", el("span", { class: "mono", text: row.lb })) : null,
      fact("row", (row.rid !== undefined ? String(row.rid) + " · " : "") + `#${row.r} · line ${row.l}`),
      fact("sample", String(row.s)),
      fact("attempts", String(row.a)),
      fact("workflow · grader", ms(row.wm) + " · " + ms(row.gm)),
      u ? fact("model tokens", usageText(u)) : null,
      u && isNum(u.$) ? fact("model cost", money(u.$)) : null));
    if (row.em || row.ec || row.tb) {
      into.appendChild(el("div", { class: "block" }, el("h3", { text: "Error" + (row.es ? " · in the " + row.es : "") }),
        el("div", { class: "error-box" },
          row.ec ? el("div", { class: "cat", text: row.ec }) : null,
          el("div", { class: "msg-text", text: row.em || "" }),
          row.tb ? el("details", { open: true }, el("summary", { text: "Traceback" }), el("pre", { class: "code", text: row.tb })) : null)));
    }
    if (row.lb !== undefined && !shortLabel) into.appendChild(el("div", { class: "block" }, el("h3", { text: "Label" }), el("pre", { class: "code wrap-lines", text: row.lb })));
    into.appendChild(transcriptBlock(row, run));
    const calls = modelCallsBlock(row);
    if (calls) into.appendChild(calls);
    const files = filesBlock(row, run);
    if (files) into.appendChild(files);
    if (row.m !== undefined || row.md !== undefined) {
      into.appendChild(el("div", { class: "block pair-blocks" },
        row.m !== undefined ? el("div", null, el("h3", { text: "Metrics" }), keyValues(row.m)) : null,
        row.md !== undefined ? el("div", null, el("h3", { text: "Metadata" }), keyValues(row.md)) : null));
    }
  }

  // -- the run page --------------------------------------------------------------------------

  function runHeader(run, summary, eyebrow) {
    const state = summary.interrupted ? ["warn", "interrupted"] : summary.complete ? ["good", "complete"] : ["warn", "partial"];
    return el("header", { class: "head" },
      el("div", null,
        el("p", { class: "eyebrow", text: eyebrow }),
        el("h1", { text: run.name }),
        el("div", { class: "meta" },
          run.dataset ? el("span", { title: run.dataset }, "dataset ", el("b", { class: "mono", text: basename(run.dataset) })) : null,
          run.workflow ? el("span", null, "workflow ", el("b", { class: "mono", text: run.workflow })) : null,
          run.grader ? el("span", null, "grader ", el("b", { class: "mono", text: run.grader })) : null,
          el("span", null, "samples ", el("b", { text: String(summary.samples_per_row) })),
          el("span", null, "pass at reward ≥ ", el("b", { text: short(summary.pass_threshold) })))),
      el("div", { class: "badges" }, el("span", { class: "badge " + state[0], text: state[1] }),
        summary.errors ? el("span", { class: "badge bad", text: `${int(summary.errors)} error${summary.errors === 1 ? "" : "s"}` }) : null));
  }

  function runKpis(s) {
    const rg = s.reward_graded, ra = s.reward_all;
    const best = s.pass_at_k.length ? s.pass_at_k[s.pass_at_k.length - 1] : null;
    const planned = isNum(s.planned) && s.planned !== s.rollouts ? `of ${int(s.planned)} planned` : "finished";
    return el("div", { class: "kpis" },
      kpi("Rollouts", int(s.rollouts), planned),
      kpi("Mean reward", fix(ra.mean), `all ${int(ra.count)} scored; failures count 0`),
      kpi("Graded mean", fix(rg.mean), `std ${fix(rg.std)} · median ${fix(rg.median)} · n=${int(rg.count)}`),
      kpi("Pass rate", pct(s.pass_rate), `${int(s.passed)} passed at reward ≥ ${short(s.pass_threshold)}`),
      best ? kpi(`pass@${best.k}`, fix(best.value), `pass^${best.k} ${fix(s.pass_hat_k[s.pass_hat_k.length - 1].value)}`) : null,
      kpi("Errors", int(s.errors), `${pct(s.error_rate)} of rollouts`, s.errors ? "bad" : ""),
      kpi("Latency p50", ms(s.workflow_ms.p50), `workflow · p99 ${ms(s.workflow_ms.p99)}; grader ${ms(s.grader_ms.p50)}`),
      kpi("Wall time", seconds(s.wall_s), isNum(s.throughput_per_s) ? `${s.throughput_per_s.toFixed(1)} rollouts/s` : ""),
      usageKpis(DATA.usage));
  }

  /* Model tokens and cost, when the run's rollouts went through the gateway. */
  function usageKpis(u) {
    if (!u) return null;
    const requests = `${int(u.rq)} request${u.rq === 1 ? "" : "s"} by ${int(u.rollouts)} rollout${u.rollouts === 1 ? "" : "s"}` + (u.rt ? ` · ${int(u.rt)} retr${u.rt === 1 ? "y" : "ies"}` : "");
    return [
      el("div", { class: "card kpi", "data-kpi": "tokens" },
        el("div", { class: "label", text: "Model tokens" }),
        el("div", { class: "value", text: int(u.tt) }),
        el("div", { class: "detail", text: `${int(u.pt)} prompt · ${int(u.ct)} completion · ${requests}` })),
      isNum(u.$) ? el("div", { class: "card kpi", "data-kpi": "cost" },
        el("div", { class: "label", text: "Model cost" }),
        el("div", { class: "value", text: money(u.$) }),
        el("div", { class: "detail", text: u.rollouts ? `${money(u.$ / u.rollouts)} per rollout` : "" })) : null,
    ];
  }

  function emptyChart(text) { return el("div", { class: "empty-chart", text }); }

  function runCharts(data, controls) {
    const s = data.summary, c = data.charts;
    const reward = c.reward;
    const wide = el("div", { class: "charts two" },
      card("Reward distribution", reward ? `${int(s.reward_graded.count)} graded rollouts; click a bar to filter the table` : "",
        reward ? histogram({
          label: "reward histogram", cls: "reward-hist", edges: reward.edges, counts: reward.counts, xTitle: "reward",
          edgeLabel: (e) => short(e), edgeText: (i) => `reward ${short(reward.edges[i])}–${short(reward.edges[i + 1])}`,
          onBar: (i) => controls.rewardRange(reward.edges[i], reward.edges[i + 1], i === reward.counts.length - 1),
        }) : emptyChart("No graded rollouts.")),
      card("Latency", c.latency ? "time per rollout, workflow and grader; dashed lines mark p50, p90, p99" : "",
        c.latency ? latencyChart(c.latency, s) : emptyChart("No timings.")));
    const outcomes = el("section", { class: "card chart" },
      el("h2", { text: "Status" }), el("p", { class: "sub", text: "click a status to filter the table" }),
      c.status.length ? hbars(c.status, { label: "counts by status", fill: (n) => "fill-" + n, onPick: (n) => controls.status(n) }) : emptyChart("No rollouts."),
      el("h2", { class: "second", text: "Error categories" }),
      el("p", { class: "sub", text: c.categories.length ? "failed, timed-out and invalid rollouts; click to filter" : "no failed, timed-out or invalid rollouts" }),
      c.categories.length ? hbars(c.categories, { label: "counts by error category", fill: () => "fill-category", onPick: (n) => controls.category(n) }) : null);
    const small = el("div", { class: "charts three" }, outcomes,
      s.samples_per_row >= 2 && s.pass_at_k.length
        ? card("pass@k", `unbiased estimates from ${int(s.samples_per_row)} samples per row`, passAtK(s),
          el("div", { class: "legend" }, el("span", null, el("i", { style: "background:#4f46e5" }), "pass@k: any of k passes"),
            el("span", null, el("i", { style: "background:#f59e0b" }), "pass^k: all k pass")))
        : null,
      extraTables(data));
    return [wide, small];
  }

  function extraTables(data) {
    const s = data.summary, parts = [];
    const groups = Object.entries(s.groups || {});
    if (groups.length) {
      parts.push(card(`By ${s.group_by}`, `${int(groups.length)} groups`, el("table", { class: "mini" },
        el("thead", null, el("tr", null, el("th", { text: "group" }), el("th", { class: "r", text: "rollouts" }), el("th", { class: "r", text: "errors" }), el("th", { class: "r", text: "mean reward" }), el("th", { class: "r", text: "pass rate" }))),
        el("tbody", null, groups.map(([name, g]) => el("tr", null, el("td", { text: name }), el("td", { class: "r", text: int(g.rollouts) }), el("td", { class: "r", text: int(g.errors) }), el("td", { class: "r", text: fix(g.mean_reward) }), el("td", { class: "r", text: pct(g.pass_rate) })))))));
    }
    const m = s.model;
    if (m) {
      const g = m.gateway || {};
      const rows = [
        ["model calls", `${int(m.requests)} (${int(m.retries)} retries, ${int(m.rate_limited)} rate-limited, ${int(m.errors)} failed)`],
        ["tokens", `${int(m.total_tokens)} (${int(m.prompt_tokens)} prompt + ${int(m.completion_tokens)} completion)`],
        ["tokens per rollout", `mean ${short(m.tokens_per_rollout.mean)} · p50 ${short(m.tokens_per_rollout.p50)} · p99 ${short(m.tokens_per_rollout.p99)}`],
        ["model wait per rollout", `mean ${ms(m.wait_ms_per_rollout.mean)} · p50 ${ms(m.wait_ms_per_rollout.p50)} · p99 ${ms(m.wait_ms_per_rollout.p99)}`],
      ];
      if (isNum(m.cost)) rows.push(["cost", `$${m.cost.toFixed(4)}`]);
      if (g.cache_hits) rows.push(["model cache", `${int(g.cache_hits)} of ${int(g.calls)} calls replayed`]);
      if (isNum(g.limit_lowest) && g.limit_lowest < g.max_connections) rows.push(["calls in flight", `limit lowered to ${int(g.limit_lowest)} by 429s, ${int(g.limit_final)} at the end (of ${int(g.max_connections)})`]);
      parts.push(card("Model usage", "every call through the gateway, summed over the rollouts", el("table", { class: "mini model-usage" },
        el("tbody", null, rows.map(([k, v]) => el("tr", null, el("td", { text: k }), el("td", { class: "r", text: v })))))));
    }
    if (data.metrics.length) {
      parts.push(card("Rollout metrics", "means of the numeric metrics workflows and graders reported", el("table", { class: "mini" },
        el("thead", null, el("tr", null, el("th", { text: "metric" }), el("th", { class: "r", text: "mean" }), el("th", { class: "r", text: "rollouts" }))),
        el("tbody", null, data.metrics.map(([name, mean, n]) => el("tr", null, el("td", { class: "mono", text: name }), el("td", { class: "r", text: short(mean) }), el("td", { class: "r", text: int(n) })))))));
    }
    return parts;
  }

  /* A clipped cell of text (the full text, up to the report's cut, in its tooltip). */
  function glanceCell(text) {
    if (text === undefined) return el("span", { class: "muted", text: "—" });
    return el("div", { class: "glance-text", title: text, text });
  }

  function rowName(r) { return r.rid !== undefined ? String(r.rid) : "#" + r.r; }

  function rolloutColumns(withUsage) {
    return [
      { key: "id", label: "Rollout", cls: "id", sort: (r) => r.i, cell: (r) => r.i },
      { key: "row", label: "Row", cls: "opt", sort: (r) => r.r, cell: rowName },
      { key: "sample", label: "Sample", cls: "r opt", sort: (r) => r.s, cell: (r) => String(r.s) },
      { key: "status", label: "Result", sort: (r) => OUTCOME_ORDER.indexOf(r.o) * 10 + STATUSES.indexOf(r.st), cell: outcomePill },
      { key: "reward", label: "Reward", cls: "r", sort: (r) => r.rw, firstDir: -1, cell: (r) => rewardText(r) },
      { key: "prompt", label: "Prompt", cls: "glance", sort: (r) => r.pr, cell: (r) => glanceCell(r.pr) },
      { key: "answer", label: "Final answer", cls: "glance", sort: (r) => r.fa, cell: (r) => glanceCell(r.fa) },
      { key: "error", label: "Error", cls: "err", sort: (r) => r.ec, cell: (r) => (r.ec || r.em ? el("div", { class: "err-text" }, r.ec ? el("span", { class: "cat", text: r.ec }) : null, r.em || "") : el("span", { class: "muted", text: "—" })) },
      withUsage ? { key: "tokens", label: "Tokens", cls: "r opt", sort: (r) => (r.u ? r.u.tt : null), firstDir: -1, cell: (r) => (r.u && isNum(r.u.tt) ? int(r.u.tt) : el("span", { class: "muted", text: "—" })) } : null,
      { key: "attempts", label: "Tries", cls: "r opt", sort: (r) => r.a, firstDir: -1, cell: (r) => String(r.a) },
      { key: "wm", label: "Workflow", cls: "r opt", sort: (r) => r.wm, firstDir: -1, cell: (r) => ms(r.wm) },
      { key: "gm", label: "Grader", cls: "r opt", sort: (r) => r.gm, firstDir: -1, cell: (r) => ms(r.gm) },
    ].filter(Boolean);
  }

  /* The head of one dataset row's samples (-n): how they did together. */
  function groupHead(groups) {
    return (row, continued) => {
      const g = groups[String(row.r)];
      const parts = [`${int(g.n)} samples`, `${int(g.p)} passed`, `${int(g.f)} failed`];
      if (g.e) parts.push(`${int(g.e)} error${g.e === 1 ? "" : "s"}`);
      parts.push(`mean ${fix(g.m)}`);
      return el("div", { class: "group-head" },
        el("span", { class: "group-name" }, "Row ", el("b", { class: "mono", text: rowName(row) }), ` · line ${row.l}` + (continued ? " (continued)" : "")),
        el("span", { class: "group-stats", text: parts.join(" · ") }),
        row.pr !== undefined ? el("span", { class: "group-prompt", title: row.pr, text: row.pr }) : null);
    };
  }

  function option(value, text, count) {
    return el("option", { value, text: count === undefined ? text : `${text} (${int(count)})` });
  }

  function runPage(app) {
    const run = DATA.run, s = DATA.summary, rows = DATA.rows;
    const render = (row, body, extra) => { extra.append(outcomePill(row), isNum(row.rw) ? rewardText(row) : ""); detail(row, run, body); };
    const groups = DATA.groups || {};
    const grouped = Object.keys(groups).length > 0;
    const group = grouped ? { key: (r) => (groups[String(r.r)] ? String(r.r) : null), head: groupHead(groups), on: true, keeps: ["row"] } : null;
    const table = new Table({ columns: rolloutColumns(Boolean(DATA.usage)), rows, name: "rollouts", group, onOpen: (t, pos) => drawer.open(t, pos, render, false) });
    const groupToggle = grouped ? el("label", { class: "toggle" }, el("input", { type: "checkbox", name: "group", checked: true, onchange: (e) => { group.on = e.target.checked; table.draw(); } }), "group samples by row") : null;
    const status = el("select", { "aria-label": "status", name: "status" }, option("", "All statuses"), STATUSES.filter((x) => s.counts[x]).map((x) => option(x, x, s.counts[x])));
    const cats = Object.entries(s.error_categories);
    const category = el("select", { "aria-label": "error category", name: "category" }, option("", "All categories"), cats.map(([x, n]) => option(x, x, n)), option("-", "no error"));
    const outcome = el("select", { "aria-label": "outcome", name: "outcome" }, option("", "Pass or fail"), option("pass", "Passed", s.passed), option("fail", "Not passed"));
    const rmin = el("input", { type: "number", step: "any", placeholder: "min", "aria-label": "minimum reward", name: "rmin" });
    const rmax = el("input", { type: "number", step: "any", placeholder: "max", "aria-label": "maximum reward", name: "rmax" });
    const search = el("input", { type: "search", placeholder: "Search ids, errors, labels, transcripts…", "aria-label": "search", name: "q" });
    let rmaxInclusive = true;
    const apply = () => {
      const st = status.value, cat = category.value, out = outcome.value, q = search.value.trim().toLowerCase();
      const lo = rmin.value === "" ? null : Number(rmin.value), hi = rmax.value === "" ? null : Number(rmax.value);
      const inclusive = rmaxInclusive;
      table.setFilter((r) => {
        if (st && r.st !== st) return false;
        if (cat === "-" ? r.ec : cat && r.ec !== cat) return false;
        if (out === "pass" && r.p !== true) return false;
        if (out === "fail" && r.p !== false) return false;
        if ((lo !== null || hi !== null) && !isNum(r.rw)) return false;
        if (lo !== null && r.rw < lo) return false;
        if (hi !== null && (inclusive ? r.rw > hi : r.rw >= hi)) return false;
        return !q || haystack(r).includes(q);
      });
    };
    const typed = () => { rmaxInclusive = true; apply(); };
    for (const input of [status, category, outcome]) input.addEventListener("change", apply);
    for (const input of [rmin, rmax]) input.addEventListener("input", debounce(typed, 200));
    search.addEventListener("input", debounce(apply, 160));
    const reset = el("button", { class: "btn ghost", type: "button", text: "Reset", onclick: () => {
      status.value = category.value = outcome.value = rmin.value = rmax.value = search.value = ""; typed();
    } });
    const toolbar = el("div", { class: "toolbar" }, search, status, category, outcome,
      el("label", null, "reward", rmin, "–", rmax), groupToggle, reset);
    const tableSection = el("section", { id: "rollouts" }, el("h2", { class: "section-title" }, "Rollouts", el("span", { class: "count", text: listedCount(rows.length) })), listedNote("run"), table.element(toolbar));
    const focus = () => tableSection.scrollIntoView({ behavior: "smooth", block: "start" });
    // A click on a chart shows exactly what was clicked: it replaces the other filters (not the search).
    const only = () => { status.value = category.value = outcome.value = rmin.value = rmax.value = ""; rmaxInclusive = true; };
    const controls = {
      status: (x) => { only(); status.value = x; apply(); focus(); },
      category: (x) => { only(); category.value = x; apply(); focus(); },
      rewardRange: (lo, hi, last) => {
        only();
        rmin.value = String(Number(lo.toFixed(6))); rmax.value = String(Number(hi.toFixed(6)));
        rmaxInclusive = last; apply(); focus();
      },
    };
    app.append(el("div", { class: "wrap" },
      runHeader(run, s, "osmosis-run · run report"),
      runKpis(s),
      runCharts(DATA, controls),
      tableSection,
      footer()));
    table.refresh(false);
    followHash(table, render, false);
  }

  /* A run over the report's MAX_ROWS: its table lists some of its rollouts, and says which. */
  const listedSome = () => DATA.limits.listed < DATA.limits.rollouts;
  const listedCount = (n) => (listedSome() ? `${int(n)} of ${int(DATA.limits.rollouts)}` : int(n));

  function listedNote(kind) {
    if (!listedSome()) return null;
    const lim = DATA.limits;
    const which = kind === "compare"
      ? "the flipped ones first, then those failing in either run, then the others in row order"
      : "every one that did not pass first, then the others in row order";
    return el("p", { class: "note", "data-note": "listed", text: `This table lists ${int(lim.listed)} of the ${int(lim.rollouts)} rollouts: ${which} (a report lists at most ${int(lim.max_rows)}). The numbers and charts above count every rollout; osmosis-run show RUN ROLLOUT_ID shows any of them.` });
  }

  function footer() {
    const lim = DATA.limits;
    const transcripts = lim.over_budget
      ? `Transcripts: ${int(lim.embedded)} of ${int(lim.transcripts)} embedded (over the ${int(lim.budget_chars)}-character budget, only failing${DATA.kind === "compare" ? " and flipped" : ""} rollouts' transcripts are kept).`
      : `Transcripts: all ${int(lim.transcripts)} embedded.`;
    const links = DATA.kind === "compare"
      ? [`A: ${linksNote(DATA.a)}`, `B: ${linksNote(DATA.b)}`]
      : [linksNote(DATA.run)];
    return el("footer", null,
      el("div", null, listedSome() ? `Rollouts: ${int(lim.listed)} of ${int(lim.rollouts)} listed. ` : "", transcripts, ` Messages over ${int(lim.max_content_chars)} characters and transcripts over ${int(lim.max_messages)} messages are shortened, with a marker.`),
      links.map((text) => el("div", { class: "links-note", text })),
      el("div", null, `Generated by osmosis-run ${DATA.version} on ${new Date(DATA.generated_at * 1000).toLocaleString()}. `,
        "Keys: ", el("kbd", { text: "j" }), " / ", el("kbd", { text: "k" }), " next / previous rollout, ", el("kbd", { text: "Esc" }), " close."));
  }

  // -- the comparison page -------------------------------------------------------------------

  const KINDS = {
    pf: "pass → fail", fp: "fail → pass", pp: "both pass", ff: "both fail", na: "not scored", oa: "only in A", ob: "only in B",
  };

  function compareKpi(label, a, b, delta, opts, fmt, note) {
    return el("div", { class: "card kpi" },
      el("div", { class: "label", text: label }),
      el("div", { class: "pair" }, el("span", { class: "from", text: fmt(a) }), el("span", { class: "arrow", text: "→" }), el("span", { class: "to", text: fmt(b) })),
      el("div", { class: "detail" }, note !== undefined ? note : deltaChip(delta, 3, opts)));
  }

  const diff = (a, b) => (isNum(a) && isNum(b) ? b - a : null);

  /* Each run on its own, over all of its rollouts (paired or not) at its own pass threshold.
   * The differences that matter are the comparison's, above: these cards carry no delta of
   * their own for the means and the pass rate, so the page never shows two. */
  function runKpisSideBySide(A, B) {
    const a = A.summary, b = B.summary;
    const counts = (x, y, what) => `n = ${int(x)} → ${int(y)} ${what}`;
    return el("div", { class: "kpis", "data-section": "runs" },
      compareKpi("Mean reward", a.reward_all.mean, b.reward_all.mean, null, {}, fix, counts(a.reward_all.count, b.reward_all.count, "scored; failures count 0")),
      compareKpi("Graded mean", a.reward_graded.mean, b.reward_graded.mean, null, {}, fix, counts(a.reward_graded.count, b.reward_graded.count, "graded")),
      compareKpi("Pass rate", a.pass_rate, b.pass_rate, null, {}, pct, `at reward ≥ ${short(a.pass_threshold)} → ${short(b.pass_threshold)}`),
      compareKpi("Error rate", a.error_rate, b.error_rate, diff(a.error_rate, b.error_rate), { percent: true, lowerIsBetter: true }, pct),
      compareKpi("Workflow p50", a.workflow_ms.p50, b.workflow_ms.p50, diff(a.workflow_ms.p50, b.workflow_ms.p50), { lowerIsBetter: true, format: ms }, ms),
      compareKpi("Rollouts", a.rollouts, b.rollouts, null, {}, int, `${int(a.planned ?? a.rollouts)} → ${int(b.planned ?? b.rollouts)} planned`));
  }

  /* One metric of the comparison, as `osmosis-run compare` prints it (the text comes formatted). */
  function comparedKpi(metric, label, C) {
    const t = C.text[metric], delta = C[metric].delta;
    const cls = !isNum(delta) || Math.abs(delta) < 1e-12 ? "" : delta > 0 ? "up" : "down";
    return el("div", { class: "card kpi", "data-metric": metric },
      el("div", { class: "label", text: label }),
      el("div", { class: "pair" }, el("span", { class: "from", text: t.a }), el("span", { class: "arrow", text: "→" }), el("span", { class: "to", text: t.b })),
      el("div", { class: "detail" }, "B - A ", el("span", { class: "delta " + cls, "data-part": "delta", text: t.delta }),
        " · " + pct(C.confidence, 0) + " CI ", el("span", { "data-part": "ci", text: t.ci })));
  }

  /* What `osmosis-run compare` reports: its deltas, intervals, pairing, flips and errors. */
  function comparisonCards(C, P) {
    const n = C.counts;
    return el("div", { class: "kpis", "data-section": "comparison" },
      comparedKpi("mean", "Mean reward (failures 0)", C),
      comparedKpi("pass_rate", "Pass rate", C),
      el("div", { class: "card kpi", "data-metric": "paired" },
        el("div", { class: "label", text: "Paired rollouts" }),
        el("div", { class: "value", text: int(C.paired) }),
        el("div", { class: "detail", text: `over ${int(C.paired_rows)} rows · ${int(C.only_in_a)} only in A · ${int(C.only_in_b)} only in B · ${int(C.unscored)} unscored` })),
      kpi("Pass → fail", int(n.pass_to_fail), "regressions", n.pass_to_fail ? "bad" : ""),
      kpi("Fail → pass", int(n.fail_to_pass), "fixes"),
      kpi("New errors", int(n.new_errors), `${int(n.fixed_errors)} fixed`, n.new_errors ? "bad" : ""),
      kpi("Reward changed", int(P.improved + P.worsened), `${int(P.improved)} up · ${int(P.worsened)} down · ${int(P.scored - P.improved - P.worsened)} same`));
  }

  function comparisonNotes(C) {
    if (!C.notes.length) return null;
    return el("div", { class: "badges", "data-section": "notes" }, C.notes.map((note) => el("span", { class: "badge warn", text: "note: " + note })));
  }

  function pairDetail(A, B) {
    return (pair, body, extra) => {
      extra.append(el("span", { class: "badge " + (pair.k === "pf" ? "bad" : pair.k === "fp" ? "good" : ""), text: KINDS[pair.k] }));
      if (isNum(pair.d)) extra.append(deltaChip(pair.d, 3));
      const side = (label, run, row) => {
        const col = el("div", { class: "side", "data-side": label }, el("div", { class: "side-label", text: `${label} · ${run.name}` }));
        detail(row, run, col);
        return col;
      };
      const sides = el("div", { class: "sides" }, side("A", A, pair.A), side("B", B, pair.B));
      if (isNum(pair.fd)) markFirstDifference(sides, pair.fd);
      body.appendChild(sides);
    };
  }

  /* Highlight message ``at`` (the first that differs) in both transcripts of a pair. */
  function markFirstDifference(sides, at) {
    let first = null;
    for (const transcript of sides.querySelectorAll(".transcript")) {
      const node = transcript.children[at];
      const label = el("div", { class: "diff-label", text: `first difference · message ${at + 1}` });
      if (node) {
        node.classList.add("first-diff");
        node.insertBefore(label, node.firstChild);
        first = first || node;
      } else {
        transcript.appendChild(el("div", { class: "msg first-diff missing-msg" }, label, el("div", { class: "empty-content", text: "(no message here: this transcript ends before it)" })));
      }
    }
    if (first) requestAnimationFrame(() => first.scrollIntoView({ block: "center" }));
  }

  function pairColumns() {
    const st = (side) => (p) => outcomePill(p[side]);
    return [
      { key: "id", label: "Rollout", cls: "id", sort: (p) => p.i, cell: (p) => p.i },
      { key: "row", label: "Row", cls: "opt", sort: (p) => (p.A || p.B).r, cell: (p) => { const r = p.A || p.B; return r.rid !== undefined ? String(r.rid) : "#" + r.r; } },
      { key: "sa", label: "A", sort: (p) => (p.A ? STATUSES.indexOf(p.A.st) : null), cell: st("A") },
      { key: "ra", label: "Reward A", cls: "r", sort: (p) => (p.A ? p.A.rw : null), cell: (p) => rewardText(p.A) },
      { key: "sb", label: "B", sort: (p) => (p.B ? STATUSES.indexOf(p.B.st) : null), cell: st("B") },
      { key: "rb", label: "Reward B", cls: "r", sort: (p) => (p.B ? p.B.rw : null), cell: (p) => rewardText(p.B) },
      { key: "d", label: "Δ", cls: "r", sort: (p) => p.d, cell: (p) => (isNum(p.d) && Math.abs(p.d) > 1e-12 ? deltaChip(p.d, 3) : el("span", { class: "muted", text: isNum(p.d) ? "0" : "—" })) },
      { key: "k", label: "Change", cls: "opt", sort: (p) => p.k, cell: (p) => el("span", { class: "outcome " + (p.k === "pf" ? "fail" : p.k === "fp" ? "pass" : ""), text: KINDS[p.k] }) },
    ];
  }

  function flipList(kind, title, dotCls, pairs, render) {
    const list = pairs.filter((p) => p.k === kind);
    const cols = pairColumns().filter((c) => ["id", "sa", "ra", "sb", "rb"].includes(c.key));
    const table = new Table({ columns: cols, rows: list, pageSize: 10, sizes: [10, 25, 50], name: "flip-" + kind, empty: "None.", onOpen: (t, pos) => drawer.open(t, pos, render, true) });
    table.refresh(false);
    const head = el("div", { class: "flip-title" }, el("span", { class: "dot " + dotCls }), title, el("span", { class: "n", "data-count": list.length, text: `(${int(list.length)})` }));
    return el("div", { class: "card table-card", "data-flip": kind }, head, el("div", { class: "scroller" }, table.table), table.pager);
  }

  function comparePage(app) {
    const A = DATA.a, B = DATA.b, C = DATA.comparison, P = DATA.paired, pairs = DATA.pairs;
    const render = pairDetail(A, B);
    const table = new Table({ columns: pairColumns(), rows: pairs, name: "pairs", onOpen: (t, pos) => drawer.open(t, pos, render, true) });
    const kind = el("select", { "aria-label": "change", name: "change" }, option("", "All changes"),
      Object.entries(KINDS).filter(([k]) => P.kinds[k]).map(([k, text]) => option(k, text, P.kinds[k])),
      option("up", "Reward up", P.improved), option("down", "Reward down", P.worsened));
    const search = el("input", { type: "search", placeholder: "Search ids, errors, labels, transcripts…", "aria-label": "search", name: "q" });
    const apply = () => {
      const k = kind.value, q = search.value.trim().toLowerCase();
      table.setFilter((p) => {
        if (k === "up" ? !(p.d > 1e-12) : k === "down" ? !(p.d < -1e-12) : k && p.k !== k) return false;
        return !q || (p.A && haystack(p.A).includes(q)) || (p.B && haystack(p.B).includes(q));
      });
    };
    kind.addEventListener("change", apply);
    search.addEventListener("input", debounce(apply, 160));
    const sideMeta = (label, run) => el("div", { class: "meta" }, el("b", { text: label }),
      run.workflow ? el("span", null, "workflow ", el("b", { class: "mono", text: run.workflow })) : null,
      run.grader ? el("span", null, "grader ", el("b", { class: "mono", text: run.grader })) : null,
      run.dataset ? el("span", { title: run.dataset }, "dataset ", el("b", { class: "mono", text: basename(run.dataset) })) : null);
    const charts = el("div", { class: "charts two" },
      card("Outcome transitions", "rollouts present in both runs: outcome in A (rows) and in B (columns)", matrixChart(P.outcomes, P.matrix)),
      card("Paired reward change", P.delta_hist ? "reward in B minus reward in A, per rollout (failures count 0)" : "",
        P.delta_hist ? histogram({
          label: "reward delta histogram", cls: "delta-hist", edges: P.delta_hist.edges, counts: P.delta_hist.counts, xTitle: "Δ reward (B − A)",
          ticks: P.delta_hist.counts.map((_, i) => [i + 0.5, short((P.delta_hist.edges[i] + P.delta_hist.edges[i + 1]) / 2)]).filter((_, i) => i % 5 === 0),
          edgeText: (i) => `Δ ${short(P.delta_hist.edges[i])} to ${short(P.delta_hist.edges[i + 1])}`,
          barClass: (i) => { const mid = (P.delta_hist.counts.length - 1) / 2; return i < mid ? "delta-down" : i > mid ? "delta-up" : "delta-zero"; },
        }) : emptyChart("No rollouts scored in both runs.")));
    app.append(el("div", { class: "wrap" },
      el("header", { class: "head" }, el("div", null,
        el("p", { class: "eyebrow", text: "osmosis-run · comparison" }),
        el("h1", null, el("span", { text: A.name }), el("span", { class: "vs", text: "vs" }), el("span", { text: B.name })),
        sideMeta("A", A), sideMeta("B", B))),
      el("h2", { class: "section-title", text: "Paired by rollout id" }),
      el("div", { class: "meta", "data-section": "method" },
        el("span", { text: `a rollout passes at reward ≥ ${short(C.pass_threshold)}` }),
        el("span", { text: `${pct(C.confidence, 0)} CI: ${int(C.resamples)} bootstrap resamples of rows, seed ${C.seed}` })),
      comparisonNotes(C),
      comparisonCards(C, P),
      el("h2", { class: "section-title", text: "Each run on its own" }),
      runKpisSideBySide(A, B),
      charts,
      el("h2", { class: "section-title", text: "Flipped rollouts" }),
      el("div", { class: "flips" }, flipList("pf", "Pass → fail", "bad", pairs, render), flipList("fp", "Fail → pass", "good", pairs, render)),
      el("section", { id: "rollouts" }, el("h2", { class: "section-title" }, "All rollouts", el("span", { class: "count", text: listedCount(pairs.length) })),
        listedNote("compare"), table.element(el("div", { class: "toolbar" }, search, kind))),
      footer()));
    table.refresh(false);
    followHash(table, render, true);
  }

  // -- start ---------------------------------------------------------------------------------

  const app = document.getElementById("app");
  if (DATA.kind === "view") {
    // osmosis-run view draws its pages with this report's own code: one way to draw a run.
    window.OsmosisReport = {
      el, clear, isNum, int, fix, pct, ms, seconds, short, money, debounce, option,
      outcomePill, rewardText, kpi, card, drawer, detail, runHeader, runKpis, runCharts,
      rolloutColumns, glanceCell, rowName,
      statuses: STATUSES,
      /* Set the page's data (a run's usage totals, say) beside its constants. */
      use(data) { DATA = Object.assign({}, DATA, data); },
      /* Draw the comparison page of `payload` (what `osmosis-run compare --html` embeds). */
      comparePage(payload, into) {
        DATA = Object.assign({}, DATA, payload, { generated_at: Date.now() / 1000 });
        comparePage(into);
      },
    };
    return;
  }
  clear(app);
  drawer.init();
  if (DATA.kind === "compare") comparePage(app);
  else runPage(app);
  document.documentElement.setAttribute("data-ready", "1");
})();
