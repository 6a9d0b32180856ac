// Servers for egress-by-name tests, run (node) in a peer host's network
// namespace (peer-host.ts) with its addresses in PEER_A/B/C:
//   DNS  udp PEER_A:53  A records from the JSON file $RECORDS ({ "name": "1.2.3.4" }), read
//                       on every query so a test can change an answer; TTL 1 s; others NXDOMAIN
//   HTTPS      *:8443   $CERT/$KEY; GET / → `tls-ok <address reached> sni=<SNI> host=<Host>`;
//                       GET /hold → `start\n`, then `end\n` once GET /release has been asked
//   HTTP       *:8081   `http-ok <address reached> host=<Host>`
//   both:  GET /h/<name> → `<name>=sha256:<hex of the header's value>` or `<name>=absent` (a value
//          never goes back to the client: the caller compares hashes); POST /echo → the body back;
//          an Upgrade: websocket request → 101 and an echo of the bytes after it
// It prints `ready` once all listen.
const dgram = require("node:dgram");
const fs = require("node:fs");
const http = require("node:http");
const https = require("node:https");

function answer(msg) {
  let at = 12;
  const labels = [];
  while (msg[at]) {
    labels.push(msg.toString("latin1", at + 1, at + 1 + msg[at]));
    at += 1 + msg[at];
  }
  const qEnd = at + 5;
  const qtype = msg.readUInt16BE(at + 1);
  const name = labels.join(".").toLowerCase();
  let records = {};
  try {
    records = JSON.parse(fs.readFileSync(process.env.RECORDS, "utf8"));
  } catch {}
  const ip = records[name];
  const header = Buffer.alloc(12);
  msg.copy(header, 0, 0, 2);
  header.writeUInt16BE(ip === undefined ? 0x8183 : 0x8180, 2);
  header.writeUInt16BE(1, 4);
  const ans = [];
  if (ip !== undefined && qtype === 1) {
    const rr = Buffer.alloc(16);
    rr.writeUInt16BE(0xc00c, 0);
    rr.writeUInt16BE(1, 2);
    rr.writeUInt16BE(1, 4);
    rr.writeUInt32BE(1, 6);
    rr.writeUInt16BE(4, 10);
    ip.split(".").forEach((o, i) => (rr[12 + i] = Number(o)));
    ans.push(rr);
  }
  header.writeUInt16BE(ans.length, 6);
  return Buffer.concat([header, msg.subarray(12, qEnd), ...ans]);
}

const waiting = [];
let released = false;
const hold = (res) => {
  res.writeHead(200, { "content-type": "text/plain" });
  res.write("start\n");
  if (released) res.end("end\n");
  else waiting.push(res);
};
const release = () => {
  released = true;
  for (const r of waiting.splice(0)) r.end("end\n");
};

const crypto = require("node:crypto");
/** The routes both servers share; true when it answered. */
function shared(req, res) {
  if (req.url.startsWith("/h/")) {
    const name = req.url.slice(3).toLowerCase();
    const v = req.headers[name];
    res.end(`${name}=${v === undefined ? "absent" : "sha256:" + crypto.createHash("sha256").update(String(v)).digest("hex")}\n`);
    return true;
  }
  if (req.url === "/echo" && req.method === "POST") {
    req.pipe(res);
    return true;
  }
  return false;
}
function upgrade(req, socket, head) {
  socket.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
  if (head.length) socket.write(head);
  socket.pipe(socket);
}

const dns = dgram.createSocket("udp4");
dns.on("message", (msg, from) => {
  try {
    dns.send(answer(msg), from.port, from.address);
  } catch {}
});
const tls = https.createServer({ cert: fs.readFileSync(process.env.CERT), key: fs.readFileSync(process.env.KEY) }, (req, res) => {
  if (shared(req, res)) return;
  if (req.url === "/hold") return hold(res);
  if (req.url === "/release") {
    release();
    return res.end("released\n");
  }
  res.end(`tls-ok ${req.socket.localAddress} sni=${req.socket.servername || "-"} host=${req.headers.host || "-"}\n`);
});
const plain = http.createServer((req, res) => shared(req, res) || res.end(`http-ok ${req.socket.localAddress} host=${req.headers.host || "-"}\n`));
tls.on("upgrade", upgrade);
plain.on("upgrade", upgrade);
let n = 0;
const up = () => ++n === 3 && console.log("ready");
dns.bind(53, process.env.PEER_A, up);
tls.listen(8443, "0.0.0.0", up);
plain.listen(8081, "0.0.0.0", up);
