// One at a time: making folders for a user (mkdir as root, then chown) and
// the access checks that read those folders' owners.

let tail: Promise<unknown> = Promise.resolve();

/**
 * Runs `fn` after every earlier call has finished. envd makes a missing
 * folder as root and then gives it to the user; a check of whether the user
 * may write there, run between the two (another part of the same multipart
 * upload, say), would see a root-owned folder and refuse with a 403. Both
 * run under this lock, so a check sees a folder either absent or the
 * user's. Only the checks and the folder making are serialised, never the
 * bytes written.
 */
export function withDirLock<T>(fn: () => Promise<T>): Promise<T> {
  const run = tail.then(fn, fn);
  tail = run.catch(() => undefined);
  return run;
}
