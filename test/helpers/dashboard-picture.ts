/**
 * A picture of the Grafana dashboard (src/metrics/dashboard.ts) for the docs, drawn without
 * Grafana (neither npm nor Debian has it): each panel of the dashboard's JSON placed by its
 * gridPos, its lines drawn as SVG from what Prometheus's `query_range` answered for its query.
 * It shows the panels, their titles, legends and data as the dashboard test's Prometheus had
 * them — not Grafana's styling; the caption in the picture says so.
 */

export interface PanelSeries {
  readonly legend: string;
  /** [unix seconds, value] */
  readonly points: ReadonlyArray<readonly [number, number]>;
}

export interface GridPos {
  readonly x: number;
  readonly y: number;
  readonly w: number;
  readonly h: number;
}

export type PictureItem =
  | { readonly type: 'row'; readonly title: string; readonly gridPos: GridPos }
  | {
      readonly type: 'panel';
      readonly title: string;
      readonly unit: string;
      readonly gridPos: GridPos;
      readonly series: readonly PanelSeries[];
    };

/** Grafana's grid: 24 columns, 30 px a row unit. */
const COLUMN = 1440 / 24;
const UNIT = 30;
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];

const esc = (s: string): string => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function valueText(v: number, unit: string): string {
  const abs = Math.abs(v);
  const short = (n: number) =>
    n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : n >= 10 || n === 0 ? n.toFixed(0) : n.toFixed(2);
  if (unit === 's') return abs < 1 && abs > 0 ? `${(v * 1000).toFixed(abs < 0.01 ? 2 : 0)} ms` : `${short(v)} s`;
  if (unit === 'bytes')
    return abs >= 1024 * 1024 ? `${(v / 1024 / 1024).toFixed(1)} MiB` : abs >= 1024 ? `${(v / 1024).toFixed(1)} KiB` : `${v} B`;
  if (unit === 'ops') return `${short(v)}/s`;
  return short(v);
}

function panelSvg(p: Extract<PictureItem, { type: 'panel' }>, width: number, height: number): string {
  const left = 64;
  const top = 8;
  const legendRows = Math.min(3, Math.ceil(p.series.length / 3));
  const bottom = 22 + legendRows * 16;
  const plotW = width - left - 12;
  const plotH = height - top - bottom;
  const finite = p.series.flatMap((s) => s.points.map(([, v]) => v).filter(Number.isFinite));
  const times = p.series.flatMap((s) => s.points.map(([t]) => t));
  if (finite.length === 0 || times.length === 0) {
    const what = p.series.length === 0 ? 'no data' : `${p.series.length} series, all +Inf (no rate measured yet)`;
    return `<svg width="${width}" height="${height}"><text x="${width / 2}" y="${height / 2}" text-anchor="middle" class="none">${esc(what)}</text></svg>`;
  }
  let lo = Math.min(0, ...finite);
  let hi = Math.max(...finite);
  if (hi === lo) hi = lo + 1;
  const pad = (hi - lo) * 0.08;
  hi += pad;
  if (lo < 0) lo -= pad;
  const t0 = Math.min(...times);
  const t1 = Math.max(t0 + 1, ...times);
  const x = (t: number) => left + ((t - t0) / (t1 - t0)) * plotW;
  const y = (v: number) => top + plotH - ((v - lo) / (hi - lo)) * plotH;
  const grid = [0, 0.5, 1]
    .map((f) => lo + (hi - lo) * f)
    .map(
      (v) =>
        `<line x1="${left}" x2="${left + plotW}" y1="${y(v)}" y2="${y(v)}" class="grid"/><text x="${left - 6}" y="${y(v) + 4}" text-anchor="end">${esc(valueText(v, p.unit))}</text>`,
    )
    .join('');
  const clock = (t: number) => new Date(t * 1000).toISOString().slice(11, 19);
  const axis = `<text x="${left}" y="${top + plotH + 16}">${clock(t0)}</text><text x="${left + plotW}" y="${top + plotH + 16}" text-anchor="end">${clock(t1)}</text>`;
  const lines = p.series
    .map((s, i) => {
      const pts = s.points.filter(([, v]) => Number.isFinite(v)).map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`);
      return pts.length === 0 ? '' : `<polyline points="${pts.join(' ')}" stroke="${COLORS[i % COLORS.length]}" class="series"/>`;
    })
    .join('');
  const shown = p.series.slice(0, 9);
  const legend = shown
    .map((s, i) => {
      const lx = left + (i % 3) * (plotW / 3);
      const ly = top + plotH + 34 + Math.floor(i / 3) * 16;
      return `<rect x="${lx}" y="${ly - 8}" width="10" height="3" fill="${COLORS[i % COLORS.length]}"/><text x="${lx + 14}" y="${ly}">${esc(s.legend.slice(0, 34))}</text>`;
    })
    .join('');
  const more =
    p.series.length > shown.length
      ? `<text x="${left + plotW}" y="${height - 4}" text-anchor="end">+${p.series.length - shown.length} more</text>`
      : '';
  return `<svg width="${width}" height="${height}">${grid}${axis}${lines}${legend}${more}</svg>`;
}

/** The whole dashboard as one HTML page (static: no script), `caption` under its title. */
export function dashboardPictureHtml(title: string, caption: string, items: readonly PictureItem[]): string {
  const bottom = Math.max(...items.map((i) => i.gridPos.y + i.gridPos.h));
  const boxes = items
    .map((item) => {
      const { x, y, w, h } = item.gridPos;
      const style = `left:${x * COLUMN + 4}px;top:${y * UNIT + 4}px;width:${w * COLUMN - 8}px;height:${h * UNIT - 8}px`;
      if (item.type === 'row') return `<div class="row" style="${style}">${esc(item.title)}</div>`;
      return `<div class="panel" style="${style}"><div class="title">${esc(item.title)}</div>${panelSvg(item, w * COLUMN - 10, h * UNIT - 36)}</div>`;
    })
    .join('\n');
  return `<!doctype html><html><head><meta charset="utf-8"><title>${esc(title)}</title><style>
body{margin:0;background:#111217;color:#ccccdc;font:12px system-ui,sans-serif}
header{padding:10px 12px}h1{font-size:18px;margin:0 0 2px;color:#fff}header p{margin:0;color:#8e8e9e}
.board{position:relative;width:1440px;height:${bottom * UNIT + 8}px;margin-left:8px}
.row{position:absolute;font-size:15px;font-weight:600;color:#fff;padding-top:6px}
.panel{position:absolute;background:#181b1f;border:1px solid #2c3235;border-radius:3px}
.title{font-weight:600;color:#ccccdc;padding:6px 8px 2px;white-space:nowrap;overflow:hidden}
svg text{fill:#9fa0ad;font-size:11px}.grid{stroke:#2c3235}.series{fill:none;stroke-width:1.6}.none{fill:#6e6f7e;font-size:13px}
</style></head><body><header><h1>${esc(title)}</h1><p>${esc(caption)}</p></header><div class="board">${boxes}</div></body></html>`;
}
