// JSON answers of a fleet API replica's own (the E2B REST shape: code and message).
import type { ServerResponse } from "node:http";

export type Json = Record<string, unknown>;

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) return void res.destroy();
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...headers }).end(text);
}

export function sendError(res: ServerResponse, status: number, message: string, headers: Record<string, string> = {}): void {
  sendJson(res, status, { code: status, message }, headers);
}
