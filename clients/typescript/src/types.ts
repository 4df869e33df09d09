// The partners' REST/JSON API's messages, as the platform sends and takes
// them: protobuf JSON with the protos' field names
// (proto/cellpay/v1/payments.proto). int64 fields are decimal strings;
// fields at their zero value ("", 0, an unset message) are left out of an
// answer, hence the optional fields of Transaction and Money.

/** cellpay.v1.PaymentType, by name. */
export type PaymentType = "PAYMENT_TYPE_UNSPECIFIED" | "CARD_AUTHORIZATION" | "CARD_REFUND" | "BANK_TRANSFER";

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
}

/** minorUnits reads an answer's Money amount as a bigint (0n when absent). */
export function minorUnits(m: Money | undefined): bigint {
  return m?.minor_units ? BigInt(m.minor_units) : 0n;
}
