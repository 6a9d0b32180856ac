/**
 * A workspace is a sandbox with this metadata key: the workspace id names
 * it, so that the mapping lives in the sandbox store itself (it survives
 * restarts, and E2B's list can filter by it).
 */
export const WORKSPACE_METADATA = "locale2b.workspace_id";
