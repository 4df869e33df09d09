-- deciding: an outcome decided before the point of no return (a decline of
-- the cell's own), durable in the cell while it goes into the transaction
-- directory, which makes it the transaction's (issue #38: without it, a
-- later attempt of the same GTR call could take the entry over and decide
-- the transaction again on another cell). A restart never abandons such a
-- row: the reconciler settles it by the directory, like a sending row by
-- the issuer (docs/design/transaction-directory.md).
ALTER TABLE transactions DROP CONSTRAINT transactions_state_check;
ALTER TABLE transactions ADD CONSTRAINT transactions_state_check
    CHECK (state IN ('received', 'sending', 'approved', 'declined', 'failed', 'abandoned', 'deciding'));

DROP INDEX transactions_unresolved;
CREATE INDEX transactions_unresolved ON transactions (state) WHERE state IN ('received', 'sending', 'deciding');

---- create above / drop below ----

DROP INDEX transactions_unresolved;
CREATE INDEX transactions_unresolved ON transactions (state) WHERE state IN ('received', 'sending');
UPDATE transactions SET state = 'abandoned', decline_reason = '', owner = '' WHERE state = 'deciding';
ALTER TABLE transactions DROP CONSTRAINT transactions_state_check;
ALTER TABLE transactions ADD CONSTRAINT transactions_state_check
    CHECK (state IN ('received', 'sending', 'approved', 'declined', 'failed', 'abandoned'));
