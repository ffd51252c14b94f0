// A small SVG line chart of values over time, for histories the page keeps itself.

import { h, duration } from './dom.js';

const WIDTH = 520;
const HEIGHT = 120;
const PAD = { left: 44, right: 8, top: 8, bottom: 18 };

/**
 * Draws `series` ([{ name, color, points: [{ t, v }] }], points in time order) on a shared
 * time axis from the first point to the last, and a y axis from 0 to the largest value.
 * Answers a `<figure>` with the SVG and a legend holding each series' latest value.
 */
export function lineChart(testid, series) {
  const points = series.flatMap((s) => s.points);
  const t0 = Math.min(...points.map((p) => p.t));
  const t1 = Math.max(...points.map((p) => p.t));
  const top = niceMax(Math.max(1, ...points.map((p) => p.v)));
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const x = (t) => PAD.left + (t1 > t0 ? ((t - t0) / (t1 - t0)) * plotW : plotW);
  const y = (v) => PAD.top + plotH - (v / top) * plotH;

  const grid = [0, top / 2, top].map((v) => h('g', { class: 'grid' },
    h('line', { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(v), y2: y(v) }),
    h('text', { x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end' }, formatTick(v))));
  const lines = series.filter((s) => s.points.length > 0).map((s) => {
    const coords = s.points.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`);
    const last = s.points[s.points.length - 1];
    return h('g', { class: 'series', dataset: { series: s.name } },
      h('polyline', { points: coords.join(' '), stroke: s.color, fill: 'none' }),
      h('circle', { cx: x(last.t), cy: y(last.v), r: 2.5, fill: s.color }));
  });
  const span = t1 > t0 ? `last ${duration(t1 - t0)}` : 'collecting…';
  const svg = h('svg', {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: 'chart', role: 'img',
    'aria-label': series.map((s) => s.name).join(', '), dataset: { points: points.length },
  }, grid, lines, h('text', { x: WIDTH - PAD.right, y: HEIGHT - 4, 'text-anchor': 'end', class: 'span' }, span));
  const legend = h('figcaption', {}, series.map((s) => h('span', { class: 'key' },
    h('i', { style: `background:${s.color}` }), `${s.name} `,
    h('b', {}, s.points.length ? s.points[s.points.length - 1].v : '–'))));
  return h('figure', { dataset: { testid } }, svg, legend);
}

/** The next "round" number at or above `v` (1, 2, 5 × a power of ten). */
function niceMax(v) {
  const power = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((m) => m * power).find((n) => n >= v);
}

function formatTick(v) {
  if (v >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (v >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  return `${+v.toFixed(1)}`;
}
