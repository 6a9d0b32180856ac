// rootfs/templates/code-interpreter-v1.yaml carries what rootfs/code-interpreter
// needs: the same pins as its requirements.txt (spelled out, since `files` are
// added after `run`) and every file of the server.
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { loadDefinition } from "../../control-plane/images/template-definition.js";
import { SERVER_DIR } from "./server.js";

const GUEST_DIR = "/opt/locale2b/code-interpreter";

function serverFiles(dir = join(SERVER_DIR, "locale2b_ci")): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    if (d.name === "__pycache__") return [];
    if (d.isDirectory()) return serverFiles(join(dir, d.name));
    return /\.(py|cjs)$/.test(d.name) ? [relative(SERVER_DIR, join(dir, d.name))] : [];
  });
}

describe("the code-interpreter-v1 template definition", () => {
  const def = loadDefinition("code-interpreter-v1");

  it("parses, with Python, pip and curl (the ready check) among its packages", () => {
    expect(def.packages).toEqual(expect.arrayContaining(["python3", "python3-pip", "curl", "libstdc++6"]));
  });

  it("installs exactly the pins of rootfs/code-interpreter/requirements.txt", () => {
    const wanted = readFileSync(join(SERVER_DIR, "requirements.txt"), "utf8")
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => /^[A-Za-z0-9]/.test(l));
    const pip = def.run.find((c) => c.startsWith("pip install"));
    expect(pip, "a `pip install` run step").toBeDefined();
    const pinned = pip!.split(/\s+/).filter((w) => w.includes("=="));
    expect(pinned).toEqual(wanted);
  });

  it("copies every file of the server to /opt/locale2b/code-interpreter, and start-server.sh executable", () => {
    const byPath = new Map(def.files.map((f) => [f.path, f]));
    for (const rel of [...serverFiles(), "start-server.sh"]) {
      const f = byPath.get(`${GUEST_DIR}/${rel}`);
      expect(f, `${rel} is in the template's files`).toBeDefined();
      expect(f!.from).toBe(join(SERVER_DIR, rel));
    }
    expect(byPath.get(`${GUEST_DIR}/start-server.sh`)!.mode).toBe(0o755);
  });
});
