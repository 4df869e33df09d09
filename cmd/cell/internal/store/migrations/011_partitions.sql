-- Retention by partitions (issue #42): transactions and outbox become
-- tables partitioned by created_at, so that a partition past the cell's
-- retention is dropped whole (DROP TABLE: no row deletes, no vacuum, no
-- bloat) instead of deleted row by row. The tables as they were become the
-- first partition of each (transactions_legacy, outbox_legacy), bounded
-- below by nothing and above by the first of the month after the latest
-- row or the next month, whichever is later; from there on each calendar
-- quarter (or what is left of one) is a partition of its own
-- (transactions_YYYY_MM, outbox_YYYY_MM, named by its first month),
-- created ahead by the cell's leading instance (cmd/cell/internal/retention)
-- through cellpay_create_partition, and dropped through
-- cellpay_drop_partition. Quarters, not months: every statement over a
-- partitioned table pays for each partition it may touch, and a cell holds
-- about six quarters where it would hold sixteen months.
--
-- A key of a partitioned table must hold its partition key, so the primary
-- key of transactions is (partner_id, transaction_id, created_at), which
-- no longer makes a transaction ID unique across partitions. Uniqueness is
-- kept by the insert instead: it runs only WHERE cellpay_claim_key(partner,
-- ID), which takes a transaction-scoped advisory lock on the key and finds
-- no row of it in any partition (store.Insert). Inserts of one key so wait
-- for each other's commit; the function, being volatile, reads with a
-- snapshot taken after its lock, so the second finds the first's row. (A
-- partition may hold no primary key of its own: the first partitions'
-- keys are the parents', built when they are attached.)
--
-- The outbox's event_id was UNIQUE: it is now unique with created_at. A
-- transaction's event is written once, by the statement that moves it to
-- its final state (a final state never moves), so the change loses no
-- check that held; an ID reused once its partition is dropped gets its own
-- event where the old rule would have swallowed it.
--
-- The migration takes both tables' locks while it rebuilds their keys:
-- roll a cell with its instances stopped, or expect a pause as long as the
-- tables are large (an index build over each).

ALTER TABLE transactions RENAME TO transactions_legacy;
ALTER TABLE transactions_legacy DROP CONSTRAINT transactions_pkey;
ALTER INDEX transactions_card_velocity RENAME TO transactions_legacy_card_velocity;
ALTER INDEX transactions_unresolved RENAME TO transactions_legacy_unresolved;
ALTER INDEX transactions_unfiled RENAME TO transactions_legacy_unfiled;
ALTER INDEX transactions_followups RENAME TO transactions_legacy_followups;
ALTER INDEX transactions_partner_created RENAME TO transactions_legacy_partner_created;

CREATE TABLE transactions (LIKE transactions_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (created_at);
ALTER TABLE transactions ADD CONSTRAINT transactions_pkey PRIMARY KEY (partner_id, transaction_id, created_at);
CREATE INDEX transactions_card_velocity ON transactions (pan_hash, created_at) WHERE pan_hash IS NOT NULL;
CREATE INDEX transactions_unresolved ON transactions (state) WHERE state IN ('received', 'sending', 'deciding');
CREATE INDEX transactions_unfiled ON transactions (updated_at) WHERE unfiled;
CREATE INDEX transactions_followups ON transactions (partner_id, original_transaction_id)
    WHERE original_transaction_id <> '';
CREATE INDEX transactions_partner_created ON transactions (partner_id, created_at, transaction_id);

ALTER TABLE outbox RENAME TO outbox_legacy;
ALTER TABLE outbox_legacy DROP CONSTRAINT outbox_pkey, DROP CONSTRAINT outbox_event_id_key;
ALTER INDEX outbox_due RENAME TO outbox_legacy_due;
ALTER INDEX outbox_partner RENAME TO outbox_legacy_partner;

CREATE TABLE outbox (LIKE outbox_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (created_at);
-- The id sequence belongs to the table that draws from it, not to the
-- first partition (dropping that would take the sequence with it).
ALTER SEQUENCE outbox_id_seq OWNED BY outbox.id;
ALTER TABLE outbox ADD CONSTRAINT outbox_pkey PRIMARY KEY (id, created_at);
ALTER TABLE outbox ADD CONSTRAINT outbox_event_key UNIQUE (event_id, created_at);
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX outbox_partner ON outbox (partner_id, status, created_at);


-- cellpay_claim_key: whether no transaction of (partner, ID) is recorded
-- in any partition, once this transaction holds the key's lock (held to
-- its end). The lock's first key names the table, so that it never meets
-- another advisory lock of the cell (store.ReconcilerLock is a one-key
-- lock, a space of its own).
CREATE FUNCTION cellpay_claim_key(partner text, id text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('cellpay.transactions'), hashtext(partner || chr(31) || id));
    PERFORM 1 FROM transactions WHERE partner_id = partner AND transaction_id = id;
    RETURN NOT FOUND;
END $$;

-- cellpay_create_partition creates parent's partition for the months
-- months from first (the first day of a month, UTC), true, or false when
-- a partition of that name (parent_YYYY_MM) exists already. It runs as the
-- schema's owner (SECURITY DEFINER) for the role the cell serves as, which
-- may only read and write rows; it makes nothing but a partition of one of
-- the two tables. A lock it cannot take within lock_timeout fails it
-- rather than queue the cell's statements behind it.
CREATE FUNCTION cellpay_create_partition(parent text, first date, months integer) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET lock_timeout = '1s' AS $$
DECLARE
    name text;
BEGIN
    IF parent NOT IN ('transactions', 'outbox') THEN
        RAISE EXCEPTION 'cellpay_create_partition: parent %: not a partitioned table of the cell', parent;
    END IF;
    IF first IS NULL OR extract(day FROM first) <> 1 THEN
        RAISE EXCEPTION 'cellpay_create_partition: first %: not the first day of a month', first;
    END IF;
    IF months IS NULL OR months < 1 OR months > 12 THEN
        RAISE EXCEPTION 'cellpay_create_partition: months %: not 1 to 12', months;
    END IF;
    name := parent || '_' || to_char(first, 'YYYY_MM');
    IF to_regclass(name) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)', name, parent,
        first::timestamp AT TIME ZONE 'UTC', (first + months * interval '1 month')::timestamp AT TIME ZONE 'UTC');
    RETURN true;
