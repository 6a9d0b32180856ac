/** A small line of the last values (an SVG path: a hundred rows cost a hundred small elements, no canvas). */
export function Sparkline({ values, max, label }: { values: number[]; max?: number; label: string }) {
  const w = 90;
  const h = 22;
  if (values.length < 2) return <svg class="spark" width={w} height={h} aria-label={label} />;
  const top = Math.max(max ?? 0, ...values, 1e-9);
  const step = w / (values.length - 1);
  const d = values.map((v, i) => `${i ? "L" : "M"}${(i * step).toFixed(1)},${(h - 1 - (v / top) * (h - 2)).toFixed(1)}`).join("");
  return (
    <svg class="spark" width={w} height={h} viewBox={`0 0 ${w} ${h}`} aria-label={label} role="img">
      <path d={d} fill="none" stroke="currentColor" stroke-width="1.5" />
    </svg>
  );
}
