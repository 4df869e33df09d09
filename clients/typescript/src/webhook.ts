// Callbacks: Cellpay's cells POST every final outcome to the partner,
// signed per Standard Webhooks (https://www.standardwebhooks.com/): headers
// webhook-id (the event's ID, stable across retries: drop duplicates by
// it), webhook-timestamp (Unix seconds) and webhook-signature
// ("v1,<base64 HMAC-SHA256 over id.timestamp.body>", one per secret,
// space-separated, during a rotation), with the partner's secret
// "whsec_<base64 key>". The Go side is pkg/webhook; both check the same
// test vectors.

import { createHmac, timingSafeEqual } from "node:crypto";

import type { Transaction } from "./types";

export const HEADER_ID = "webhook-id";
export const HEADER_TIMESTAMP = "webhook-timestamp";
export const HEADER_SIGNATURE = "webhook-signature";

/** The default tolerance between a webhook-timestamp and the receiver's clock, in seconds. */
export const DEFAULT_TOLERANCE_SECONDS = 300;

/** Why a delivery was refused. */
export type WebhookErrorKind =
  /** A header is missing or malformed. */
  | "headers"
  /** The timestamp is outside the tolerance: too old (a replay) or too new (a clock far off). */
  | "timestamp"
  /** No signature matches any of the secrets. */
  | "signature"
  /** A secret is not whsec_ followed by base64. */
  | "secret";

/** WebhookVerificationError: the delivery must be refused (answer 401). Its message quotes no secret nor signature. */
export class WebhookVerificationError extends Error {
  override readonly name = "WebhookVerificationError";
  constructor(
    readonly kind: WebhookErrorKind,
    message: string,
  ) {
    super(message);
  }
}

/** Request headers: node:http's IncomingHttpHeaders, any record (names in any case), or a fetch Headers. */
export type WebhookHeaders = Record<string, string | string[] | undefined> | { get(name: string): string | null };

export interface VerifyOptions {
  /** How far the timestamp may be from now, either way; default 300. */
  toleranceSeconds?: number;
  /** The receiver's clock; default the current time. */
  now?: Date | number;
}

export interface VerifiedWebhook {
  /** webhook-id: the event's ID, the same in every retry. */
  id: string;
  /** webhook-timestamp: when this attempt was signed. */
  timestamp: Date;
}

function header(h: WebhookHeaders, name: string): string {
  if (typeof (h as { get?: unknown }).get === "function") {
    return (h as { get(name: string): string | null }).get(name) ?? "";
  }
  const rec = h as Record<string, string | string[] | undefined>;
  const direct = rec[name];
  if (direct !== undefined) {
    return (Array.isArray(direct) ? direct[0] : direct) ?? "";
  }
  for (const k of Object.keys(rec)) {
    if (k.toLowerCase() === name) {
      const v = rec[k];
      return (Array.isArray(v) ? v[0] : v) ?? "";
    }
  }
  return "";
}

const SECRET_PREFIX = "whsec_";

function secretKey(secret: string): Buffer {
  if (!secret.startsWith(SECRET_PREFIX)) {
    throw new WebhookVerificationError("secret", "webhook: malformed secret");
  }
  const b64 = secret.slice(SECRET_PREFIX.length);
  // Strict standard base64, as Go's base64.StdEncoding reads it.
  if (b64.length === 0 || b64.length % 4 !== 0 || !/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) {
    throw new WebhookVerificationError("secret", "webhook: malformed secret");
  }
  const key = Buffer.from(b64, "base64");
  if (key.length === 0) {
    throw new WebhookVerificationError("secret", "webhook: malformed secret");
  }
  return key;
}

function toBuffer(body: string | Uint8Array): Buffer {
  return typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
}

function sign1(key: Buffer, id: string, ts: number, body: Buffer): string {
  const mac = createHmac("sha256", key);
  mac.update(`${id}.${ts}.`, "utf8");
  mac.update(body);
  return mac.digest("base64");
}

