// What the runtime remembers of one microVM: returned as Instance.persisted
// (the store keeps it) and also written to <dir>/firecracker.json on every
// change, so that adoption after a restart sees the latest state even when
// the store's copy predates a pause or a resume.
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import type { JailSpec } from "./layout.js";

export interface TapRecord {
  /** Host device name (`l2b…`, at most 15 bytes). */
  name: string;
  /** Index of the sandbox's /30 in the runtime's address range. */
  index: number;
  guestMac: string;
}

export interface PersistedFirecracker {
  v: 1;
  sandboxId: string;
  /** The Firecracker process (0 while paused: no process then). */
  pid: number;
  /** Its start time in clock ticks after boot (with the pid, names one process for good). */
  startTime: number;
  /** Host paths. */
  apiSock: string;
  vsock: string;
  rootfs: string;
  snapshot: { vmstate: string; memory: string };
  /** True when the VM lives only as a snapshot on disk. */
  paused: boolean;
  cpuCount: number;
  memoryMB: number;
  /** When the guest booted (ms since the epoch), for console timestamps. */
  bootedAt: number;
  tap?: TapRecord;
  jail?: JailSpec;
  /** ms since the epoch of the last change; the newer of two copies wins. */
  updatedAt: number;
}

/** The record as a plain object, JSON-safe. */
export function toRecord(p: PersistedFirecracker): Record<string, unknown> {
  return JSON.parse(JSON.stringify(p)) as Record<string, unknown>;
}

/** Writes the state file atomically (temp file + rename). */
export function writeStateFile(path: string, p: PersistedFirecracker): void {
  const tmp = `${path}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(p, null, 2)}\n`);
  renameSync(tmp, path);
}

/** A persisted record when `raw` looks like one of this sandbox's, else undefined. */
export function parseRecord(raw: unknown, sandboxId: string): PersistedFirecracker | undefined {
  if (!raw || typeof raw !== "object") return undefined;
  const p = raw as Partial<PersistedFirecracker>;
  if (p.v !== 1 || p.sandboxId !== sandboxId) return undefined;
  if (typeof p.apiSock !== "string" || typeof p.vsock !== "string" || typeof p.rootfs !== "string") return undefined;
  if (!p.snapshot || typeof p.snapshot.vmstate !== "string" || typeof p.snapshot.memory !== "string") return undefined;
  return {
    v: 1,
    sandboxId,
    pid: Number(p.pid) || 0,
    startTime: Number(p.startTime) || 0,
    apiSock: p.apiSock,
    vsock: p.vsock,
    rootfs: p.rootfs,
    snapshot: { vmstate: p.snapshot.vmstate, memory: p.snapshot.memory },
    paused: p.paused === true,
    cpuCount: Number(p.cpuCount) || 1,
    memoryMB: Number(p.memoryMB) || 512,
    bootedAt: Number(p.bootedAt) || 0,
    tap: p.tap && typeof p.tap.name === "string" ? p.tap : undefined,
    jail: p.jail && typeof p.jail.chrootBase === "string" ? p.jail : undefined,
    updatedAt: Number(p.updatedAt) || 0,
  };
}

/** The newer of the store's record and the state file's. */
export function latestRecord(persisted: unknown, stateFile: string, sandboxId: string): PersistedFirecracker | undefined {
  let fromFile: PersistedFirecracker | undefined;
  try {
    fromFile = parseRecord(JSON.parse(readFileSync(stateFile, "utf8")), sandboxId);
  } catch {
    fromFile = undefined;
  }
  const fromStore = parseRecord(persisted, sandboxId);
  if (!fromFile) return fromStore;
  if (!fromStore) return fromFile;
  return fromFile.updatedAt >= fromStore.updatedAt ? fromFile : fromStore;
}
