// `locale2b template build|list`: guest images (root filesystems) built from
// the definitions in rootfs/templates/, for the VM runtimes and the process
// runtime's template mode.
import { imagesDir } from "../images/layout.js";
import { DefinitionError } from "../images/template-definition.js";
import { BuildSetupError, BuildStepError, formatBytes, formatSeconds, type StepEvent } from "../images/template-exec.js";
import { CliError, parse, table, UsageError } from "./args.js";

const HELP = `Usage: locale2b template <command> [options]

Guest images: a root filesystem (directory and ext4 image) with Debian, the
packages of a definition, this control plane's Node, envd and the guest init.

Commands:
  build <NAME|FILE.yaml>   build rootfs/templates/NAME.yaml (or a yaml file);
                           cached: an unchanged template builds in a moment
  list                     built templates: name, hash, built at, sizes, path

Options:
      --force            build: rebuild the base layer and the image even if cached
  -v, --verbose          build: show the output of debootstrap and the commands
      --images-dir DIR   the image cache (default: $LOCALE2B_IMAGES_DIR, or
                         <data dir>/images: ${imagesDir()})
      --json             list: print JSON
  -h, --help             show this help

Building needs root (debootstrap, chroot), debootstrap and e2fsprogs
(scripts/setup-host). The definition format is in rootfs/README.md.
`;

const CMD = "template";

export async function runTemplateCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(CMD, {
    args,
    allowPositionals: true,
    options: {
      force: { type: "boolean" },
      verbose: { type: "boolean", short: "v" },
      "images-dir": { type: "string" },
      json: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  const [sub, ...rest] = positionals;
  if (values.help || sub === "help" || sub === undefined) {
    process.stdout.write(HELP);
    return sub === undefined && !values.help ? 2 : 0;
  }
  const dir = values["images-dir"] || imagesDir();
  switch (sub) {
    case "build": {
      if (rest.length !== 1) throw new UsageError("build takes one template: a name from rootfs/templates or a .yaml file", `${CMD} build`);
      return build(rest[0]!, dir, values.force ?? false, values.verbose ?? false);
    }
    case "list":
    case "ls":
      if (rest.length) throw new UsageError(`list takes no arguments, got '${rest[0]}'`, `${CMD} list`);
      return list(dir, values.json ?? false);
    default:
      throw new UsageError(`unknown command '${sub}' (build, list)`, CMD);
  }
}

/** Prints "[4/8] debootstrap bookworm (minbase + 24 packages)... 93.2 s", the start as it begins, the time when done. */
function stepPrinter() {
  let open = false;
  const out = process.stdout;
  const progress = (e: StepEvent) => {
    if (e.state === "start") {
      if (open) out.write("\n");
      out.write(`[${e.index}/${e.total}] ${e.title}...`);
      open = true;
      return;
    }
    const time = formatSeconds(e.seconds ?? 0);
    const what = e.state === "cached" ? `${e.note ?? "cached"} (${time})` : e.state === "failed" ? `FAILED after ${time}` : `${time}${e.note ? ` (${e.note})` : ""}`;
    out.write(open ? ` ${what}\n` : `[${e.index}/${e.total}] ${e.title}... ${what}\n`);
    open = false;
  };
  const log = (line: string) => {
    if (open) out.write("\n");
    open = false;
    out.write(`    ${line}\n`);
  };
  const close = () => {
    if (open) out.write("\n");
    open = false;
  };
  return { progress, log, close };
}

async function build(template: string, dir: string, force: boolean, verbose: boolean): Promise<number> {
  const { buildTemplate } = await import("../images/template-build.js");
  const printer = stepPrinter();
  try {
    const r = await buildTemplate(template, { imagesDir: dir, force, verbose, progress: printer.progress, log: printer.log });
    printer.close();
    const m = r.manifest;
    const state = r.cached ? "up to date" : r.layerCached ? "built (base layer cached)" : "built";
    process.stdout.write(
      `template ${r.id} ${state} in ${formatSeconds(r.seconds)}\n` +
        `  rootfs      ${r.rootfsDir} (${formatBytes(m.rootfsBytes)})\n` +
        `  image       ${r.rootfsImage} (${formatBytes(m.imageBytes)}, ext4)\n` +
        `  node ${m.nodeVersion}, envd bundle ${m.envdBundle}, layer ${m.layer}\n`,
    );
    return 0;
  } catch (err) {
    printer.close();
    if (err instanceof DefinitionError || err instanceof BuildSetupError || err instanceof BuildStepError) throw new CliError(err.message);
    throw err;
  }
}

async function list(dir: string, json: boolean): Promise<number> {
  const { listBuiltTemplates } = await import("../images/template-store.js");
  const built = listBuiltTemplates(dir);
  if (json) {
    process.stdout.write(`${JSON.stringify(built.map((t) => ({ name: t.name, hash: t.hash, current: t.current, builtAt: t.manifest.builtAt, rootfsBytes: t.manifest.rootfsBytes, imageBytes: t.manifest.imageBytes, path: t.dir })), null, 2)}\n`);
    return 0;
  }
  if (!built.length) {
    process.stdout.write(`no templates built in ${dir}: run 'locale2b template build base'\n`);
    return 0;
  }
  const rows = built.map((t) => [
    t.name + (t.current ? "" : " (old)"),
    t.hash,
    t.manifest.builtAt.replace("T", " ").replace(/\.\d+Z$/, "Z"),
    formatBytes(t.manifest.rootfsBytes),
    formatBytes(t.manifest.imageBytes),
    t.dir,
  ]);
  process.stdout.write(table(["NAME", "HASH", "BUILT AT", "ROOTFS", "IMAGE", "PATH"], rows));
  return 0;
}
