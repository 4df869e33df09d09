// Refusals: the platform answers a refused call with the HTTP status of its
// gRPC code and a body of google.rpc.Status in JSON
// ({"code","message","details"}), whose google.rpc.ErrorInfo (domain
// cellpay.dev) holds the reason and the request ID, a google.rpc.RetryInfo
// the retry hint (also sent as Retry-After, in seconds) and a
// google.rpc.BadRequest the fields at fault. decodeError turns that, or
// anything else a proxy may answer, into a CellpayError.

/**
 * The closed set of reasons (pkg/api/apierr; docs/partners/errors.md). A
 * reason is added in a new API version, never renamed or removed; one this
 * client does not know is treated by its gRPC code.
 */
export const REASONS = [
  "API_KEY_MISSING",
  "API_KEY_INVALID",
  "PARTNER_SUSPENDED",
  "PARTNER_MISMATCH",
  "MARKET_NOT_ENABLED",
  "PAYMENT_TYPE_NOT_ENABLED",
  "INVALID_REQUEST",
  "REQUEST_TOO_LARGE",
  "TRANSACTION_ID_REUSED",
  "TRANSACTION_NOT_FOUND",
  "TRANSACTION_IN_PROGRESS",
  "RATE_LIMITED",
  "TOO_MANY_IN_FLIGHT",
  "OVERLOADED",
  "NO_ROUTE",
  "UNAVAILABLE",
  "DEADLINE_EXCEEDED",
  "CANCELLED",
  "NOT_SUPPORTED",
  "INTERNAL",
  // A capture, void or refund refused (docs/partners/follow-ups.md): the
  // original unknown (NOT_FOUND, HTTP 404), or a rule broken
  // (FAILED_PRECONDITION, HTTP 400), before anything was recorded.
  "ORIGINAL_NOT_FOUND",
  "ORIGINAL_NOT_APPROVED",
  "ORIGINAL_MISMATCH",
  "CAPTURE_EXCEEDS_AUTHORIZATION",
  "REFUND_EXCEEDS_CAPTURED",
  "REFUND_BEFORE_CAPTURE",
  "VOID_AFTER_CAPTURE",
  "ORIGINAL_VOIDED",
] as const;

/** A reason of the closed set, or (from a newer platform) another string. */
export type Reason = (typeof REASONS)[number] | (string & {});

/**
 * The reasons whose call is safe and worth sending again unchanged, under
 * the same transaction_id (after retryAfterMs when set): nothing was done,
 * or the transaction_id makes the resend answer what was done.
 */
export const RETRYABLE_REASONS: ReadonlySet<string> = new Set([
  "RATE_LIMITED",
  "TOO_MANY_IN_FLIGHT",
  "OVERLOADED",
  "UNAVAILABLE",
  "DEADLINE_EXCEEDED",
  "TRANSACTION_IN_PROGRESS",
]);

/** google.rpc.Code names, by number. */
export const GRPC_CODE_NAMES = [
  "OK",
  "CANCELLED",
  "UNKNOWN",
  "INVALID_ARGUMENT",
  "DEADLINE_EXCEEDED",
  "NOT_FOUND",
  "ALREADY_EXISTS",
  "PERMISSION_DENIED",
  "RESOURCE_EXHAUSTED",
  "FAILED_PRECONDITION",
  "ABORTED",
  "OUT_OF_RANGE",
  "UNIMPLEMENTED",
  "INTERNAL",
  "UNAVAILABLE",
  "DATA_LOSS",
  "UNAUTHENTICATED",
] as const;

