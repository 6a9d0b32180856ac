import { useEffect, useRef, useState } from "preact/hooks";

export interface Loaded<T> {
  data: T | undefined;
  error: string;
  /** Loads again now. */
  reload: () => void;
}

/**
 * Loads `fetcher()` when `deps` change, again on reload(), and every
 * `everyMs` when given (one timer per page: pages poll one summary call,
 * never one call per row). An answer that comes after the component went
 * away, or after a newer load started, is dropped.
 */
export function useLoad<T>(fetcher: () => Promise<T>, deps: unknown[], everyMs?: number): Loaded<T> {
  const [data, setData] = useState<T | undefined>();
  const [error, setError] = useState("");
  const [version, setVersion] = useState(0);
  const latest = useRef(0);
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stopped = false;
    const run = async () => {
      const n = ++latest.current;
      try {
        const d = await fetcher();
        if (stopped || n !== latest.current) return;
        setData(d);
        setError("");
      } catch (err) {
        if (!stopped && n === latest.current) setError((err as Error).message);
      }
      if (!stopped && everyMs) timer = setTimeout(() => void run(), everyMs);
    };
    void run();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [...deps, version]);
  return { data, error, reload: () => setVersion((v) => v + 1) };
}
