// Running nft on the shared table of sandbox networks (nft.ts describes it).
import { findExecutable } from "../../host/executables.js";
import { runCommand } from "../../host/commands.js";

export const TABLE = "inet locale2b";

/** Runs an nft script as one transaction. */
export async function nft(script: string): Promise<void> {
  await runCommand(findExecutable("nft")!, ["-f", "-"], { input: script }).catch((err: { stderr?: string; message: string }) => {
    throw new Error(`nft failed: ${(err.stderr ?? err.message).trim()}`);
  });
}
