// e2e: the client against a running platform (test/e2e/tsclient_test.go
// runs it; so can anyone with a platform, e.g. make run's). Inputs, from
// the environment:
//
//   CELLPAY_REST_URL          the primary access point's REST URL (https://host:port)
//   CELLPAY_REST_BACKUP_URL   the backup access point's
//   CELLPAY_CA_FILE           the platform's CA certificate (PEM)
//   CELLPAY_API_KEY           the partner's API key
//   CELLPAY_PARTNER_ID        the partner
//   CELLPAY_PAN               a card number the issuer approves, unused by other calls
//   CELLPAY_PAN_2             another (optional; default CELLPAY_PAN), for the second transaction
//   CELLPAY_TXN_PREFIX        a prefix making this run's transaction IDs unique
//   CELLPAY_CALLBACK_JSON     a callback as delivered: {"secret","headers":{...},"body"}
//
// It checks: a submit approved; the read answers the same; a resend (the
// same request, then with an Idempotency-Key header, and a submit by the
// header alone, resent) answers the same auth code; the backup access point
// reads it, also as the next after a dead primary; a refused key is
// API_KEY_INVALID with a request ID, not retryable; on the first
// authorization a part captured (resent: the same answer) and a part of
// that refunded (by the Idempotency-Key header, resent), an over-capture
// refused as CAPTURE_EXCEEDS_AUTHORIZATION, an over-refund as
// REFUND_EXCEEDS_CAPTURED, a void as VOID_AFTER_CAPTURE, an unknown
// original as ORIGINAL_NOT_FOUND, the authorization's sums read back, the
// capture read with hints; a second authorization voided, then a capture
// of it refused as ORIGINAL_VOIDED; the follow-ups listed page by page
// (once each, in order, the refused ones not at all) and all pages of the
// approved; the day's statement holding them; the captured callback
// verifies and a tampered one does not. It prints one line per check and
// exits 1 at the first failure, saying which and why.

import { readFileSync } from "node:fs";

import { CellpayClient, CellpayError, WebhookVerificationError, int64, minorUnits, parseCallback, verifyWebhook } from "./index";
import type { PaymentType, StatementLine, SubmitTransactionRequest, Transaction, TransactionStatus } from "./index";

class CheckFailed extends Error {}

function env(name: string): string {
  const v = process.env[name];
  if (!v) {
    throw new CheckFailed(`${name} is not set`);
  }
  return v;
}

function check(cond: unknown, what: string): asserts cond {
  if (!cond) {
    throw new CheckFailed(what);
  }
}

function show(t: Transaction): string {
  return JSON.stringify(t);
}

// same: the fields a resend and a read must repeat.
function same(a: Transaction, b: Transaction): boolean {
  const keys: (keyof Transaction)[] = ["transaction_id", "status", "auth_code", "cell_id", "partner_id", "masked_pan", "created_at"];
  return keys.every((k) => JSON.stringify(a[k]) === JSON.stringify(b[k])) && JSON.stringify(a.amount) === JSON.stringify(b.amount);
}

// refusedAs runs f, which must be refused with reason, the HTTP status and
// gRPC code given, a request ID, and not retryable.
async function refusedAs(f: () => Promise<Transaction>, reason: string, httpStatus: number, codeName: string): Promise<void> {
  let t: Transaction;
  try {
    t = await f();
  } catch (e) {
    check(e instanceof CellpayError, `not a CellpayError: ${String(e)}`);
    check(e.reason === reason, `reason ${e.reason}, want ${reason} (${e.message})`);
    check(e.httpStatus === httpStatus && e.grpcCodeName === codeName, `HTTP ${e.httpStatus}, ${e.grpcCodeName}; want ${httpStatus}, ${codeName}`);
    check(e.requestId !== "", "no request ID");
    check(!e.retryable, "retryable");
    return;
  }
  throw new CheckFailed(`answered ${show(t)}, want ${reason}`);
}

// ns makes an RFC 3339 UTC timestamp (0, 3, 6 or 9 fractional digits)
// comparable as a string, to the nanosecond.
function ns(ts: string | undefined): string {
  const m = /^([^.]*?)(?:\.(\d{1,9}))?Z$/.exec(ts ?? "");
  return m ? `${m[1]}.${(m[2] ?? "").padEnd(9, "0")}` : "";
}

// The enums' orders (their numbers), which a statement's lines follow.
const PAYMENT_TYPES: PaymentType[] = ["PAYMENT_TYPE_UNSPECIFIED", "CARD_AUTHORIZATION", "CARD_REFUND", "BANK_TRANSFER", "CAPTURE", "VOID", "REFUND"];
const STATUSES: TransactionStatus[] = ["TRANSACTION_STATUS_UNSPECIFIED", "APPROVED", "DECLINED", "PENDING", "FAILED"];

