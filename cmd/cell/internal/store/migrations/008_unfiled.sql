-- A transaction decided at its natural home while the transaction
-- directory was unavailable (NATS down, or its bucket full) has no entry
-- (issue #37; docs/design/transaction-directory.md). unfiled marks such a
-- row until its entry is written: the reconciler's loop writes the entries
-- of the final ones once the directory is back (Store.Unfiled, Filed), so
-- that the directory is complete again and a copy of the ID sent to another
-- cell later gets this cell's answer.
ALTER TABLE transactions ADD COLUMN unfiled boolean NOT NULL DEFAULT false;

-- Only the few rows decided in an outage are in it: the loop's scan costs
-- what is left to file, not the table.
CREATE INDEX transactions_unfiled ON transactions (updated_at) WHERE unfiled;

---- create above / drop below ----

DROP INDEX transactions_unfiled;
ALTER TABLE transactions DROP COLUMN unfiled;
