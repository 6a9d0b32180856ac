import { closeSync, openSync, readSync } from "node:fs";

/**
 * Watches a growing file (a VM's serial console) for a line, reading only
 * what was appended since the last look; a match split across two looks
 * is found too.
 */
export class ConsoleWatch {
  private offset = 0;
  private carry = "";
  private found = false;

  constructor(
    private readonly path: string,
    private readonly needle: string,
  ) {}

  /** True once the file has contained the needle. */
  seen(): boolean {
    if (this.found) return true;
    let fd: number;
    try {
      fd = openSync(this.path, "r");
    } catch {
      return false; // not there yet
    }
    try {
      const buf = Buffer.alloc(64 * 1024);
      for (let n; (n = readSync(fd, buf, 0, buf.length, this.offset)) > 0; ) {
        const text = this.carry + buf.subarray(0, n).toString("latin1");
        this.offset += n;
        if (text.includes(this.needle)) return (this.found = true);
        this.carry = text.slice(-this.needle.length);
      }
    } finally {
      closeSync(fd);
    }
    return false;
  }
}
