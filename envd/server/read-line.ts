import type net from "node:net";

/** Why no line came: more than `max` bytes without a newline, or nothing in time. */
export type NoLine = "too long" | "timeout";

/**
 * Reads one `\n`-terminated line (at most `max` bytes, trimmed) from a
 * socket, `first` being bytes already read; then stops reading (the socket
 * is left paused) and hands over the line and what followed it. With
 * `timeoutMs`, gives up after that long.
 */
export function readLine(
  socket: net.Socket,
  first: Buffer,
  max: number,
  done: (line: string, rest: Buffer) => void,
  failed: (why: NoLine) => void,
  timeoutMs = 0,
): void {
  let seen = first;
  const timer = timeoutMs > 0 ? setTimeout(() => stop(() => failed("timeout")), timeoutMs) : undefined;
  const stop = (then: () => void) => {
    clearTimeout(timer);
    socket.off("data", onData);
    socket.pause();
    then();
  };
  const check = () => {
    const nl = seen.indexOf(10);
    if (nl >= 0) return stop(() => done(seen.subarray(0, nl).toString("latin1").trim(), seen.subarray(nl + 1)));
    if (seen.length > max) stop(() => failed("too long"));
  };
  const onData = (chunk: Buffer) => {
    seen = seen.length ? Buffer.concat([seen, chunk]) : chunk;
    check();
  };
  socket.on("data", onData);
  socket.resume(); // a caller may have paused it (the line before this one)
  check();
}
