// @cellpay/client: the partners' REST/JSON API (CellpayClient), its
// refusals (CellpayError) and callback verification (verifyWebhook).
// README.md says how to use them.

export * from "./types";
export * from "./errors";
export * from "./client";
export * from "./webhook";
