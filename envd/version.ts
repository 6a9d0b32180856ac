/**
 * The E2B envd version whose behaviour this envd fully implements. The SDKs
 * switch features on by it (>= 0.6.4 turns every current feature gate on),
 * so bump it only together with the behaviour it stands for.
 */
export const ENVD_VERSION = "0.6.4";

/** The TCP/vsock port envd listens on inside a sandbox. */
export const ENVD_PORT = 49983;

/**
 * The user-port forwarder's vsock port (the guest init's, or envd's where the
 * sandbox shares the host's network): `TCP <port>\n` → `OK\n` or `ERR <port>: <why>\n`.
 */
export const FORWARD_PORT = 49982;
