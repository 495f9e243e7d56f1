// Study dashboard: refresh the numbers, the answers-per-minute chart and the
// nearest-neighbour column every few seconds from the stats API.
(function () {
  "use strict";
  const root = document.getElementById("dashboard");
  if (!root) return;
  const statsUrl = root.dataset.statsUrl;
  const SVG = "http://www.w3.org/2000/svg";
  document.querySelectorAll(".swatch[data-color]").forEach((el) => (el.style.backgroundColor = el.dataset.color));
  const rows = Array.from(document.querySelectorAll("#items tbody tr"));
  const names = rows.map((r) => r.children[1].textContent.trim());
  const positions = rows.map((r) => (r.dataset.position ? r.dataset.position.split(",").map(Number) : null));

  function trueNeighbours() {
    if (positions.some((p) => p === null)) return null;
    return positions.map((p, i) => {
      let best = -1, bestD = Infinity;
      positions.forEach((q, j) => {
        if (i === j) return;
        const d = Math.hypot.apply(null, p.map((x, k) => x - q[k]));
        if (d < bestD) { bestD = d; best = j; }
      });
      return best;
    });
  }
  const truth = trueNeighbours();

  function drawTimeline(perMinute) {
    // at least the last 30 minutes, one bar per minute, so a new study does not show one giant bar
    const svg = document.getElementById("timeline");
    svg.replaceChildren();
    if (!perMinute.length) return;
    const end = Math.max(perMinute[perMinute.length - 1][0], Math.floor(Date.now() / 60000) * 60);
    const start = Math.min(perMinute[0][0], end - 29 * 60);
    const minutes = (end - start) / 60 + 1;
    const max = Math.max.apply(null, perMinute.map((p) => p[1]));
    const width = 600 / minutes;
    perMinute.forEach(([t, count]) => {
      const rect = document.createElementNS(SVG, "rect");
      const h = (count / max) * 110;
      rect.setAttribute("x", ((t - start) / 60) * width);
      rect.setAttribute("y", 120 - h);
      rect.setAttribute("width", Math.max(1, width - 1));
      rect.setAttribute("height", h);
      const title = document.createElementNS(SVG, "title");
      title.textContent = new Date(t * 1000).toLocaleTimeString() + ": " + count + " answers";
      rect.appendChild(title);
      svg.appendChild(rect);
    });
  }

  function update(stats) {
    document.getElementById("n-answers").textContent = stats.answers;
    document.getElementById("n-raters").textContent = stats.raters;
    document.getElementById("n-pool").textContent = stats.pool_depth;
    document.getElementById("status").textContent = stats.study.status;
    document.getElementById("fallback-rate").textContent = (100 * stats.fallback_rate).toFixed(1) + "%";
    const latency = stats.engine.last_latency_ms;
    document.getElementById("latency").textContent = (latency === null ? 0 : latency).toFixed(1) + " ms";
    drawTimeline(stats.answers_per_minute);
    let agree = 0, known = 0;
    (stats.algorithms || []).forEach((alg, a) => {
      const row = document.querySelector('#algorithms tr[data-label="' + alg.label + '"]');
      if (row) {
        row.querySelector(".answers").textContent = alg.answers;
        row.querySelector(".pool").textContent = alg.pool_depth;
        row.querySelector(".fallback").textContent = (100 * alg.fallback_rate).toFixed(1) + "%";
        row.querySelector(".progress").textContent = describe(alg);
      }
      if (!alg.neighbors) return;
      alg.neighbors.forEach((nn, i) => {
        if (!rows[i]) return;
        const cell = rows[i].querySelector('.nn[data-label="' + alg.label + '"]');
        if (cell) cell.textContent = nn >= 0 ? names[nn] : "—";
        if (a === 0 && truth && nn >= 0) { known += 1; if (nn === truth[i]) agree += 1; }
      });
    });
    if (truth && stats.algorithms && stats.algorithms.length) {
      document.getElementById("truth-agreement").textContent =
        "Known ground truth (" + stats.algorithms[0].label + "): " + agree + " of " + rows.length +
        " items have their true nearest neighbour (" + known + " have a guess so far).";
    }
  }

  function describe(alg) {
    const p = alg.progress;
    if (alg.finished) return "finished";
    if (!p) return "—";
    if (p.rounds_certified !== undefined) {
      return p.rounds_certified + " certified, " + p.rounds_open + " open, " + p.rounds_waiting + " waiting";
    }
    if (p.trees_built !== undefined) return p.trees_built + " of " + p.n_trees + " trees built";
    return p.answers + " answers";
  }

  async function refresh() {
    try {
      const response = await fetch(statsUrl, { credentials: "same-origin" });
      if (response.ok) update(await response.json());
    } catch (e) { /* keep the last numbers; try again on the next tick */ }
  }
  refresh();
  setInterval(refresh, 3000);
})();