/**
 * signWebhook returns the webhook-signature header for the message id sent
 * at timestamp (Unix seconds) with rawBody: "v1,<signature>" per secret,
 * space-separated. For tests of a receiver.
 */
export function signWebhook(secret: string | readonly string[], id: string, timestamp: number, rawBody: string | Uint8Array): string {
  const secrets = typeof secret === "string" ? [secret] : secret;
  if (secrets.length === 0) {
    throw new WebhookVerificationError("secret", "webhook: malformed secret: no secret");
  }
  const body = toBuffer(rawBody);
  return secrets.map((s) => "v1," + sign1(secretKey(s), id, timestamp, body)).join(" ");
}

/**
 * verifyWebhook checks a delivery: its three headers, its timestamp within
 * the tolerance of now, and its signature over the raw body (the bytes as
 * received: not JSON parsed and serialized again) against the partner's
 * secret, or any of several during a rotation. It returns the event's ID
 * and timestamp, or throws a WebhookVerificationError.
 */
export function verifyWebhook(secret: string | readonly string[], headers: WebhookHeaders, rawBody: string | Uint8Array, opts: VerifyOptions = {}): VerifiedWebhook {
  const tolerance = opts.toleranceSeconds !== undefined && opts.toleranceSeconds > 0 ? opts.toleranceSeconds : DEFAULT_TOLERANCE_SECONDS;
  const id = header(headers, HEADER_ID);
  const tsText = header(headers, HEADER_TIMESTAMP);
  const sigs = header(headers, HEADER_SIGNATURE);
  if (id === "" || tsText === "" || sigs === "") {
    throw new WebhookVerificationError("headers", "webhook: missing or malformed headers");
  }
  if (!/^[+-]?\d{1,15}$/.test(tsText)) {
    throw new WebhookVerificationError("headers", "webhook: missing or malformed headers");
  }
  const ts = Number(tsText);
  const nowMs = opts.now === undefined ? Date.now() : typeof opts.now === "number" ? opts.now : opts.now.getTime();
  const skewMs = nowMs - ts * 1000;
  if (skewMs > tolerance * 1000 || skewMs < -tolerance * 1000) {
    throw new WebhookVerificationError("timestamp", "webhook: timestamp outside the tolerance");
  }
  const body = toBuffer(rawBody);
  const given: Buffer[] = [];
  for (const part of sigs.split(" ")) {
    const comma = part.indexOf(",");
    if (comma > 0 && part.slice(0, comma) === "v1") {
      given.push(Buffer.from(part.slice(comma + 1), "utf8"));
    }
  }
  const secrets = typeof secret === "string" ? [secret] : secret;
  for (const s of secrets) {
    const want = Buffer.from(sign1(secretKey(s), id, ts, body), "utf8");
    for (const g of given) {
      if (g.length === want.length && timingSafeEqual(g, want)) {
        return { id, timestamp: new Date(ts * 1000) };
      }
    }
  }
  throw new WebhookVerificationError("signature", "webhook: no matching signature");
}

/** The type of the event every final outcome sends. */
export const EVENT_TYPE_FINAL = "transaction.final";

/** A callback's body. */
export interface CallbackEvent {
  /** "transaction.final". */
  type: string;
  /** RFC 3339: when the outcome was recorded. */
  timestamp: string;
  /** The transaction, with the masked card only. */
  data: Transaction;
}

/** parseCallback reads a verified delivery's body. */
export function parseCallback(rawBody: string | Uint8Array): CallbackEvent {
  const v: unknown = JSON.parse(toBuffer(rawBody).toString("utf8"));
  if (!v || typeof v !== "object" || typeof (v as CallbackEvent).type !== "string" || typeof (v as CallbackEvent).data !== "object") {
    throw new SyntaxError("callback: not an event");
  }
  return v as CallbackEvent;
}
