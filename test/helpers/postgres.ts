// A real, throwaway Postgres server for the tests: Debian's postgresql
// binaries, a fresh cluster in a temporary directory, reached over a Unix
// socket only (no TCP port) unless `tcp` is given, removed on stop.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";

export interface TestPostgres {
  /** A `postgresql://` URL to a new database on it (each call: another database), over its Unix socket. */
  database(name?: string): Promise<string>;
  /** The same database's URL over TCP (host:port and password of `tcp`); undefined without `tcp`. */
  tcpUrl(database: string): string | undefined;
  stop(): Promise<void>;
}

export interface PostgresOptions {
  /**
   * Also listen on TCP at this address (e.g. a test cluster's bridge address, for pods), where
   * connections need the password (scram-sha-256); the Unix socket still trusts its local user.
   */
  tcp?: { host: string; port: number; password: string };
}

/** Where Debian installs the server binaries (initdb, postgres, pg_ctl): the newest version present. */
function binDir(): string | undefined {
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root).filter((v) => existsSync(join(root, v, "bin", "postgres"))).sort((a, b) => Number(b) - Number(a));
  return versions[0] ? join(root, versions[0], "bin") : undefined;
}

/**
 * Why a Postgres cannot be started here, or undefined. The server refuses to
 * run as root: as root the cluster belongs to the `postgres` account.
 */
export function postgresMissing(): string | undefined {
  if (!binDir()) return "no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/postgres; Debian package postgresql)";
  if (process.getuid?.() === 0) {
    try {
      execFileSync("id", ["-u", "postgres"], { stdio: "ignore" });
    } catch {
      return "running as root and there is no 'postgres' account to run the server as";
    }
  }
  return undefined;
}

let counter = 0;

export async function startPostgres(opts: PostgresOptions = {}): Promise<TestPostgres> {
  const bin = binDir()!;
  const asRoot = process.getuid?.() === 0;
  const user = asRoot ? "postgres" : userInfo().username;
  const dir = mkdtempSync(join(tmpdir(), "locale2b-pg-"));
  if (asRoot) {
    const uid = Number(execFileSync("id", ["-u", "postgres"]).toString().trim());
    const gid = Number(execFileSync("id", ["-g", "postgres"]).toString().trim());
    chownSync(dir, uid, gid);
  }
  const run = (cmd: string, args: string[]): string[] => (asRoot ? ["runuser", "-u", "postgres", "--", join(bin, cmd), ...args] : [join(bin, cmd), ...args]);
  const data = join(dir, "data");
  const tcp = opts.tcp;
  const auth = tcp ? ["--auth-local=trust", "--auth-host=scram-sha-256"] : ["--auth=trust"];
  const [initCmd, ...initArgs] = run("initdb", ["-D", data, "-U", user, ...auth, "--no-sync", "-E", "UTF8", "--locale=C"]);
  execFileSync(initCmd!, initArgs, { stdio: "pipe" });
  if (tcp) {
    // initdb's pg_hba.conf covers 127.0.0.1 and ::1 only: let any address in with the password.
    const hba = join(data, "pg_hba.conf");
    writeFileSync(hba, `${readFileSync(hba, "utf8")}\nhost all all 0.0.0.0/0 scram-sha-256\n`);
  }
  const listen = tcp ? ["-c", `listen_addresses=${tcp.host}`, "-p", String(tcp.port)] : ["-c", "listen_addresses="];
  const [pgCmd, ...pgArgs] = run("postgres", ["-D", data, "-k", dir, ...listen, "-c", "fsync=off", "-c", "max_connections=200"]);
  const server: ChildProcess = spawn(pgCmd!, pgArgs, { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  server.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  const exited = new Promise<void>((resolve) => server.once("exit", () => resolve()));
  const socket = join(dir, `.s.PGSQL.${tcp?.port ?? 5432}`);
  for (let i = 0; !existsSync(socket); i++) {
    if (server.exitCode !== null || i > 400) throw new Error(`postgres did not start: ${stderr}`);
    await new Promise((r) => setTimeout(r, 25));
  }
  const url = (db: string) => `postgresql://${encodeURIComponent(user)}@${encodeURIComponent(dir)}${tcp ? `:${tcp.port}` : ""}/${db}`;
  const psql = async (sql: string): Promise<void> => {
    const pg = (await import("pg")).default;
    for (let i = 0; ; i++) {
      const c = new pg.Client({ connectionString: url("postgres") });
      try {
        await c.connect();
        await c.query(sql);
        return;
      } catch (err) {
        // Up but not yet accepting connections ("the database system is starting up"), or its socket bound but
        // not yet listening (ECONNREFUSED: a kwok test's start met that once).
        if (i > 200 || !/starting up|ECONNREFUSED/.test((err as Error).message)) throw err;
        await new Promise((r) => setTimeout(r, 25));
      } finally {
        await c.end().catch(() => undefined);
      }
    }
  };
  if (tcp) await psql(`ALTER ROLE "${user}" PASSWORD '${tcp.password.replace(/'/g, "''")}'`);
  return {
    tcpUrl: (db) => (tcp ? `postgresql://${encodeURIComponent(user)}:${encodeURIComponent(tcp.password)}@${tcp.host}:${tcp.port}/${db}` : undefined),
    async database(name = `t${process.pid}_${++counter}`) {
      await psql(`CREATE DATABASE ${name}`);
      return url(name);
    },
    async stop() {
      // SIGINT is a fast shutdown; sent to the postmaster itself (runuser does not pass signals on).
      const postmaster = (() => {
        try {
          return Number(readFileSync(join(data, "postmaster.pid"), "utf8").split("\n")[0]);
        } catch {
          return 0;
        }
      })();
      if (postmaster > 0) process.kill(postmaster, "SIGINT");
      else server.kill("SIGINT");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      if (server.exitCode === null) server.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
