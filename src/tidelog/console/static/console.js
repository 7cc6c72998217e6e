// tidelog console: draws the charts whose <canvas data-chart-src="..."> names a JSON endpoint, refreshed
// every sampling interval (data-refresh-ms). Values only ever go into Chart.js data (never into HTML). After each refresh the
// plotted values are also written to the canvas's data-points attribute (as JSON), so that tests read
// exactly what the chart shows.
"use strict";
(function () {
  const DEFAULT_REFRESH_MS = 5000;

  function series(kind, body) {
    const points = body.points || [];
    const labels = points.map((p) => new Date(p.t).toLocaleTimeString());
    if (kind === "lag") {
      return { labels, label: "total lag (messages)", values: points.map((p) => p.lag) };
    }
    return { labels, label: "messages in / s (" + body.source + ")", values: points.map((p) => p.messages_per_s) };
  }

  function draw(canvas) {
    const kind = canvas.dataset.chartKind;
    const chart = new Chart(canvas, {
      type: "line",
      data: { labels: [], datasets: [{ label: "", data: [], borderColor: "#0b6bcb", backgroundColor: "rgba(11,107,203,0.12)", fill: true, pointRadius: 2, tension: 0.2 }] },
      options: { animation: false, maintainAspectRatio: false, scales: { x: { ticks: { maxRotation: 0, autoSkip: true, maxTicksLimit: 8 } }, y: { beginAtZero: true } }, plugins: { legend: { display: true } } },
    });
    async function refresh() {
      try {
        const response = await fetch(canvas.dataset.chartSrc, { headers: { Accept: "application/json" } });
        if (!response.ok) return;
        const data = series(kind, await response.json());
        chart.data.labels = data.labels;
        chart.data.datasets[0].label = data.label;
        chart.data.datasets[0].data = data.values;
        chart.update();
        canvas.dataset.points = JSON.stringify(data.values);
      } catch (err) {
        // the console may be restarting: the next refresh tries again
      }
    }
    refresh();
    setInterval(refresh, Number(canvas.dataset.refreshMs) || DEFAULT_REFRESH_MS);
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("canvas[data-chart-src]").forEach(draw);
  });
})();
