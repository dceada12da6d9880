// Small SVG line charts for the console: a few series of (time, value) points kept in the
// browser from polling. Our own code (no library to install or serve): axes, a grid line at the
// top value, one polyline per series and a legend.
(function () {
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

function svgElement(tag, attrs, text) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  if (text !== undefined) el.textContent = text;
  return el;
}

// A top for the y axis: 1, 2 or 5 times a power of ten, at least the largest value.
function niceTop(value) {
  if (!(value > 0)) return 1;
  const power = Math.pow(10, Math.floor(Math.log10(value)));
  for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function shortNumber(value) {
  const abs = Math.abs(value);
  if (abs >= 1e9) return (value / 1e9).toFixed(1).replace(/\.0$/, "") + "G";
  if (abs >= 1e6) return (value / 1e6).toFixed(1).replace(/\.0$/, "") + "M";
  if (abs >= 1e3) return (value / 1e3).toFixed(1).replace(/\.0$/, "") + "k";
  if (abs > 0 && abs < 10) return value.toFixed(1).replace(/\.0$/, "");
  return String(Math.round(value));
}

// series: [{name, className, points: [[timeMs, value], ...]}]; windowMs: the time span shown.
function lineChart(title, series, windowMs, unit) {
  const width = 420, height = 160, left = 44, right = 8, top = 22, bottom = 22;
  const plotW = width - left - right, plotH = height - top - bottom;
  const now = Date.now();
  const start = now - windowMs;
  let max = 0;
  for (const s of series) for (const [, v] of s.points) max = Math.max(max, v);
  const yTop = niceTop(max);
  const x = (t) => left + ((t - start) / windowMs) * plotW;
  const y = (v) => top + plotH - (v / yTop) * plotH;
  const svg = svgElement("svg", {
    viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img", "aria-label": title,
  });
  svg.append(svgElement("text", { x: left, y: 14, class: "chart-title" }, title));
  svg.append(svgElement("line", { x1: left, y1: top, x2: left + plotW, y2: top, class: "grid" }));
  svg.append(svgElement("line", { x1: left, y1: top + plotH, x2: left + plotW, y2: top + plotH, class: "axis" }));
  svg.append(svgElement("line", { x1: left, y1: top, x2: left, y2: top + plotH, class: "axis" }));
  svg.append(svgElement("text", { x: left - 4, y: top + 4, class: "tick", "text-anchor": "end" }, shortNumber(yTop)));
  svg.append(svgElement("text", { x: left - 4, y: top + plotH, class: "tick", "text-anchor": "end" }, "0"));
  svg.append(svgElement("text", { x: left, y: height - 6, class: "tick" }, `-${Math.round(windowMs / 60000)} min`));
  svg.append(svgElement("text", { x: left + plotW, y: height - 6, class: "tick", "text-anchor": "end" }, "now"));
  if (unit) svg.append(svgElement("text", { x: left + plotW, y: 14, class: "tick", "text-anchor": "end" }, unit));
  let legendX = left + 8;
  series.forEach((s, i) => {
    const shown = s.points.filter(([t]) => t >= start);
    const cls = s.className || `series-${i}`;
    if (shown.length > 0) {
      const d = shown.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
      svg.append(svgElement("polyline", { points: d, class: `line ${cls}` }));
    }
    const last = shown.length ? shown[shown.length - 1][1] : 0;
    const label = svgElement("text", { x: legendX, y: top + 12, class: `legend ${cls}` }, `${s.name} ${shortNumber(last)}`);
    svg.append(label);
    legendX += 12 + 7 * (s.name.length + shortNumber(last).length + 1);
  });
  return svg;
}

// Points kept per chart: at most windowMs of them, the oldest dropped first.
class History {
  constructor(windowMs) {
    this.windowMs = windowMs;
    this.series = new Map();
  }
  add(name, time, value) {
    if (!this.series.has(name)) this.series.set(name, []);
    const points = this.series.get(name);
    points.push([time, value]);
    while (points.length && points[0][0] < time - this.windowMs) points.shift();
  }
  points(name) {
    return this.series.get(name) || [];
  }
}

window.MagnetarChart = { lineChart, History, niceTop, shortNumber };
})();
