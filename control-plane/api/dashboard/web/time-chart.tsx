import uPlot from "uplot";
import { useEffect, useRef } from "preact/hooks";

/** A chart of one series over time (uPlot on a canvas); x in unix seconds. */
export function TimeChart({ title, times, values, unit, max }: { title: string; times: number[]; values: number[]; unit: string; max?: number }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | undefined>(undefined);

  useEffect(() => {
    const el = box.current!;
    const opts: uPlot.Options = {
      title,
      width: Math.max(200, el.clientWidth),
      height: 180,
      scales: { x: { time: true }, y: { range: (_u, _min, dataMax) => [0, Math.max(max ?? 0, dataMax * 1.1, 1)] } },
      series: [{}, { label: title, stroke: "#1095c1", fill: "rgba(16,149,193,0.12)", width: 1.5, value: (_u, v) => (v == null ? "–" : `${v.toFixed(1)} ${unit}`) }],
      axes: [{ stroke: "#888" }, { stroke: "#888", values: (_u, ticks) => ticks.map((t) => `${t} ${unit}`), size: 70 }],
      legend: { show: true },
    };
    plot.current = new uPlot(opts, [times, values], el);
    const ro = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(200, el.clientWidth), height: 180 }));
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.current?.destroy();
      plot.current = undefined;
    };
  }, [title, unit, max]);

  useEffect(() => {
    plot.current?.setData([times, values]);
  }, [times, values]);

  return <div class="chart" ref={box} data-chart={title} data-points={times.length} />;
}
