import { useEffect, useState } from "preact/hooks";

// The page's own routes, under /dashboard/: "" (the sandboxes) and "sandboxes/<id>". History API, no hash.

const listeners = new Set<() => void>();

export function navigate(path: string): void {
  history.pushState(null, "", path);
  for (const f of listeners) f();
}

export function usePath(): string {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const update = () => setPath(location.pathname);
    listeners.add(update);
    addEventListener("popstate", update);
    return () => {
      listeners.delete(update);
      removeEventListener("popstate", update);
    };
  }, []);
  return path;
}

/** An in-page link. */
export function linkProps(path: string): { href: string; onClick: (e: MouseEvent) => void } {
  return {
    href: path,
    onClick: (e: MouseEvent) => {
      if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
      e.preventDefault();
      navigate(path);
    },
  };
}
