// Callback verification against the vectors pkg/webhook checks: the
// Standard Webhooks specification's published example (the constants of
// pkg/webhook/webhook_test.go, compared with that file when it is at hand),
// signatures made by pkg/webhook.Sign, and TestVerify's cases.

import { strict as assert } from "node:assert";
import { existsSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import { WebhookVerificationError, parseCallback, signWebhook, verifyWebhook } from "../webhook";

// The Standard Webhooks specification's published example, as
// pkg/webhook/webhook_test.go has it.
const specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const specID = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const specBody = `{"test": 2432232314}`;
const specSig = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
const specTS = 1614265330;

// Made with pkg/webhook.Sign(id, time.Unix(1700000000, 0), body,
// []string{goSecret, specSecret}): a delivery signed during a rotation, and
// its ID is webhook.EventID("p-001", "t-1").
const goSecret = "whsec_AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";
const goID = "evt_xhnoq55ihtndwdcb7cm3sarpga";
const goTS = 1700000000;
const goBody = `{"type":"transaction.final","timestamp":"2023-11-14T22:13:20Z","data":{"transaction_id":"t-1","status":"APPROVED","partner_id":"p-001"}}`;
const goSigBoth = "v1,oCm8XB+q1GMRBA8r1yxhSbCYHDXZnoutg/nFfRt2reo= v1,b/P5G0rPwUGzQ6h73iHs8woi4XWBnG2Rk3saWFd3Ed4=";
const goSigOne = "v1,oCm8XB+q1GMRBA8r1yxhSbCYHDXZnoutg/nFfRt2reo=";

function hdrs(id: string, ts: number | string, sig: string): Record<string, string> {
  return { "webhook-id": id, "webhook-timestamp": String(ts), "webhook-signature": sig };
}

function refusedAs(kind: string, f: () => unknown): void {
  assert.throws(f, (e: unknown) => {
    assert.ok(e instanceof WebhookVerificationError, `not a WebhookVerificationError: ${String(e)}`);
    assert.equal(e.kind, kind);
    assert.ok(!e.message.includes("whsec_"), "an error quotes a secret");
    assert.ok(!e.message.includes("v1,"), "an error quotes a signature");
    return true;
  });
}

test("the spec's vector: signed and verified as pkg/webhook does", () => {
  assert.equal(signWebhook(specSecret, specID, specTS, specBody), specSig);
  const v = verifyWebhook(specSecret, hdrs(specID, specTS, specSig), specBody, { now: (specTS + 60) * 1000 });
  assert.equal(v.id, specID);
  assert.equal(v.timestamp.getTime(), specTS * 1000);
  // The body as bytes, and the headers as a fetch Headers, in any case.
  const h = new Headers({ "Webhook-Id": specID, "Webhook-Timestamp": String(specTS), "Webhook-Signature": specSig });
  assert.equal(verifyWebhook(specSecret, h, Buffer.from(specBody), { now: new Date(specTS * 1000) }).id, specID);
  assert.equal(verifyWebhook([specSecret], { "WEBHOOK-ID": specID, "webhook-timestamp": [String(specTS)], "Webhook-Signature": specSig }, specBody, { now: specTS * 1000 }).id, specID);
});

test("the spec's vector is pkg/webhook/webhook_test.go's", (t) => {
  const file = process.env["CELLPAY_GO_WEBHOOK_TEST"] ?? path.join(__dirname, "..", "..", "..", "..", "pkg", "webhook", "webhook_test.go");
  if (!existsSync(file)) {
    t.skip(`${file} is not here (a copy of the package outside the repository)`);
    return;
  }
  const src = readFileSync(file, "utf8");
  const goConst = (name: string): string => {
    const m = new RegExp(`${name}\\s*=\\s*(?:"((?:[^"\\\\]|\\\\.)*)"|\`([^\`]*)\`)`).exec(src);
    assert.ok(m, `${name} not found in ${file}`);
    return m[1] !== undefined ? JSON.parse(`"${m[1]}"`) : (m[2] as string);
  };
  assert.equal(goConst("specSecret"), specSecret);
  assert.equal(goConst("specID"), specID);
  assert.equal(goConst("specBody"), specBody);
  assert.equal(goConst("specSig"), specSig);
  assert.match(src, new RegExp(`specTS\\s*=\\s*time\\.Unix\\(${specTS}, 0\\)`));
});

test("pkg/webhook's signatures over a rotation: either secret verifies", () => {
  assert.equal(signWebhook([goSecret, specSecret], goID, goTS, goBody), goSigBoth);
  assert.equal(signWebhook(goSecret, goID, goTS, goBody), goSigOne);
  for (const secrets of [[goSecret], [specSecret], [specSecret, goSecret]]) {
    assert.equal(verifyWebhook(secrets, hdrs(goID, goTS, goSigBoth), goBody, { now: goTS * 1000 }).id, goID);
  }
  refusedAs("signature", () => verifyWebhook(specSecret, hdrs(goID, goTS, goSigOne), goBody, { now: goTS * 1000 }));
  const ev = parseCallback(goBody);
  assert.equal(ev.type, "transaction.final");
  assert.equal(ev.data.status, "APPROVED");
});

test("pkg/webhook's TestVerify cases", () => {
  const newS = "whsec_" + Buffer.from(Array.from({ length: 32 }, (_, i) => 200 - i)).toString("base64");
  const now = 1_700_000_000;
  const body = `{"type":"transaction.final"}`;
  const signed = (ts: number, ...secrets: string[]): Record<string, string> => hdrs("evt_1", ts, signWebhook(secrets, "evt_1", ts, body));
  const cases: { name: string; h: Record<string, string>; body: string; secrets: string[]; want: string | null }[] = [
    { name: "good", h: signed(now, newS), body, secrets: [newS], want: null },
    { name: "rotation: signed with both, receiver has the old", h: signed(now, newS, specSecret), body, secrets: [specSecret], want: null },
    { name: "rotation: signed with the new, receiver has both", h: signed(now, newS), body, secrets: [specSecret, newS], want: null },
    { name: "other secret", h: signed(now, newS), body, secrets: [specSecret], want: "signature" },
    { name: "body changed", h: signed(now, newS), body: `{"type":"x"}`, secrets: [newS], want: "signature" },
    { name: "too old", h: signed(now - 6 * 60, newS), body, secrets: [newS], want: "timestamp" },
    { name: "too new", h: signed(now + 6 * 60, newS), body, secrets: [newS], want: "timestamp" },
    { name: "no headers", h: {}, body, secrets: [newS], want: "headers" },
  ];
  for (const c of cases) {
    const run = (): unknown => verifyWebhook(c.secrets, c.h, c.body, { now: now * 1000 });
    if (c.want === null) {
      assert.equal((run() as { id: string }).id, "evt_1", c.name);
    } else {
      refusedAs(c.want, run);
    }
  }
  assert.equal(signed(now, newS, specSecret)["webhook-signature"]?.split("v1,").length, 3, "two secrets, two signatures");
});

test("the tolerance: its edge, a narrower one", () => {
  const h = hdrs(specID, specTS, specSig);
  verifyWebhook(specSecret, h, specBody, { now: (specTS + 300) * 1000 });
  verifyWebhook(specSecret, h, specBody, { now: (specTS - 300) * 1000 });
  refusedAs("timestamp", () => verifyWebhook(specSecret, h, specBody, { now: (specTS + 301) * 1000 }));
  refusedAs("timestamp", () => verifyWebhook(specSecret, h, specBody, { now: (specTS + 11) * 1000, toleranceSeconds: 10 }));
  // Without now: the spec's 2021 timestamp is far too old today.
  refusedAs("timestamp", () => verifyWebhook(specSecret, h, specBody));
});

test("malformed headers, signatures and secrets are refused", () => {
  const now = { now: specTS * 1000 };
  refusedAs("headers", () => verifyWebhook(specSecret, hdrs(specID, "yesterday", specSig), specBody, now));
  refusedAs("headers", () => verifyWebhook(specSecret, hdrs("", specTS, specSig), specBody, now));
  refusedAs("signature", () => verifyWebhook(specSecret, hdrs(specID, specTS, "v2," + specSig.slice(3)), specBody, now));
  refusedAs("signature", () => verifyWebhook(specSecret, hdrs(specID, specTS, specSig.slice(0, -2)), specBody, now));
  refusedAs("signature", () => verifyWebhook(specSecret, hdrs(specID, specTS + 1, specSig), specBody, { now: specTS * 1000 }));
  refusedAs("signature", () => verifyWebhook(specSecret, hdrs(specID, specTS, "garbage " + specSig.toLowerCase()), specBody, now));
  // Several signatures: the one that matches may be any of them.
  assert.equal(verifyWebhook(specSecret, hdrs(specID, specTS, "v1,AAAA " + specSig), specBody, now).id, specID);
  refusedAs("secret", () => verifyWebhook("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", hdrs(specID, specTS, specSig), specBody, now));
  refusedAs("secret", () => verifyWebhook("whsec_not base64!", hdrs(specID, specTS, specSig), specBody, now));
  refusedAs("secret", () => verifyWebhook("whsec_", hdrs(specID, specTS, specSig), specBody, now));
});
