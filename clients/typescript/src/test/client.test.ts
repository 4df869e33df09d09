// The client without a platform: refusals decoded as the REST API sends
// them (cmd/gtr/internal/rest), and the calls against local HTTP servers
// (what is sent, the answers read, the switch between access points).

import { strict as assert } from "node:assert";
import { existsSync, readFileSync } from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import * as path from "node:path";
import { after, test } from "node:test";

import { CellpayClient, CellpayError, decodeError, isRetryable, minorUnits, REASONS, RETRYABLE_REASONS } from "../index";
import type { SubmitTransactionRequest } from "../index";

// A refusal as the REST API answers it (google.rpc.Status in JSON, the
// protos' field names).
const rateLimited = JSON.stringify({
  code: 8,
  message: "partner p-rest over its rate of 1/s",
  details: [
    { "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: "RATE_LIMITED", domain: "cellpay.dev", metadata: { request_id: "req-123" } },
    { "@type": "type.googleapis.com/google.rpc.RetryInfo", retry_delay: "0.250s" },
  ],
});

test("a refusal's reason, request ID, retry hint and retryability", () => {
  const e = decodeError(429, { "x-request-id": "req-123", "retry-after": "1" }, rateLimited);
  assert.ok(e instanceof CellpayError && e instanceof Error);
  assert.equal(e.httpStatus, 429);
  assert.equal(e.grpcCode, 8);
  assert.equal(e.grpcCodeName, "RESOURCE_EXHAUSTED");
  assert.equal(e.reason, "RATE_LIMITED");
  assert.equal(e.requestId, "req-123");
  assert.equal(e.retryAfterMs, 250, "RetryInfo, finer than Retry-After, wins");
  assert.equal(e.retryable, true);
  assert.equal(e.serverMessage, "partner p-rest over its rate of 1/s");
  assert.match(e.message, /RATE_LIMITED.*req-123/);
});

test("Retry-After alone; an HTTP date", () => {
  const body = JSON.stringify({ code: 8, message: "x", details: [{ "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: "OVERLOADED", domain: "cellpay.dev" }] });
  assert.equal(decodeError(429, { "retry-after": "2" }, body).retryAfterMs, 2000);
  const e = decodeError(503, { "retry-after": new Date(Date.now() + 60_000).toUTCString() }, "");
  assert.ok(e.retryAfterMs !== undefined && e.retryAfterMs > 55_000 && e.retryAfterMs <= 60_000, String(e.retryAfterMs));
  assert.equal(decodeError(429, {}, body).retryAfterMs, undefined);
});

test("a refused key, an invalid field: not retryable; the field named", () => {
  const key = decodeError(
    401,
    { "x-request-id": "r1" },
    JSON.stringify({ code: 16, message: "invalid API key", details: [{ "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: "API_KEY_INVALID", domain: "cellpay.dev", metadata: { request_id: "r1" } }] }),
  );
  assert.equal(key.reason, "API_KEY_INVALID");
  assert.equal(key.grpcCodeName, "UNAUTHENTICATED");
  assert.equal(key.retryable, false);
  const bad = decodeError(
    400,
    {},
    JSON.stringify({
      code: 3,
      message: "Idempotency-Key: differs from transaction_id",
      details: [
        { "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: "INVALID_REQUEST", domain: "cellpay.dev", metadata: { request_id: "r2" } },
        { "@type": "type.googleapis.com/google.rpc.BadRequest", field_violations: [{ field: "Idempotency-Key", description: "differs" }] },
      ],
    }),
  );
  assert.equal(bad.reason, "INVALID_REQUEST");
  assert.equal(bad.requestId, "r2");
  assert.deepEqual(bad.fieldViolations, [{ field: "Idempotency-Key", description: "differs" }]);
  assert.equal(bad.retryable, false);
});

test("the retryable reasons; an unknown one by its gRPC code", () => {
  for (const r of REASONS) {
    const want = ["RATE_LIMITED", "TOO_MANY_IN_FLIGHT", "OVERLOADED", "UNAVAILABLE", "DEADLINE_EXCEEDED", "TRANSACTION_IN_PROGRESS"].includes(r);
    assert.equal(isRetryable(r, 0), want, r);
  }
  assert.equal(RETRYABLE_REASONS.size, 6);
  assert.equal(isRetryable("REQUEST_TOO_LARGE", 8), false, "a known reason is not read by its code");
  assert.equal(isRetryable("SOME_NEW_REASON", 14), true);
  assert.equal(isRetryable("SOME_NEW_REASON", 8), true);
  assert.equal(isRetryable("SOME_NEW_REASON", 3), false);
  const e = decodeError(409, {}, JSON.stringify({ code: 10, message: "busy", details: [] }));
  assert.equal(e.reason, "TRANSACTION_IN_PROGRESS", "no ErrorInfo: the reason its code means");
  assert.equal(e.retryable, true);
  const other = decodeError(500, {}, JSON.stringify({ code: 13, message: "x", details: [{ "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: "THEIRS", domain: "example.com" }] }));
  assert.equal(other.reason, "INTERNAL", "another domain's ErrorInfo is not a Cellpay reason");
});

test("REASONS is pkg/api/apierr's closed set, in its order", (t) => {
  const file = process.env["CELLPAY_GO_APIERR"] ?? path.join(__dirname, "..", "..", "..", "..", "pkg", "api", "apierr", "apierr.go");
  if (!existsSync(file)) {
    t.skip(`${file} is not here (a copy of the package outside the repository)`);
    return;
  }
  const goReasons = [...readFileSync(file, "utf8").matchAll(/^\s*\w+\s+Reason\s*=\s*"([A-Z_]+)"/gm)].map((m) => m[1]);
  assert.deepEqual([...REASONS], goReasons);
});

test("an answer that is not a Cellpay status (a proxy's)", () => {
  const e = decodeError(502, { "x-request-id": "lb-1" }, "<html>Bad Gateway</html>");
  assert.equal(e.grpcCode, 14);
  assert.equal(e.reason, "UNAVAILABLE");
  assert.equal(e.retryable, true);
  assert.equal(e.requestId, "lb-1");
  assert.match(e.message, /HTTP 502/);
  assert.equal(decodeError(413, {}, "").reason, "REQUEST_TOO_LARGE");
  assert.equal(decodeError(504, {}, "").reason, "DEADLINE_EXCEEDED");
  assert.equal(decodeError(401, {}, "").reason, "API_KEY_INVALID");
});

// A local server answering with handler, recording what it was sent.
interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

const servers: http.Server[] = [];
after(() => {
  for (const s of servers) {
    s.closeAllConnections();
    s.close();
  }
});

async function serve(handler: (req: Seen, res: http.ServerResponse) => void): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const s = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const r = { method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks).toString("utf8") };
      seen.push(r);
      handler(r, res);
    });
  });
  servers.push(s);
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, seen };
}

// deadURL is an address where nothing listens (connection refused).
async function deadURL(): Promise<string> {
  const s = http.createServer();
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return `http://127.0.0.1:${port}`;
}

const txnJSON = (id: string): string =>
  JSON.stringify({ transaction_id: id, status: "APPROVED", auth_code: "A1B2C3", amount: { minor_units: "9007199254740993", currency: "GBP" }, partner_id: "p/1" });

function answer(res: http.ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "Content-Type": "application/json", "X-Request-Id": "srv-1", ...headers });
  res.end(body);
}

const req: SubmitTransactionRequest = {
  transaction_id: "t-1",
  payment_type: "CARD_AUTHORIZATION",
  partner_id: "p/1",
  market: "GB",
  amount: { minor_units: 9007199254740993n, currency: "GBP" },
  merchant: { id: "m-1", mcc: "5411", country: "GB" },
  card: { pan: "4242424242424242", expiry_month: 12, expiry_year: 2030 },
};

test("submit and read: what is sent, what is read", async () => {
  const srv = await serve((r, res) => answer(res, 200, txnJSON("t-1")));
  const c = new CellpayClient({ baseUrl: srv.url + "/", apiKey: "cpk_test" });
  const got = await c.submitTransaction(req, { idempotencyKey: "t-1" });
  assert.equal(got.status, "APPROVED");
  assert.equal(minorUnits(got.amount), 9007199254740993n, "int64 as a string, read as a bigint");
  const sent = srv.seen[0] as Seen;
  assert.equal(sent.method, "POST");
  assert.equal(sent.url, "/v1/partners/p%2F1/transactions");
  assert.equal(sent.headers["authorization"], "Bearer cpk_test");
  assert.equal(sent.headers["idempotency-key"], "t-1");
  assert.equal(sent.headers["content-type"], "application/json");
  assert.match(String(sent.headers["user-agent"]), /^cellpay-client-ts\//);
  const body = JSON.parse(sent.body) as Record<string, unknown>;
  assert.deepEqual(body["amount"], { minor_units: "9007199254740993", currency: "GBP" }, "a bigint sent as a decimal string");
  assert.equal(body["transaction_id"], "t-1");

  await c.getTransaction("p/1", "t 1");
  const read = srv.seen[1] as Seen;
  assert.equal(read.method, "GET");
  assert.equal(read.url, "/v1/partners/p%2F1/transactions/t%201");
  assert.equal(read.headers["idempotency-key"], undefined);
  assert.equal(read.body, "");
  c.close();
});

test("a refusal is thrown as a CellpayError, at the same access point", async () => {
  const primary = await serve((r, res) => answer(res, 429, rateLimited, { "Retry-After": "1" }));
  const backup = await serve((r, res) => answer(res, 200, txnJSON("t-1")));
  const c = new CellpayClient({ baseUrls: [primary.url, backup.url], apiKey: "k" });
  await assert.rejects(c.submitTransaction(req), (e: unknown) => {
    assert.ok(e instanceof CellpayError);
    assert.equal(e.reason, "RATE_LIMITED");
    assert.equal(e.retryable, true);
    assert.equal(e.retryAfterMs, 250);
    assert.equal(e.baseUrl, primary.url);
    return true;
  });
  assert.equal(backup.seen.length, 0, "a refusal other than UNAVAILABLE does not switch");
  assert.equal(c.currentBaseUrl, primary.url);
  c.close();
});

test("two access points: no answer or UNAVAILABLE switches to the next", async () => {
  const dead = await deadURL();
  const backup = await serve((r, res) => answer(res, 200, txnJSON("t-1")));
  const c = new CellpayClient({ baseUrls: [dead, backup.url], apiKey: "k" });
  assert.equal((await c.submitTransaction(req)).auth_code, "A1B2C3");
  assert.equal(c.currentBaseUrl, backup.url, "the backup serves the calls that follow");
  await c.getTransaction("p/1", "t-1");
  assert.equal(backup.seen.length, 2);
  c.close();

  let unavailable = 0;
  const shedding = await serve((r, res) => {
    unavailable++;
    answer(res, 503, JSON.stringify({ code: 14, message: "no cell", details: [{ "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: "UNAVAILABLE", domain: "cellpay.dev", metadata: { request_id: "u1" } }] }));
  });
  const c2 = new CellpayClient({ baseUrls: [shedding.url, backup.url], apiKey: "k" });
  await c2.getTransaction("p/1", "t-1");
  assert.equal(unavailable, 1);
  assert.equal(c2.currentBaseUrl, backup.url);
  c2.close();

  // Both fail: the last one's error, each tried once.
  const c3 = new CellpayClient({ baseUrls: [shedding.url, dead], apiKey: "k" });
  await assert.rejects(c3.getTransaction("p/1", "t-1"), (e: unknown) => {
    assert.ok(e instanceof CellpayError);
    assert.equal(e.httpStatus, 0, "no HTTP answer");
    assert.equal(e.reason, "UNAVAILABLE");
    assert.equal(e.retryable, true);
    assert.match(e.message, /ECONNREFUSED/);
    return true;
  });
  assert.equal(unavailable, 2);
  c3.close();
});

test("a timeout is DEADLINE_EXCEEDED and switches; a cancellation does neither", async () => {
  const slow = await serve((r, res) => setTimeout(() => answer(res, 200, txnJSON("t-1")), 2000));
  const fast = await serve((r, res) => answer(res, 200, txnJSON("t-1")));
  const one = new CellpayClient({ baseUrl: slow.url, apiKey: "k", timeoutMs: 100 });
  await assert.rejects(one.getTransaction("p", "t"), (e: unknown) => {
    assert.ok(e instanceof CellpayError);
    assert.equal(e.reason, "DEADLINE_EXCEEDED");
    assert.equal(e.retryable, true);
    return true;
  });
  one.close();
  const two = new CellpayClient({ baseUrls: [slow.url, fast.url], apiKey: "k", timeoutMs: 100 });
  assert.equal((await two.getTransaction("p", "t")).status, "APPROVED");
  assert.equal(two.currentBaseUrl, fast.url);
  two.close();

  const c = new CellpayClient({ baseUrls: [slow.url, fast.url], apiKey: "k" });
  const ac = new AbortController();
  setTimeout(() => ac.abort(), 50);
  const before = fast.seen.length;
  await assert.rejects(c.getTransaction("p", "t", { signal: ac.signal }), (e: unknown) => {
    assert.ok(e instanceof CellpayError);
    assert.equal(e.reason, "CANCELLED");
    assert.equal(e.retryable, false);
    return true;
  });
  assert.equal(fast.seen.length, before, "a cancelled call is not sent on");
  assert.equal(c.currentBaseUrl, slow.url);
  c.close();
});

test("options are checked", () => {
  assert.throws(() => new CellpayClient({ apiKey: "k" }), TypeError);
  assert.throws(() => new CellpayClient({ baseUrl: "ftp://x", apiKey: "k" }), TypeError);
  assert.throws(() => new CellpayClient({ baseUrl: "https://x", apiKey: "" }), TypeError);
});
