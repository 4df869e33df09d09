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
// API_KEY_INVALID with a request ID, not retryable; the captured callback
// verifies and a tampered one does not. It prints one line per check and
// exits 1 at the first failure, saying which and why.

import { readFileSync } from "node:fs";

import { CellpayClient, CellpayError, WebhookVerificationError, parseCallback, verifyWebhook } from "./index";
import type { SubmitTransactionRequest, Transaction } from "./index";

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
