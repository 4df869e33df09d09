// CellpayClient: a thin client of the partners' REST/JSON API over HTTPS
// with node:https (no runtime dependency), so that it can trust a private
// CA (the ca option), which Node's fetch cannot without a dispatcher.

import * as http from "node:http";
import * as https from "node:https";

import { CellpayError, Code, decodeError } from "./errors";
import type {
  CaptureTransactionRequest,
  ListTransactionsRequest,
  ListTransactionsResponse,
  PaymentType,
  RefundTransactionRequest,
  Statement,
  SubmitTransactionRequest,
  Transaction,
  VoidTransactionRequest,
} from "./types";

export const USER_AGENT = "cellpay-client-ts/0.2.0";

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
  /**
   * Access points with their sites (up to six, several per site), and
   * homeSite, the partner's: the home site's come first, in this order,
   * then the others', so that a call crosses to another site only when
   * every access point of its own has failed it (README: "Access points
   * in two sites"). Instead of baseUrl or baseUrls.
   */
  accessPoints?: ReadonlyArray<AccessPoint>;
  /** The partner's home site, one of accessPoints' sites. */
  homeSite?: string;
  /**
   * How long the client stays on an access point it switched to before
   * the next call tries the first (the home site's first) again, moving
   * on from it at once if it fails; default 60000. 0: never goes back.
   */
  homeRetryMs?: number;
  /** The partner's API key, sent as "Authorization: Bearer <key>". */
  apiKey: string;
  /** CA certificate(s) to trust, PEM (instead of Node's default roots). */
  ca?: string | Buffer | ReadonlyArray<string | Buffer>;
  /** How long one attempt at one access point may take; default 30000. */
  timeoutMs?: number;
  /** Sent as User-Agent, after this client's own. */
  userAgent?: string;
}

/** An access point and the site it is in. */
export interface AccessPoint {
  /** Its base URL, e.g. "https://api.a.cellpay.example". */
  url: string;
  /** Its site, e.g. "site-a". */
  site: string;
}

/** The most access points a client takes, as the cross-city guide's (three per site). */
export const MAX_ACCESS_POINTS = 6;

export interface CallOptions {
  /** Cancels the call (it then fails with reason CANCELLED). */
  signal?: AbortSignal;
}

export interface SubmitOptions extends CallOptions {
  /**
   * Sent as the Idempotency-Key header: the transaction_id (of a capture,
   * void or refund: its own, not the original's). It fills an absent
   * transaction_id; one that differs is refused (INVALID_REQUEST).
   */
  idempotencyKey?: string;
}

export interface GetOptions extends CallOptions {
  /**
   * The transaction's market (a follow-up's: its original's), a hint: with
   * it and paymentType the read goes straight to the cell that holds the
   * transaction. Without them, or with wrong ones, the answer is the same.
   */
  market?: string;
  /** The transaction's payment type (a follow-up's: CARD_AUTHORIZATION), a hint as market. */
  paymentType?: PaymentType;
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

/** jsonBody is a request's JSON: a bigint as a decimal string (int64), undefined fields left out. */
function jsonBody(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) => (typeof x === "bigint" ? x.toString() : x));
}

function idempotencyHeaders(opts: SubmitOptions): Record<string, string> {
  return opts.idempotencyKey !== undefined ? { "Idempotency-Key": opts.idempotencyKey } : {};
}

/** query is "?" and q's parameters, or "" when it has none. */
function query(q: URLSearchParams): string {
  const s = q.toString();
  return s ? `?${s}` : "";
}

/** timestamp is a google.protobuf.Timestamp query parameter: RFC 3339 (a Date's in UTC, to the millisecond). */
function timestamp(t: string | Date): string {
  return typeof t === "string" ? t : t.toISOString();
}

function errCode(e: unknown): string {
  const c = (e as { code?: unknown } | null)?.code;
  return typeof c === "string" ? c : "";
}

/** ordered lists the access points: the home site's first, each group in the given order. */
function ordered(opts: CellpayClientOptions): { urls: string[]; sites: (string | undefined)[] } {
  const given = [opts.baseUrl !== undefined, opts.baseUrls !== undefined, opts.accessPoints !== undefined].filter(Boolean).length;
  if (given !== 1) {
    throw new TypeError("CellpayClient: one of baseUrl, baseUrls or accessPoints is required");
  }
  if (opts.accessPoints === undefined) {
    if (opts.homeSite !== undefined) {
      throw new TypeError("CellpayClient: homeSite needs accessPoints with their sites");
    }
    const urls = opts.baseUrls ?? [opts.baseUrl as string];
    return { urls: [...urls], sites: urls.map(() => undefined) };
  }
  const aps = opts.accessPoints;
  for (const [i, ap] of aps.entries()) {
    if (!ap.site) {
      throw new TypeError(`CellpayClient: accessPoints[${i}].site is required`);
    }
  }
  const home = opts.homeSite;
  if (home !== undefined && !aps.some((ap) => ap.site === home)) {
    throw new TypeError(`CellpayClient: homeSite ${JSON.stringify(home)} is the site of none of accessPoints`);
  }
  const first = aps.filter((ap) => home === undefined || ap.site === home);
  const rest = aps.filter((ap) => home !== undefined && ap.site !== home);
  const all = [...first, ...rest];
  return { urls: all.map((ap) => ap.url), sites: all.map((ap) => ap.site) };
}

