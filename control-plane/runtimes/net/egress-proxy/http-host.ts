// The host an HTTP/1.x client names, read from the Host header of its first
// request (RFC 9112 §3.2) before any byte goes to the server.

export type HostPeek = { state: "more" } | { state: "other" } | { state: "done"; name?: string };

const REQUEST_LINE = /^[A-Z]{1,16} \S+ HTTP\/1\.[01]\r\n/;

export function peekHttpHost(buf: Buffer): HostPeek {
  const head = buf.toString("latin1", 0, Math.min(buf.length, 64 * 1024));
  const firstLine = head.indexOf("\r\n");
  // A request line still arriving: a method, its target, the start of `HTTP/1.x`.
  if (firstLine < 0) return /^[A-Z]{0,16}( \S{0,8192}( [A-Z0-9/.]{0,8}\r?)?)?$/.test(head) ? { state: "more" } : { state: "other" };
  if (!REQUEST_LINE.test(head.slice(0, firstLine + 2))) return { state: "other" };
  const end = head.indexOf("\r\n\r\n");
  if (end < 0) return { state: "more" };
  const hosts = head
    .slice(firstLine + 2, end)
    .split("\r\n")
    .filter((l) => /^host:/i.test(l))
    .map((l) => l.slice(5).trim());
  // No Host, or more than one (a request smuggling its name): no name to judge by.
  if (hosts.length !== 1 || !hosts[0]) return { state: "done" };
  return { state: "done", name: hostOf(hosts[0]) };
}

/** `name`, `name:port` or `[v6]:port` → the name (an IPv6 literal keeps its brackets off). */
function hostOf(value: string): string {
  if (value.startsWith("[")) return value.slice(1, value.indexOf("]") >>> 0);
  const colon = value.lastIndexOf(":");
  return colon >= 0 && /^\d*$/.test(value.slice(colon + 1)) ? value.slice(0, colon) : value;
}
