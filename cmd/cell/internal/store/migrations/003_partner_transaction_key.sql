-- Transaction IDs are a namespace per partner: a transaction is identified
-- by (partner_id, transaction_id), and two partners' transactions with one
-- ID are two rows. The primary key is the only key, index or constraint
-- over transaction_id (the velocity and unresolved indexes do not name it,
-- and no table refers to transactions), so it is the one that changes.
--
-- Rows written before this migration keep working: partner_id has been
-- NOT NULL since 001 and their transaction IDs are unique, so every pair is
-- unique and the new key cannot fail to build. The migration runs in one
-- transaction and holds the table's lock while the new index builds.
--
-- A cell binary from before this migration must not serve once it has run
-- (its INSERT ... ON CONFLICT (transaction_id) has no matching key any
-- more): roll every instance of a cell, not some.
ALTER TABLE transactions
    DROP CONSTRAINT transactions_pkey,
    ADD CONSTRAINT transactions_pkey PRIMARY KEY (partner_id, transaction_id);

---- create above / drop below ----

-- Fails, as it must, once two partners hold one transaction ID.
ALTER TABLE transactions
    DROP CONSTRAINT transactions_pkey,
    ADD CONSTRAINT transactions_pkey PRIMARY KEY (transaction_id);
