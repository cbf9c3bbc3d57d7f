// Draws the report's charts from the JSON in #report-data with the inlined Plotly; no data is put into HTML.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const config = { displaylogo: false, responsive: true };
  const layout = (title, extra) => Object.assign({ title: { text: title }, margin: { t: 40, l: 60, r: 20, b: 80 },
    height: 360 }, extra || {});

  function chartDiv(parent) {
    const div = document.createElement("div");
    div.className = "chart";
    parent.appendChild(div);
    return div;
  }

  const breakdowns = document.getElementById("breakdown-charts");
  for (const b of data.breakdowns) {
    const cats = b.categories.filter((c) => c.value !== null);
    const x = cats.map((c) => c.category);
    const y = cats.map((c) => c.value);
    const err = cats.map((c) => (c.ci ? c.ci[1] - c.value : 0));
    const title = `${b.run} · ${b.task} by ${b.field} (${b.metric}, 95% CI)`;
    Plotly.newPlot(chartDiv(breakdowns), [{ type: "bar", x: x, y: y, error_y: { type: "data", array: err },
      text: cats.map((c) => `n=${c.n}`), hovertemplate: "%{x}: %{y:.4f} (%{text})<extra></extra>" }],
      layout(title), config);
    if (b.radar) {
      Plotly.newPlot(chartDiv(breakdowns), [{ type: "scatterpolar", r: y.concat(y.slice(0, 1)),
        theta: x.concat(x.slice(0, 1)), fill: "toself", name: b.task }],
        layout(`${b.run} · ${b.task}: ${b.field} radar`, { polar: { radialaxis: { visible: true } } }), config);
    }
  }

  const eff = document.getElementById("efficiency-chart");
  if (eff && data.efficiency.length) {
    const labels = data.efficiency.map((e) => `${e.run} · ${e.task}`);
    const traces = ["prepare_s", "model_s", "judge_s", "score_s"].map((k) => ({ type: "bar", name: k.replace("_s", ""),
      y: labels, x: data.efficiency.map((e) => e[k] || 0), orientation: "h" }));
    Plotly.newPlot(eff, traces, layout("seconds per stage (prepare is summed over the preparing workers)",
      { barmode: "group", height: 120 + 60 * labels.length, margin: { l: 260, t: 40, r: 20, b: 40 } }), config);
  }

  const lite = document.getElementById("lite-charts");
  for (const t of data.lite) {
    const ok = t.models.filter((m) => m.full !== null && m.lite !== null);
    const all = ok.flatMap((m) => [m.full, m.lite]);
    const lo = Math.min(...all), hi = Math.max(...all);
    const pearson = t.pearson === null ? "n/a" : t.pearson.toFixed(3);
    Plotly.newPlot(chartDiv(lite), [
      { type: "scatter", mode: "markers+text", x: ok.map((m) => m.full), y: ok.map((m) => m.lite),
        text: ok.map((m) => m.model), textposition: "top center", name: "models" },
      { type: "scatter", mode: "lines", x: [lo, hi], y: [lo, hi], name: "lite = full", line: { dash: "dot" } }],
      layout(`${t.task}: lite vs full ${t.metric} (Pearson ${pearson}, keep full: ${t.keep_full})`,
        { xaxis: { title: { text: "full" } }, yaxis: { title: { text: "lite" } } }), config);
  }

  const contam = document.getElementById("contam-chart");
  const names = Object.keys(data.contam);
  if (contam && names.length) {
    const kinds = [["any_overlap_share", "any"], ["text_overlap_share", "text"], ["image_overlap_share", "image"],
      ["near_duplicate_share", "near-duplicate"]];
    Plotly.newPlot(contam, kinds.map(([k, label]) => ({ type: "bar", name: label, x: names,
      y: names.map((n) => (data.contam[n][k] === null ? null : 100 * data.contam[n][k])) })),
      layout("% of instances overlapping the training corpus", { barmode: "group",
        yaxis: { title: { text: "%" } } }), config);
  }
  document.body.dataset.chartsReady = "1";
})();
