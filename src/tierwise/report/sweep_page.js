// tierwise sweep page: choice map, time maps, Pareto front, sliders (report/html.py)
const D = JSON.parse(document.getElementById('data').textContent);
const S = D.sites.length, A = D.axes, X = A[0], Y = A[1] || {key: '', values: [0], texts: ['']};
const NX = X.values.length, NY = Y.values.length, BLOCK = NX * NY;
const RESTN = A.slice(2).reduce((n, a) => n * a.values.length, 1);
const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2'];
const pos = A.slice(2).map(() => 0);
function label(a) { return a.key + (a.unit ? ' (' + a.unit + ')' : ''); }
function axis(a) {
  return {title: {text: label(a)}, type: a.numeric && a.log ? 'log' : (a.numeric ? 'linear' : 'category')};
}
function offset() {
  let o = 0;
  A.slice(2).forEach((a, k) => { o = o * a.values.length + pos[k]; });
  return o * BLOCK;
}
function rows(flat, site) {
  const base = site * RESTN * BLOCK + offset(), z = [];
  for (let j = 0; j < NY; j++) z.push(flat.slice(base + j * NX, base + (j + 1) * NX));
  return z;
}
function winnerRows() {
  const o = offset(), z = [];
  for (let j = 0; j < NY; j++) z.push(D.winner.slice(o + j * NX, o + (j + 1) * NX));
  return z;
}
function choiceFigure() {
  // one colour band per outcome: -1 (no site) .. S-1, each band centred on its value
  const z = winnerRows(), names = ['none', ...D.sites], n = S + 1, colorscale = [];
  for (let i = 0; i < n; i++) {
    const c = i === 0 ? '#dddddd' : COLORS[(i - 1) % COLORS.length];
    colorscale.push([i / n, c], [(i + 1) / n, c]);
  }
  const text = z.map(r => r.map(v => names[v + 1]));
  return [
    {type: 'heatmap', x: X.values, y: Y.values, z: z, zmin: -1.5, zmax: S - 0.5,
     colorscale: colorscale, text: text, hovertemplate: '%{text}<br>x=%{x}<br>y=%{y}<extra></extra>',
     colorbar: {tickvals: names.map((_, i) => i - 1), ticktext: names, title: {text: 'chosen'}}},
    ...thresholdLines()
  ];
}
function thresholdLines() {
  // the planner's flip points (report/html.py _lines), searched along one map axis per
  // set (L.axis, then each of L.also): one polyline per pair of sites and per crossing
  // of that pair within a row, broken where a row has none
  const L = D.lines || {};
  return [L, ...(L.also || [])].filter(s => s.axis).flatMap(lineSet);
}
function lineSet(L) {
  const r = offset() / BLOCK, rowsN = L.axis === 'y' ? NX : NY;
  const byKey = {}, count = {};
  (L.crossings || []).filter(c => c[0] === r).forEach(c => {
    const pair = c[3] + '|' + c[4], at = pair + '@' + c[1];
    count[at] = (count[at] || 0) + 1;
    const key = pair + '|' + (count[at] - 1);
    (byKey[key] = byKey[key] || {})[c[1]] = c[2];
  });
  const names = ['none', ...D.sites], across = L.axis === 'y' ? X : Y, edge = edges(across);
  return Object.entries(byKey).map(([key, at]) => {
    // a step per row: the row's threshold held across its cell, so the line never
    // suggests a threshold between two rows that the planner did not compute
    const [a, b] = key.split('|').map(Number), xs = [], ys = [];
    for (let i = 0; i < rowsN; i++) {
      const pts = at[i] === undefined ? [[null, null]] : [[edge[i], at[i]], [edge[i + 1], at[i]]];
      pts.forEach(([o, v]) => { if (L.axis === 'y') { xs.push(o); ys.push(v); } else { xs.push(v); ys.push(o); } });
    }
    return {type: 'scatter', mode: 'lines+markers', x: xs, y: ys, connectgaps: false,
            line: {color: '#000', width: 2}, marker: {size: 3, color: '#000'}, showlegend: false,
            name: names[a + 1] + ' | ' + names[b + 1], legendgroup: 'along-' + L.axis,
            hovertemplate: 'planner threshold: ' + names[a + 1] + ' | ' + names[b + 1] +
                           '<br>x=%{x}<br>y=%{y}<extra></extra>'};
  });
}
function edges(a) {
  // cell edges of a numeric axis (midpoints; geometric on a log axis), as the heatmap draws
  const v = a.values, n = v.length, mid = (p, q) => a.log ? Math.sqrt(p * q) : (p + q) / 2;
  if (!a.numeric) return [...Array(n + 1).keys()].map(i => i - 0.5);  // category positions
  if (n < 2) return [v[0], v[0]];  // one row: the line is its marker
  const out = [a.log ? v[0] * v[0] / mid(v[0], v[1]) : 2 * v[0] - mid(v[0], v[1])];
  for (let i = 0; i + 1 < n; i++) out.push(mid(v[i], v[i + 1]));
  out.push(a.log ? v[n - 1] * v[n - 1] / mid(v[n - 2], v[n - 1]) : 2 * v[n - 1] - mid(v[n - 2], v[n - 1]));
  return out;
}
function paretoFigure() {
  const hasCost = D.cost.some(v => v);
  const traces = [];
  D.sites.forEach((s, i) => {
    const t = rows(D.time_s, i).flat(), e = rows(D.energy_j, i).flat(), c = rows(D.cost, i).flat();
    const ok = rows(D.feasible, i).flat(), p = rows(D.pareto, i).flat();
    const parts = Object.entries(D.parts).map(([name, flat]) => [name, rows(flat, i).flat()]);
    const xs = [], ys = [], tx = [], sym = [];
    t.forEach((v, k) => {
      if (!ok[k]) return;
      const ix = k % NX, iy = Math.floor(k / NX);
      xs.push(v); ys.push(hasCost ? c[k] : e[k]); sym.push(p[k] ? 'circle' : 'circle-open');
      tx.push(s + '<br>' + X.key + ' = ' + X.texts[ix] + (Y.key ? '<br>' + Y.key + ' = ' + Y.texts[iy] : '') +
              '<br>time ' + v + ' s<br>energy ' + e[k] + ' J<br>cost ' + c[k] + (p[k] ? '<br>on the Pareto front' : '') +
              parts.filter(([, a]) => a[k]).map(([name, a]) => '<br>  ' + name + ' ' + a[k] + ' s').join(''));
    });
    traces.push({type: 'scatter', mode: 'markers', name: s, x: xs, y: ys, text: tx,
                 hovertemplate: '%{text}<extra></extra>',
                 marker: {color: COLORS[i % COLORS.length], symbol: sym, size: 7}});
  });
  return {traces, ytitle: hasCost ? 'cost' : 'energy (J)'};
}
function draw() {
  Plotly.react('choice', choiceFigure(), {title: {text: 'which site is chosen'},
    xaxis: axis(X), yaxis: axis(Y), margin: {t: 40}});
  const p = paretoFigure();
  Plotly.react('pareto', p.traces, {title: {text: 'time against ' + p.ytitle + ' (filled: Pareto front)'},
    xaxis: {title: {text: 'time (s)'}, type: 'log'}, yaxis: {title: {text: p.ytitle}}, margin: {t: 40}});
  D.sites.forEach((s, i) => {
    Plotly.react('time-' + i, [{type: 'heatmap', x: X.values, y: Y.values, z: rows(D.time_s, i),
      colorscale: 'Viridis', colorbar: {title: {text: 's'}}}],
      {title: {text: s + ': whole-task time'}, xaxis: axis(X), yaxis: axis(Y), margin: {t: 40}});
  });
}
D.sites.forEach((s, i) => {
  const div = document.createElement('div');
  div.id = 'time-' + i; div.className = 'plot';
  document.getElementById('times').appendChild(div);
});
A.slice(2).forEach((a, k) => {
  const box = document.createElement('div'); box.className = 'slider';
  const lab = document.createElement('label'); const out = document.createElement('span');
  const input = document.createElement('input');
  input.type = 'range'; input.min = 0; input.max = a.values.length - 1; input.value = 0;
  input.id = 'slider-' + k; input.setAttribute('aria-label', a.key);
  lab.textContent = a.key + ': '; out.textContent = a.texts[0];
  input.addEventListener('input', () => { pos[k] = +input.value; out.textContent = a.texts[pos[k]]; draw(); });
  box.append(lab, input, ' ', out); document.getElementById('sliders').appendChild(box);
});
document.getElementById('notes').textContent = (D.notes || []).join(' ');
draw();