/** google.rpc.Code numbers this client branches on. */
export const Code = {
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

/** A google.rpc.BadRequest field violation. */
export interface FieldViolation {
  field: string;
  description: string;
}

export interface CellpayErrorInit {
  httpStatus: number;
  grpcCode: number;
  reason: string;
  message: string;
  requestId?: string;
  retryAfterMs?: number;
  fieldViolations?: FieldViolation[];
  details?: unknown[];
  baseUrl?: string;
  cause?: unknown;
}

/**
 * CellpayError is every failure of a CellpayClient call: a refusal by the
 * platform, or no answer at all (httpStatus 0: connection refused or
 * reset, TLS failure, timeout, cancelled).
 */
export class CellpayError extends Error {
  override readonly name = "CellpayError";
  /** The HTTP status; 0 when no HTTP answer arrived. */
  readonly httpStatus: number;
  /** The google.rpc.Code number (16 for UNAUTHENTICATED...). */
  readonly grpcCode: number;
  /** The gRPC code's name ("UNAUTHENTICATED"...). */
  readonly grpcCodeName: string;
  /** The ErrorInfo reason (REASONS), or the one its gRPC code means when the answer named none. */
  readonly reason: Reason;
  /** The platform's message, as it sent it. */
  readonly serverMessage: string;
  /** The request ID to quote to support ("" when the answer had none). */
  readonly requestId: string;
  /** The retry hint in milliseconds (RetryInfo, else Retry-After), when the answer gave one. */
  readonly retryAfterMs: number | undefined;
  /** Safe and worth sending again unchanged under the same transaction_id (after retryAfterMs). */
  readonly retryable: boolean;
  /** The google.rpc.BadRequest fields at fault, if any. */
  readonly fieldViolations: FieldViolation[];
  /** The status's details as sent (google.protobuf.Any in JSON). */
  readonly details: unknown[];
  /** The access point that answered (or failed). */
  readonly baseUrl: string | undefined;

  constructor(init: CellpayErrorInit) {
    const id = init.requestId ?? "";
    super(`${init.reason}: ${init.message || "(no message)"}` + (id ? ` [request_id ${id}]` : ""), init.cause === undefined ? undefined : { cause: init.cause });
    this.httpStatus = init.httpStatus;
    this.grpcCode = init.grpcCode;
    this.grpcCodeName = GRPC_CODE_NAMES[init.grpcCode] ?? `CODE_${init.grpcCode}`;
    this.reason = init.reason;
    this.serverMessage = init.message;
    this.requestId = id;
    this.retryAfterMs = init.retryAfterMs;
    this.retryable = isRetryable(init.reason, init.grpcCode);
    this.fieldViolations = init.fieldViolations ?? [];
    this.details = init.details ?? [];
    this.baseUrl = init.baseUrl;
  }
}

/**
 * isRetryable: a known reason by RETRYABLE_REASONS; one this client does
 * not know by its gRPC code (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED,
 * RESOURCE_EXHAUSTED).
 */
export function isRetryable(reason: string, grpcCode: number): boolean {
  if ((REASONS as readonly string[]).includes(reason)) {
    return RETRYABLE_REASONS.has(reason);
  }
  return (
    grpcCode === Code.UNAVAILABLE ||
    grpcCode === Code.DEADLINE_EXCEEDED ||
    grpcCode === Code.ABORTED ||
    grpcCode === Code.RESOURCE_EXHAUSTED
  );
}

/** reasonForCode is the reason of a refusal that named none (apierr.ForCode). */
export function reasonForCode(code: number): string {
  switch (code) {
    case Code.INVALID_ARGUMENT:
    case Code.OUT_OF_RANGE:
    case Code.FAILED_PRECONDITION:
      return "INVALID_REQUEST";
    case Code.ALREADY_EXISTS:
      return "TRANSACTION_ID_REUSED";
    case Code.NOT_FOUND:
      return "TRANSACTION_NOT_FOUND";
    case Code.ABORTED:
      return "TRANSACTION_IN_PROGRESS";
    case Code.RESOURCE_EXHAUSTED:
      return "OVERLOADED";
    case Code.UNAUTHENTICATED:
      return "API_KEY_INVALID";
    case Code.PERMISSION_DENIED:
      return "PARTNER_MISMATCH";
    case Code.UNAVAILABLE:
      return "UNAVAILABLE";
    case Code.DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case Code.CANCELLED:
      return "CANCELLED";
    case Code.UNIMPLEMENTED:
      return "NOT_SUPPORTED";
  }
  return "INTERNAL";
}

/** codeForHTTP is the gRPC code of an HTTP status whose body is not a google.rpc.Status (a proxy's answer). */
export function codeForHTTP(status: number): number {
  switch (status) {
    case 400:
      return Code.INVALID_ARGUMENT;
    case 401:
      return Code.UNAUTHENTICATED;
    case 403:
      return Code.PERMISSION_DENIED;
    case 404:
      return Code.NOT_FOUND;
    case 409:
      return Code.ABORTED;
    case 412:
      return Code.FAILED_PRECONDITION;
    case 413:
    case 429:
      return Code.RESOURCE_EXHAUSTED;
    case 499:
      return Code.CANCELLED;
    case 501:
      return Code.UNIMPLEMENTED;
    case 502:
    case 503:
      return Code.UNAVAILABLE;
    case 504:
      return Code.DEADLINE_EXCEEDED;
  }
  return status >= 500 ? Code.INTERNAL : Code.UNKNOWN;
}

/** Response headers as node:http gives them (lower-case names), or a fetch Headers. */
export type ResponseHeaders = Record<string, string | string[] | undefined> | { get(name: string): string | null };

export function headerOf(h: ResponseHeaders | undefined, name: string): string | undefined {
  if (!h) {
    return undefined;
  }
  if (typeof (h as { get?: unknown }).get === "function") {
    return (h as { get(name: string): string | null }).get(name) ?? undefined;
  }
  const rec = h as Record<string, string | string[] | undefined>;
  const want = name.toLowerCase();
  for (const k of Object.keys(rec)) {
    if (k.toLowerCase() === want) {
      const v = rec[k];
      return Array.isArray(v) ? v[0] : v;
    }
  }
  return undefined;
}

/** parseDuration reads a google.protobuf.Duration in JSON ("1s", "0.250s") as milliseconds. */
export function parseDuration(s: unknown): number | undefined {
  if (typeof s !== "string") {
    return undefined;
  }
  const m = /^(\d+)(?:\.(\d{1,9}))?s$/.exec(s);
  if (!m) {
    return undefined;
  }
  const secs = Number(m[1]);
  const frac = m[2] ? Number(`0.${m[2]}`) : 0;
  return Math.round((secs + frac) * 1000);
}

/** parseRetryAfter reads an HTTP Retry-After (seconds, or an HTTP date) as milliseconds from now. */
export function parseRetryAfter(v: string | undefined, now: number = Date.now()): number | undefined {
  if (v === undefined || v.trim() === "") {
    return undefined;
  }
  if (/^\d+$/.test(v.trim())) {
    return Number(v.trim()) * 1000;
  }
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : Math.max(0, t - now);
}

const DOMAIN = "cellpay.dev";

function isType(d: Record<string, unknown>, name: string): boolean {
  const t = d["@type"];
  return typeof t === "string" && (t === name || t.endsWith("/" + name));
}

/**
 * decodeError turns an answer that is not a 200 into a CellpayError: the
 * google.rpc.Status body's code, message and details when it is one, the
 * HTTP status's meaning otherwise.
 */
export function decodeError(httpStatus: number, headers: ResponseHeaders | undefined, body: string | Uint8Array, baseUrl?: string): CellpayError {
  const text = typeof body === "string" ? body : Buffer.from(body).toString("utf8");
  let st: Record<string, unknown> | undefined;
  try {
    const v: unknown = JSON.parse(text);
    if (v && typeof v === "object" && !Array.isArray(v) && typeof (v as Record<string, unknown>)["code"] === "number") {
      st = v as Record<string, unknown>;
    }
  } catch {
    st = undefined;
  }
  const headerID = headerOf(headers, "x-request-id") ?? "";
  const headerRetry = parseRetryAfter(headerOf(headers, "retry-after"));
  if (!st) {
    const code = codeForHTTP(httpStatus);
    const reason = httpStatus === 413 ? "REQUEST_TOO_LARGE" : reasonForCode(code);
    const snippet = text.length > 200 ? text.slice(0, 200) + "..." : text;
    return new CellpayError({
      httpStatus,
      grpcCode: code,
      reason,
      message: `HTTP ${httpStatus} without a Cellpay status` + (snippet.trim() ? `: ${snippet.trim()}` : ""),
      requestId: headerID,
      ...(headerRetry !== undefined ? { retryAfterMs: headerRetry } : {}),
      ...(baseUrl !== undefined ? { baseUrl } : {}),
    });
  }
  const code = st["code"] as number;
  const message = typeof st["message"] === "string" ? st["message"] : "";
  const details = Array.isArray(st["details"]) ? (st["details"] as unknown[]) : [];
  let reason = "";
  let requestId = "";
  let retryAfterMs: number | undefined;
  const fieldViolations: FieldViolation[] = [];
  for (const raw of details) {
    if (!raw || typeof raw !== "object") {
      continue;
    }
    const d = raw as Record<string, unknown>;
    if (isType(d, "google.rpc.ErrorInfo")) {
      const domain = d["domain"];
      if ((domain === undefined || domain === DOMAIN) && typeof d["reason"] === "string") {
        reason = d["reason"];
        const md = d["metadata"];
        if (md && typeof md === "object") {
          const id = (md as Record<string, unknown>)["request_id"];
          if (typeof id === "string") {
            requestId = id;
          }
        }
      }
    } else if (isType(d, "google.rpc.RetryInfo")) {
      retryAfterMs = parseDuration(d["retry_delay"] ?? d["retryDelay"]);
    } else if (isType(d, "google.rpc.BadRequest")) {
      const fv = d["field_violations"] ?? d["fieldViolations"];
      if (Array.isArray(fv)) {
        for (const v of fv) {
          if (v && typeof v === "object") {
            const o = v as Record<string, unknown>;
            fieldViolations.push({
              field: typeof o["field"] === "string" ? o["field"] : "",
              description: typeof o["description"] === "string" ? o["description"] : "",
            });
          }
        }
      }
    }
  }
  const hint = retryAfterMs ?? headerRetry;
  return new CellpayError({
    httpStatus,
    grpcCode: code,
    reason: reason || reasonForCode(code),
    message,
    requestId: requestId || headerID,
    ...(hint !== undefined ? { retryAfterMs: hint } : {}),
    fieldViolations,
    details,
    ...(baseUrl !== undefined ? { baseUrl } : {}),
  });
}
