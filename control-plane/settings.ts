// Every LOCALE2B_* environment variable, in one table: what it sets, its
// default, and who reads it. Code reads them through setting() (envd, which
// runs inside sandboxes and ships without the control plane, reads its three
// itself; they are listed here all the same). `locale2b serve --help` prints
// this table and docs/configuration.md explains it; a test keeps the three in
// step with the source.

export type SettingReader = "serve" | "cli" | "templates" | "process" | "gvisor" | "qemu" | "firecracker" | "envd" | "client";

export interface Setting {
  /** What it sets, in a line. */
  what: string;
  /** Its default, in words (empty: none). */
  default: string;
  /** Who reads it. */
  reader: SettingReader;
  /** The serve flag that wins over it, if any. */
  flag?: string;
}

export const SETTINGS = {
  LOCALE2B_DATA_DIR: { what: "state: SQLite, sandboxes, images", default: "/var/lib/locale2b as root, else ~/.local/state/locale2b", reader: "cli", flag: "--data-dir" },
  LOCALE2B_API_KEY: { what: "an API key the server accepts ('e2b_' + 40 hex); the key client commands send", default: "the first start creates one and prints it", reader: "cli" },
  LOCALE2B_DATABASE_URL: { what: "a postgresql:// URL: sandboxes, keys, snapshots and templates in Postgres instead of the data dir's SQLite (a store hosts can share)", default: "unset: SQLite in the data dir", reader: "cli", flag: "--database-url" },
  LOCALE2B_NODE_NAME: { what: "this host's name in a shared store: its sandboxes carry it, and a start adopts only those", default: "the host name (with LOCALE2B_DATABASE_URL)", reader: "serve", flag: "--node-name" },
  LOCALE2B_NODE_TOKEN: { what: "a fleet's shared secret (at least 32 characters): API replicas send it to nodes, and nodes answer nothing else", default: "unset: required by `locale2b api` and `locale2b node`", reader: "cli" },
  LOCALE2B_ADVERTISE_URL: { what: "where a fleet node is reached by the API replicas (http://host:port)", default: "http://<host name>:<port>", reader: "serve", flag: "--advertise-url" },
  LOCALE2B_SANDBOX_DENY: { what: "IPv4 addresses and CIDRs no sandbox may reach whatever its allowOut (your own infrastructure); the server adds its Postgres and, in Kubernetes, the API server", default: "unset", reader: "serve" },
  LOCALE2B_SANDBOX_ALLOW_PRIVATE: { what: "parts of the private ranges (10/8, 172.16/12, 192.168/16, 100.64/10) sandboxes may reach, e.g. an internal package mirror; each sandbox's allowOut and denyOut still apply", default: "unset: none (as on E2B)", reader: "serve" },
  LOCALE2B_URL: { what: "the server client commands talk to", default: "http://127.0.0.1:3000", reader: "cli" },
  LOCALE2B_RUNTIME: { what: "sandbox runtime: process, gvisor, qemu or firecracker", default: "process", reader: "serve", flag: "--runtime" },
  LOCALE2B_WARM_POOL: { what: "sandboxes started ahead of time for default-shape creates", default: "2 on process, else 0", reader: "serve", flag: "--warm-pool" },
  LOCALE2B_TEMPLATE_WARM_POOL: { what: "sandboxes kept started ahead of creates for each other template with a start command created lately (at most 4 templates)", default: "1 on process, else 0", reader: "serve" },
  LOCALE2B_MAX_CONCURRENT_CREATES: { what: "sandbox starts run at once", default: "one per CPU", reader: "serve", flag: "--max-concurrent-creates" },
  LOCALE2B_CREATE_QUEUE: { what: "creates that may wait for a start before 429", default: "16 per start slot", reader: "serve", flag: "--create-queue" },
  LOCALE2B_AUDIT_RETENTION_DAYS: { what: "days audit entries are kept (in a fleet: `locale2b api` prunes the shared history; nodes do not)", default: "30", reader: "serve", flag: "--audit-retention-days" },
  LOCALE2B_EVENT_RETENTION_HOURS: { what: "hours events are kept for replay (in a fleet: set on `locale2b api`)", default: "24", reader: "serve", flag: "--event-retention-hours" },
  LOCALE2B_METRICS_INTERVAL_S: { what: "seconds between metric samples of each running sandbox", default: "5", reader: "serve", flag: "--metrics-interval-s" },
  LOCALE2B_METRICS_RETENTION_HOURS: { what: "hours metric samples are kept (in a fleet: set on `locale2b api`)", default: "24", reader: "serve", flag: "--metrics-retention-hours" },
  LOCALE2B_SESSION_BUFFER_MB: { what: "output kept per background session, MiB", default: "8", reader: "serve", flag: "--session-buffer-mb" },
  LOCALE2B_WORKSPACE_IDLE_TIMEOUT_S: { what: "idle seconds before a workspace sandbox pauses", default: "3600", reader: "serve", flag: "--workspace-idle-timeout-s" },
  LOCALE2B_TLS_CERT: { what: "serve HTTPS (HTTP/1.1 and HTTP/2) on the port with these PEM certificate files, comma-separated (a wildcard *.<domain> covers the sandbox hosts; several: chosen by SNI); reloaded when they change", default: "unset: plain HTTP and h2c", reader: "serve", flag: "--tls-cert" },
  LOCALE2B_TLS_KEY: { what: "the unencrypted PEM keys of LOCALE2B_TLS_CERT's certificates, in the same order", default: "", reader: "serve", flag: "--tls-key" },
  LOCALE2B_NO_IMAGE_BUILD: { what: "1: serve does not build a missing base template at start", default: "build it (as root)", reader: "serve" },
  LOCALE2B_LOG_LEVEL: { what: "pino log level of the server and of envd (stderr, one JSON event per line)", default: "info", reader: "serve" },
  LOCALE2B_DEBUG: { what: "1: CLI errors print their stack", default: "", reader: "cli" },
  LOCALE2B_IMAGES_DIR: { what: "image cache: templates, guest kernel, envd bundle, init", default: "<data dir>/images", reader: "templates" },
  LOCALE2B_KERNEL: { what: "guest kernel for the VM runtimes", default: "the last kernel built into the image cache", reader: "templates" },
  LOCALE2B_DEBIAN_MIRROR: { what: "Debian mirror template builds use", default: "the template's mirror", reader: "templates" },
  LOCALE2B_REGISTRY_MIRRORS: { what: "image pulls: registry mirrors, REGISTRY=MIRROR[/PATH] comma-separated (* for every registry), tried in order before the registry", default: "none", reader: "templates" },
  LOCALE2B_REGISTRY_MIRRORS_ONLY: { what: "1: image pulls never ask a registry that has a mirror (an air-gapped host)", default: "the registry after its mirrors", reader: "templates" },
  LOCALE2B_INSECURE_REGISTRIES: { what: "image pulls: registries (host or host:port, comma-separated) allowed over plain HTTP or with an unverified certificate", default: "none: HTTPS with a trusted certificate", reader: "templates" },
  LOCALE2B_IMAGE_PULL_MAX_MB: { what: "largest image a pull accepts, MiB (its layers, compressed and unpacked)", default: "20480", reader: "templates" },
  LOCALE2B_IMAGE_PULL_TIMEOUT_S: { what: "seconds an image pull may take", default: "1800", reader: "templates" },
  LOCALE2B_ECR_ENDPOINT: { what: "image pulls with AWS keys: the ECR API asked for a registry token ({region} is replaced)", default: "https://api.ecr.{region}.amazonaws.com", reader: "templates" },
  LOCALE2B_TEMPLATE_BUILDS: { what: "template builds run at once (the rest wait their turn)", default: "one per 4 CPUs, at least 1", reader: "serve" },
  LOCALE2B_TEMPLATE_BUILD_TIMEOUT_S: { what: "seconds a template build may take", default: "3600", reader: "serve" },
  LOCALE2B_TEMPLATE_BUILD_DISK_MB: { what: "disk of a template build's sandbox, MiB (sparse: only what it writes takes space)", default: "10240", reader: "serve" },
  LOCALE2B_TEMPLATE_CACHE_MB: { what: "template build step cache size, MiB (the results used longest ago go first)", default: "10240", reader: "serve" },
  LOCALE2B_TEMPLATE_UPLOAD_MAX_MB: { what: "largest COPY upload of a template build, MiB", default: "2048", reader: "serve" },
  LOCALE2B_TEMPLATE_READY_TIMEOUT_S: { what: "seconds a template's ready command may take to succeed (its build's check, and each create)", default: "600", reader: "serve" },
  LOCALE2B_TEMPLATE_UPLOAD_TTL_S: { what: "seconds a template file upload URL stays valid", default: "3600", reader: "serve" },
  LOCALE2B_IMAGE_CA_DIR: { what: "CA certificates (*.crt) template builds copy into images, trusted there; none: no CAs", default: "/usr/local/share/ca-certificates (the host's locally added CAs)", reader: "templates" },
  LOCALE2B_DNS: { what: "name servers for sandboxes with their own network, comma-separated", default: "the host's non-loopback ones", reader: "serve" },
  LOCALE2B_ENVD_LOG_LEVEL: { what: "envd's log level in sandboxes", default: "info", reader: "serve" },
  LOCALE2B_VOLUME_SIZE_MB: { what: "a new volume's size limit in MiB unless its create says (sizeMB); a sparse ext4 image: host disk is used only as files are written", default: "10240", reader: "serve" },
  LOCALE2B_SECRETS_KEY: { what: "the key secret values are encrypted under (AES-256-GCM): 32 bytes as base64 or 64 hex digits; every API replica and node of a fleet needs the same one. Wins over the key file", default: "unset: the key file", reader: "serve" },
  LOCALE2B_SECRETS_KEY_FILE: { what: "the file holding the secrets key, created with mode 0600 when a secret first needs it (outside the database; losing it makes stored secret values unreadable)", default: "<data dir>/secrets.key; none on a Postgres store (set LOCALE2B_SECRETS_KEY)", reader: "serve" },
  LOCALE2B_EGRESS_UPSTREAM_CA: { what: "a PEM file of CAs the egress proxy also trusts when it connects on for a host with network.rules (besides the host's CA bundle)", default: "the host's CA bundle only", reader: "serve" },
  LOCALE2B_CGROUP_PARENT: { what: "process runtime: the cgroup sandboxes go under", default: "the server's own", reader: "process" },
  LOCALE2B_PIDS_MAX_TOTAL: { what: "process runtime: processes all sandboxes may have together", default: "3/4 of the smaller of pid_max and threads-max", reader: "process" },
  LOCALE2B_ID_BASE: { what: "process runtime: first host uid/gid of sandbox user namespaces", default: "the locale2b entry of /etc/subuid and /etc/subgid, else a free range", reader: "process" },
  LOCALE2B_PROCESS_HOST_RW: { what: "1: process runtime without a template rootfs keeps the host's folders writable (tests only)", default: "read-only", reader: "process" },
  LOCALE2B_RUNSC: { what: "gvisor: the runsc binary", default: "runsc on PATH or /usr/local/bin", reader: "gvisor" },
  LOCALE2B_GVISOR_WARM_START: { what: "0: gvisor creates always boot (no restore from a template's warm-start checkpoint)", default: "restore when the image is built", reader: "gvisor" },
  LOCALE2B_GVISOR_OUTPUT_COALESCE_MS: { what: "gvisor: ms envd waits after a read that emptied a command's 1 MiB output pipe, once it printed 1 MiB (fewer wake-ups through gVisor's kernel); 0: neither, default pipes", default: "2", reader: "gvisor" },
  LOCALE2B_RUNSC_DEBUG_LOG: { what: "gvisor: a directory for runsc's debug logs (runsc --debug), a folder per sandbox id", default: "none", reader: "gvisor" },
  LOCALE2B_RUNSC_PLATFORM: { what: "gvisor: runsc --platform (systrap, ptrace, kvm)", default: "runsc's default (systrap)", reader: "gvisor" },
  LOCALE2B_QEMU: { what: "qemu: qemu-system-x86_64", default: "on PATH", reader: "qemu" },
  LOCALE2B_QEMU_IMG: { what: "qemu: qemu-img", default: "on PATH", reader: "qemu" },
  LOCALE2B_VHOST_VSOCK: { what: "qemu: vhost-device-vsock", default: "on PATH or /usr/local/bin", reader: "qemu" },
  LOCALE2B_VIRTIOFSD: { what: "qemu: virtiofsd (volumes)", default: "on PATH, /usr/lib/qemu or /usr/libexec", reader: "qemu" },
  LOCALE2B_QEMU_TCG_CPUS: { what: "qemu: vCPUs a VM gets under emulation (TCG)", default: "1", reader: "qemu" },
  LOCALE2B_FIRECRACKER: { what: "firecracker: the firecracker binary", default: "on PATH", reader: "firecracker" },
  LOCALE2B_JAILER: { what: "firecracker: the jailer binary", default: "on PATH", reader: "firecracker" },
  LOCALE2B_FIRECRACKER_JAILER: { what: "1: start Firecracker through its jailer", default: "no jailer", reader: "firecracker" },
  LOCALE2B_FIRECRACKER_CHROOT_BASE: { what: "firecracker: the jailer's chroot base", default: "/srv/jailer", reader: "firecracker" },
  LOCALE2B_FIRECRACKER_UID: { what: "firecracker: uid the jailer drops to", default: "65534", reader: "firecracker" },
  LOCALE2B_FIRECRACKER_GID: { what: "firecracker: gid the jailer drops to", default: "65534", reader: "firecracker" },
  LOCALE2B_FIRECRACKER_DNS: { what: "firecracker: the guest's name server (kernel ip= argument)", default: "1.1.1.1", reader: "firecracker" },
  LOCALE2B_ENVD_ACCESS_TOKEN: { what: "`locale2b envd`: the access token it requires", default: "none (set by /init)", reader: "envd" },
  LOCALE2B_ENVD_CODE_CACHE_OUT: { what: "envd's loader: write the V8 code cache to this file when envd exits (set by the bundle build, envd-bundle.ts)", default: "none", reader: "envd" },
  LOCALE2B_SPAWN_HELPER: { what: "envd: the program that starts its processes (`locale2b-init --spawn-helper`; the init sets it in every sandbox)", default: "none: Node's own spawn", reader: "envd" },
  LOCALE2B_OUTPUT_PIPE_SIZE: { what: "envd's spawn helper: the size of each command's stdout and stderr pipe, bytes (F_SETPIPE_SZ; the gvisor runtime sets 1048576)", default: "the kernel's (64 KiB)", reader: "envd" },
  LOCALE2B_OUTPUT_COALESCE_MS: { what: "envd: ms without reading after a read that emptied a command's output pipe, once it carried 1 MiB (the gvisor runtime sets 2)", default: "0: read at once", reader: "envd" },
  LOCALE2B_ENVD_STAGING_DIR: { what: "envd: where uploads are staged before their rename", default: "/var/tmp/.locale2b-envd-uploads, else under the temp dir", reader: "envd" },
  LOCALE2B_BASE_URL: { what: "agent harnesses: the workspace API's base URL (serve prints it)", default: "", reader: "client" },
} as const satisfies Record<string, Setting>;

export type SettingName = keyof typeof SETTINGS;

/** A LOCALE2B_* variable's value; empty or blank counts as unset. */
export function setting(name: SettingName, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === "" ? undefined : v;
}

/** The table as `serve --help` prints it. */
export function settingsHelp(): string {
  const names = Object.keys(SETTINGS) as SettingName[];
  const width = Math.max(...names.map((n) => n.length));
  return names
    .map((n) => {
      const s: Setting = SETTINGS[n];
      const extra = [s.flag ? `flag ${s.flag} wins` : "", s.default ? `default: ${s.default}` : ""].filter(Boolean).join("; ");
      return `  ${n.padEnd(width)}  [${s.reader}] ${s.what}${extra ? ` (${extra})` : ""}`;
    })
    .join("\n");
}