END $$;

-- cellpay_drop_partition drops the partition part of transactions or
-- outbox if its whole range ends at or before retained_since, which is at
-- least 8 days ago (the idempotency window is 7), and it holds nothing
-- unresolved: no transaction short of a final state or with a follow-up
-- held, no callback still to deliver. It returns '' when dropped, else why
-- not. The check is made again under the parent's lock, which the drop
-- needs anyway; lock_timeout bounds the wait, as above.
CREATE FUNCTION cellpay_drop_partition(part text, retained_since timestamptz) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET lock_timeout = '1s' AS $$
DECLARE
    parent text;
    upper_bound timestamptz;
    busy boolean;
BEGIN
    IF retained_since > now() - interval '8 days' THEN
        RAISE EXCEPTION 'cellpay_drop_partition: retained since %: within the idempotency window', retained_since;
    END IF;
    SELECT p.relname, (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz
        INTO parent, upper_bound
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_class p ON p.oid = i.inhparent
        WHERE c.oid = to_regclass(part) AND p.relname IN ('transactions', 'outbox');
    IF parent IS NULL THEN
        RAISE EXCEPTION 'cellpay_drop_partition: %: not a partition of transactions or outbox', part;
    END IF;
    IF upper_bound IS NULL OR upper_bound > retained_since THEN
        RETURN 'holds rows within retention';
    END IF;
    FOR pass IN 1..2 LOOP
        IF pass = 2 THEN
            EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', parent);
        END IF;
        IF parent = 'transactions' THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE state IN (''received'', ''sending'', ''deciding'')
                OR held_capture > 0 OR held_refund > 0)', part) INTO busy;
            IF busy THEN
                RETURN 'holds unresolved transactions';
            END IF;
        ELSE
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE status = ''pending'')', part) INTO busy;
            IF busy THEN
                RETURN 'holds callbacks still to deliver';
            END IF;
        END IF;
    END LOOP;
    EXECUTE format('DROP TABLE %I', part);
    RETURN '';
END $$;

-- The first of the month after both the latest row and now: the legacy
-- partitions' upper bound; the rest of its quarter is created at once.
DO $$
DECLARE
    bound timestamptz := (date_trunc('month', greatest(now(),
        (SELECT max(created_at) FROM transactions_legacy),
        (SELECT max(created_at) FROM outbox_legacy)) AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC';
BEGIN
    EXECUTE format('ALTER TABLE transactions ATTACH PARTITION transactions_legacy FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    EXECUTE format('ALTER TABLE outbox ATTACH PARTITION outbox_legacy FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    PERFORM cellpay_create_partition(t, (bound AT TIME ZONE 'UTC')::date,
        3 - (extract(month FROM bound AT TIME ZONE 'UTC')::integer - 1) % 3)
        FROM unnest(ARRAY['transactions', 'outbox']) AS t;
END $$;

---- create above / drop below ----

DROP FUNCTION cellpay_drop_partition(text, timestamptz);
DROP FUNCTION cellpay_create_partition(text, date, integer);
DROP FUNCTION cellpay_claim_key(text, text);

-- Back to one table each, every partition's rows in it; fails, as it must,
-- once one key is recorded in two partitions.
CREATE TABLE outbox_flat (LIKE outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
INSERT INTO outbox_flat SELECT * FROM outbox;
ALTER SEQUENCE outbox_id_seq OWNED BY NONE;
DROP TABLE outbox;
ALTER TABLE outbox_flat RENAME TO outbox;
ALTER SEQUENCE outbox_id_seq OWNED BY outbox.id;
ALTER TABLE outbox ADD CONSTRAINT outbox_pkey PRIMARY KEY (id);
ALTER TABLE outbox ADD CONSTRAINT outbox_event_id_key UNIQUE (event_id);
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX outbox_partner ON outbox (partner_id, status, created_at);

CREATE TABLE transactions_flat (LIKE transactions INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
INSERT INTO transactions_flat SELECT * FROM transactions;
DROP TABLE transactions;
ALTER TABLE transactions_flat RENAME TO transactions;
ALTER TABLE transactions ADD CONSTRAINT transactions_pkey PRIMARY KEY (partner_id, transaction_id);
CREATE INDEX transactions_card_velocity ON transactions (pan_hash, created_at) WHERE pan_hash IS NOT NULL;
CREATE INDEX transactions_unresolved ON transactions (state) WHERE state IN ('received', 'sending', 'deciding');
CREATE INDEX transactions_unfiled ON transactions (updated_at) WHERE unfiled;
CREATE INDEX transactions_followups ON transactions (partner_id, original_transaction_id)
    WHERE original_transaction_id <> '';
CREATE INDEX transactions_partner_created ON transactions (partner_id, created_at, transaction_id);
