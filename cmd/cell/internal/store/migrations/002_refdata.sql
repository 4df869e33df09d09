-- The reference data version the cell serves, as tables. Only versions
-- received from NATS are stored (a bootstrap file never is), and a version
-- is written in one transaction: a restarted cell loads exactly one whole
-- version. refdata_state is the version's header: one row, or none before
-- the first version arrives.
CREATE TABLE refdata_state (
    singleton                   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version                     bigint NOT NULL CHECK (version > 0),
    base_currency               text NOT NULL,
    default_settlement_currency text NOT NULL,
    published_at                timestamptz NOT NULL,
    applied_at                  timestamptz NOT NULL
);

CREATE TABLE refdata_currencies (
    code        text PRIMARY KEY,
    minor_units smallint NOT NULL CHECK (minor_units BETWEEN 0 AND 4),
    name        text NOT NULL DEFAULT ''
);

-- Rates are exact decimal strings: units of the currency per base unit.
CREATE TABLE refdata_fx_rates (
    currency text PRIMARY KEY,
    rate     text NOT NULL
);

CREATE TABLE refdata_mcc (
    code     text PRIMARY KEY CHECK (code ~ '^[0-9]{4}$'),
    category text NOT NULL,
    risk     text NOT NULL CHECK (risk IN ('low', 'medium', 'high'))
);

CREATE TABLE refdata_partners (
    partner_id          text PRIMARY KEY,
    settlement_currency text NOT NULL
);

CREATE TABLE refdata_blocked_categories (
    category text PRIMARY KEY
);

-- One row per version applied, for audit and for "which version did this
-- transaction use" questions after the fact.
CREATE TABLE refdata_history (
    version      bigint PRIMARY KEY,
    kind         text NOT NULL CHECK (kind IN ('snapshot', 'update')),
    content_hash text NOT NULL,
    published_at timestamptz NOT NULL,
    applied_at   timestamptz NOT NULL
);

---- create above / drop below ----

DROP TABLE refdata_history;
DROP TABLE refdata_blocked_categories;
DROP TABLE refdata_partners;
DROP TABLE refdata_mcc;
DROP TABLE refdata_fx_rates;
DROP TABLE refdata_currencies;
DROP TABLE refdata_state;
