-- The callback outbox: one row per final outcome (approved, declined,
-- failed, and a pending transaction once it resolves), written by the same
-- statement that records the outcome (store.Persist), so that no outcome is
-- ever recorded without its event. The cell's notifier delivers the rows to
-- the partner's callback endpoints, at least once.
--
-- body is the callback's JSON, frozen when the outcome is recorded: every
-- attempt and every replay sends the same bytes (each signed anew with its
-- own timestamp). It carries the masked card at most, never a card number
-- or a secret.
--
-- Several instances of a cell share the table: a notifier claims due rows
-- with FOR UPDATE SKIP LOCKED and holds each under a lease (lease_owner,
-- lease_until) while it delivers; a row whose lease ran out (its instance
-- died mid-delivery) is due again.
CREATE TABLE outbox (
    id               bigserial PRIMARY KEY,
    event_id         text NOT NULL UNIQUE,
    partner_id       text NOT NULL,
    transaction_id   text NOT NULL,
    event_type       text NOT NULL,
    body             bytea NOT NULL,
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  timestamptz NOT NULL,
    lease_owner      text,
    lease_until      timestamptz,
    last_error       text NOT NULL DEFAULT '',
    last_http_status integer NOT NULL DEFAULT 0,
    last_endpoint    text NOT NULL DEFAULT '',
    delivered_to     text NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    delivered_at     timestamptz
);

-- The notifier's claim reads due rows; operators list a partner's.
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX outbox_partner ON outbox (partner_id, status, created_at);

-- Endpoints that answered 410 Gone: the notifier skips them for the
-- partner until an operator replays the partner's events.
CREATE TABLE callback_endpoints_disabled (
    partner_id  text NOT NULL,
    endpoint    text NOT NULL,
    disabled_at timestamptz NOT NULL,
    reason      text NOT NULL,
    PRIMARY KEY (partner_id, endpoint)
);

---- create above / drop below ----

DROP TABLE callback_endpoints_disabled;
DROP TABLE outbox;
