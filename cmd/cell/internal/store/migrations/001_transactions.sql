-- One row per transaction ID. No column ever holds a full card number: the
-- CHECK on masked_pan refuses anything but first 6, asterisks, last 4.
CREATE TABLE transactions (
    transaction_id      text PRIMARY KEY,
    fingerprint         bytea NOT NULL,
    state               text NOT NULL CHECK (state IN ('received', 'sending', 'approved', 'declined', 'failed', 'abandoned')),
    decline_reason      text NOT NULL DEFAULT '',
    auth_code           text NOT NULL DEFAULT '',
    payment_type        smallint NOT NULL,
    partner_id          text NOT NULL,
    market              text NOT NULL,
    amount              bigint NOT NULL CHECK (amount > 0),
    currency            text NOT NULL,
    settlement_amount   bigint NOT NULL,
    settlement_currency text NOT NULL,
    risk_amount         bigint NOT NULL,
    merchant_id         text NOT NULL,
    mcc                 text NOT NULL,
    merchant_country    text NOT NULL,
    masked_pan          text NOT NULL CHECK (masked_pan = '' OR masked_pan ~ '^[0-9]{6}[*]{2,9}[0-9]{4}$'),
    pan_hash            bytea,
    refdata_version     text NOT NULL,
    route_rule          text NOT NULL,
    attempt             integer NOT NULL,
    cell_id             text NOT NULL,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL
);

-- Per-card velocity checks read a card's recent transactions.
CREATE INDEX transactions_card_velocity ON transactions (pan_hash, created_at) WHERE pan_hash IS NOT NULL;
-- Recovery and reconciliation read what is not final.
CREATE INDEX transactions_unresolved ON transactions (state) WHERE state IN ('received', 'sending');

-- The cell's risk limits: one row. Amounts in minor units of limit_currency.
CREATE TABLE risk_limits (
    singleton           boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    limit_currency      text NOT NULL,
    max_amount_low      bigint NOT NULL CHECK (max_amount_low > 0),
    max_amount_medium   bigint NOT NULL CHECK (max_amount_medium > 0),
    max_amount_high     bigint NOT NULL CHECK (max_amount_high > 0),
    velocity_window     interval NOT NULL,
    velocity_max_count  bigint NOT NULL CHECK (velocity_max_count > 0),
    velocity_max_amount bigint NOT NULL CHECK (velocity_max_amount > 0)
);

INSERT INTO risk_limits (limit_currency, max_amount_low, max_amount_medium, max_amount_high,
                         velocity_window, velocity_max_count, velocity_max_amount)
VALUES ('EUR', 1000000, 500000, 200000, interval '10 minutes', 20, 2000000);

---- create above / drop below ----

DROP TABLE risk_limits;
DROP TABLE transactions;
