// tierwise plan page: time breakdown and Pareto front (report/html.py)
const D = JSON.parse(document.getElementById('data').textContent);
document.getElementById('reason').textContent = 'choice: ' + D.reason;
const parts = [...new Set(D.options.flatMap(o => Object.keys(o.breakdown)))];
Plotly.newPlot('breakdown', parts.map(p => ({type: 'bar', name: p, orientation: 'h',
  y: D.options.map(o => o.site), x: D.options.map(o => o.breakdown[p] || 0)})),
  {barmode: 'stack', title: {text: 'where the time goes (s)'}, margin: {t: 40, l: 100}});
const hover = o => o.site + '<br>time ' + o.time_s.toPrecision(4) + ' s<br>energy ' +
  (o.energy_j === null ? 'unknown' : o.energy_j.toPrecision(4) + ' J') + '<br>cost ' + o.cost +
  Object.entries(o.breakdown).map(([k, v]) => '<br>' + k + ' ' + v.toPrecision(3) + ' s').join('');
Plotly.newPlot('pareto', [{type: 'scatter', mode: 'markers+text', x: D.options.map(o => o.time_s),
  y: D.options.map(o => o.energy_j), text: D.options.map(o => o.site), textposition: 'top center',
  hovertext: D.options.map(hover), hoverinfo: 'text',
  marker: {size: 12, symbol: D.options.map(o => o.chosen ? 'star' : 'circle')}}],
  {title: {text: 'time against energy (star: the choice)'}, xaxis: {title: {text: 'time (s)'}},
   yaxis: {title: {text: 'energy (J)'}}, margin: {t: 40}});