export class CellpayClient {
  /** The access points, in order of preference (the home site's first). */
  readonly baseUrls: readonly string[];
  /** Their sites, as baseUrls (undefined without accessPoints). */
  readonly sites: readonly (string | undefined)[];
  private readonly homeRetryMs: number;
  /** When the client last switched access points (Date.now()). */
  private switchedAt = 0;
  private readonly apiKey: string;
  private readonly timeoutMs: number;
  private readonly userAgent: string;
  private readonly httpsAgent: https.Agent;
  private readonly httpAgent: http.Agent;
  private current = 0;

  constructor(opts: CellpayClientOptions) {
    const { urls, sites } = ordered(opts);
    if (urls.length === 0) {
      throw new TypeError("CellpayClient: baseUrl, baseUrls or accessPoints is required");
    }
    if (urls.length > MAX_ACCESS_POINTS) {
      throw new TypeError(`CellpayClient: ${urls.length} access points, at most ${MAX_ACCESS_POINTS}`);
    }
    const retry = opts.homeRetryMs ?? 60_000;
    if (!Number.isFinite(retry) || retry < 0) {
      throw new TypeError(`CellpayClient: homeRetryMs ${retry}: want 0 or more`);
    }
    this.homeRetryMs = retry;
    this.sites = sites;
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

  /** The access point the next call goes to first (but see homeRetryMs). */
  get currentBaseUrl(): string {
    return this.baseUrls[this.current] as string;
  }

  /** The current access point's site (undefined without accessPoints). */
  get currentSite(): string | undefined {
    return this.sites[this.current];
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
    return this.call<Transaction>("POST", `/v1/partners/${encodeURIComponent(req.partner_id)}/transactions`, jsonBody(req), idempotencyHeaders(opts), opts.signal);
  }

  /**
   * captureTransaction captures req.amount of the approved
   * CARD_AUTHORIZATION req.original_transaction_id: POST
   * /v1/partners/{partner_id}/transactions/{original_transaction_id}:capture.
   * The capture is a transaction of its own (payment type CAPTURE), under
   * its own transaction_id, with a submit's idempotency: a resend answers
   * the recorded capture, without capturing again.
   */
  async captureTransaction(req: CaptureTransactionRequest, opts: SubmitOptions = {}): Promise<Transaction> {
    return this.followUp("captureTransaction", "capture", req, { transaction_id: req.transaction_id, market: req.market, amount: req.amount }, opts);
  }

  /**
   * voidTransaction releases the approved CARD_AUTHORIZATION
   * req.original_transaction_id, which has no capture: POST
   * .../transactions/{original_transaction_id}:void (payment type VOID), as
   * captureTransaction.
   */
  async voidTransaction(req: VoidTransactionRequest, opts: SubmitOptions = {}): Promise<Transaction> {
    return this.followUp("voidTransaction", "void", req, { transaction_id: req.transaction_id, market: req.market }, opts);
  }

  /**
   * refundTransaction refunds req.amount of what was captured of the
   * authorization req.original_transaction_id: POST
   * .../transactions/{original_transaction_id}:refund (payment type
   * REFUND), as captureTransaction.
   */
  async refundTransaction(req: RefundTransactionRequest, opts: SubmitOptions = {}): Promise<Transaction> {
    return this.followUp("refundTransaction", "refund", req, { transaction_id: req.transaction_id, market: req.market, amount: req.amount }, opts);
  }

  /**
   * getTransaction reads the recorded outcome: GET
   * /v1/partners/{partnerId}/transactions/{transactionId}, with the
   * optional hints market and payment_type (opts.market, opts.paymentType).
   */
  async getTransaction(partnerId: string, transactionId: string, opts: GetOptions = {}): Promise<Transaction> {
    const q = new URLSearchParams();
    if (opts.market) {
      q.set("market", opts.market);
    }
    if (opts.paymentType) {
      q.set("payment_type", opts.paymentType);
    }
    return this.call<Transaction>(
      "GET",
      `/v1/partners/${encodeURIComponent(partnerId)}/transactions/${encodeURIComponent(transactionId)}${query(q)}`,
      undefined,
      {},
      opts.signal,
    );
  }

  /**
   * listTransactions reads one page of the partner's transactions created
   * in [start_time, end_time), oldest first: GET
   * /v1/partners/{partner_id}/transactions. Pass next_page_token back as
   * page_token, with the same filters, for the next page; it is "" on the
   * last. listAllTransactions goes through every page.
   */
  async listTransactions(req: ListTransactionsRequest, opts: CallOptions = {}): Promise<ListTransactionsResponse> {
    if (!req.partner_id) {
      throw new TypeError("listTransactions: partner_id is required");
    }
    const q = new URLSearchParams();
    if (req.start_time !== undefined) {
      q.set("start_time", timestamp(req.start_time));
    }
    if (req.end_time !== undefined) {
      q.set("end_time", timestamp(req.end_time));
    }
    for (const s of req.statuses ?? []) {
      q.append("statuses", s);
    }
    for (const t of req.payment_types ?? []) {
      q.append("payment_types", t);
    }
    if (req.page_size !== undefined) {
      q.set("page_size", String(req.page_size));
    }
    if (req.page_token) {
      q.set("page_token", req.page_token);
    }
    const page = await this.call<Partial<ListTransactionsResponse>>(
      "GET",
      `/v1/partners/${encodeURIComponent(req.partner_id)}/transactions${query(q)}`,
      undefined,
      {},
      opts.signal,
    );
    return { ...page, transactions: page.transactions ?? [], next_page_token: page.next_page_token ?? "" };
  }

  /**
   * listAllTransactions yields every transaction of the listing, page after
   * page (listTransactions from req.page_token, if any), oldest first:
   *
   *   for await (const t of client.listAllTransactions(req)) { ... }
   *
   * A page's failure ends the iteration with its CellpayError; to resume
   * where it stopped, page with listTransactions, whose next_page_token
   * says where each page ends.
   */
  async *listAllTransactions(req: ListTransactionsRequest, opts: CallOptions = {}): AsyncGenerator<Transaction, void, undefined> {
    let token = req.page_token ?? "";
    for (;;) {
      const page = await this.listTransactions({ ...req, page_token: token }, opts);
      yield* page.transactions;
      if (!page.next_page_token) {
        return;
      }
      if (page.next_page_token === token) {
        throw new CellpayError({
          httpStatus: 200,
          grpcCode: Code.INTERNAL,
          reason: "INTERNAL",
          message: "the listing answered the page_token it was sent as the next one",
        });
      }
      token = page.next_page_token;
    }
  }

  /**
   * getStatement reads the partner's UTC day (YYYY-MM-DD, or a Date's UTC
   * day) summed by payment type, status and currency: GET
   * /v1/partners/{partnerId}/statements/{date}.
   */
  async getStatement(partnerId: string, date: string | Date, opts: CallOptions = {}): Promise<Statement> {
    const day = typeof date === "string" ? date : date.toISOString().slice(0, 10);
    const st = await this.call<Partial<Statement>>(
      "GET",
      `/v1/partners/${encodeURIComponent(partnerId)}/statements/${encodeURIComponent(day)}`,
      undefined,
      {},
      opts.signal,
    );
    return { ...st, partner_id: st.partner_id ?? "", date: st.date ?? "", lines: st.lines ?? [] };
  }

  /**
   * followUp sends a capture, void or refund: body (the request's fields
   * that are not in the path) to .../transactions/{original}:{verb}, with
   * a submit's Idempotency-Key and the same switch between access points.
   */
  private async followUp(
    method: string,
    verb: "capture" | "void" | "refund",
    req: { partner_id: string; original_transaction_id: string },
    body: Record<string, unknown>,
    opts: SubmitOptions,
  ): Promise<Transaction> {
    if (!req.partner_id) {
      throw new TypeError(`${method}: partner_id is required`);
    }
    if (!req.original_transaction_id) {
      throw new TypeError(`${method}: original_transaction_id is required`);
    }
    const path = `/v1/partners/${encodeURIComponent(req.partner_id)}/transactions/${encodeURIComponent(req.original_transaction_id)}:${verb}`;
    return this.call<Transaction>("POST", path, jsonBody(body), idempotencyHeaders(opts), opts.signal);
  }

  /** close drops the idle kept-alive connections. */
  close(): void {
    this.httpsAgent.destroy();
    this.httpAgent.destroy();
  }

  /**
   * call tries the access points in turn from the current one (or, once
   * homeRetryMs has passed since the client switched away from the first,
   * from the first): on no answer (other than a cancellation) or an
   * UNAVAILABLE answer it goes on to the next in order; each is tried at
   * most once per call, and the one that answers becomes the current one.
   */
  private async call<T>(method: string, path: string, body: string | undefined, headers: Record<string, string>, signal?: AbortSignal): Promise<T> {
    const n = this.baseUrls.length;
    let idx = this.current;
    if (idx !== 0 && this.homeRetryMs > 0 && Date.now() - this.switchedAt >= this.homeRetryMs) {
      idx = 0; // home again, if it answers; on from it at once if not
    }
    const moveTo = (i: number): void => {
      if (i !== this.current) {
        this.current = i;
        this.switchedAt = Date.now();
      }
    };
    for (let attempt = 1; ; attempt++) {
      const base = this.baseUrls[idx] as string;
      let err: CellpayError;
      try {
        const a = await this.send(base, method, path, body, headers, signal);
        if (a.status !== 0) {
          moveTo(idx); // an answer: this access point serves
        }
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
      moveTo(idx);
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
