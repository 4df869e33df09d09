// The partners' REST/JSON API's messages, as the platform sends and takes
// them: protobuf JSON with the protos' field names
// (proto/cellpay/v1/payments.proto). int64 fields are decimal strings;
// fields at their zero value ("", 0, an unset message) are left out of an
// answer, hence the optional fields of Transaction and Money (a page's
// transactions and a statement's lines, the client fills with [] when
// absent).

/**
 * cellpay.v1.PaymentType, by name. CAPTURE, VOID and REFUND follow an
 * approved CARD_AUTHORIZATION (their original_transaction_id); CARD_REFUND
 * is a credit to a card that refers to no earlier transaction.
 */
export type PaymentType = "PAYMENT_TYPE_UNSPECIFIED" | "CARD_AUTHORIZATION" | "CARD_REFUND" | "BANK_TRANSFER" | "CAPTURE" | "VOID" | "REFUND";

/** cellpay.v1.TransactionStatus, by name. */
export type TransactionStatus = "TRANSACTION_STATUS_UNSPECIFIED" | "APPROVED" | "DECLINED" | "PENDING" | "FAILED";

/**
 * Money as the platform answers it: an amount in the minor units of an ISO
 * 4217 currency. minor_units is an int64, a decimal string (absent when 0);
 * read it with minorUnits().
 */
export interface Money {
  minor_units?: string;
  currency?: string;
}

/** Money as a request may send it: minor_units as a string, a safe integer or a bigint. */
export interface MoneyInput {
  minor_units: string | number | bigint;
  currency: string;
}

export interface Merchant {
  id: string;
  /** ISO 18245 merchant category code: four digits. */
  mcc: string;
  /** ISO 3166-1 alpha-2. */
  country: string;
}

export interface Card {
  /** 12 to 19 digits passing the Luhn check; never returned in full. */
  pan: string;
  expiry_month: number;
  expiry_year: number;
}

/** cellpay.v1.SubmitTransactionRequest. */
export interface SubmitTransactionRequest {
  /**
   * 1 to 64 characters of [A-Za-z0-9._-], unique per partner: the
   * idempotency key. It may be left out when the Idempotency-Key header
   * carries it (submitTransaction's idempotencyKey option).
   */
  transaction_id?: string;
  payment_type: PaymentType;
  /** The partner sending the transaction (the path's partner too). */
  partner_id: string;
  /** ISO 3166-1 alpha-2. */
  market: string;
  amount: MoneyInput;
  merchant: Merchant;
  /** Required for CARD_AUTHORIZATION and CARD_REFUND. */
  card?: Card;
}

/** cellpay.v1.Transaction: the recorded outcome. */
export interface Transaction {
  transaction_id: string;
  status: TransactionStatus;
  /** A stable code such as "do_not_honor"; set when DECLINED or FAILED. */
  decline_reason?: string;
  auth_code?: string;
  cell_id?: string;
  /** How many cells started this transaction. */
  attempts?: number;
  amount?: Money;
  /** amount in the partner's settlement currency. */
  settlement_amount?: Money;
  refdata_version?: string;
  route_rule?: string;
  /** The card number masked (first 6 and last 4 digits of a 16-digit PAN). */
  masked_pan?: string;
  payment_type?: PaymentType;
  partner_id?: string;
  market?: string;
  merchant_id?: string;
  mcc?: string;
  /** RFC 3339. */
  created_at?: string;
  /** RFC 3339. */
  updated_at?: string;
  /** For a CAPTURE, VOID or REFUND: the authorization it follows. */
  original_transaction_id?: string;
  /**
   * For a CARD_AUTHORIZATION: the sums of its approved captures and
   * refunds (follow-ups still PENDING are not in them), and whether it
   * was voided.
   */
  captured_amount?: Money;
  refunded_amount?: Money;
  voided?: boolean;
}

/**
 * cellpay.v1.CaptureTransactionRequest: capture amount of the approved
 * CARD_AUTHORIZATION original_transaction_id, once or several times, the
 * captures together at most its amount.
 */
export interface CaptureTransactionRequest {
  /**
   * The capture's own ID, chosen as a submit's (1 to 64 characters of
   * [A-Za-z0-9._-], unique per partner): its idempotency key. It may be
   * left out when the Idempotency-Key header carries it.
   */
  transaction_id?: string;
  /** The partner (the path's). */
  partner_id: string;
  /** The partner's CARD_AUTHORIZATION (the path's). */
  original_transaction_id: string;
  /** The original's market: a follow-up is routed as its original was. */
  market: string;
  /** In the original's currency; more than zero. */
  amount: MoneyInput;
}

/** cellpay.v1.VoidTransactionRequest: release an approved CARD_AUTHORIZATION that has no capture. */
export interface VoidTransactionRequest {
  /** The void's own ID, as CaptureTransactionRequest's. */
  transaction_id?: string;
  partner_id: string;
  original_transaction_id: string;
  /** The original's market. */
  market: string;
}

/**
 * cellpay.v1.RefundTransactionRequest: refund amount of what was captured
 * of the authorization original_transaction_id, once or several times, the
 * refunds together at most the captures.
 */
export interface RefundTransactionRequest {
  /** The refund's own ID, as CaptureTransactionRequest's. */
  transaction_id?: string;
  partner_id: string;
  original_transaction_id: string;
  /** The original's market. */
  market: string;
  /** In the original's currency; more than zero. */
  amount: MoneyInput;
}

/**
 * cellpay.v1.ListTransactionsRequest: the partner's transactions created in
 * [start_time, end_time) (at most 31 days), oldest first, a page at a time.
 */
export interface ListTransactionsRequest {
  partner_id: string;
  /** Inclusive: RFC 3339 (nanoseconds kept) or a Date. */
  start_time: string | Date;
  /** Exclusive: RFC 3339 or a Date. */
  end_time: string | Date;
  /** Only these statuses; absent or empty for all. */
  statuses?: readonly TransactionStatus[];
  /** Only these payment types; absent or empty for all. */
  payment_types?: readonly PaymentType[];
  /** 1 to 1000; the platform's default is 100. */
  page_size?: number;
  /** The previous page's next_page_token, as it came, with the same filters. */
  page_token?: string;
}

/** cellpay.v1.ListTransactionsResponse: one page. */
export interface ListTransactionsResponse {
  /** The page's transactions, oldest first ([] when none: the client fills it). */
  transactions: Transaction[];
  /** Pass it back as page_token for the next page; "" on the last page (the client fills it). */
  next_page_token: string;
}

/** cellpay.v1.StatementLine: one payment type, status and currency of a day. */
export interface StatementLine {
  payment_type: PaymentType;
  status: TransactionStatus;
  currency: string;
  /** int64, a decimal string (absent when 0): read it with int64(). */
  count?: string;
  /**
   * The transactions' amounts summed, in minor units (a void's is the
   * authorization's it released); int64, a decimal string (absent when 0).
   */
  amount_minor_units?: string;
}

/** cellpay.v1.Statement: a partner's UTC day, summed. */
export interface Statement {
  partner_id: string;
  /** The UTC day, YYYY-MM-DD. */
  date: string;
  /** One per payment type, status and currency with a transaction, in that order ([] when none: the client fills it). */
  lines: StatementLine[];
}

/** int64 reads an answer's int64 field (a decimal string, absent when 0) as a bigint. */
export function int64(v: string | number | undefined): bigint {
  return v === undefined || v === "" ? 0n : BigInt(v);
}

/** minorUnits reads an answer's Money amount as a bigint (0n when absent). */
export function minorUnits(m: Money | undefined): bigint {
  return int64(m?.minor_units);
}
