// Study dashboard: refresh the numbers, the uPlot charts, the nearest-neighbour column, the learned
// graph and the raters table from the researcher API, without reloading the page.
(function () {
  "use strict";
  const root = document.getElementById("dashboard");
  if (!root) return;
  const statsUrl = root.dataset.statsUrl;
  const SVG = "http://www.w3.org/2000/svg";
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  document.querySelectorAll(".swatch[data-color]").forEach((el) => (el.style.backgroundColor = el.dataset.color));
  // the Learning tab lists one page of the items (rows carry their item's index); every item's id
  // comes once from the items list, so neighbours off the page are named too
  const rows = Array.from(document.querySelectorAll("#items tbody tr"));
  const names = [];
  const itemCells = [];
  rows.forEach((r) => {
    const i = Number(r.dataset.index);
    names[i] = r.children[1].textContent.trim();
    itemCells[i] = r.children[1];
  });
  const itemsTable = document.getElementById("items");
  if (itemsTable && itemsTable.dataset.namesUrl) {
    fetch(itemsTable.dataset.namesUrl, { credentials: "same-origin" })
      .then((response) => (response.ok ? response.json() : { ids: [] }))
      .then((doc) => (doc.ids || []).forEach((id, i) => { if (names[i] === undefined) names[i] = id; }))
      .catch(() => {});
  }

  // ------------------------------------------------------------------ confirmations (no inline handlers: CSP)
  document.querySelectorAll("form[data-confirm]").forEach((form) => {
    form.addEventListener("submit", (ev) => { if (!window.confirm(form.dataset.confirm)) ev.preventDefault(); });
  });

  // ------------------------------------------------------------------ the data package, built by a worker
  // The button asks for a build (joined if one runs), the bar shows the answers written, then the link.
  document.querySelectorAll("#package .package").forEach((box) => {
    const bar = box.querySelector("progress"), message = box.querySelector(".package-message");
    const link = box.querySelector("a.package-download"), button = box.querySelector("button");
    let timer = null;
    function show(status) {
      box.dataset.state = status.state;
      const active = status.state === "queued" || status.state === "running";
      bar.hidden = !active;
      bar.max = Math.max(1, status.total);
      bar.value = status.written;
      message.textContent = status.message;
      message.classList.toggle("failure", status.state === "failed");
      link.hidden = status.state !== "finished" && status.state !== "stale";
      button.disabled = active;
      button.textContent = button.textContent.replace(/^(Rebuild|Build)/,
        ["stale", "failed", "dropped"].includes(status.state) ? "Rebuild" : "Build");
      clearTimeout(timer);
      if (active) timer = setTimeout(poll, 1000);
    }
    async function poll() {
      try {
        const response = await fetch(box.dataset.statusUrl, { credentials: "same-origin" });
        if (response.ok) show(await response.json());
        else timer = setTimeout(poll, 3000);
      } catch (e) { timer = setTimeout(poll, 3000); }
    }
    box.querySelector("form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      button.disabled = true;
      try {
        const response = await fetch(box.dataset.buildUrl, { method: "POST", credentials: "same-origin",
          headers: { "X-CSRFToken": csrf } });
        const body = await response.json();
        if (response.ok) show(body);
        else { message.textContent = "The build could not be started: " + ((body.error && body.error.message) || response.status); button.disabled = false; }
      } catch (e) { message.textContent = "The server could not be reached; try again."; button.disabled = false; }
    });
    if (box.dataset.state === "queued" || box.dataset.state === "running") poll();
  });

  // ------------------------------------------------------------------ copy buttons
  document.querySelectorAll("button.copy").forEach((button) => {
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(button.dataset.copy);
        button.textContent = "Copied";
      } catch (e) {
        window.prompt("Copy this link:", button.dataset.copy);
      }
      setTimeout(() => (button.textContent = "Copy"), 1500);
    });
  });

  // ------------------------------------------------------------------ charts (uPlot)
  const charts = {};
  function chart(id, series, data, opts) {
    const el = typeof id === "string" ? document.getElementById(id) : id;
    if (!el || typeof uPlot === "undefined") return;
    const key = el.id || el.dataset.key || (el.dataset.key = "k" + Math.random());
    const width = Math.max(240, el.clientWidth || 300);
    const timeAxis = !(opts && opts.scales && opts.scales.x && opts.scales.x.time === false);
    if (timeAxis && data[0].length === 1) {
      // uPlot spreads a lone time point over years: give it an empty minute before
      data = [[data[0][0] - 60, data[0][0]]].concat(data.slice(1).map((ys) => [null].concat(ys)));
    }
    if (charts[key] && charts[key].series.length === series.length + 1) {
      charts[key].setData(data);
      return;
    }
    if (charts[key]) charts[key].destroy();
    charts[key] = new uPlot(Object.assign({
      width: width, height: 160, legend: { show: true },
      scales: { x: { time: true, range: atLeastAMinute }, y: yFromZero },
      series: [{}].concat(series),
    }, opts || {}), data, el);
  }
  const bars = () => uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.8, 60] }) : undefined;
  const barSeries = (label, stroke) => ({ label: label, stroke: stroke, fill: stroke + "88", paths: bars(), points: { show: false } });
  // A series without a scale of its own must not carry `scale: undefined` (it would leave the "y"
  // axis without a series, drawn without numbers).
  const lineSeries = (label, stroke, scale) =>
    Object.assign({ label: label, stroke: stroke, width: 2 }, scale ? { scale: scale } : {});
  // a time axis spans at least a minute (one point alone would be spread over years)
  const atLeastAMinute = (u, lo, hi) => (lo === null || hi === null ? [0, 60]
    : hi - lo < 60 ? [hi - 60, hi + 1] : [lo, hi]);
  // y from 0 and at least to 1, so a flat or empty curve still gets numbered ticks
  const yFromZero = { range: (u, lo, hi) => [Math.min(0, lo || 0), Math.max(1, hi || 0)] };
  const categoryOpts = (xLabel) => ({ scales: { x: { time: false }, y: yFromZero }, axes: [{ label: xLabel }, {}] });

  const history = { t: [], fallback: [], pool: [] };
  const roundHistory = {};

  function drawPerMinute(perMinute) {
    const end = Math.max(perMinute.length ? perMinute[perMinute.length - 1][0] : 0, Math.floor(Date.now() / 60000) * 60);
    const start = Math.min(perMinute.length ? perMinute[0][0] : end, end - 29 * 60);
    const counts = new Map(perMinute.map(([t, c]) => [t, c]));
    const xs = [], ys = [], cum = [];
    let total = 0;
    for (let t = start; t <= end; t += 60) {
      xs.push(t); ys.push(counts.get(t) || 0);
      total += counts.get(t) || 0; cum.push(total);
    }
    chart("plot-per-minute", [barSeries("answers / min", "#2857c5")], [xs, ys]);
    chart("plot-cumulative", [lineSeries("answers", "#2857c5")], [xs, cum]);
  }

  function drawHistogram(id, hist, label, scale) {
    if (!hist || !hist.counts || !hist.counts.length) return;
    const xs = hist.edges.slice(0, -1).map((e) => e / (scale || 1));
    chart(id, [barSeries(label, "#4a8f5b")], [xs, hist.counts], categoryOpts(""));
  }

  function drawAlgorithms(stats, now) {
    (stats.algorithms || []).forEach((alg) => {
      const fig = document.querySelector('.alg-plot[data-label="' + alg.label + '"]');
      if (!fig) return;
      const plot = fig.querySelector(".progress-plot");
      const p = alg.progress || {};
      if (p.nodes_built) {
        const trees = p.nodes_built.map((_, i) => i);
        const depth = p.depth || p.nodes_built.map(() => 0);
        chart(plot, [barSeries("built", "#2857c5"), barSeries("pending", "#d98b2b"),
          Object.assign(lineSeries("depth", "#2e8540", "depth"), { points: { show: true, size: 6 } })],
        [trees, p.nodes_built, p.nodes_pending, depth],
        { scales: { x: { time: false }, depth: { range: (u, lo, hi) => [0, Math.max(1, hi)] } },
          axes: [{ label: "tree" }, { label: "nodes" }, { scale: "depth", side: 1, label: "depth", grid: { show: false } }] });
      } else if (alg.rounds && alg.progress) {  // a planner working in rounds (its entry says so)
        const h = roundHistory[alg.label] || (roundHistory[alg.label] = { t: [], c: [], o: [], w: [] });
        h.t.push(now); h.c.push(p.rounds_certified); h.o.push(p.rounds_open); h.w.push(p.rounds_waiting);
        chart(plot, [lineSeries("certified", "#2e8540"), lineSeries("open", "#2857c5"), lineSeries("waiting", "#999999")],
          [h.t, h.c, h.o, h.w]);
        const share = fig.querySelector(".certified-share");
        if (share && alg.share_certified !== null && alg.share_certified !== undefined) {
          share.textContent = (100 * alg.share_certified).toFixed(0) + "%";
        }
      } else {
        const h = roundHistory[alg.label] || (roundHistory[alg.label] = { t: [], a: [] });
        h.t.push(now); h.a.push(alg.answers);
        chart(plot, [lineSeries("answers", "#2857c5")], [h.t, h.a]);
      }
      drawError(fig, alg.truth_error);
      drawHeldout(fig, alg.heldout);
    });
  }

  // Known truth (simulated studies): share of items whose learned nearest neighbour is wrong,
  // against the answers the algorithm had applied, as the server recorded it.
  // The budget plan's expected accuracy (exact nearest neighbour, mean over runs) per learner against
  // answers per item, with where the study is now: drawn once from the table's data.
  function drawPlan() {
    const fig = document.getElementById("plan-plot");
    if (!fig || !fig.dataset.plan) return;
    const plan = JSON.parse(fig.dataset.plan);
    const colours = ["#2857c5", "#c0392b", "#2e8540", "#d98b2b", "#7b4fb5", "#555555", "#1b9aaa", "#a0522d"];
    const names = Object.keys(plan.algorithms);
    const series = names.map((name, i) => lineSeries(name + " (plan)", colours[i % colours.length], "share"));
    const data = [plan.budgets].concat(names.map((name) => plan.algorithms[name].exact.mean));
    chart(fig.querySelector(".plot"), series, data,
      { height: 320, scales: { x: { time: false, distr: 3 }, share: { range: [0, 1] } },
        axes: [{ label: "answers per item (log scale)", labelSize: 22, size: 50 },
          { scale: "share", label: "expected exact accuracy", labelSize: 22, size: 56 }] });
  }

  function drawError(fig, error) {
    const plot = fig.querySelector(".error-plot");
    if (!plot || !error) return;
    const now = fig.querySelector(".error-now");
    if (now) now.textContent = (100 * error.share_wrong).toFixed(0) + "% wrong after " + error.answers_applied + " answers";
    const curve = error.curve.slice().sort((a, b) => a[0] - b[0]);
    if (!curve.length) return;
    chart(plot, [lineSeries("share wrong", "#c0392b", "share")],
      [curve.map((p) => p[0]), curve.map((p) => p[1])],
      { scales: { x: { time: false }, share: { range: [0, 1] } },
        axes: [{ label: "answers applied" }, { scale: "share", label: "share wrong" }] });
  }

  // Held-out questions (never learned from): the learner's current model scored on their answers, against
  // the answers it had applied, with the ceiling the raters' agreement with themselves on repeats sets.
  function drawHeldout(fig, held) {
    const plot = fig.querySelector(".heldout-plot");
    if (!plot || !held) return;
    const now = fig.querySelector(".heldout-now");
    if (now) now.textContent = held.score.toFixed(2) + " on " + held.answers_scored + " held-out answers";
    const ceiling = fig.querySelector(".heldout-ceiling");
    if (ceiling && held.ceiling !== null && held.ceiling !== undefined) {
      ceiling.textContent = held.ceiling.toFixed(2) + " (" + held.repeats + " repeated questions, " +
        (100 * held.self_agreement).toFixed(0) + "% answered alike)";
    }
    const curve = held.curve.slice().sort((a, b) => a[0] - b[0]);
    if (!curve.length) return;
    const label = held.metric === "correlation" ? "correlation" : "agreement";
    const series = [lineSeries("held-out " + label, "#2e8540", "score")];
    const data = [curve.map((p) => p[0]), curve.map((p) => p[1])];
    if (held.ceiling !== null && held.ceiling !== undefined) {
      series.push(Object.assign(lineSeries("ceiling (repeats)", "#999999", "score"), { dash: [6, 4] }));
      data.push(curve.map(() => held.ceiling));
    }
    chart(plot, series, data,
      { scales: { x: { time: false }, score: { range: [held.metric === "correlation" ? -0.2 : 0, 1] } },
        axes: [{ label: "answers applied" }, { scale: "score", label: label }] });
  }

  // Each section of the page (Overview, Learning, ...) is its own page: write only what this one shows.
  function setText(id, text) {
    const node = document.getElementById(id);
    if (node) node.textContent = text;
  }

  function update(stats) {
    const now = Date.now() / 1000;
    setText("n-answers", stats.answers);
    setText("n-raters", stats.raters);
    setText("n-active", stats.active_raters);
    setText("n-pool", stats.pool_depth);
    setText("status", stats.study.status);
    setText("fallback-rate", (100 * stats.fallback_rate).toFixed(1) + "%");
    setText("glance-fallback", (100 * stats.fallback_rate).toFixed(1) + "%");
    setText("glance-active", stats.active_raters);
    setText("glance-answers", stats.answers);
    setText("glance-per-item", stats.answers_per_item.toFixed(1));  // the learners' answers only
    if (stats.split) setText("glance-split", stats.split.sentence);  // the split the pooled learner set
    setText("health-state", stats.state);
    const failure = document.getElementById("learning-failure");
    if (failure && stats.learning) {  // learning stopped or behind: said at the top of the Overview
      failure.textContent = stats.learning.problem;
      failure.hidden = !stats.learning.problem;
    }
    (stats.algorithms || []).forEach((alg) => {
      const cell = document.querySelector('#glance-quality li[data-label="' + alg.label + '"] .quality');
      if (!cell) return;
      // before any answer is applied nothing is learned: its answers, not "0% right"
      if (alg.truth_error && alg.truth_error.answers_applied) cell.textContent = (100 * (1 - alg.truth_error.share_wrong)).toFixed(0) + "% right (known truth)";
      else if (alg.share_certified !== null && alg.share_certified !== undefined) cell.textContent = (100 * alg.share_certified).toFixed(0) + "% of items certified";
      else cell.textContent = alg.answers + " answers";
    });
    const e = stats.engine;
    setText("latency", (e.last_latency_ms === null ? 0 : e.last_latency_ms).toFixed(1) + " ms");
    setText("latency-p95", e.latency_ms_p50 === null ? "—"
      : e.latency_ms_p50.toFixed(0) + " / " + e.latency_ms_p95.toFixed(0) + " ms");
    const med = stats.response_ms.median;
    setText("median-response", med === null ? "—" : (med / 1000).toFixed(1) + " s");
    root.dataset.updates = String(Number(root.dataset.updates || 0) + 1);

    drawPerMinute(stats.answers_per_minute);
    drawHistogram("plot-response", stats.response_ms.histogram, "answers", 1000);
    history.t.push(now); history.fallback.push(100 * stats.fallback_rate); history.pool.push(stats.pool_depth);
    chart("plot-pool", [lineSeries("fallback %", "#c0392b", "%"), lineSeries("pool depth", "#2857c5", "n")],
      [history.t, history.fallback, history.pool],
      { scales: { x: { time: true, range: atLeastAMinute }, "%": { range: [0, 100] }, n: yFromZero },
        axes: [{}, { scale: "%" }, { scale: "n", side: 1, grid: { show: false } }] });
    const lat = e.latencies_ms || [];
    chart("plot-latency", [lineSeries("refresh ms", "#7b4fb5")], [lat.map((_, i) => i), lat], categoryOpts("update"));
    drawAlgorithms(stats, now);

    (stats.algorithms || []).forEach((alg) => {
      const row = document.querySelector('#algorithms tr[data-label="' + alg.label + '"]');
      if (row) {
        row.querySelector(".answers").textContent = alg.answers;
        row.querySelector(".pool").textContent = alg.pool_depth;
        row.querySelector(".fallback").textContent = (100 * alg.fallback_rate).toFixed(1) + "%";
        row.querySelector(".alg-progress").textContent = describe(alg);
      }
      if (!alg.neighbors) return;
      // items added after the learner was built: their neighbour is predicted from features, not measured
      const predicted = new Set((alg.predicted && alg.predicted.items) || []);
      rows.forEach((row) => {
        const index = Number(row.dataset.index);
        const nn = alg.neighbors[index];
        const cell = row.querySelector('.nn[data-label="' + alg.label + '"]');
        if (cell && nn !== undefined) {
          const guess = predicted.has(index) && nn >= 0;
          cell.textContent = nn >= 0 ? (names[nn] || "item " + nn) + (guess ? " (predicted from features, not measured)" : "")
            : "no data yet";
          cell.classList.toggle("no-data", nn < 0);
          cell.classList.toggle("predicted", guess);
          cell.title = guess ? alg.predicted.about : "";
        }
      });
    });
    const featuresNote = document.getElementById("features-note");
    if (featuresNote && stats.features) {
      featuresNote.hidden = false;
      featuresNote.textContent = stats.features.sentence;
    }
    const first = (stats.algorithms || []).find((alg) => alg.truth_error);
    if (first && stats.study.n_items && document.getElementById("truth-agreement")) {
      const right = Math.round((1 - first.truth_error.share_wrong) * stats.study.n_items);
      document.getElementById("truth-agreement").textContent =
        "Known ground truth (" + first.label + "): " + right + " of " + stats.study.n_items +
        " items have a true nearest neighbour as their learned one.";
    }
    showRebuild(stats.rebuild);
  }

  // ------------------------------------------------------------------ rebuild after excluding a rater
  const rebuildStatus = document.getElementById("rebuild-status");
  let rebuildState = null;
  function showRebuild(rebuild) {
    if (!rebuildStatus || !rebuild) return;
    rebuildStatus.hidden = false;
    rebuildStatus.textContent = rebuild.message;
    rebuildStatus.dataset.state = rebuild.state;
    if (rebuildState !== null && rebuildState !== rebuild.state && rebuild.state === "finished") {
      refreshRaters();
      refreshGraph();
    }
    rebuildState = rebuild.state;
  }

  function describe(alg) {
    const p = alg.progress;
    if (alg.finished) return "finished";
    if (!p) return "—";
    if (alg.rounds) {
      return p.rounds_certified + " certified, " + p.rounds_open + " open, " + p.rounds_waiting + " waiting";
    }
    if (p.trees_built !== undefined) {
      const depth = p.depth && p.depth.length ? ", depth up to " + Math.max.apply(null, p.depth) : "";
      return p.trees_built + " of " + p.n_trees + " trees built" + depth;
    }
    return p.answers + " answers";
  }

  // ------------------------------------------------------------------ learned graph
  const graphSvg = document.getElementById("nn-graph");
  const graphSelect = document.getElementById("graph-algorithm");
  const panel = document.getElementById("candidates");
  let layout = null, selected = null;

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    Object.entries(attrs).forEach(([k, v]) => node.setAttribute(k, v));
    if (parent) parent.appendChild(node);
    return node;
  }

  // An item as the map draws it: its picture, colour or a dot, ``size`` across (centred on x, y); from the
  // layout's looks (every drawn item), else the item table on this page.
  function itemVisual(i, x, y, group, size, look) {
    const s = size || 28;
    const cell = itemCells[i];
    const swatch = cell && cell.querySelector(".swatch");
    const img = cell && cell.querySelector("img.thumb");
    const src = look && look.media !== undefined && look.kind === "image" ? mediaUrl + look.media
      : img ? img.getAttribute("src") : null;
    const colour = look && look.color ? look.color : swatch ? swatch.dataset.color : "#2857c5";
    if (src) {
      el("image", { href: src, x: x - s / 2, y: y - s / 2, width: s, height: s, class: "node",
        preserveAspectRatio: "xMidYMid slice" }, group);
    } else {
      el("circle", { cx: x, cy: y, r: s / 3, class: "node", fill: colour }, group);
    }
    const title = el("title", {}, group);
    title.textContent = (look && look.id) || names[i] || "item " + i;
  }

  function itemName(i) {
    const slot = layout ? layout.nodes.indexOf(i) : -1;
    return (slot >= 0 && layout.looks && layout.looks[slot].id) || names[i] || "item " + i;
  }

  const mediaUrl = root.dataset.mediaUrl || "";
  // The map's drawing units; the picture of an item is never less than MIN_PX screen pixels across, at any
  // zoom (zooming in spreads items apart, their pictures keep their size).
  const W = 960, H = 720, pad = 30, MIN_PX = 32;
  let view = { x: 0, y: 0, w: W, h: H };
  let drawn = null;  // what resize() updates: the items' looks and the arrows with their ends

  function setView(v) {
    view = v;
    graphSvg.setAttribute("viewBox", [v.x, v.y, v.w, v.h].join(" "));
    resize();
  }

  // screen pixels per drawing unit at the current zoom
  function pixelsPerUnit() {
    const width = graphSvg.getBoundingClientRect().width;
    return width > 0 ? width / view.w : 1;
  }

  // an item's size in drawing units: its share of the map (shrinking with more items), at least MIN_PX
  function itemSize() {
    const ppu = pixelsPerUnit(), atFullView = ppu * view.w / W;
    const px = Math.max(MIN_PX, (layout.node_size || 0.045) * (W - 2 * pad) * atFullView);
    return px / ppu;
  }

  function resize() {
    if (!drawn) return;
    const s = itemSize(), gap = 2 / pixelsPerUnit();
    drawn.looks.forEach((g) => g.setAttribute("transform", "scale(" + s + ")"));
    drawn.arrows.forEach(([line, x1, y1, x2, y2]) => {
      const len = Math.hypot(x2 - x1, y2 - y1) || 1, shrink = Math.min(s / 2 + gap, len / 2);
      line.setAttribute("x2", x2 - ((x2 - x1) / len) * shrink);
      line.setAttribute("y2", y2 - ((y2 - y1) / len) * shrink);
    });
    graphSvg.dataset.itemPx = (s * pixelsPerUnit()).toFixed(1);
  }

  function drawGraph() {
    if (!graphSvg || !layout) return;
    const started = performance.now();
    Array.from(graphSvg.querySelectorAll("g")).forEach((g) => g.remove());
    drawn = { looks: [], arrows: [] };
    const xy = new Map();
    layout.nodes.forEach((item, slot) => {
      const [x, y] = layout.positions[slot];
      xy.set(item, [pad + x * (W - 2 * pad), pad + y * (H - 2 * pad)]);
    });
    const edges = el("g", { class: "edges" }, graphSvg);
    const many = layout.nodes.length > 200;
    layout.edges.forEach((edge) => {
      const [x1, y1] = xy.get(edge.from), [x2, y2] = xy.get(edge.to);
      const line = el("line", {
        x1: x1, y1: y1, x2: x2, y2: y2,
        class: "edge " + (edge.predicted ? "predicted" : edge.certified ? "certified" : "uncertain") +
          (many ? " thin" : ""),
        "marker-end": "url(#arrow)", "data-from": edge.from,
      }, edges);
      drawn.arrows.push([line, x1, y1, x2, y2]);
    });
    const waiting = layout.no_data || [];
    if (waiting.length) {
      const label = el("text", { x: pad, y: pad + 0.9 * (H - 2 * pad), class: "no-data-label" },
        el("g", { class: "labels" }, graphSvg));
      label.textContent = "no data yet (" + waiting.length + " item" + (waiting.length === 1 ? "" : "s") +
        " without an answer):";
    }
    const nodes = el("g", { class: "nodes" }, graphSvg);
    const certified = layout.certified || [];
    const outliers = new Set(layout.outliers || []);
    // items added after the learner was built: never asked about, their neighbour predicted from their features
    const predicted = new Set((layout.predicted && layout.predicted.items) || []);
    layout.nodes.forEach((i, slot) => {
      const [x, y] = xy.get(i);
      const far = outliers.has(i), guess = predicted.has(i);
      const g = el("g", { class: "item" + (i === selected ? " selected" : "") + (certified[slot] ? " certified" : "") +
        (far ? " outlier" : "") + (guess ? " predicted" : ""), "data-index": i, tabindex: 0,
        transform: "translate(" + x + " " + y + ")" }, nodes);
      const look = el("g", { class: "look" }, g);  // drawn one unit across, scaled by resize()
      if (certified[slot]) el("circle", { cx: 0, cy: 0, r: 0.6, class: "certainty" }, look);
      if (far) el("circle", { cx: 0, cy: 0, r: 0.72, class: "far" }, look);
      if (guess) el("circle", { cx: 0, cy: 0, r: 0.66, class: "predicted-ring" }, look);
      itemVisual(i, 0, 0, look, 1, layout.looks && layout.looks[slot]);
      el("rect", { x: -0.58, y: -0.58, width: 1.16, height: 1.16, rx: 0.08, class: "selection" }, look);
      if (far) look.querySelector("title").textContent += " (far from the rest: drawn at the map's edge)";
      if (guess) look.querySelector("title").textContent += " (added later: never asked about; its neighbour is " +
        layout.predicted.about + ")";
      drawn.looks.push(look);
      g.addEventListener("click", () => showCandidates(i, true));
      g.addEventListener("keydown", (ev) => { if (ev.key === "Enter") showCandidates(i, true); });
    });
    resize();
    const nCertified = certified.filter(Boolean).length;
    document.getElementById("graph-updated").textContent = layout.nodes.length + " items, " + layout.edges.length +
      " arrows, " + nCertified + " items certified · updated " + new Date().toLocaleTimeString();
    const how = document.getElementById("graph-placement");
    if (how) {
      how.textContent = (layout.placement === "embedding"
        ? "Items placed by the embedding the learner fitted to the answers (" + layout.embedding_dim +
          " dimension" + (layout.embedding_dim === 1 ? "" : "s") + ", its two main axes shown)"
        : "Items placed by classical MDS of the estimated distances") +
        (outliers.size ? "; " + outliers.size + " item" + (outliers.size === 1 ? "" : "s") +
          " far from the rest drawn at the map's edge (dashed ring), so the rest keep their room" : "") +
        (predicted.size ? "; " + predicted.size + " item" + (predicted.size === 1 ? "" : "s") + " added after the " +
          "learner was built, never asked about, drawn beside the neighbour predicted from " +
          (predicted.size === 1 ? "its" : "their") + " features (dotted ring and arrow: predicted, not measured)"
          : "");
    }
    const cap = document.getElementById("graph-cap");
    if (cap) {
      cap.hidden = layout.nodes.length >= layout.n_items;
      cap.textContent = "Showing " + layout.nodes.length + " of " + layout.n_items + " items (those with the most " +
        "answers so far; at most " + layout.max_drawn + " are drawn) and the " + layout.edges.length +
        " arrows between them; " + layout.edges_not_drawn + " arrows lead to items not drawn. " +
        "Every item and its nearest neighbour is listed in the table at the end of the page.";
    }
    graphSvg.dataset.drawMs = (performance.now() - started).toFixed(1);
    graphSvg.dataset.drawn = String(layout.nodes.length);
  }

  // zoom with the wheel (or the buttons) around the pointer, drag to pan: a map of 1,000 items is read up close
  function zoom(factor, cx, cy) {
    const w = Math.min(W, Math.max(W / 16, view.w * factor)), h = w * H / W;
    const x = cx - (cx - view.x) * (w / view.w), y = cy - (cy - view.y) * (h / view.h);
    setView({ x: Math.min(Math.max(x, 0), W - w), y: Math.min(Math.max(y, 0), H - h), w: w, h: h });
  }
  function svgPoint(ev) {
    const r = graphSvg.getBoundingClientRect();
    return [view.x + (ev.clientX - r.left) / r.width * view.w, view.y + (ev.clientY - r.top) / r.height * view.h];
  }
  if (graphSvg) {
    graphSvg.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const [cx, cy] = svgPoint(ev);
      zoom(ev.deltaY < 0 ? 0.8 : 1.25, cx, cy);
    }, { passive: false });
    let drag = null;
    graphSvg.addEventListener("pointerdown", (ev) => {
      if (ev.target.closest("g.item")) return;
      drag = { x: ev.clientX, y: ev.clientY, view: view };
    });
    window.addEventListener("pointerup", () => { drag = null; });
    window.addEventListener("resize", resize);
    graphSvg.addEventListener("pointermove", (ev) => {
      if (!drag) return;
      const r = graphSvg.getBoundingClientRect();
      const dx = (ev.clientX - drag.x) / r.width * drag.view.w, dy = (ev.clientY - drag.y) / r.height * drag.view.h;
      setView({ x: Math.min(Math.max(drag.view.x - dx, 0), W - drag.view.w),
        y: Math.min(Math.max(drag.view.y - dy, 0), H - drag.view.h), w: drag.view.w, h: drag.view.h });
    });
    document.querySelectorAll("[data-zoom]").forEach((b) => b.addEventListener("click", () => {
      if (b.dataset.zoom === "reset") setView({ x: 0, y: 0, w: W, h: H });
      else zoom(b.dataset.zoom === "in" ? 0.67 : 1.5, view.x + view.w / 2, view.y + view.h / 2);
    }));
  }

  function fmt(x) { return x === null || x === undefined ? "—" : Number(x).toFixed(3); }

  function table(className, columns, rows) {
    const t = document.createElement("table");
    t.className = "table " + className;
    const head = document.createElement("tr");
    columns.forEach(([text, title]) => {
      const th = document.createElement("th");
      th.textContent = text;
      if (title) th.title = title;
      head.appendChild(th);
    });
    t.appendChild(document.createElement("thead")).appendChild(head);
    const body = t.appendChild(document.createElement("tbody"));
    rows.forEach((cells) => {
      const tr = body.appendChild(document.createElement("tr"));
      if (cells.className) tr.className = cells.className;
      cells.forEach((text) => { tr.appendChild(document.createElement("td")).textContent = text; });
    });
    return t;
  }

  // The answers behind an item's neighbours (the evidence route), fetched on a click; kept across refreshes.
  let evidence = null, evidenceAsked = 0;
  async function fetchEvidence(i) {
    const asked = ++evidenceAsked;
    evidence = document.createElement("div");
    evidence.className = "evidence";
    evidence.id = "evidence";
    evidence.textContent = "Reading the answers about this item…";
    panel.appendChild(evidence);
    const box = evidence;
    try {
      const url = root.dataset.evidenceUrl.replace("/ITEM/", "/" + i + "/") + "?algorithm=" +
        encodeURIComponent(graphSelect.value);
      const response = await fetch(url, { credentials: "same-origin" });
      if (asked !== evidenceAsked) return;
      if (!response.ok) { box.textContent = "The answers about this item could not be read."; return; }
      renderEvidence(box, await response.json());
    } catch (e) { if (asked === evidenceAsked) box.textContent = "The answers about this item could not be read."; }
  }

  function renderEvidence(box, doc) {
    box.replaceChildren();
    const h = document.createElement("h4");
    h.textContent = "What the answers say";
    box.appendChild(h);
    const p = document.createElement("p");
    p.className = "muted";
    p.textContent = doc.answers + " answer" + (doc.answers === 1 ? "" : "s") + " this learner learns from show" +
      (doc.answers === 1 ? "s" : "") + " this item" +
      (doc.all_read ? "" : " (of the newest " + doc.read + " read)") + ". " +
      (doc.evidence === "ratings"
        ? "Each row: the ratings of this item and the other one, and their mean (higher: more alike)."
        : "Agree: answers that judged the two closer than a third item; disagree: a third item judged closer.");
    box.appendChild(p);
    const rows = [];
    const label = (r, n) => (r.neighbour ? "#" + n + " " : "") + itemName(r.item);
    const cells = (r, n) => {
      const row = doc.evidence === "ratings" ? [label(r, n), String(r.ratings), r.mean === null ? "—" : r.mean.toFixed(2)]
        : [label(r, n), String(r.closer), String(r.farther)];
      row.className = r.neighbour ? "neighbour" : "other";
      return row;
    };
    doc.neighbours.forEach((r, k) => rows.push(cells(r, k + 1)));
    doc.others.forEach((r) => rows.push(cells(r, 0)));
    if (!rows.length) {
      p.textContent += " No answer has compared it with another item yet.";
      return;
    }
    const columns = doc.evidence === "ratings"
      ? [["Item", "#n: the learner's n-th nearest neighbour now"], ["Ratings"], ["Mean rating"]]
      : [["Item", "#n: the learner's n-th nearest neighbour now; the others: items the answers put close"],
        ["Agree", "Implied triplets that judged the two closer than a third item"],
        ["Disagree", "Implied triplets that judged a third item closer"]];
    box.appendChild(table("evidence-table", columns, rows));
  }

  function showCandidates(i, clicked) {
    if (clicked || selected !== i) evidence = null;
    selected = i;
    graphSvg.querySelectorAll("g.item").forEach((g) => g.classList.toggle("selected", Number(g.dataset.index) === i));
    panel.replaceChildren();
    const h = document.createElement("h3");
    h.textContent = itemName(i);
    panel.appendChild(h);
    const slot = layout ? layout.nodes.indexOf(i) : -1;
    const cands = (slot >= 0 && layout.candidates[slot]) || [];
    const p = document.createElement("p");
    p.className = "muted";
    if (slot >= 0 && layout.certified) {
      p.textContent = (layout.certified[slot] ? "Its nearest neighbour is certified." :
        "Its nearest neighbour is not certified yet.") +
        ((layout.outliers || []).includes(i) ? " It is far from the rest: drawn at the map's edge." : "");
      if (layout.predicted && layout.predicted.items.includes(i)) {
        p.textContent = "Added after the learner was built: no rater has been asked about it. Its neighbour is " +
          layout.predicted.about + ".";
      }
      panel.appendChild(p);
    }
    if (cands.length) {
      const duels = cands[0].win_share !== undefined;
      panel.appendChild(table("candidates-table",
        duels ? [["Candidate"], ["Won", "Smoothed share of the duels about this item the candidate won"], ["Duels"]]
          : [["Candidate"], ["Estimate"], ["Lower"], ["Upper"], ["Answers"]],
        cands.map((c) => (duels ? [itemName(c.item), (100 * c.win_share).toFixed(0) + "%", String(c.duels)]
          : [itemName(c.item), fmt(c.estimate), fmt(c.lower), fmt(c.upper), String(c.samples)]))));
    }
    if (evidence) panel.appendChild(evidence);  // a refresh of the map keeps what was read
    else fetchEvidence(i);
  }

  async function refreshGraph() {
    if (!graphSvg) return;
    try {
      const url = root.dataset.layoutUrl + "?algorithm=" + encodeURIComponent(graphSelect.value);
      const response = await fetch(url, { credentials: "same-origin" });
      if (!response.ok) return;
      layout = await response.json();
      drawGraph();
      if (selected !== null) showCandidates(selected, false);
      document.querySelectorAll(".alg-plot").forEach((fig) => {
        const hist = layout.samples_histogram;
        if (fig.dataset.label !== layout.algorithm || !hist || !hist.counts.length) return;
        const plot = fig.querySelector(".samples-plot");
        if (plot) chart(plot, [barSeries("items", "#4a8f5b")], [hist.edges.slice(0, -1), hist.counts], categoryOpts("answers about the item"));
      });
    } catch (e) { /* try again on the next tick */ }
  }
  if (graphSelect) graphSelect.addEventListener("change", () => { selected = null; evidence = null; refreshGraph(); });

  // ------------------------------------------------------------------ raters table
  const ratersBody = document.querySelector("#raters-table tbody");
  async function refreshRaters() {
    if (!ratersBody) return;
    try {
      const response = await fetch(root.dataset.ratersUrl, { credentials: "same-origin" });
      if (!response.ok) return;
      const raters = (await response.json()).raters;
      ratersBody.replaceChildren();
      if (!raters.length) {
        ratersBody.innerHTML = '<tr><td colspan="10" class="muted">No answers yet.</td></tr>';
        return;
      }
      raters.forEach((r) => {
        const tr = document.createElement("tr");
        tr.dataset.rater = r.rater;
        if (r.flagged) tr.className = "flagged";
        // a partial-completion code (the study ran out before the rater finished): pay it as such
        if (r.code_kind === "partial") tr.title = "shown a partial-completion code";
        const answers = String(r.answers) + (r.code_kind === "partial" ? " (partial code)" : "");
        const cells = [r.rater, answers,
          r.median_response_ms === null ? "—" : (r.median_response_ms / 1000).toFixed(1) + " s",
          catchTrials(r),
          (100 * r.too_fast_share).toFixed(0) + "%", String(r.skipped || 0),
          r.repeats ? (100 * r.self_agreement).toFixed(0) + "% of " + r.repeats : "—", answerCheck(r),
          r.flagged ? "yes" : ""];
        cells.forEach((text) => {
          const td = document.createElement("td");
          td.textContent = text;
          tr.appendChild(td);
        });
        const td = document.createElement("td");
        if (r.excluded) {
          td.textContent = "excluded";
        } else {
          const form = document.createElement("form");
          form.method = "post";
          form.action = root.dataset.excludeUrl;
          form.addEventListener("submit", (ev) => {
            if (!window.confirm("Exclude rater " + r.rater + "? The engines are rebuilt from the log without their answers.")) ev.preventDefault();
          });
          [["csrf_token", csrf], ["rater", r.rater]].forEach(([n, v]) => {
            const input = document.createElement("input");
            input.type = "hidden"; input.name = n; input.value = v;
            form.appendChild(input);
          });
          const button = document.createElement("button");
          button.type = "submit"; button.className = "exclude"; button.textContent = "Exclude";
          form.appendChild(button);
          td.appendChild(form);
        }
        tr.appendChild(td);
        ratersBody.appendChild(tr);
      });
    } catch (e) { /* try again on the next tick */ }
  }

  async function refresh() {
    try {
      const response = await fetch(statsUrl, { credentials: "same-origin" });
      if (response.ok) update(await response.json());
    } catch (e) { /* keep the last numbers; try again on the next tick */ }
  }
  // the graph, the raters table and the flagged count every DASHBOARD_REFRESH_SECONDS (an instance setting,
  // default 10 s), the numbers and charts every 3 s or that, whichever is shorter
  const refreshMs = 1000 * (Number(root.dataset.refreshSeconds) || 10);
  refresh();
  refreshGraph();
  refreshRaters();
  setInterval(refresh, Math.min(3000, refreshMs));
  if (graphSvg) setInterval(refreshGraph, refreshMs);
  if (ratersBody) setInterval(refreshRaters, refreshMs);

  // Catch trials failed of those given; misses of label comparisons waiting for the crowd's verdict, and a
  // flag by it.
  function catchTrials(r) {
    if (!r.catch) return "—";
    let text = r.catch_failed + " of " + r.catch;
    if (r.catch_pending) text += ", " + r.catch_pending + " missed waiting for the crowd";
    if (r.crowd_flagged) text += ", flagged by the crowd (p = " + r.crowd_p.toExponential(1) + ")";
    return text;
  }

  // The answer check's verdict: "random-looking, p = 0.0003" when it flagged the rater, else its p-value.
  function answerCheck(r) {
    if (r.answer_check_p === null || r.answer_check_p === undefined) return "—";
    const p = r.answer_check_p < 0.001 ? r.answer_check_p.toExponential(1) : r.answer_check_p.toFixed(3);
    return r.answer_check_flagged ? r.answer_check_rule + "-looking, p = " + p : "p = " + p;
  }

  // Overview: how many raters the attention checks flagged, from the raters API (every refreshMs).
  const flaggedCount = document.getElementById("n-flagged");
  async function refreshFlagged() {
    try {
      const response = await fetch(root.dataset.ratersUrl, { credentials: "same-origin" });
      if (!response.ok) return;
      const raters = (await response.json()).raters;
      flaggedCount.textContent = raters.filter((r) => r.flagged).length;
      setText("glance-raters-total", raters.length);
    } catch (e) { /* try again on the next tick */ }
  }
  if (flaggedCount) setInterval(refreshFlagged, refreshMs);

  // Embedding scatter: the learned coordinates (first two dimensions), fetched from the export.
  async function drawEmbeddings() {
    for (const fig of document.querySelectorAll("figure.embedding-plot")) {
      const svg = fig.querySelector("svg.embedding-scatter");
      const status = fig.querySelector(".embedding-status");
      let doc;
      try {
        const response = await fetch(fig.dataset.url, { credentials: "same-origin" });
        if (!response.ok) { status.textContent = "no embedding fitted yet"; continue; }
        doc = await response.json();
      } catch (err) { status.textContent = "could not load the embedding"; continue; }
      const pts = doc.coordinates.map((c) => [c[0] || 0, c.length > 1 ? c[1] || 0 : 0]);
      const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
      const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
      const sx = (x) => 20 + 440 * (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5);
      const sy = (y) => 340 - 320 * (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5);
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      pts.forEach((p, i) => {
        // the item itself where the page has it (thumbnail or colour swatch), else a dot
        const g = el("g", { class: "item" }, svg);
        if (itemCells[i]) itemVisual(i, sx(p[0]), sy(p[1]), g);
        else el("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 5, class: "node", fill: "#2857c5" }, g);
        const title = document.createElementNS(SVG, "title");
        title.textContent = doc.items[i];
        g.appendChild(title);
      });
      status.textContent = `${pts.length} items, ${doc.dim} dimension(s), ${doc.fit.answers} answers`;
    }
  }
  drawEmbeddings();
  drawPlan();
})();
