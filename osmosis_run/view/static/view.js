/* osmosis-run view: the live pages, drawn with the HTML report's own code (report.js hands it
 * over as window.OsmosisReport) from the view's JSON API (osmosis_run/view/app.py).
 *
 * The report's one safety rule holds here too: text from a run reaches the DOM only as text.
 * Every page's state is in its URL (the path, the query string for filters, sort and search,
 * #rollout=<id> for the open rollout): a URL copied shows the same thing.
 */
(function () {
  "use strict";

  const R = window.OsmosisReport;
  const { el, clear, int, fix, pct, isNum } = R;
  const ROW_HEIGHT = 38;
  const PAGE = 100;
  const POLL_MS = 1000;
  const app = document.getElementById("app");

  // -- helpers -------------------------------------------------------------------------------

  async function getJSON(url) {
    const response = await fetch(url, { headers: { accept: "application/json" } });
    if (!response.ok) {
      let message = `${response.status}`;
      try { message = (await response.json()).error || message; } catch (_) { /* not JSON */ }
      throw new Error(message);
    }
    return response.json();
  }

  const enc = encodeURIComponent;
  const params = () => new URLSearchParams(location.search);

  function setParams(values) {
    const p = params();
    for (const [k, v] of Object.entries(values)) {
      if (v === "" || v === null || v === undefined || v === false) p.delete(k);
      else p.set(k, String(v));
    }
    const query = p.toString();
    history.replaceState(null, "", location.pathname + (query ? "?" + query : "") + location.hash);
  }

  function when(seconds) {
    if (!isNum(seconds)) return "—";
    return new Date(seconds * 1000).toLocaleString();
  }

  function wall(seconds) {
    if (!isNum(seconds)) return "—";
    if (seconds < 60) return seconds.toFixed(1) + " s";
    if (seconds < 3600) return Math.floor(seconds / 60) + " m " + Math.round(seconds % 60) + " s";
    return Math.floor(seconds / 3600) + " h " + Math.round((seconds % 3600) / 60) + " m";
  }

  function stateBadge(state) {
    const cls = state === "running" ? "running" : state === "finished" ? "good" : "warn";
    return el("span", { class: "badge " + cls, "data-state": state, text: state });
  }

  function topbar(live) {
    return el("div", { class: "topbar" },
      el("a", { class: "brand", href: "/", text: "osmosis-run view" }),
      el("a", { href: "/", text: "Runs" }),
      live);
  }

  function errorPage(message) {
    clear(app).append(topbar(null), el("div", { class: "error-page" }, el("h1", { text: "Not here" }), el("p", { text: message })));
    document.documentElement.setAttribute("data-ready", "1");
  }

  // Wrap every match of `words` in the text under `root` in <mark> (text nodes only).
  function highlight(root, words) {
    const needle = (words || "").trim().toLowerCase();
    if (!needle) return 0;
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    const nodes = [];
    while (walker.nextNode()) nodes.push(walker.currentNode);
    let marked = 0;
    for (const node of nodes) {
      const text = node.nodeValue, lower = text.toLowerCase();
      let at = lower.indexOf(needle);
      if (at < 0) continue;
      const parts = document.createDocumentFragment();
      let from = 0;
      while (at >= 0) {
        parts.append(text.slice(from, at), el("mark", { text: text.slice(at, at + needle.length) }));
        marked++;
        from = at + needle.length;
        at = lower.indexOf(needle, from);
      }
      parts.append(text.slice(from));
      node.parentNode.replaceChild(parts, node);
    }
    const first = root.querySelector("mark");
    if (first) first.scrollIntoView({ block: "center" });
    return marked;
  }

  // Text files shown inline and images as images, under their links in a rollout's files.
  function previews(body) {
    for (const link of body.querySelectorAll("ul.files a")) {
      const path = link.textContent || "";
      const image = /\.(png|jpe?g|gif|webp)$/i.test(path);
      const button = el("button", { class: "btn ghost show", type: "button", text: image ? "show image" : "show" });
      const box = el("div", { class: "preview" });
      button.addEventListener("click", async () => {
        if (box.firstChild) { clear(box); button.textContent = image ? "show image" : "show"; return; }
        button.textContent = "hide";
        if (image) { box.append(el("img", { src: link.getAttribute("href"), alt: path })); return; }
        const response = await fetch(link.getAttribute("href"));
        const kind = response.headers.get("content-type") || "";
        if (!kind.startsWith("text/")) { box.append(el("p", { class: "muted", text: "Not text: open the link to download it." })); return; }
        const text = await response.text();
        box.append(el("pre", { class: "code wrap-lines", text: text.length > 200000 ? text.slice(0, 200000) + "\n… (cut; open the link for all of it)" : text }));
      });
      link.parentNode.append(button, box);
    }
  }

  // -- the runs list -------------------------------------------------------------------------

  async function runsPage() {
    const live = el("span", { class: "live on", text: "live" });
    const tbody = el("tbody");
    const count = el("span", { class: "count", text: "" });
    const pickA = el("select", { "aria-label": "baseline run", name: "a" });
    const pickB = el("select", { "aria-label": "compared run", name: "b" });
    const go = el("button", { class: "btn", type: "button", text: "Compare", onclick: () => {
      if (pickA.value && pickB.value) location.href = `/compare?a=${enc(pickA.value)}&b=${enc(pickB.value)}`;
    } });
    clear(app).append(topbar(live), el("div", { class: "wrap" },
      el("header", { class: "head" }, el("div", null, el("p", { class: "eyebrow", text: "osmosis-run · view" }), el("h1", null, "Runs ", count))),
      el("section", { class: "card" }, el("div", { class: "scroller" }, el("table", { class: "runs", "data-table": "runs" },
        el("thead", null, el("tr", null, ["Run", "Dataset", "Status", "Rollouts", "Mean reward", "Pass rate", "Errors", "Started", "Wall"].map((h, i) => el("th", { class: i >= 3 && i <= 6 ? "r" : null, text: h })))),
        tbody))),
      el("section", { class: "card" }, el("h2", { text: "Compare two runs" }),
        el("div", { class: "pick" }, el("label", null, "baseline ", pickA), el("label", null, "against ", pickB), go))));
    let shown = "";
    async function draw() {
      let data;
      try { data = await getJSON("/api/runs"); live.className = "live on"; live.textContent = "live"; } catch (e) { live.className = "live"; live.textContent = "disconnected"; return; }
      const runs = data.runs;
      const signature = JSON.stringify(runs);
      if (signature === shown) return;
      shown = signature;
      count.textContent = int(runs.length);
      clear(tbody);
      for (const run of runs) {
        const done = isNum(run.planned) ? `${int(run.rollouts)} of ${int(run.planned)}` : int(run.rollouts);
        tbody.append(el("tr", { "data-run": run.name, tabindex: 0, onclick: () => { location.href = "/runs/" + enc(run.name); } },
          el("td", null, el("a", { href: "/runs/" + enc(run.name), class: "mono", text: run.name })),
          el("td", { class: "mono", title: run.dataset || "", text: run.dataset ? String(run.dataset).split("/").pop() : "—" }),
          el("td", null, stateBadge(run.state)),
          el("td", { class: "r", "data-field": "rollouts", text: done }),
          el("td", { class: "r", text: fix(run.mean_reward) }),
          el("td", { class: "r", text: pct(run.pass_rate) }),
          el("td", { class: "r", text: int(run.errors) }),
          el("td", { text: when(run.started_at) }),
          el("td", { text: wall(run.wall_s) })));
      }
      if (!runs.length) tbody.append(el("tr", null, el("td", { colspan: 9, class: "muted", text: "No run directories here yet." })));
      for (const select of [pickA, pickB]) {
        const value = select.value;
        clear(select).append(...runs.map((run) => el("option", { value: run.name, text: run.name })));
        if (value) select.value = value;
      }
      if (!pickB.value || pickB.value === pickA.value) pickB.selectedIndex = Math.min(1, runs.length - 1);
      document.documentElement.setAttribute("data-ready", "1");
    }
    await draw();
    setInterval(draw, 2 * POLL_MS);
  }

  // -- a run ---------------------------------------------------------------------------------

  // The server's sorts, by the report's column keys.
  const SORT_OF = { id: "id", row: "row", reward: "reward", wm: "duration", gm: "duration" };

  class RemoteTable {
    constructor(name, columns, onOpen) {
      Object.assign(this, { name, columns, onOpen });
      this.query = {};
      this.total = 0;
      this.version = -1;
      this.pages = new Map();  // offset -> rows, for this query and version
      this.current = null;
      this.head = el("tr");
      this.body = el("tbody");
      this.spacer = el("div", { class: "spacer" });
      this.table = el("table", { class: "rollouts", "data-table": "rollouts" }, el("thead", null, this.head), this.body);
      this.scroller = el("div", { class: "vscroll" }, this.spacer, this.table);
      this.scroller.addEventListener("scroll", () => this.draw());
      this.info = el("span", { class: "info" });
      // What the drawer reads (report.js's Table does the same): rows by position.
      const table = this;
      this.rows = new Proxy({}, { get: (_, key) => table.rowAt(Number(key)) });
      this.view = new Proxy({}, { get: (_, key) => (key === "length" ? table.total : Number(key)) });
      this.page = 0;
      this.pageSize = Infinity;
      this.drawHead();
    }
    drawHead() {
      clear(this.head);
      const sort = this.query.sort || "row", desc = this.query.desc === "1";
      for (const col of this.columns) {
        const server = SORT_OF[col.key];
        const sorted = server && server === sort && (col.key !== "gm" || sort !== "duration");
        const th = el("th", { class: (server ? "sortable " : "") + (col.cls || ""), scope: "col", "data-col": col.key, "aria-sort": sorted ? (desc ? "descending" : "ascending") : null },
          col.label, sorted ? el("span", { class: "arrow", text: desc ? "▼" : "▲" }) : null);
        if (server) th.addEventListener("click", () => this.sortBy(server, col));
        this.head.append(th);
      }
    }
    sortBy(server, col) {
      const same = (this.query.sort || "row") === server;
      const desc = same ? this.query.desc !== "1" : col.firstDir === -1;
      this.onSort(server, desc);
    }
    rowAt(pos) {
      const page = this.pages.get(Math.floor(pos / PAGE) * PAGE);
      return page ? page[pos % PAGE] : undefined;
    }
    url(offset) {
      const p = new URLSearchParams(this.query);
      p.set("offset", offset); p.set("limit", PAGE);
      return `/api/runs/${enc(this.name)}/rollouts?` + p.toString();
    }
    async load(offset) {
      if (this.pages.has(offset)) return this.pages.get(offset);
      const key = JSON.stringify(this.query);
      const data = await getJSON(this.url(offset));
      if (key !== JSON.stringify(this.query)) return null;  // the query changed meanwhile
      if (data.version !== this.version) { this.pages.clear(); this.version = data.version; }
      this.total = data.total;
      this.pages.set(offset, data.rows);
      return data.rows;
    }
    async ensure(pos) {
      await this.load(Math.floor(pos / PAGE) * PAGE);
      return this.rowAt(pos);
    }
    async reset(query) {
      this.query = query;
      this.pages.clear();
      this.drawHead();
      await this.load(0);
      this.scroller.scrollTop = 0;
      this.draw();
    }
    async reload() {  // the run grew: the same query again, where the reader is
      const first = Math.floor(this.scroller.scrollTop / ROW_HEIGHT);
      this.pages.clear();
      await this.load(Math.floor(first / PAGE) * PAGE);
      this.draw();
    }
    draw() {
      const height = this.scroller.clientHeight || 560;
      const first = Math.max(0, Math.floor(this.scroller.scrollTop / ROW_HEIGHT) - 5);
      const last = Math.min(this.total, first + Math.ceil(height / ROW_HEIGHT) + 10);
      this.spacer.style.height = (this.total + 1) * ROW_HEIGHT + "px";
      this.table.style.top = first * ROW_HEIGHT + "px";
      clear(this.body);
      const missing = new Set();
      for (let pos = first; pos < last; pos++) {
        const row = this.rowAt(pos);
        if (!row) {
          missing.add(Math.floor(pos / PAGE) * PAGE);
          this.body.append(el("tr", { class: "loading" }, el("td", { colspan: this.columns.length, text: "…" })));
          continue;
        }
        this.body.append(el("tr", { tabindex: 0, "data-id": row.i, class: this.current && this.current.i === row.i ? "current" : null,
          onclick: () => this.onOpen(this, pos), onkeydown: (e) => { if (e.key === "Enter") this.onOpen(this, pos); } },
        this.columns.map((col) => el("td", { class: col.cls || null }, col.cell(row)))));
      }
      if (!this.total) this.body.append(el("tr", { class: "empty-row" }, el("td", { colspan: this.columns.length, text: "No rollouts match." })));
      this.info.textContent = `${int(this.total)} rollout${this.total === 1 ? "" : "s"}`;
      for (const offset of missing) this.load(offset).then((rows) => { if (rows) this.draw(); });
    }
    go() { /* one scrolling list: no pages */ }
  }

  async function runPage(name) {
    let data;
    try { data = await getJSON(`/api/runs/${enc(name)}`); } catch (e) { errorPage(`No run ${name} here (${e.message}).`); return; }
    const live = el("span", { class: "live on", text: "live" });
    const p = params();
    const runInfo = data.run;
    R.drawer.init();
    // The drawer: the rollout's detail comes from the server when it opens.
    const render = (row, body, extra) => {
      extra.append(R.outcomePill(row), isNum(row.rw) ? R.rewardText(row) : "");
      body.append(el("p", { class: "muted", text: "loading…" }));
      getJSON(`/api/runs/${enc(name)}/rollouts/${enc(row.i)}`).then((full) => {
        clear(body);
        R.detail(full, runInfo, body);
        previews(body);
        highlight(body, params().get("q"));
        body.setAttribute("data-loaded", row.i);
      }).catch((e) => { clear(body).append(el("p", { class: "note", text: `Cannot load ${row.i}: ${e.message}` })); });
    };
    const open = (t, pos) => { t.ensure(pos).then((row) => { if (row) R.drawer.open(t, pos, render, false); }); };
    const step = R.drawer.step.bind(R.drawer);
    R.drawer.step = (delta) => {
      const t = R.drawer.table, pos = R.drawer.pos + delta;
      if (t && t.ensure && pos >= 0 && pos < t.view.length) t.ensure(pos).then(() => step(delta));
      else step(delta);
    };
    const table = new RemoteTable(name, R.rolloutColumns(Boolean(data.usage)), open);
    table.onSort = (sort, desc) => { setParams({ sort: sort === "row" ? "" : sort, desc: desc ? "1" : "" }); apply(); };

    // The filters: their values are the URL's.
    const s = data.summary;
    const status = el("select", { "aria-label": "status", name: "status" }, R.option("", "All statuses"));
    const category = el("select", { "aria-label": "error category", name: "category" }, R.option("", "All categories"));
    const outcome = el("select", { "aria-label": "outcome", name: "outcome" }, R.option("", "Pass or fail"), R.option("pass", "Passed"), R.option("fail", "Not passed"));
    const rmin = el("input", { type: "number", step: "any", placeholder: "min", "aria-label": "minimum reward", name: "rmin" });
    const rmax = el("input", { type: "number", step: "any", placeholder: "max", "aria-label": "maximum reward", name: "rmax" });
    const sample = el("input", { type: "number", min: "0", step: "1", placeholder: "sample", "aria-label": "sample index", name: "sample", class: "narrow" });
    const metaKey = el("select", { "aria-label": "metadata field", name: "meta-key" }, R.option("", "metadata…"), data.metadata_keys.map((k) => R.option(k, k)));
    const metaValue = el("input", { type: "text", placeholder: "value", "aria-label": "metadata value", name: "meta-value" });
    const words = el("input", { type: "search", placeholder: "Search transcripts and errors (Enter)", "aria-label": "search", name: "q" });
    const reset = el("button", { class: "btn ghost", type: "button", text: "Reset", onclick: () => {
      for (const input of [status, category, outcome, rmin, rmax, sample, metaKey, metaValue]) input.value = "";
      setParams({ sort: "", desc: "" }); apply();
    } });
    const fillSelects = (summary) => {
      const keep = [status.value, category.value];
      clear(status).append(R.option("", "All statuses"), ...R.statuses.filter((x) => summary.counts[x]).map((x) => R.option(x, x, summary.counts[x])));
      clear(category).append(R.option("", "All categories"), ...Object.entries(summary.error_categories).map(([x, n]) => R.option(x, x, n)), R.option("-", "no error"));
      [status.value, category.value] = keep;
    };
    fillSelects(s);
    status.value = p.get("status") || ""; category.value = p.get("category") || ""; outcome.value = p.get("outcome") || "";
    rmin.value = p.get("rmin") || ""; rmax.value = p.get("rmax") || ""; sample.value = p.get("sample") || "";
    const meta = (p.get("meta") || "").split("=");
    metaKey.value = meta[0] || ""; metaValue.value = meta.slice(1).join("=");
    words.value = p.get("q") || "";

    function queryOf() {
      const q = {};
      const values = { status: status.value, category: category.value, outcome: outcome.value, rmin: rmin.value, rmax: rmax.value, sample: sample.value,
        meta: metaKey.value ? metaKey.value + "=" + metaValue.value : "" };
      const current = params();
      values.sort = current.get("sort") || ""; values.desc = current.get("desc") || "";
      for (const [k, v] of Object.entries(values)) if (v !== "") q[k] = v;
      return q;
    }
    function apply() {
      const q = queryOf();
      setParams({ status: q.status, category: q.category, outcome: q.outcome, rmin: q.rmin, rmax: q.rmax, sample: q.sample, meta: q.meta });
      return table.reset(q);
    }
    for (const input of [status, category, outcome, metaKey]) input.addEventListener("change", apply);
    for (const input of [rmin, rmax, sample, metaValue]) input.addEventListener("input", R.debounce(apply, 250));

    // Search: hits stream from the server as they are found.
    const hitsList = el("ol", { class: "hits", "aria-label": "search hits" });
    const hitsInfo = el("span", { class: "hits-info muted" });
    const hitsTable = { rows: [], view: [], page: 0, pageSize: Infinity, current: null, go() {}, draw() {} };
    let searching = null;
    async function runSearch() {
      const q = words.value.trim();
      setParams({ q });
      if (searching) searching.abort();
      clear(hitsList); hitsTable.rows = []; hitsTable.view = [];
      hitsInfo.textContent = "";
      if (!q) return;
      const controller = new AbortController();
      searching = controller;
      hitsInfo.textContent = "searching…";
      hitsInfo.setAttribute("data-state", "searching");
      try {
        const response = await fetch(`/api/runs/${enc(name)}/search?q=${enc(q)}`, { signal: controller.signal });
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffered = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffered += decoder.decode(value, { stream: true });
          let cut;
          while ((cut = buffered.indexOf("\n")) >= 0) {
            const line = buffered.slice(0, cut); buffered = buffered.slice(cut + 1);
            if (!line) continue;
            const hit = JSON.parse(line);
            if (hit.done) {
              hitsInfo.textContent = `${int(hit.hits)} rollout${hit.hits === 1 ? "" : "s"} match${hit.hits === 1 ? "es" : ""} (of ${int(hit.searched)} searched)` + (hit.capped ? "; the first ones shown" : "");
              hitsInfo.setAttribute("data-state", "done");
              continue;
            }
            const pos = hitsTable.rows.length;
            hitsTable.rows.push({ i: hit.i }); hitsTable.view.push(pos);
            const text = hit.s;
            hitsList.append(el("li", { "data-id": hit.i, tabindex: 0, onclick: () => R.drawer.open(hitsTable, pos, render, false) },
              el("span", { class: "hit-id", text: hit.i }),
              el("span", { class: "hit-text" }, text.slice(0, hit.m[0]), el("mark", { text: text.slice(hit.m[0], hit.m[1]) }), text.slice(hit.m[1]))));
            if (hitsInfo.getAttribute("data-state") === "searching") hitsInfo.textContent = `${int(hitsTable.rows.length)} found, searching…`;
          }
        }
      } catch (e) {
        if (e.name !== "AbortError") hitsInfo.textContent = `search failed: ${e.message}`;
      }
    }
    words.addEventListener("keydown", (e) => { if (e.key === "Enter") runSearch(); });
    words.addEventListener("search", runSearch);

    // Compare with another run: this one is B, the one picked the baseline A.
    const baseline = el("select", { "aria-label": "compare with", name: "baseline" }, R.option("", "Compare with…"));
    baseline.addEventListener("change", () => { if (baseline.value) location.href = `/compare?a=${enc(baseline.value)}&b=${enc(name)}`; });
    getJSON("/api/runs").then((all) => baseline.append(...all.runs.filter((r) => r.name !== name).map((r) => R.option(r.name, r.name))));

    const header = el("div");
    const kpis = el("div");
    const charts = el("div");
    const controls = {
      status: (x) => { status.value = x; category.value = outcome.value = ""; apply(); focus(); },
      category: (x) => { category.value = x; status.value = outcome.value = ""; apply(); focus(); },
      rewardRange: (lo, hi) => { rmin.value = String(Number(lo.toFixed(6))); rmax.value = String(Number(hi.toFixed(6))); apply(); focus(); },
    };
    const toolbar = el("div", { class: "toolbar" }, words, status, category, outcome,
      el("label", null, "reward", rmin, "–", rmax), sample, metaKey, metaValue, reset);
    const tableSection = el("section", { id: "rollouts" },
      el("h2", { class: "section-title" }, "Rollouts", el("span", { class: "count", text: "" })),
      el("div", { class: "card table-card" }, toolbar,
        el("div", { class: "table-info" }, table.info, hitsInfo), hitsList, table.scroller));
    const focus = () => tableSection.scrollIntoView({ behavior: "smooth", block: "start" });
    function drawRun(d) {
      R.use({ usage: d.usage });
      clear(header).append(R.runHeader(d.run, d.summary, "osmosis-run · live view"));
      const badges = header.querySelector(".badges");
      if (badges) badges.prepend(stateBadge(d.overview.state));
      clear(kpis).append(R.runKpis(d.summary));
      clear(charts).append(...R.runCharts({ summary: d.summary, charts: d.charts, metrics: d.metrics }, controls));
      tableSection.querySelector(".count").textContent = int(d.summary.rollouts);
      fillSelects(d.summary);
      document.title = `${d.run.name} · osmosis-run view`;
    }
    clear(app).append(topbar(live), el("div", { class: "wrap" }, header, el("div", { class: "pick compare-with" }, el("label", null, "compare with a baseline ", baseline)), kpis, charts, tableSection));
    drawRun(data);
    await apply();
    if (words.value) runSearch();
    // #rollout=<id>: open it where it is in the table this URL shows.
    const opened = /^#rollout=(.*)$/.exec(location.hash);
    if (opened) {
      const id = decodeURIComponent(opened[1]);
      const at = await getJSON(`/api/runs/${enc(name)}/position?id=${enc(id)}&` + new URLSearchParams(table.query).toString());
      if (at.position !== null) open(table, at.position);
      else R.drawer.open({ rows: [{ i: id }], view: [0], page: 0, pageSize: Infinity, current: null, go() {}, draw() {} }, 0, render, false);
    }
    document.documentElement.setAttribute("data-ready", "1");
    // Live: the run's version moves when rollouts are added.
    let version = data.version;
    setInterval(async () => {
      let d;
      try { d = await getJSON(`/api/runs/${enc(name)}`); live.className = "live on"; live.textContent = "live"; } catch (e) { live.className = "live"; live.textContent = "disconnected"; return; }
      if (d.version === version && d.overview.state === data.overview.state) return;
      version = d.version; data = d;
      drawRun(d);
      await table.reload();
    }, POLL_MS);
  }

  // -- two runs ------------------------------------------------------------------------------

  async function comparePage() {
    const p = params();
    const a = p.get("a") || "", b = p.get("b") || "";
    clear(app).append(topbar(null), el("div", { class: "wrap" }, el("p", { class: "muted", text: `Comparing ${a} and ${b}…` })));
    let payload;
    try { payload = await getJSON(`/api/compare?a=${enc(a)}&b=${enc(b)}`); } catch (e) { errorPage(`Cannot compare ${a} and ${b}: ${e.message}`); return; }
    R.drawer.init();
    clear(app).append(topbar(null));
    R.comparePage(payload, app);
    document.title = `${a} vs ${b} · osmosis-run view`;
    // The pairs' filters in the URL: change (pf = pass -> fail, the regressions) and search.
    const kind = app.querySelector("select[name=change]"), search = app.querySelector("input[type=search]");
    if (kind) {
      if (p.get("change")) { kind.value = p.get("change"); kind.dispatchEvent(new Event("change")); }
      kind.addEventListener("change", () => setParams({ change: kind.value }));
    }
    if (search) {
      if (p.get("q")) { search.value = p.get("q"); search.dispatchEvent(new Event("input")); }
      search.addEventListener("input", R.debounce(() => setParams({ q: search.value }), 300));
    }
    document.documentElement.setAttribute("data-ready", "1");
  }

  // -- start ---------------------------------------------------------------------------------

  const path = location.pathname;
  const run = /^\/runs\/([^/]+)\/?$/.exec(path);
  if (run) runPage(decodeURIComponent(run[1]));
  else if (path === "/compare") comparePage();
  else runsPage();
})();
