// CellpayClient: a thin client of the partners' REST/JSON API over HTTPS
// with node:https (no runtime dependency), so that it can trust a private
// CA (the ca option), which Node's fetch cannot without a dispatcher.

import * as http from "node:http";
import * as https from "node:https";

import { CellpayError, Code, decodeError } from "./errors";
import type { SubmitTransactionRequest, Transaction } from "./types";

export const USER_AGENT = "cellpay-client-ts/0.1.0";

/** The largest answer read, in bytes. */
const MAX_ANSWER = 1 << 20;

export interface CellpayClientOptions {
  /** The access point, e.g. "https://api.cellpay.example" (a path prefix is kept). */
  baseUrl?: string;
  /**
   * Access points in order of preference, e.g. [primary, backup]: a call
   * that gets no answer or UNAVAILABLE from one is sent at once to the
   * next, which then serves the calls that follow (README: "Two access
   * points"). Either baseUrl or baseUrls.
   */
  baseUrls?: readonly string[];
  /** The partner's API key, sent as "Authorization: Bearer <key>". */
  apiKey: string;
  /** CA certificate(s) to trust, PEM (instead of Node's default roots). */
  ca?: string | Buffer | ReadonlyArray<string | Buffer>;
  /** How long one attempt at one access point may take; default 30000. */
  timeoutMs?: number;
  /** Sent as User-Agent, after this client's own. */
  userAgent?: string;
}

export interface CallOptions {
  /** Cancels the call (it then fails with reason CANCELLED). */
  signal?: AbortSignal;
}

