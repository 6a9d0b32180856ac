import type { MessageInitShape } from "@bufbuild/protobuf";
import { readdir, readFile, readlink } from "node:fs/promises";
import type { GetCountersResponseSchema } from "../../gen/ts/locale2b/envd/v1/activity_pb.js";

type Counters = MessageInitShape<typeof GetCountersResponseSchema>;

async function read(path: string): Promise<string> {
  try {
    return await readFile(path, "utf8");
  } catch {
    return "";
  }
}

/** Received and sent bytes of every interface but lo (/proc/net/dev of envd's network namespace). */
export function parseNetDev(text: string): { rx: number; tx: number } {
  let rx = 0;
  let tx = 0;
  for (const line of text.split("\n").slice(2)) {
    const colon = line.indexOf(":");
    if (colon < 0) continue;
    if (line.slice(0, colon).trim() === "lo") continue;
    const f = line.slice(colon + 1).trim().split(/\s+/).map(Number);
    rx += f[0] || 0;
    tx += f[8] || 0;
  }
  return { rx, tx };
}

/** Sectors (512 bytes) read and written by whole disks: partitions, loop, ram and dm devices are left out. */
export function parseDiskstats(text: string): { read: number; write: number } {
  let read = 0;
  let write = 0;
  for (const line of text.split("\n")) {
    const f = line.trim().split(/\s+/);
    const name = f[2];
    if (!name || !/^(vd[a-z]+|sd[a-z]+|xvd[a-z]+|hd[a-z]+|nvme\d+n\d+|mmcblk\d+|pmem\d+)$/.test(name)) continue;
    read += Number(f[5]) * 512 || 0;
    write += Number(f[9]) * 512 || 0;
  }
  return { read, write };
}

/** Storage bytes read and written by every process visible in /proc (envd's pid namespace). */
async function processIo(): Promise<{ read: number; write: number }> {
  let readBytes = 0;
  let writeBytes = 0;
  let pids: string[] = [];
  try {
    pids = (await readdir("/proc")).filter((n) => /^\d+$/.test(n));
  } catch {
    return { read: 0, write: 0 };
  }
  await Promise.all(
    pids.map(async (pid) => {
      const io = await read(`/proc/${pid}/io`);
      const r = /^read_bytes:\s+(\d+)/m.exec(io);
      const w = /^write_bytes:\s+(\d+)/m.exec(io);
      readBytes += Number(r?.[1] ?? 0);
      writeBytes += Number(w?.[1] ?? 0);
    }),
  );
  return { read: readBytes, write: writeBytes };
}

/** GetCounters: the sandbox's cumulative network and storage I/O, and what tells whether it shares the host's kernel. */
export async function getCounters(): Promise<Counters> {
  const [bootId, netns, netDev, diskstats, procs] = await Promise.all([
    read("/proc/sys/kernel/random/boot_id"),
    readlink("/proc/self/ns/net").catch(() => ""),
    read("/proc/net/dev"),
    read("/proc/diskstats"),
    processIo(),
  ]);
  const net = parseNetDev(netDev);
  const disk = parseDiskstats(diskstats);
  return {
    bootId: bootId.trim(),
    netNamespace: netns,
    netRxBytes: BigInt(net.rx),
    netTxBytes: BigInt(net.tx),
    blockReadBytes: BigInt(disk.read),
    blockWriteBytes: BigInt(disk.write),
    processReadBytes: BigInt(procs.read),
    processWriteBytes: BigInt(procs.write),
  };
}
