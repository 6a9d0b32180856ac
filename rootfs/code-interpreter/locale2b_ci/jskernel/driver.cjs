// locale2b's JavaScript kernel, the Node side. jskernel.py (a Jupyter wrapper
// kernel) starts `node driver.cjs CELLS EVENTS INTERRUPTS` (three fd numbers)
// and talks to it over those pipes:
//   CELLS       in:  cells, one JSON line each: {"id": 1, "code": "..."}
//   EVENTS      out: events, one JSON line each: stream / result / error / done
//   INTERRUPTS  in:  the id of the cell to interrupt, one line each
//                    (read by a worker thread, see below)
// fd 0 is /dev/null; fds 1 and 2 are pipes jskernel.py forwards as output (what
// child processes or native code write there).
//
// Cells run through V8's inspector in REPL mode (what a browser console does):
// top-level await, `let`/`const` that persist from cell to cell and may be
// declared again, and the value of the last expression. Nothing outside Node's
// standard library is used.
"use strict";

const fs = require("node:fs");
const inspector = require("node:inspector");
const net = require("node:net");
const path = require("node:path");
const readline = require("node:readline");
const util = require("node:util");
const vm = require("node:vm");
const { createRequire } = require("node:module");
const { Worker } = require("node:worker_threads");
const { IMPORTER, importer, rewriteImports } = require("./imports.cjs");

const [CELLS_FD, EVENTS_FD, INTERRUPT_FD] = process.argv.slice(2, 5).map(Number);

/** Writes one event line; synchronous, so events keep the order they happened in. */
function emit(event) {
  const bytes = Buffer.from(JSON.stringify(event) + "\n");
  let off = 0;
  while (off < bytes.length) {
    try {
      off += fs.writeSync(EVENTS_FD, bytes, off);
    } catch (err) {
      if (err.code !== "EAGAIN") throw err;
    }
  }
}

// console.log and friends write through process.stdout/stderr: send that text
// as events so it stays in order with the cell's result and its end.
for (const name of ["stdout", "stderr"]) {
  const stream = process[name];
  stream.write = (chunk, encoding, cb) => {
    const text = typeof chunk === "string" ? chunk : Buffer.from(chunk).toString(typeof encoding === "string" ? encoding : "utf8");
    if (text) emit({ type: "stream", name, text });
    const done = typeof encoding === "function" ? encoding : cb;
    if (typeof done === "function") process.nextTick(done);
    return true;
  };
}

// `require` as in a script in the working directory: packages installed there
// (npm install) and global ones (NODE_PATH) resolve.
globalThis.require = createRequire(path.join(process.cwd(), "[cell]"));
// `import` statements and import() calls, rewritten to this (imports.cjs).
globalThis[IMPORTER] = importer(process.cwd());

const session = new inspector.Session();
session.connect();
const post = (method, params) =>
  new Promise((resolve, reject) => session.post(method, params, (err, res) => (err ? reject(err) : resolve(res))));

// A cell's synchronous part runs inside session.post(); `state` holds that
// cell's id meanwhile (0 otherwise, -id once an interrupt claimed it), so an
// interrupt only ever terminates the code of the cell it was meant for.
const state = new Int32Array(new SharedArrayBuffer(4));

// The interrupt reader: a worker, because the main thread is the one busy in a
// `while (true) {}`. It asks V8 (through an inspector session on the main
// thread) to terminate the running script, and tells the main thread, which
// stops waiting for a cell that is awaiting something. Its session stays
// connected: one opened when the interrupt comes could not connect while the
// main thread is busy.
const worker = new Worker(
  `
  const inspector = require("node:inspector");
  const net = require("node:net");
  const { parentPort, workerData } = require("node:worker_threads");
  const state = new Int32Array(workerData.state);
  const session = new inspector.Session();
  session.connectToMainThread();
  const terminate = () => session.post("Runtime.terminateExecution", () => {});
  // A socket over the pipe, not fs.read: a read blocked in the thread pool
  // would keep the worker, and so Node's exit, waiting.
  const pipe = new net.Socket({ fd: workerData.fd, readable: true, writable: false });
  let pending = "";
  pipe.on("data", (chunk) => {
    pending += chunk.toString("latin1");
    const lines = pending.split("\\n");
    pending = lines.pop();
    for (const line of lines) {
      const id = Number(line);
      if (!Number.isInteger(id) || id <= 0) continue;
      if (Atomics.compareExchange(state, 0, id, -id) === id) terminate();
      parentPort.postMessage(id);
    }
  });
  `,
  { eval: true, workerData: { fd: INTERRUPT_FD, state: state.buffer } },
);
worker.unref();

let current = null; // the running cell: {id, interrupt} (interrupt rejects its wait)

class Interrupted extends Error {}