export interface SubmitOptions extends CallOptions {
  /**
   * Sent as the Idempotency-Key header: the transaction_id. It fills an
   * absent transaction_id; one that differs is refused (INVALID_REQUEST).
   */
  idempotencyKey?: string;
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

class NoAnswer extends Error {
  constructor(
    readonly kind: "timeout" | "cancelled" | "transport",
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

function errCode(e: unknown): string {
  const c = (e as { code?: unknown } | null)?.code;
  return typeof c === "string" ? c : "";
}

export class CellpayClient {
  /** The access points, in order of preference. */
  readonly baseUrls: readonly string[];
  private readonly apiKey: string;
  private readonly timeoutMs: number;
  private readonly userAgent: string;
  private readonly httpsAgent: https.Agent;
  private readonly httpAgent: http.Agent;
  private current = 0;

  constructor(opts: CellpayClientOptions) {
    const urls = opts.baseUrls ?? (opts.baseUrl !== undefined ? [opts.baseUrl] : []);
    if (urls.length === 0) {
      throw new TypeError("CellpayClient: baseUrl or baseUrls is required");
    }
    for (const u of urls) {
      const p = new URL(u).protocol;
      if (p !== "https:" && p !== "http:") {
        throw new TypeError(`CellpayClient: ${u}: not an http(s) URL`);
      }
    }
    if (!opts.apiKey) {
      throw new TypeError("CellpayClient: apiKey is required");
    }
    this.baseUrls = urls.map((u) => u.replace(/\/+$/, ""));
    this.apiKey = opts.apiKey;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.userAgent = opts.userAgent ? `${USER_AGENT} ${opts.userAgent}` : USER_AGENT;
    const ca = opts.ca === undefined ? undefined : Array.isArray(opts.ca) ? [...opts.ca] : (opts.ca as string | Buffer);
    this.httpsAgent = new https.Agent({ keepAlive: true, ...(ca !== undefined ? { ca } : {}) });
    this.httpAgent = new http.Agent({ keepAlive: true });
  }

  /** The access point the next call goes to first. */
  get currentBaseUrl(): string {
    return this.baseUrls[this.current] as string;
  }

  /**
   * submitTransaction sends req: POST /v1/partners/{partner_id}/transactions.
   * A resend of the same request (same transaction_id, same payload)
   * answers the recorded transaction, without charging again.
   */
  async submitTransaction(req: SubmitTransactionRequest, opts: SubmitOptions = {}): Promise<Transaction> {
    if (!req.partner_id) {
      throw new TypeError("submitTransaction: partner_id is required");
    }
    const headers: Record<string, string> = {};
    if (opts.idempotencyKey !== undefined) {
      headers["Idempotency-Key"] = opts.idempotencyKey;
    }
    const body = JSON.stringify(req, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v));
    return this.call<Transaction>("POST", `/v1/partners/${encodeURIComponent(req.partner_id)}/transactions`, body, headers, opts.signal);
  }

  /** getTransaction reads the recorded outcome: GET /v1/partners/{partnerId}/transactions/{transactionId}. */
  async getTransaction(partnerId: string, transactionId: string, opts: CallOptions = {}): Promise<Transaction> {
    return this.call<Transaction>(
      "GET",
      `/v1/partners/${encodeURIComponent(partnerId)}/transactions/${encodeURIComponent(transactionId)}`,
      undefined,
      {},
      opts.signal,
    );
  }

  /** close drops the idle kept-alive connections. */
  close(): void {
    this.httpsAgent.destroy();
    this.httpAgent.destroy();
  }

  /**
   * call tries the access points in turn from the current one: on no
   * answer (other than a cancellation) or an UNAVAILABLE answer it goes
   * on to the next, which becomes the current one; each is tried at most
   * once per call.
   */
  private async call<T>(method: string, path: string, body: string | undefined, headers: Record<string, string>, signal?: AbortSignal): Promise<T> {
    const n = this.baseUrls.length;
    let idx = this.current;
    for (let attempt = 1; ; attempt++) {
      const base = this.baseUrls[idx] as string;
      let err: CellpayError;
      try {
        const a = await this.send(base, method, path, body, headers, signal);
        if (a.status === 200) {
          try {
            return JSON.parse(a.body) as T;
          } catch (e) {
            throw new CellpayError({
              httpStatus: 200,
              grpcCode: Code.INTERNAL,
              reason: "INTERNAL",
              message: "the answer is not JSON",
              requestId: (a.headers["x-request-id"] as string | undefined) ?? "",
              baseUrl: base,
              cause: e,
            });
          }
        }
        err = decodeError(a.status, a.headers, a.body, base);
      } catch (e) {
        if (e instanceof CellpayError) {
          throw e;
        }
        if (!(e instanceof NoAnswer)) {
          throw e;
        }
        const code = e.kind === "timeout" ? Code.DEADLINE_EXCEEDED : e.kind === "cancelled" ? Code.CANCELLED : Code.UNAVAILABLE;
        err = new CellpayError({
          httpStatus: 0,
          grpcCode: code,
          reason: e.kind === "timeout" ? "DEADLINE_EXCEEDED" : e.kind === "cancelled" ? "CANCELLED" : "UNAVAILABLE",
          message: `${method} ${base}${path}: ${e.message}`,
          baseUrl: base,
          cause: e.cause ?? e,
        });
        if (e.kind === "cancelled") {
          throw err;
        }
      }
      const failedOver = err.httpStatus === 0 || err.grpcCode === Code.UNAVAILABLE;
      if (!failedOver || attempt >= n) {
        throw err;
      }
      idx = (idx + 1) % n;
      this.current = idx;
    }
  }

  private send(base: string, method: string, path: string, body: string | undefined, extra: Record<string, string>, signal?: AbortSignal): Promise<Answer> {
    return new Promise<Answer>((resolve, reject) => {
      if (signal?.aborted) {
        reject(new NoAnswer("cancelled", "cancelled before it was sent"));
        return;
      }
      const url = new URL(base + path);
      const isHTTPS = url.protocol === "https:";
      const headers: Record<string, string> = {
        Accept: "application/json",
        Authorization: `Bearer ${this.apiKey}`,
        "User-Agent": this.userAgent,
        ...extra,
      };
      if (body !== undefined) {
        headers["Content-Type"] = "application/json";
        headers["Content-Length"] = String(Buffer.byteLength(body));
      }
      let settled = false;
      let timer: NodeJS.Timeout | undefined;
      const done = (f: () => void): void => {
        if (!settled) {
          settled = true;
          if (timer) {
            clearTimeout(timer);
          }
          signal?.removeEventListener("abort", onAbort);
          f();
        }
      };
      const fail = (e: NoAnswer): void => done(() => reject(e));
      const req = (isHTTPS ? https : http).request(
        url,
        { method, headers, agent: isHTTPS ? this.httpsAgent : this.httpAgent },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on("data", (c: Buffer) => {
            size += c.length;
            if (size > MAX_ANSWER) {
              req.destroy();
              fail(new NoAnswer("transport", `answer over ${MAX_ANSWER} bytes`));
              return;
            }
            chunks.push(c);
          });
          res.on("end", () =>
            done(() => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") })),
          );
          res.on("error", (e) => fail(new NoAnswer("transport", `answer cut short: ${e.message}`, { cause: e })));
          res.on("close", () => {
            if (!res.complete) {
              fail(new NoAnswer("transport", "answer cut short"));
            }
          });
        },
      );
      const onAbort = (): void => {
        req.destroy();
        fail(new NoAnswer("cancelled", "cancelled"));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      timer = setTimeout(() => {
        req.destroy();
        fail(new NoAnswer("timeout", `no answer within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      req.on("error", (e) => {
        const code = errCode(e);
        fail(new NoAnswer("transport", code ? `${code}: ${e.message}` : e.message, { cause: e }));
      });
      req.end(body);
    });
  }
}
