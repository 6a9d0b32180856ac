// ES module imports in cells. A cell is evaluated as a script (driver.cjs), where
// `import x from "y"` is a syntax error and `import("y")` has no loader (V8's
// inspector gives evaluated code none). So before a cell runs, its import
// statements become `const ... = await <importer>("y")` (REPL-mode `const`
// persists and may be declared again), and `import(` calls the importer,
// which resolves from the context's working directory like `require` does.
"use strict";

const path = require("node:path");
const { builtinModules, createRequire } = require("node:module");
const { pathToFileURL } = require("node:url");

const IMPORTER = "__locale2b_import";

/** import() from the cwd: builtins as they are, packages and files through require's resolution. */
function importer(cwd) {
  const userRequire = createRequire(path.join(cwd, "[cell]"));
  return (specifier) => {
    const name = String(specifier);
    if (name.startsWith("node:") || builtinModules.includes(name) || /^(file|data):/.test(name)) return import(name);
    return import(pathToFileURL(userRequire.resolve(name)).href);
  };
}

// `import <clause> from "m"` (the clause may span lines) and `import "m"`, each at the start of a line.
const FROM = /^([ \t]*)import\s+(?!\()([^'";]+?)\s+from\s*(['"])([^'"\n]+)\3[ \t]*;?/gm;
const BARE = /^([ \t]*)import\s*(['"])([^'"\n]+)\2[ \t]*;?/gm;
const CALL = /(?<![.\w$])import\s*\(/g;

/** The bindings of an import clause as a destructuring pattern of the module namespace. */
function pattern(clause) {
  const parts = [];
  let rest = clause.trim();
  let star;
  const def = /^([\w$]+)\s*(,|$)/.exec(rest);
  if (def) {
    parts.push(`default: ${def[1]}`);
    rest = rest.slice(def[0].length).trim();
  }
  const ns = /^\*\s*as\s+([\w$]+)$/.exec(rest);
  if (ns) star = ns[1];
  else if (rest.startsWith("{")) {
    for (const spec of rest.replace(/^\{|\}$/g, "").split(",")) {
      const m = /^\s*([\w$]+|'[^']*'|"[^"]*")(?:\s+as\s+([\w$]+))?\s*$/.exec(spec);
      if (!m) continue;
      parts.push(m[2] ? `${m[1]}: ${m[2]}` : m[1]);
    }
  } else if (rest !== "") return null; // not an import clause we know: leave the code alone
  return { parts, star };
}

/** The cell's code with its imports rewritten (unchanged when it has none). */
function rewriteImports(code) {
  let out = code.replace(FROM, (all, indent, clause, _q, specifier) => {
    const p = pattern(clause);
    if (!p) return all;
    const load = `await ${IMPORTER}(${JSON.stringify(specifier)})`;
    const lines = [];
    if (p.star) lines.push(`const ${p.star} = ${load};`);
    if (p.parts.length) lines.push(`const { ${p.parts.join(", ")} } = ${p.star ?? load};`);
    return indent + lines.join(" ");
  });
  out = out.replace(BARE, (_all, indent, _q, specifier) => `${indent}await ${IMPORTER}(${JSON.stringify(specifier)});`);
  return out.replace(CALL, `${IMPORTER}(`);
}

module.exports = { IMPORTER, importer, rewriteImports };
