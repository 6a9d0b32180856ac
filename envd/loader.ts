// The envd bundle's entry, envd.js (GUEST.envd): a few lines of CommonJS
// that compile the bundled envd (envd-main.cjs) with the V8 code cache made
// when the bundle was built (envd-main.cjs.cache), so a sandbox's envd
// neither parses its half a megabyte of JavaScript nor compiles the
// functions of its start-up and first requests again. A cache V8 does not
// take (another node, other flags) is ignored: envd then compiles as
// usual. envd logs which it was (`codeCache` in "envd listening").
//
// LOCALE2B_ENVD_CODE_CACHE_OUT=<file>: write the cache there when envd
// exits (envd-bundle.ts, at build time; removed from envd's environment).

import { CODE_CACHE_GLOBAL } from "./code-cache.js";

export const ENVD_MAIN = "envd-main.cjs";
/** What the bundle build puts around esbuild's output (Node's own CommonJS wrapper, Module.wrap). */
export const ENVD_MAIN_HEAD = "(function (exports, require, module, __filename, __dirname) { ";
export const ENVD_MAIN_TAIL = "\n});";
export const ENVD_CODE_CACHE = `${ENVD_MAIN}.cache`;

export const ENVD_LOADER = `#!/usr/bin/env node
// locale2b envd (envd/loader.ts): runs ${ENVD_MAIN} with its V8 code cache.
"use strict";
const fs = require("node:fs");
const Module = require("node:module");
const { join } = require("node:path");
const { Script } = require("node:vm");
const main = join(__dirname, ${JSON.stringify(ENVD_MAIN)});
let cachedData;
try {
  cachedData = fs.readFileSync(join(__dirname, ${JSON.stringify(ENVD_CODE_CACHE)}));
} catch {}
// ${ENVD_MAIN} is already wrapped as a CommonJS module function (ENVD_MAIN_HEAD … ENVD_MAIN_TAIL): compiled as
// read, with no copy of its half a megabyte of text.
const script = new Script(fs.readFileSync(main, "utf8"), { filename: main, cachedData });
globalThis[Symbol.for(${JSON.stringify(CODE_CACHE_GLOBAL)})] = cachedData ? (script.cachedDataRejected ? "rejected" : "used") : "none";
cachedData = undefined;
const out = process.env.LOCALE2B_ENVD_CODE_CACHE_OUT;
delete process.env.LOCALE2B_ENVD_CODE_CACHE_OUT;
if (out) process.once("exit", () => fs.writeFileSync(out, script.createCachedData()));
const mod = new Module(main, module);
mod.filename = main;
mod.paths = Module._nodeModulePaths(__dirname);
script.runInThisContext().call(mod.exports, mod.exports, Module.createRequire(main), mod, main, __dirname);
`;
