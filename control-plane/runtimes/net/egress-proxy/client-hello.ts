// The server name a TLS client asks for, read from its first bytes (the
// ClientHello, RFC 8446 §4.1.2, its server_name extension, RFC 6066 §3),
// before any byte goes to the server. Written here rather than taken from npm:
// no maintained package parses a ClientHello from raw bytes without also
// terminating TLS, and this is ~80 lines checked by its own tests.

/** What the first bytes say: wait for more, not TLS at all, or the hello's name (none: no SNI; `ech`: the real name is encrypted). */
export type HelloPeek = { state: "more" } | { state: "other" } | { state: "done"; name?: string; ech: boolean };

const HANDSHAKE = 0x16;
const CLIENT_HELLO = 0x01;
const EXT_SERVER_NAME = 0x0000;
const EXT_ECH = 0xfe0d;

/** The handshake bytes of the leading TLS handshake records, or `other` when the bytes are no TLS handshake. */
function handshakeBytes(buf: Buffer): Buffer | "other" {
  const parts: Buffer[] = [];
  let at = 0;
  while (at + 5 <= buf.length) {
    if (buf[at] !== HANDSHAKE || buf[at + 1] !== 0x03) return at === 0 ? "other" : Buffer.concat(parts);
    const len = buf.readUInt16BE(at + 3);
    if (len === 0 || len > 16_384 + 2048) return "other";
    if (at + 5 + len > buf.length) break;
    parts.push(buf.subarray(at + 5, at + 5 + len));
    at += 5 + len;
  }
  if (at === 0 && buf.length >= 1 && buf[0] !== HANDSHAKE) return "other";
  if (at === 0 && buf.length >= 2 && buf[1] !== 0x03) return "other";
  return Buffer.concat(parts);
}

export function peekClientHello(buf: Buffer): HelloPeek {
  const hs = handshakeBytes(buf);
  if (hs === "other") return { state: "other" };
  if (hs.length < 4) return { state: "more" };
  if (hs[0] !== CLIENT_HELLO) return { state: "other" };
  const helloLen = hs.readUIntBE(1, 3);
  if (hs.length < 4 + helloLen) return { state: "more" };
  const hello = hs.subarray(4, 4 + helloLen);
  try {
    return { state: "done", ...extensions(hello) };
  } catch {
    return { state: "done", ech: false }; // a malformed hello names nothing
  }
}

function extensions(hello: Buffer): { name?: string; ech: boolean } {
  let at = 2 + 32; // legacy_version, random
  const need = (n: number) => {
    if (at + n > hello.length) throw new RangeError("short ClientHello");
  };
  need(1);
  at += 1 + hello[at]!; // session id
  need(2);
  at += 2 + hello.readUInt16BE(at); // cipher suites
  need(1);
  at += 1 + hello[at]!; // compression methods
  if (at === hello.length) return { ech: false }; // no extensions at all
  need(2);
  const end = at + 2 + hello.readUInt16BE(at);
  at += 2;
  if (end > hello.length) throw new RangeError("short extensions");
  let name: string | undefined;
  let ech = false;
  while (at + 4 <= end) {
    const type = hello.readUInt16BE(at);
    const len = hello.readUInt16BE(at + 2);
    const data = hello.subarray(at + 4, at + 4 + len);
    at += 4 + len;
    if (type === EXT_ECH) ech = true;
    if (type !== EXT_SERVER_NAME || data.length < 2) continue;
    let i = 2;
    while (i + 3 <= data.length) {
      const kind = data[i]!;
      const n = data.readUInt16BE(i + 1);
      if (kind === 0 && i + 3 + n <= data.length) name = data.subarray(i + 3, i + 3 + n).toString("latin1");
      i += 3 + n;
    }
  }
  return { ...(name !== undefined ? { name } : {}), ech };
}