async function step<T>(name: string, f: () => Promise<T>): Promise<T> {
  const start = Date.now();
  try {
    const v = await f();
    console.log(`ok   ${name} (${Date.now() - start} ms)`);
    return v;
  } catch (e) {
    const why = e instanceof CheckFailed ? e.message : e instanceof Error ? `${e.name}: ${e.message}` : String(e);
    throw new CheckFailed(`${name}: ${why}`);
  }
}

async function main(): Promise<void> {
  const primary = env("CELLPAY_REST_URL");
  const backup = env("CELLPAY_REST_BACKUP_URL");
  const ca = readFileSync(env("CELLPAY_CA_FILE"));
  const key = env("CELLPAY_API_KEY");
  const partner = env("CELLPAY_PARTNER_ID");
  const pan = env("CELLPAY_PAN");
  const pan2 = process.env["CELLPAY_PAN_2"] || pan;
  const prefix = env("CELLPAY_TXN_PREFIX");
  const callback = JSON.parse(env("CELLPAY_CALLBACK_JSON")) as { secret: string; headers: Record<string, string>; body: string };

  const client = new CellpayClient({ baseUrls: [primary, backup], apiKey: key, ca, timeoutMs: 20_000 });
  const req: SubmitTransactionRequest = {
    transaction_id: `${prefix}-a`,
    payment_type: "CARD_AUTHORIZATION",
    partner_id: partner,
    market: "GB",
    amount: { minor_units: 1250, currency: "GBP" },
    merchant: { id: "m-1", mcc: "5411", country: "GB" },
    card: { pan, expiry_month: 12, expiry_year: 2030 },
  };

  const first = await step("submit: APPROVED", async () => {
    const t = await client.submitTransaction(req);
    check(t.status === "APPROVED" && t.auth_code && t.transaction_id === req.transaction_id, `answered ${show(t)}`);
    check(t.masked_pan && !t.masked_pan.includes(pan.slice(6, 12)), `masked_pan ${t.masked_pan}`);
    check(t.amount?.minor_units === "1250" && t.amount.currency === "GBP", `amount ${JSON.stringify(t.amount)}`);
    return t;
  });
  await step("read: the same transaction", async () => {
    const t = await client.getTransaction(partner, first.transaction_id);
    check(same(t, first), `read ${show(t)}, submit answered ${show(first)}`);
  });
  await step("resend: the same auth code", async () => {
    const t = await client.submitTransaction(req);
    check(same(t, first), `resend answered ${show(t)}, first ${show(first)}`);
  });
  await step("resend with Idempotency-Key: the same auth code", async () => {
    const t = await client.submitTransaction(req, { idempotencyKey: req.transaction_id as string });
    check(same(t, first), `resend answered ${show(t)}, first ${show(first)}`);
  });
  await step("Idempotency-Key as the transaction_id, resent", async () => {
    const byHeader: SubmitTransactionRequest = { ...req, amount: { minor_units: "2500", currency: "GBP" }, card: { pan: pan2, expiry_month: 12, expiry_year: 2030 } };
    delete byHeader.transaction_id;
    const id = `${prefix}-h`;
    const a = await client.submitTransaction(byHeader, { idempotencyKey: id });
    check(a.status === "APPROVED" && a.transaction_id === id && a.auth_code, `answered ${show(a)}`);
    const b = await client.submitTransaction(byHeader, { idempotencyKey: id });
    check(same(a, b), `resend answered ${show(b)}, first ${show(a)}`);
  });
  await step("the backup access point reads it, also after a dead primary", async () => {
    const b = new CellpayClient({ baseUrl: backup, apiKey: key, ca });
    const t = await b.getTransaction(partner, first.transaction_id);
    b.close();
    check(same(t, first), `backup read ${show(t)}`);
    // Port 1 of the loopback: nothing listens there; the call goes on to
    // the next access point, which serves the calls that follow.
    const dead = "https://127.0.0.1:1";
    const f = new CellpayClient({ baseUrls: [dead, backup], apiKey: key, ca });
    const t2 = await f.getTransaction(partner, first.transaction_id);
    check(same(t2, first), `read after the switch ${show(t2)}`);
    check(f.currentBaseUrl === backup.replace(/\/+$/, ""), `current access point ${f.currentBaseUrl}`);
    f.close();
  });
  await step("access points by site: the home site's first, across only when its own fail", async () => {
    const s = new CellpayClient({ accessPoints: [{ url: backup, site: "site-b" }, { url: primary, site: "site-a" }], homeSite: "site-a", apiKey: key, ca });
    const t = await s.getTransaction(partner, first.transaction_id);
    check(same(t, first), `read by site ${show(t)}`);
    check(s.currentSite === "site-a" && s.currentBaseUrl === primary.replace(/\/+$/, ""), `current access point ${s.currentBaseUrl} (${s.currentSite}), want the home site's`);
    s.close();
    const d = new CellpayClient({ accessPoints: [{ url: "https://127.0.0.1:1", site: "site-a" }, { url: backup, site: "site-b" }], homeSite: "site-a", apiKey: key, ca });
    const t2 = await d.getTransaction(partner, first.transaction_id);
    check(same(t2, first), `read across ${show(t2)}`);
    check(d.currentSite === "site-b", `current site ${d.currentSite} after the home site failed, want site-b`);
    d.close();
  });
  await step("a refused key: API_KEY_INVALID, a request ID, not retryable", async () => {
    const wrong = key.length > 64 ? key.slice(0, -64) + "0".repeat(64) : key + "0";
    const w = new CellpayClient({ baseUrl: primary, apiKey: wrong, ca });
    try {
      const t = await w.submitTransaction({ ...req, transaction_id: `${prefix}-refused` });
      throw new CheckFailed(`a wrong key was answered ${show(t)}`);
    } catch (e) {
      if (e instanceof CheckFailed) {
        throw e;
      }
      check(e instanceof CellpayError, `not a CellpayError: ${String(e)}`);
      check(e.reason === "API_KEY_INVALID", `reason ${e.reason} (${e.message})`);
      check(e.httpStatus === 401 && e.grpcCodeName === "UNAUTHENTICATED", `HTTP ${e.httpStatus}, ${e.grpcCodeName}`);
      check(e.requestId !== "", "no request ID");
      check(!e.retryable, "retryable");
      check(!e.message.includes(wrong) && !e.serverMessage.includes("cpk_"), "the error quotes the key");
    } finally {
      w.close();
    }
  });

  // Follow-ups of the first authorization (1250): capture 1000, refund 400.
  const orig = { partner_id: partner, original_transaction_id: first.transaction_id, market: "GB" };
  const gbp = (n: number) => ({ minor_units: n, currency: "GBP" });
  const captureReq = { ...orig, transaction_id: `${prefix}-cap`, amount: gbp(1000) };
  const cap = await step("capture part: APPROVED, a CAPTURE of the authorization; resent, the same", async () => {
    const t = await client.captureTransaction(captureReq);
    check(t.status === "APPROVED" && t.payment_type === "CAPTURE" && t.transaction_id === captureReq.transaction_id, `answered ${show(t)}`);
    check(t.original_transaction_id === first.transaction_id, `original_transaction_id ${t.original_transaction_id}`);
    check(minorUnits(t.amount) === 1000n && t.amount?.currency === "GBP", `amount ${JSON.stringify(t.amount)}`);
    const again = await client.captureTransaction(captureReq, { idempotencyKey: captureReq.transaction_id });
    check(same(again, t), `resend answered ${show(again)}, first ${show(t)}`);
    return t;
  });
  await step("over-capture (300 of the 250 left): CAPTURE_EXCEEDS_AUTHORIZATION", async () => {
    await refusedAs(() => client.captureTransaction({ ...orig, transaction_id: `${prefix}-cap-over`, amount: gbp(300) }), "CAPTURE_EXCEEDS_AUTHORIZATION", 400, "FAILED_PRECONDITION");
  });
  const ref = await step("refund part by Idempotency-Key: APPROVED, a REFUND; resent, the same", async () => {
    const id = `${prefix}-ref`;
    const byHeader = { ...orig, amount: gbp(400) };
    const t = await client.refundTransaction(byHeader, { idempotencyKey: id });
    check(t.status === "APPROVED" && t.payment_type === "REFUND" && t.transaction_id === id, `answered ${show(t)}`);
    check(t.original_transaction_id === first.transaction_id && minorUnits(t.amount) === 400n, `answered ${show(t)}`);
    const again = await client.refundTransaction(byHeader, { idempotencyKey: id });
    check(same(again, t), `resend answered ${show(again)}, first ${show(t)}`);
    return t;
  });
  await step("over-refund, void after a capture, unknown original: refused with their reasons", async () => {
    await refusedAs(() => client.refundTransaction({ ...orig, transaction_id: `${prefix}-ref-over`, amount: gbp(700) }), "REFUND_EXCEEDS_CAPTURED", 400, "FAILED_PRECONDITION");
    await refusedAs(() => client.voidTransaction({ ...orig, transaction_id: `${prefix}-void-late` }), "VOID_AFTER_CAPTURE", 400, "FAILED_PRECONDITION");
    await refusedAs(
      () => client.captureTransaction({ ...orig, original_transaction_id: `${prefix}-never`, transaction_id: `${prefix}-cap-none`, amount: gbp(1) }),
      "ORIGINAL_NOT_FOUND",
      400,
      "FAILED_PRECONDITION",
    );
  });
  await step("the authorization reads its sums; the capture reads the same with hints, or wrong ones", async () => {
    const t = await client.getTransaction(partner, first.transaction_id);
    check(same(t, first), `read ${show(t)}, submit answered ${show(first)}`);
    check(minorUnits(t.captured_amount) === 1000n && minorUnits(t.refunded_amount) === 400n && !t.voided, `read ${show(t)}`);
    const c1 = await client.getTransaction(partner, cap.transaction_id, { market: "GB", paymentType: "CARD_AUTHORIZATION" });
    check(same(c1, cap) && c1.payment_type === "CAPTURE", `read with hints ${show(c1)}, capture answered ${show(cap)}`);
    const c2 = await client.getTransaction(partner, cap.transaction_id, { market: "FR", paymentType: "BANK_TRANSFER" });
    check(same(c2, cap), `read with wrong hints ${show(c2)}`);
  });
  const voided = await step("a second authorization voided; a capture of it: ORIGINAL_VOIDED", async () => {
    const a = await client.submitTransaction({ ...req, transaction_id: `${prefix}-v`, amount: { minor_units: 700, currency: "GBP" }, card: { pan: pan2, expiry_month: 12, expiry_year: 2030 } });
    check(a.status === "APPROVED", `authorization answered ${show(a)}`);
    const o2 = { partner_id: partner, original_transaction_id: a.transaction_id, market: "GB" };
    const v = await client.voidTransaction({ ...o2, transaction_id: `${prefix}-void` });
    check(v.status === "APPROVED" && v.payment_type === "VOID" && v.original_transaction_id === a.transaction_id, `void answered ${show(v)}`);
    const read = await client.getTransaction(partner, a.transaction_id, { market: "GB", paymentType: "CARD_AUTHORIZATION" });
    check(read.voided === true, `the authorization read ${show(read)}`);
    await refusedAs(() => client.captureTransaction({ ...o2, transaction_id: `${prefix}-cap-voided`, amount: gbp(100) }), "ORIGINAL_VOIDED", 400, "FAILED_PRECONDITION");
    return { auth: a, void: v };
  });
  const mine = [cap, ref, voided.void];
  const refusedIDs = [`${prefix}-cap-over`, `${prefix}-ref-over`, `${prefix}-void-late`, `${prefix}-cap-none`, `${prefix}-cap-voided`];
  const range = { partner_id: partner, start_time: first.created_at as string, end_time: new Date(Date.now() + 60_000) };
  await step("list the follow-ups a page of one at a time: each once, in order; the refused not at all", async () => {
    const types: PaymentType[] = ["CAPTURE", "VOID", "REFUND"];
    const seen: Transaction[] = [];
    let token = "";
    let pages = 0;
    do {
      const page = await client.listTransactions({ ...range, payment_types: types, page_size: 1, page_token: token });
      pages++;
      check(page.transactions.length <= 1, `a page of ${page.transactions.length}, page_size 1`);
      seen.push(...page.transactions);
      check(page.next_page_token !== token, `page ${pages}: the same token again`);
      token = page.next_page_token;
    } while (token && pages < 200);
    check(!token, `more than ${pages} pages`);
    check(pages >= mine.length, `${pages} pages for ${seen.length} transactions`);
    const ids = seen.map((t) => t.transaction_id);
    for (const t of mine) {
      check(ids.filter((id) => id === t.transaction_id).length === 1, `${t.transaction_id} listed ${ids.filter((id) => id === t.transaction_id).length} times in ${ids.join(",")}`);
    }
    for (const id of refusedIDs) {
      check(!ids.includes(id), `the refused ${id} listed`);
    }
    for (const [i, t] of seen.entries()) {
      check(types.includes(t.payment_type as PaymentType) && (t.partner_id ?? partner) === partner, `listed ${show(t)}`);
      check(i === 0 || ns(seen[i - 1]?.created_at) <= ns(t.created_at), `out of order: ${seen[i - 1]?.created_at} then ${t.created_at}`);
    }
  });
  await step("list every page of the approved: the authorizations and their follow-ups", async () => {
    const ids: string[] = [];
    let last = "";
    for await (const t of client.listAllTransactions({ ...range, statuses: ["APPROVED"], page_size: 2 })) {
      check(t.status === "APPROVED", `listed ${show(t)}`);
      check(ns(t.created_at) >= last, `out of order: ${last} then ${t.created_at}`);
      last = ns(t.created_at);
      ids.push(t.transaction_id);
      check(ids.length <= 10_000, "more than 10000 listed");
    }
    for (const id of [first.transaction_id, `${prefix}-h`, voided.auth.transaction_id, ...mine.map((t) => t.transaction_id)]) {
      check(ids.filter((x) => x === id).length === 1, `${id} listed ${ids.filter((x) => x === id).length} times`);
    }
  });
  await step("the day's statement holds them", async () => {
    // What this run put in each (day, payment type, status, currency), at
    // least: the partner's other transactions that day add to it.
    const want = new Map<string, { count: bigint; amount: bigint }>();
    const add = (t: Transaction, type: PaymentType, amount: bigint): void => {
      const k = [(t.created_at ?? "").slice(0, 10), type, "APPROVED", "GBP"].join(" ");
      const w = want.get(k) ?? { count: 0n, amount: 0n };
      want.set(k, { count: w.count + 1n, amount: w.amount + amount });
    };
    add(first, "CARD_AUTHORIZATION", 1250n);
    add(cap, "CAPTURE", 1000n);
    add(ref, "REFUND", 400n);
    add(voided.auth, "CARD_AUTHORIZATION", 700n);
    add(voided.void, "VOID", 700n); // a void at the amount it released
    const days = new Set([...want.keys()].map((k) => k.split(" ")[0] as string));
    for (const day of days) {
      check(/^\d{4}-\d{2}-\d{2}$/.test(day), `created_at day ${day}`);
      const st = await client.getStatement(partner, day);
      check(st.partner_id === partner && st.date === day, `statement of ${st.partner_id} ${st.date}`);
      const key = (l: StatementLine) => [day, l.payment_type, l.status, l.currency].join(" ");
      for (const [i, l] of st.lines.entries()) {
        const p = st.lines[i - 1];
        const order = (x: StatementLine): [number, number, string] => [PAYMENT_TYPES.indexOf(x.payment_type), STATUSES.indexOf(x.status), x.currency];
        if (p) {
          const [a, b] = [order(p), order(l)];
          check(a[0] < b[0] || (a[0] === b[0] && (a[1] < b[1] || (a[1] === b[1] && a[2] < b[2]))), `lines out of order: ${JSON.stringify(p)} then ${JSON.stringify(l)}`);
        }
        check(int64(l.count) > 0n, `a line of no transaction: ${JSON.stringify(l)}`);
      }
      for (const [k, w] of want) {
        if (!k.startsWith(day + " ")) {
          continue;
        }
        const l = st.lines.find((x) => key(x) === k);
        check(l, `no line ${k} in ${JSON.stringify(st.lines)}`);
        check(int64(l.count) >= w.count && int64(l.amount_minor_units) >= w.amount, `line ${JSON.stringify(l)}, want at least ${w.count} for ${w.amount}`);
      }
    }
  });
  await step("the captured callback verifies; tampered, it does not", async () => {
    const v = verifyWebhook(callback.secret, callback.headers, callback.body);
    check(v.id.startsWith("evt_"), `webhook-id ${v.id}`);
    const ev = parseCallback(callback.body);
    check(ev.type === "transaction.final" && ev.data.transaction_id && ev.data.status, `event ${callback.body}`);
    check(!callback.body.includes(pan), "the callback holds a card number");
    const refused = (what: string, f: () => unknown, kind: string): void => {
      try {
        f();
      } catch (e) {
        check(e instanceof WebhookVerificationError && e.kind === kind, `${what}: ${String(e)}, want ${kind}`);
        return;
      }
      throw new CheckFailed(`${what}: verified`);
    };
    refused("the body tampered", () => verifyWebhook(callback.secret, callback.headers, callback.body.replace(/"status":"[A-Z]+"/, '"status":"DECLINED"') + " "), "signature");
    refused("another secret", () => verifyWebhook("whsec_" + Buffer.alloc(32, 7).toString("base64"), callback.headers, callback.body), "signature");
    refused("replayed an hour later", () => verifyWebhook(callback.secret, callback.headers, callback.body, { now: Date.now() + 3600_000 }), "timestamp");
  });
  client.close();
}

main().then(
  () => {
    console.log("PASS");
  },
  (e: unknown) => {
    console.error(`FAIL: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  },
);