worker.on("message", (id) => {
  if (current?.id === id) current.interrupt(new Interrupted("interrupted"));
});

/** The REPL's rule: `{a: 1}` alone is an object, not a block. */
function wrapObjectLiteral(code) {
  if (!/^\s*\{/.test(code) || /;\s*$/.test(code)) return code;
  const wrapped = `(${code.trim()})`;
  try {
    new vm.Script(wrapped);
    return wrapped;
  } catch {
    return code;
  }
}

/** The inspector's handle for a value, turned back into the value itself. */
async function valueOf(remote) {
  if (remote.objectId) {
    const key = Symbol.for("locale2b.jskernel.value");
    await post("Runtime.callFunctionOn", {
      objectId: remote.objectId,
      functionDeclaration: `function (v) { globalThis[Symbol.for("locale2b.jskernel.value")] = v; }`,
      arguments: [{ objectId: remote.objectId }],
    });
    const value = globalThis[key];
    delete globalThis[key];
    return value;
  }
  if ("unserializableValue" in remote) {
    const u = remote.unserializableValue;
    if (u.endsWith("n")) return BigInt(u.slice(0, -1));
    return { NaN, Infinity, "-Infinity": -Infinity, "-0": -0 }[u];
  }
  return remote.value;
}

/** Stack lines that belong to this driver, not to the user's code. */
function userStack(stack) {
  return stack
    .split("\n")
    .filter((line) => !/\(node:inspector|node:internal|driver\.cjs:/.test(line))
    .join("\n");
}

function errorEvent(id, err) {
  if (err instanceof Error || (err && typeof err === "object" && "stack" in err && "message" in err)) {
    const name = err.name || err.constructor?.name || "Error";
    return { type: "error", id, ename: name, evalue: String(err.message), traceback: userStack(String(err.stack || `${name}: ${err.message}`)).split("\n") };
  }
  const shown = util.inspect(err);
  return { type: "error", id, ename: "Error", evalue: `Uncaught ${shown}`, traceback: [`Uncaught ${shown}`] };
}

async function runCell(id, code) {
  const evaluation = new Promise((resolve, reject) => {
    current = { id, interrupt: reject };
    Atomics.store(state, 0, id);
    try {
      session.post(
        "Runtime.evaluate",
        { expression: wrapObjectLiteral(rewriteImports(code)), replMode: true, awaitPromise: true, objectGroup: "cell" },
        (err, res) => (err ? reject(err) : resolve(res)),
      );
    } finally {
      // The synchronous part is over: from here an interrupt only stops the wait.
      Atomics.compareExchange(state, 0, id, 0);
    }
  });
  try {
    const res = await evaluation;
    if (res.exceptionDetails) {
      const thrown = res.exceptionDetails.exception;
      emit(errorEvent(id, thrown ? await valueOf(thrown) : new Error(res.exceptionDetails.text)));
    } else if (res.result.type !== "undefined") {
      const value = await valueOf(res.result);
      emit({ type: "result", id, data: { "text/plain": util.inspect(value, { depth: 4, maxArrayLength: 200 }) } });
    }
  } catch (err) {
    // A terminated script (an interrupted busy loop) or an interrupted wait.
    if (err instanceof Interrupted || /terminated/i.test(String(err.message))) {
      emit({ type: "error", id, ename: "Interrupted", evalue: "the cell was interrupted", traceback: ["Interrupted: the cell was interrupted"] });
    } else {
      emit(errorEvent(id, err));
    }
  } finally {
    current = null;
    Atomics.store(state, 0, 0);
    session.post("Runtime.releaseObjectGroup", { objectGroup: "cell" }, () => {});
    emit({ type: "done", id });
  }
}

// What user code throws or rejects outside any cell (a timer, an unawaited
// promise) must not end the kernel: it is reported as the kernel's stderr.
process.on("uncaughtException", (err) => process.stderr.write(`Uncaught ${userStack(String(err?.stack ?? err))}\n`));
process.on("unhandledRejection", (err) => process.stderr.write(`Unhandled rejection: ${userStack(String(err?.stack ?? err))}\n`));
// The kernel manager interrupts by sending SIGINT to the whole process group:
// the interrupt pipe is what acts on it here.
process.on("SIGINT", () => {});

// Cells run one after another, in the order they arrive.
let queue = Promise.resolve();
// A socket over the pipe, as for interrupts: no thread-pool read for exit to wait on.
const cells = readline.createInterface({ input: new net.Socket({ fd: CELLS_FD, readable: true, writable: false }) });
cells.on("line", (line) => {
  const { id, code } = JSON.parse(line);
  queue = queue.then(() => runCell(id, code));
});
cells.on("close", () => process.exit(0));
emit({ type: "ready" });
