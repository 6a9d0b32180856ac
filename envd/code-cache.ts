// How the bundle's loader compiled envd (envd/loader.ts):
// with its V8 code cache ("used"), without because V8 refused it ("rejected"),
// or without one ("none"); undefined when envd was not started by the loader
// (the CLI, tests).

/** The global (Symbol.for) the loader leaves it in. */
export const CODE_CACHE_GLOBAL = "locale2b.envd.codeCache";

export function codeCacheState(): string | undefined {
  return (globalThis as Record<symbol, unknown>)[Symbol.for(CODE_CACHE_GLOBAL)] as string | undefined;
}
