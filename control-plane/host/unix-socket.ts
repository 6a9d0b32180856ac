import net from "node:net";

/** Something listens on the Unix socket at `path` (the connection is closed at once, before any handshake). */
export function accepts(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createConnection(path);
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}
