import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

export interface Recorder {
  path: string;
  /** What reached the server after each handshake, in order; `<end>` when a client ended its side. */
  seen: string[];
  dials: () => number;
  close: () => void;
}

/** A hybrid-vsock server (answers `OK 49983`) that records what reaches it, per connection. */
export async function recorder(): Promise<Recorder> {
  const path = join(mkdtempSync(join(tmpdir(), "l2b-gate-")), "vsock.sock");
  const seen: string[] = [];
  let dials = 0;
  const server = net.createServer((s) => {
    dials++;
    let handshaken = false;
    s.on("data", (d: Buffer) => {
      let text = d.toString();
      if (!handshaken) {
        handshaken = true;
        s.write("OK 49983\n");
        text = text.slice(text.indexOf("\n") + 1);
      }
      if (text) seen.push(text);
    });
    s.on("end", () => seen.push("<end>"));
    s.on("error", () => undefined);
  });
  await new Promise<void>((r) => server.listen(path, r));
  // The directory goes at once: server.close() calls back only after every connection ended, which a test may never wait for.
  return {
    path,
    seen,
    dials: () => dials,
    close: () => {
      server.close();
      rmSync(dirname(path), { recursive: true, force: true });
    },
  };
}
